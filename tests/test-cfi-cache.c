/*
 * test-cfi-cache.c - the CFI table cache on disk (collect/cfi_cache.c) in a
 * temporary directory: rows read back as stored; a miss, a name that is no
 * build ID; a file corrupted, truncated, of another version or renamed is
 * refused and deleted, never read as rows; the least recently used files
 * go first when the bound is passed (a hit counts as a use); a table over
 * the bound and a write that fails (the file size limit, as a full disk
 * would) leave nothing behind and keep the files already there; a smaller
 * bound at the next start evicts at once. Needs nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "collect/cfi_cache.h"

#define HEADER_BYTES 168 /* cfi_cache.c's struct file_header */
#define N_ROWS 100000

static char dir[128] = "/tmp/test-cfi-cache.XXXXXX";

static const char *const ID[] = {
    "0123456789abcdef0123456789abcdef01234567", "1123456789abcdef0123456789abcdef01234567",
    "2123456789abcdef0123456789abcdef01234567", "3123456789abcdef0123456789abcdef01234567"};

/* @n rows sorted by PC, their other fields varied by @seed. */
static struct cfi_walk_row *make_rows(uint32_t n, unsigned seed)
{
	struct cfi_walk_row *rows = calloc(n, sizeof(*rows));

	if (!rows)
		SETUP_FAIL("out of memory");
	for (uint32_t i = 0; i < n; i++)
		rows[i] = (struct cfi_walk_row){.pc = 0x1000 + i * 4,
						.cfa_off8 = (int16_t)((i * 7 + seed) % 64),
						.fp_off = (int8_t)-(int)((i + seed) % 3 * 8),
						.kind = (uint8_t)((i + seed) % 6)};
	return rows;
}

static void path_of(const char *id, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s.cfi", dir, id);
}

static bool exists(const char *id)
{
	char p[512];

	path_of(id, p, sizeof(p));
	return access(p, F_OK) == 0;
}

/* find + read of @id: 0 and the rows in *@ret (malloc'ed), or the -errno of either. */
static int load(struct cfi_cache *c, const char *id, struct cfi_walk_row **ret, uint32_t *ret_n,
		uint64_t *ret_narrowed)
{
	struct cfi_cache_entry e;
	int r = cfi_cache__find(c, id, &e);

	*ret = NULL;
	if (r < 0)
		return r;
	*ret = malloc((size_t)e.rows * sizeof(**ret) + 1);
	if (!*ret)
		SETUP_FAIL("out of memory");
	*ret_n = e.rows;
	*ret_narrowed = e.narrowed;
	r = cfi_cache__read(c, &e, *ret);
	if (r < 0) {
		free(*ret);
		*ret = NULL;
	}
	return r;
}

/* Rewrite byte @off of @id's file with its complement; or cut the file to @off bytes. */
static void damage(const char *id, off_t off, bool truncate_it)
{
	char p[512];
	unsigned char b;
	int fd;

	path_of(id, p, sizeof(p));
	fd = open(p, O_RDWR);
	if (fd < 0)
		SETUP_FAIL("open %s: %s", p, strerror(errno));
	if (truncate_it) {
		if (ftruncate(fd, off) < 0)
			SETUP_FAIL("ftruncate: %s", strerror(errno));
	} else {
		if (pread(fd, &b, 1, off) != 1)
			SETUP_FAIL("pread %s", p);
		b = (unsigned char)~b;
		if (pwrite(fd, &b, 1, off) != 1)
			SETUP_FAIL("pwrite %s", p);
	}
	close(fd);
}

/* Set @id's file's mtime @age_s seconds in the past. */
static void age(const char *id, time_t age_s)
{
	struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = time(NULL) - age_s}};
	char p[512];

	path_of(id, p, sizeof(p));
	if (utimensat(AT_FDCWD, p, ts, 0) < 0)
		SETUP_FAIL("utimensat %s: %s", p, strerror(errno));
}

static void test_round_trip(struct cfi_cache *c, const struct cfi_walk_row *rows)
{
	struct cfi_walk_row *got;
	uint64_t narrowed = 0;
	uint32_t n = 0;
	struct stat st;
	char p[512];

	CHECK_INT_EQ(cfi_cache__find(c, ID[0], &(struct cfi_cache_entry){}), -ENOENT);
	CHECK_INT_EQ(cfi_cache__store(c, ID[0], rows, N_ROWS, 17), 0);
	path_of(ID[0], p, sizeof(p));
	CHECK(stat(p, &st) == 0 && st.st_size == HEADER_BYTES + N_ROWS * 8);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
	CHECK_INT_EQ(cfi_cache__bytes(c), HEADER_BYTES + N_ROWS * 8);
	CHECK_INT_EQ(load(c, ID[0], &got, &n, &narrowed), 0);
	CHECK_INT_EQ(n, N_ROWS);
	CHECK_INT_EQ(narrowed, 17);
	CHECK(got && memcmp(got, rows, N_ROWS * sizeof(*rows)) == 0);
	free(got);
	/* a module known to have no CFI is kept too: 0 rows */
	CHECK_INT_EQ(cfi_cache__store(c, ID[1], rows, 0, 0), 0);
	CHECK_INT_EQ(load(c, ID[1], &got, &n, &narrowed), 0);
	CHECK_INT_EQ(n, 0);
	free(got);
	/* modules without a build ID ("path:..." keys) are not cached; nothing names a file */
	CHECK_INT_EQ(cfi_cache__store(c, "path:/usr/lib/libc.so.6", rows, 10, 0), -EINVAL);
	CHECK_INT_EQ(cfi_cache__store(c, "../../etc/passwd", rows, 10, 0), -EINVAL);
	CHECK_INT_EQ(cfi_cache__store(c, "ABCDEF", rows, 10, 0), -EINVAL);
	CHECK_INT_EQ(cfi_cache__find(c, "path:/usr/lib/libc.so.6", &(struct cfi_cache_entry){}),
		     -ENOENT);
}

static void test_damaged(struct cfi_cache *c, const struct cfi_walk_row *rows)
{
	struct cfi_walk_row *got;
	uint64_t narrowed;
	uint32_t n;
	char a[512], b[512];

	/* a flipped byte in the rows: the header reads, the rows do not */
	CHECK_INT_EQ(cfi_cache__store(c, ID[2], rows, N_ROWS, 0), 0);
	damage(ID[2], HEADER_BYTES + 8 * 5000 + 6, false); /* an fp_off */
	CHECK_INT_EQ(load(c, ID[2], &got, &n, &narrowed), -EBADMSG);
	CHECK(!exists(ID[2]));
	/* cut short (a crash mid-write cannot leave one: the file is renamed in whole) */
	CHECK_INT_EQ(cfi_cache__store(c, ID[2], rows, N_ROWS, 0), 0);
	damage(ID[2], HEADER_BYTES + 8 * 100, true);
	CHECK_INT_EQ(load(c, ID[2], &got, &n, &narrowed), -EBADMSG);
	CHECK(!exists(ID[2]));
	/* another version (byte 8) */
	CHECK_INT_EQ(cfi_cache__store(c, ID[2], rows, N_ROWS, 0), 0);
	damage(ID[2], 8, false);
	CHECK_INT_EQ(load(c, ID[2], &got, &n, &narrowed), -EBADMSG);
	CHECK(!exists(ID[2]));
	/* a file under another build ID's name */
	CHECK_INT_EQ(cfi_cache__store(c, ID[2], rows, N_ROWS, 0), 0);
	path_of(ID[2], a, sizeof(a));
	path_of(ID[3], b, sizeof(b));
	CHECK(rename(a, b) == 0);
	CHECK_INT_EQ(load(c, ID[3], &got, &n, &narrowed), -EBADMSG);
	CHECK(!exists(ID[3]));
	/* the others were not touched */
	CHECK_INT_EQ(load(c, ID[0], &got, &n, &narrowed), 0);
	CHECK(got && n == N_ROWS && memcmp(got, rows, N_ROWS * sizeof(*rows)) == 0);
	free(got);
}

/* Room for three tables of N_ROWS and a half: the fourth pushes the least recently used out. */
static void test_bound(const struct cfi_walk_row *rows)
{
	uint64_t one = HEADER_BYTES + N_ROWS * 8;
	struct cfi_cache *c = NULL;
	struct cfi_walk_row *got;
	uint64_t narrowed;
	uint32_t n;

	CHECK_INT_EQ(cfi_cache__new(dir, one * 7 / 2, &c), 0);
	if (!c)
		return;
	for (int i = 0; i < 3; i++)
		CHECK_INT_EQ(cfi_cache__store(c, ID[i], rows, N_ROWS, 0), 0);
	age(ID[0], 30);
	age(ID[1], 20);
	age(ID[2], 10);
	/* ID[0], the oldest, is used: ID[1] is now the least recently used */
	CHECK_INT_EQ(load(c, ID[0], &got, &n, &narrowed), 0);
	free(got);
	CHECK_INT_EQ(cfi_cache__store(c, ID[3], rows, N_ROWS, 0), 1);
	CHECK(exists(ID[0]) && !exists(ID[1]) && exists(ID[2]) && exists(ID[3]));
	CHECK(cfi_cache__bytes(c) <= one * 7 / 2);
	/* one table larger than the whole bound is not written, and evicts nothing */
	CHECK_INT_EQ(cfi_cache__store(c, ID[1], rows, (uint32_t)(one * 4 / 8), 0), -EFBIG);
	CHECK(!exists(ID[1]) && exists(ID[0]) && exists(ID[2]) && exists(ID[3]));
	cfi_cache__free(c);

	/* the next start with a smaller bound: the oldest go at once */
	age(ID[0], 30);
	age(ID[2], 20);
	age(ID[3], 10);
	c = NULL;
	CHECK_INT_EQ(cfi_cache__new(dir, one * 3 / 2, &c), 0);
	CHECK(!exists(ID[0]) && !exists(ID[2]) && exists(ID[3]));
	cfi_cache__free(c);
	CHECK_INT_EQ(cfi_cache__new(dir, 0, &c), -EINVAL);
}

/* A write that fails half-way (RLIMIT_FSIZE: EFBIG, as ENOSPC on a full disk). */
static void test_write_fails(const struct cfi_walk_row *rows)
{
	struct rlimit old, small = {.rlim_cur = HEADER_BYTES + 8 * 1000};
	struct cfi_cache *c = NULL;
	struct cfi_walk_row *got;
	uint64_t narrowed;
	uint32_t n;
	char tmp[512];

	CHECK_INT_EQ(cfi_cache__new(dir, 1ull << 30, &c), 0);
	if (!c)
		return;
	if (getrlimit(RLIMIT_FSIZE, &old) < 0)
		SETUP_FAIL("getrlimit: %s", strerror(errno));
	small.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &small) < 0)
		SETUP_FAIL("setrlimit: %s", strerror(errno));
	CHECK_INT_EQ(cfi_cache__store(c, ID[0], rows, N_ROWS, 0), -EFBIG);
	if (setrlimit(RLIMIT_FSIZE, &old) < 0)
		SETUP_FAIL("setrlimit: %s", strerror(errno));
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, ID[0]);
	CHECK(access(tmp, F_OK) < 0 && !exists(ID[0]));
	/* the file already there reads as before */
	CHECK_INT_EQ(load(c, ID[3], &got, &n, &narrowed), 0);
	CHECK(got && n == N_ROWS && memcmp(got, rows, N_ROWS * sizeof(*rows)) == 0);
	free(got);
	cfi_cache__free(c);
}

/* A temporary file a killed profd left is deleted at the next start. */
static void test_stale_tmp(void)
{
	struct cfi_cache *c = NULL;
	char tmp[512];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, ID[1]);
	f = fopen(tmp, "w");
	if (!f)
		SETUP_FAIL("fopen %s", tmp);
	fputs("half a table", f);
	fclose(f);
	CHECK_INT_EQ(cfi_cache__new(dir, 1ull << 30, &c), 0);
	CHECK(access(tmp, F_OK) < 0);
	cfi_cache__free(c);
}

int main(void)
{
	struct cfi_walk_row *rows = make_rows(N_ROWS, 3);
	struct cfi_cache *c = NULL;
	char cmd[600];

	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %s", strerror(errno));
	/* created if missing, not its parents */
	CHECK_INT_EQ(cfi_cache__new("/nonexistent-dir/cfi-cache", 1 << 20, &c), -ENOENT);
	strcat(dir, "/cache");
	CHECK_INT_EQ(cfi_cache__new(dir, 1ull << 30, &c), 0);
	if (!c)
		return check_exit("test-cfi-cache");
	test_round_trip(c, rows);
	test_damaged(c, rows);
	cfi_cache__free(c);
	test_bound(rows);
	test_write_fails(rows);
	test_stale_tmp();
	free(rows);
	snprintf(cmd, sizeof(cmd), "rm -rf '%.*s'", (int)(strlen(dir) - strlen("/cache")), dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return check_exit("test-cfi-cache");
}
