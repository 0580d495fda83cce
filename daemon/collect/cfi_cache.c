/*
 * cfi_cache.c - the on-disk table cache (cfi_cache.h). A directory of
 * files named BUILD-ID.cfi, each a struct file_header then its rows
 * (little-endian, this machine's layout: the cache is not meant to be
 * copied between machines). A file is written under a temporary name and
 * renamed, so a reader sees it whole or not at all; a file that does not
 * read back as written (truncated, corrupt, another version) is deleted and
 * its module compiled again. Build IDs come from the files a target maps:
 * only lowercase hex names a file.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "collect/cfi_cache.h"
#include "util.h"

#define MAGIC "PROFDCFI"
#define BUILD_ID_MAX 128 /* hex digits: 64 bytes, more than any linker writes */
#define SUFFIX ".cfi"

struct file_header {
	char magic[8];	    /* MAGIC */
	uint32_t version;   /* CFI_CACHE_VERSION */
	uint32_t row_bytes; /* sizeof(struct cfi_walk_row) */
	uint32_t rows;
	uint32_t crc; /* zlib's crc32 of the rows */
	uint64_t narrowed;
	char build_id[BUILD_ID_MAX + 8]; /* NUL-terminated */
};
_Static_assert(sizeof(struct file_header) == 168, "the header has no padding");

struct cfi_cache {
	char *dir;
	uint64_t max_bytes;
	uint64_t bytes; /* of the .cfi files, as of the last scan and the stores since */
};

static bool name_ok(const char *build_id)
{
	size_t n = strlen(build_id);

	if (n < 2 || n > BUILD_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((build_id[i] >= '0' && build_id[i] <= '9') ||
		      (build_id[i] >= 'a' && build_id[i] <= 'f')))
			return false;
	return true;
}

static uint32_t rows_crc(const struct cfi_walk_row *rows, uint32_t n)
{
	return (uint32_t)crc32_z(crc32_z(0, Z_NULL, 0), (const Bytef *)rows,
				 (size_t)n * sizeof(*rows));
}

/* One .cfi file of the directory, for eviction. */
struct file {
	char name[BUILD_ID_MAX + 8];
	uint64_t bytes;
	struct timespec mtime;
};

static int cmp_mtime(const void *a, const void *b)
{
	const struct file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	return (x->mtime.tv_nsec > y->mtime.tv_nsec) - (x->mtime.tv_nsec < y->mtime.tv_nsec);
}

/*
 * scan() - list the directory's .cfi files into *@ret_files (malloc'ed,
 * oldest first), total their bytes into c->bytes and delete the temporary
 * files a killed profd left. Returns the number of files, or -errno of
 * opendir()/-ENOMEM.
 */
static long scan(struct cfi_cache *c, struct file **ret_files)
{
	_cleanup_(closedirp) DIR *d = opendir(c->dir);
	_cleanup_free_ struct file *files = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;

	if (!d)
		return -errno;
	c->bytes = 0;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		struct stat st;

		if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp")) {
			unlinkat(dirfd(d), de->d_name, 0);
			continue;
		}
		if (len <= strlen(SUFFIX) || len >= sizeof(files->name) ||
		    strcmp(de->d_name + len - strlen(SUFFIX), SUFFIX) != 0 ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (grow_array((void **)&files, &cap, n, sizeof(*files)) < 0)
			return -ENOMEM;
		memcpy(files[n].name, de->d_name, len + 1);
		files[n].bytes = (uint64_t)st.st_size;
		files[n].mtime = st.st_mtim;
		c->bytes += files[n].bytes;
		n++;
	}
	if (n)
		qsort(files, n, sizeof(*files), cmp_mtime);
	*ret_files = TAKE_PTR(files);
	return (long)n;
}

/*
 * evict() - delete the least recently used files (by mtime: a hit touches
 * its file) until the directory holds at most max_bytes. Returns the
 * number of files deleted, or scan()'s -errno.
 */
static long evict(struct cfi_cache *c)
{
	_cleanup_free_ struct file *files = NULL;
	long n = scan(c, &files), deleted = 0;
	char path[PATH_MAX];

	for (long i = 0; i < n && c->bytes > c->max_bytes; i++) {
		snprintf(path, sizeof(path), "%s/%s", c->dir, files[i].name);
		if (unlink(path) == 0) {
			c->bytes -= files[i].bytes;
			deleted++;
		}
	}
	return n < 0 ? n : deleted;
}

/*
 * cfi_cache__new() - the cache in directory @dir (created, mode 0700, if it
 * does not exist; its parent must), holding at most @max_bytes of files
 * (> 0). Files beyond it (a lower bound than the last run's) are deleted
 * now. Returns 0 and *@ret, -EINVAL for @max_bytes 0, -ENOMEM, or the
 * -errno of mkdir(2)/opendir(3) (-EACCES, -EROFS, -ENOENT...). Does not log.
 */
int cfi_cache__new(const char *dir, uint64_t max_bytes, struct cfi_cache **ret)
{
	struct cfi_cache *c;
	long r;

	if (max_bytes == 0)
		return -EINVAL;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dir = strdup(dir);
	c->max_bytes = max_bytes;
	r = c->dir ? evict(c) : -ENOMEM;
	if (r < 0) {
		cfi_cache__free(c);
		return (int)r;
	}
	*ret = c;
	return 0;
}

/* reject() - delete the file of @e, which did not read back as written. */
static int reject(struct cfi_cache_entry *e)
{
	unlink(e->path); /* the next scan() totals the bytes again */
	close(e->fd);
	e->fd = -1;
	return -EBADMSG;
}

/*
 * cfi_cache__find() - open the entry of module @build_id (lowercase hex)
 * and check its header: version, row size, build ID, and a length that
 * matches its row count. Returns 0 and *@ret (the caller then calls
 * cfi_cache__read(), which closes it), -ENOENT when there is none (or
 * @build_id is not hex: a module without one is not cached), -EBADMSG when
 * the file was not as written (it is deleted: compile the module again),
 * or open(2)'s -errno. Blocks on file I/O; does not log.
 */
int cfi_cache__find(struct cfi_cache *c, const char *build_id, struct cfi_cache_entry *ret)
{
	struct file_header h;
	struct stat st;

	if (!name_ok(build_id))
		return -ENOENT;
	snprintf(ret->path, sizeof(ret->path), "%s/%s" SUFFIX, c->dir, build_id);
	ret->fd = open(ret->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (ret->fd < 0)
		return -errno;
	if (pread(ret->fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || fstat(ret->fd, &st) < 0 ||
	    memcmp(h.magic, MAGIC, sizeof(h.magic)) != 0 || h.version != CFI_CACHE_VERSION ||
	    h.row_bytes != sizeof(struct cfi_walk_row) || h.rows > CFI_WALK_MAX_ROWS ||
	    strncmp(h.build_id, build_id, sizeof(h.build_id)) != 0 ||
	    (uint64_t)st.st_size != sizeof(h) + (uint64_t)h.rows * sizeof(struct cfi_walk_row))
		return reject(ret);
	ret->rows = h.rows;
	ret->crc = h.crc;
	ret->narrowed = h.narrowed;
	/* the least recently used go first: a hit makes this one the newest */
	futimens(ret->fd, NULL);
	return 0;
}

/*
 * cfi_cache__read() - read the rows of entry @e (cfi_cache__find()) into
 * @rows (room for e->rows) and close it. The rows are checked against the
 * header's crc32 and must be sorted by PC, as cfi_table.c writes them.
 * Returns 0, or -EBADMSG (the file is deleted; @rows holds garbage: compile
 * the module again). Blocks on file I/O; does not log.
 */
int cfi_cache__read(struct cfi_cache *c, struct cfi_cache_entry *e, struct cfi_walk_row *rows)
{
	size_t want = (size_t)e->rows * sizeof(*rows), got = 0;

	(void)c;
	while (got < want) {
		ssize_t n = pread(e->fd, (char *)rows + got, want - got,
				  (off_t)(sizeof(struct file_header) + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return reject(e);
		got += (size_t)n;
	}
	if (rows_crc(rows, e->rows) != e->crc)
		return reject(e);
	for (uint32_t i = 1; i < e->rows; i++)
		if (rows[i].pc < rows[i - 1].pc)
			return reject(e);
	close(e->fd);
	e->fd = -1;
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * cfi_cache__store() - keep the @n rows of module @build_id (lowercase
 * hex), @narrowed of them made CFI_ROW_EXPR by narrowing, replacing its
 * file if any, then delete the least recently used files over the bound.
 * Returns the number of files deleted (>= 0), -EINVAL when @build_id is not
 * hex, -EFBIG when the file alone would be over the bound (not kept), or
 * the -errno of open(2)/write(2)/rename(2) (-ENOSPC on a full disk: nothing
 * is left behind, the files already there are kept). Blocks on file I/O;
 * does not log.
 */
int cfi_cache__store(struct cfi_cache *c, const char *build_id, const struct cfi_walk_row *rows,
		     uint32_t n, uint64_t narrowed)
{
	struct file_header h = {.version = CFI_CACHE_VERSION,
				.row_bytes = sizeof(*rows),
				.rows = n,
				.narrowed = narrowed};
	char tmp[PATH_MAX], path[PATH_MAX];
	uint64_t bytes = sizeof(h) + (uint64_t)n * sizeof(*rows);
	int fd, r;
	long evicted;

	if (!name_ok(build_id) || n > CFI_WALK_MAX_ROWS)
		return -EINVAL;
	if (bytes > c->max_bytes)
		return -EFBIG;
	memcpy(h.magic, MAGIC, sizeof(h.magic));
	snprintf(h.build_id, sizeof(h.build_id), "%s", build_id);
	h.crc = rows_crc(rows, n);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", c->dir, build_id);
	snprintf(path, sizeof(path), "%s/%s" SUFFIX, c->dir, build_id);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, &h, sizeof(h));
	if (r == 0)
		r = write_all(fd, rows, (size_t)n * sizeof(*rows));
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	evicted = evict(c);
	return evicted < 0 ? 0 : (int)evicted;
}

/* cfi_cache__bytes() - the bytes of the cache's files, as of the last store or open. */
uint64_t cfi_cache__bytes(const struct cfi_cache *c)
{
	return c->bytes;
}

/* cfi_cache__free() - free @c; its files stay for the next profd. Accepts NULL. */
void cfi_cache__free(struct cfi_cache *c)
{
	if (!c)
		return;
	free(c->dir);
	free(c);
}
