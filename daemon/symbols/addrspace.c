/*
 * addrspace.c - a process's address space as the symbolizer and the
 * unwinder see it: /proc/PID/maps parsed with bounds, each executable
 * mapping with its file (dev, inode, PT_LOAD headers, build ID, load bias)
 * and the ways to open that file again (/proc/PID/map_files, /proc/PID/root,
 * the path), [vdso] recognized as the daemon's own image where it is.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <elfutils/libdwelf.h>

#include "symbols/addr_bound.h"
#include "symbols/addrspace_internal.h"
#include "symbols/debuginfo.h"
#include "symbols/elf_util.h"
#include "symbols/symbolize.h"
#include "util.h"

/* ---------------------------------------------------------------------- */
/* Bounded parsing helpers for /proc text. */

bool parse_hex(const char **p, const char *end, uint64_t *ret)
{
	const char *q = *p;
	uint64_t v = 0;

	for (; q < end; q++) {
		unsigned d;

		if (*q >= '0' && *q <= '9')
			d = *q - '0';
		else if (*q >= 'a' && *q <= 'f')
			d = *q - 'a' + 10;
		else if (*q >= 'A' && *q <= 'F')
			d = *q - 'A' + 10;
		else
			break;
		if (v >> 60)
			return false; /* more than 64 bits */
		v = v << 4 | d;
	}
	if (q == *p)
		return false;
	*p = q;
	*ret = v;
	return true;
}

bool parse_dec(const char **p, const char *end, uint64_t *ret)
{
	const char *q = *p;
	uint64_t v = 0;

	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		unsigned d = *q - '0';

		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (q == *p)
		return false;
	*p = q;
	*ret = v;
	return true;
}

bool parse_char(const char **p, const char *end, char c)
{
	if (*p >= end || **p != c)
		return false;
	(*p)++;
	return true;
}

void skip_blanks(const char **p, const char *end)
{
	while (*p < end && (**p == ' ' || **p == '\t'))
		(*p)++;
}

/* ---------------------------------------------------------------------- */
/* /proc/PID/maps */

/*
 * maps_parse_line() - parse "start-end perms offset major:minor inode [path]"
 * from @len bytes at @line (a trailing newline is allowed). Returns 0, or
 * -EINVAL for anything malformed (the caller skips the line).
 */
int maps_parse_line(const char *line, size_t len, struct maps_line *ret)
{
	const char *p = line, *end = line + len;
	struct maps_line ml = {};

	if (len > 0 && end[-1] == '\n')
		end--;
	if (memchr(line, '\0', end - line))
		return -EINVAL;
	if (!parse_hex(&p, end, &ml.start) || !parse_char(&p, end, '-') ||
	    !parse_hex(&p, end, &ml.end) || !parse_char(&p, end, ' '))
		return -EINVAL;
	if (end - p < 4)
		return -EINVAL;
	memcpy(ml.perms, p, 4);
	p += 4;
	if ((ml.perms[0] != 'r' && ml.perms[0] != '-') ||
	    (ml.perms[1] != 'w' && ml.perms[1] != '-') ||
	    (ml.perms[2] != 'x' && ml.perms[2] != '-') ||
	    (ml.perms[3] != 'p' && ml.perms[3] != 's'))
		return -EINVAL;
	if (!parse_char(&p, end, ' ') || !parse_hex(&p, end, &ml.offset) ||
	    !parse_char(&p, end, ' ') || !parse_hex(&p, end, &ml.dev_major) ||
	    !parse_char(&p, end, ':') || !parse_hex(&p, end, &ml.dev_minor) ||
	    !parse_char(&p, end, ' ') || !parse_dec(&p, end, &ml.ino))
		return -EINVAL;
	if (p < end && *p != ' ' && *p != '\t')
		return -EINVAL;
	skip_blanks(&p, end);
	if (ml.start >= ml.end || end - p >= PATH_MAX)
		return -EINVAL;
	ml.path = p;
	ml.path_len = end - p;
	*ret = ml;
	return 0;
}

bool is_vdso(const char *path, size_t len)
{
	return len == strlen("[vdso]") && memcmp(path, "[vdso]", len) == 0;
}

bool maps_line_wanted(const struct maps_line *ml)
{
	if (ml->perms[2] != 'x' || ml->path_len == 0)
		return false;
	if (ml->path[0] == '/')
		return true;
	return is_vdso(ml->path, ml->path_len);
}

static uint64_t page_size(void)
{
	static uint64_t size;

	if (!size) {
		long r = sysconf(_SC_PAGESIZE);

		size = r > 0 ? (uint64_t)r : 4096;
	}
	return size;
}

int open_path(const struct addrspace *as, uint64_t start, uint64_t end, const char *path, int how,
	      char *buf, size_t size)
{
	int n;

	if (path[0] != '/')
		return -ENOENT;
	switch (how) {
	case OPEN_MAP_FILES:
		if (as->pid <= 0)
			return -ENOENT;
		n = snprintf(buf, size, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)as->pid,
			     start, end);
		break;
	case OPEN_ROOT:
		if (as->pid <= 0)
			return -ENOENT;
		n = snprintf(buf, size, "/proc/%d/root%s", (int)as->pid, path);
		break;
	default:
		n = snprintf(buf, size, "%s", path);
		break;
	}
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

/*
 * open_regular() - open @path read-only. O_NONBLOCK so that a FIFO planted
 * at a library's path cannot block us; anything but a regular file is
 * refused (-ENOEXEC). Returns an fd (O_CLOEXEC) or -errno. Shared with
 * unwind.c through symbolize.h.
 */
int open_regular(const char *path)
{
	_cleanup_close_ int fd = -1;
	struct stat st;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOEXEC;
	return TAKE_FD(fd);
}

/*
 * elf_begin_fd() - an Elf for @fd. ELF_C_READ rather than an mmap: a file
 * truncated under us would otherwise raise SIGBUS.
 */
Elf *elf_begin_fd(int fd)
{
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);

	if (e && elf_kind(e) != ELF_K_ELF) {
		elf_end(e);
		return NULL;
	}
	return e;
}

/* elf_build_id_hex() - @e's GNU build ID in lowercase hex into @buf, "" if none. */
void elf_build_id_hex(Elf *e, char buf[static 2 * BUILD_ID_MAX_BYTES + 1])
{
	static const char hex[] = "0123456789abcdef";
	const void *id = NULL;
	ssize_t len = dwelf_elf_gnu_build_id(e, &id);

	buf[0] = '\0';
	if (len <= 0 || len > BUILD_ID_MAX_BYTES || !id)
		return;
	for (ssize_t i = 0; i < len; i++) {
		unsigned char b = ((const unsigned char *)id)[i];

		buf[2 * i] = hex[b >> 4];
		buf[2 * i + 1] = hex[b & 15];
	}
	buf[2 * len] = '\0';
}

/* as_file_read_elf() - fill @f's build ID and PT_LOAD headers from @e; false if unreadable. */
static bool as_file_read_elf(struct as_file *f, Elf *e)
{
	struct elf_load loads[ELF_MAX_LOADS];
	size_t phnum, n = 0;
	GElf_Ehdr ehdr;

	if (!gelf_getehdr(e, &ehdr) || elf_getphdrnum(e, &phnum) < 0)
		return false;
	for (size_t i = 0; i < phnum && n < ELF_MAX_LOADS; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		loads[n++] = (struct elf_load){
		    .vaddr = ph.p_vaddr,
		    .offset = ph.p_offset,
		    .filesz = ph.p_filesz,
		    .exec = ph.p_flags & PF_X,
		};
	}
	free(f->loads);
	f->n_loads = 0;
	f->loads = n ? malloc(n * sizeof(*loads)) : NULL;
	if (!f->loads)
		return false; /* no PT_LOAD, or out of memory: read as unreadable */
	memcpy(f->loads, loads, n * sizeof(*loads));
	f->n_loads = n;
	elf_build_id_hex(e, f->build_id);
	return true;
}

/* elf_image_read() - fill @f from the ELF image in @image (@size bytes); false if unreadable. */
static bool elf_image_read(struct as_file *f, char *image, size_t size)
{
	_cleanup_(elf_endp) Elf *e = elf_memory(image, size);

	return e && elf_kind(e) == ELF_K_ELF && as_file_read_elf(f, e);
}

/* elf_image_build_id() - GNU build ID (hex, "" if none) of the ELF image in @image. */
static void elf_image_build_id(char *image, size_t size,
			       char buf[static 2 * BUILD_ID_MAX_BYTES + 1])
{
	_cleanup_(elf_endp) Elf *e = elf_memory(image, size);

	buf[0] = '\0';
	if (e && elf_kind(e) == ELF_K_ELF)
		elf_build_id_hex(e, buf);
}

/* vdso_read_target() - read @size bytes at @start of process @pid's memory; false if not all. */
static bool vdso_read_target(pid_t pid, uint64_t start, char *buf, size_t size)
{
	_cleanup_close_ int fd = -1;
	char path[64];

	if (pid <= 0 || start > (uint64_t)INT64_MAX - size)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd >= 0 && pread(fd, buf, size, (off_t)start) == (ssize_t)size;
}

/*
 * as_file_load_vdso() - fill the [vdso] entry @f from the ELF headers of the
 * process's vDSO, and set vdso_self when it is the daemon's own image, the
 * one the symbolizer reads symbols from.
 *
 * The image is read from /proc/PID/mem (the daemon may, as it may open
 * /proc/PID/map_files): it is ours if it has our size and our bytes or our
 * build ID (a process may have patched its copy). When it cannot be read (no
 * ptrace access, the process gone, maps text without a process), a vDSO of
 * our size is taken for ours, as daemon/symbols/unwind.c does: the kernel maps one
 * and the same 64-bit image into every x86-64 process; 32-bit and x32
 * processes get other images (vdso-image-32.c, vdso-image-x32.c). Leaves
 * @f unread (n_loads 0, no build ID, load bias from p_vaddr == 0) when
 * neither works.
 */
static void as_file_load_vdso(const struct addrspace *as, struct as_file *f)
{
	uint64_t size = f->vdso_end - f->vdso_start, self_start = 0, self_size;
	char self_id[2 * BUILD_ID_MAX_BYTES + 1];
	_cleanup_free_ char *image = NULL;
	bool theirs, same;

	if (size > VDSO_MAX_BYTES)
		return;
	image = malloc(size);
	if (!image)
		return;
	self_size = debuginfo__self_vdso(&self_start);
	theirs = vdso_read_target(as->pid, f->vdso_start, image, size);
	if (!theirs) {
		if (size != self_size)
			return;
		memcpy(image, (const void *)(uintptr_t)self_start, size);
	}
	/* compared before libelf reads the image (it may convert data in place) */
	same = size == self_size && memcmp(image, (const void *)(uintptr_t)self_start, size) == 0;
	if (!elf_image_read(f, image, size) || size != self_size)
		return;
	if (same) {
		f->vdso_self = true;
		return;
	}
	memcpy(image, (const void *)(uintptr_t)self_start, size);
	elf_image_build_id(image, size, self_id);
	f->vdso_self = f->build_id[0] && strcmp(f->build_id, self_id) == 0;
}

/* as_file_load() - read @f's ELF headers through the first way that opens it. */
static void as_file_load(const struct addrspace *as, struct as_file *f, uint64_t start,
			 uint64_t end)
{
	char buf[PATH_MAX + 64];

	if (is_vdso(f->path, strlen(f->path))) {
		as_file_load_vdso(as, f);
		return;
	}
	for (int how = 0; how < OPEN_N; how++) {
		_cleanup_close_ int fd = -1;
		_cleanup_(elf_endp) Elf *e = NULL;

		if (open_path(as, start, end, f->path, how, buf, sizeof(buf)) < 0)
			continue;
		fd = open_regular(buf);
		if (fd < 0)
			continue;
		e = elf_begin_fd(fd);
		if (e && as_file_read_elf(f, e))
			return;
	}
}

/*
 * mapping_load_bias() - runtime address minus ELF virtual address for a
 * mapping of @f at @start from file offset @offset.
 *
 * The PT_LOAD holding @offset maps file offset X to virtual address
 * p_vaddr + (X - p_offset), and the mapping puts X at start + (X - offset),
 * so bias = start - offset - (p_vaddr - p_offset). For ET_EXEC the mapping
 * sits at p_vaddr rounded down to a page and offset is p_offset rounded down
 * the same way, which gives 0. Without readable headers the guess is
 * p_vaddr == p_offset, true of the text of almost every linker's output.
 */
static uint64_t mapping_load_bias(const struct as_file *f, uint64_t start, uint64_t offset)
{
	const struct elf_load *best = NULL;

	for (size_t i = 0; i < f->n_loads; i++) {
		const struct elf_load *l = &f->loads[i];
		/* the mapping's offset is p_offset rounded down to a page */
		uint64_t lo = l->offset & ~(page_size() - 1);
		uint64_t span = l->offset - lo;

		span = l->filesz > UINT64_MAX - span ? UINT64_MAX : span + l->filesz;
		if (l->filesz == 0 || offset < lo || offset - lo >= span)
			continue;
		if (!best || (l->exec && !best->exec))
			best = l;
	}
	if (!best)
		return start - offset;
	return start - offset - (best->vaddr - best->offset);
}

/* as_file_get() - the file entry for @ml, created (and its ELF read) on first sight. */
static struct as_file *as_file_get(struct addrspace *as, const struct maps_line *ml)
{
	bool vdso = is_vdso(ml->path, ml->path_len);
	struct as_file *f, **files;

	for (size_t i = as->n_files; i-- > 0;) {
		f = as->files[i];
		if (f->ino == ml->ino && f->dev_major == ml->dev_major &&
		    f->dev_minor == ml->dev_minor && strlen(f->path) == ml->path_len &&
		    memcmp(f->path, ml->path, ml->path_len) == 0 &&
		    (!vdso || (f->vdso_start == ml->start && f->vdso_end == ml->end)))
			return f;
	}
	files = reallocarray(as->files, as->n_files + 1, sizeof(*files));
	if (!files)
		return NULL;
	as->files = files;
	f = calloc(1, sizeof(*f) + ml->path_len + 1);
	if (!f)
		return NULL;
	memcpy(f->path, ml->path, ml->path_len);
	f->dev_major = ml->dev_major;
	f->dev_minor = ml->dev_minor;
	f->ino = ml->ino;
	if (vdso) {
		f->vdso_start = ml->start;
		f->vdso_end = ml->end;
	}
	as_file_load(as, f, ml->start, ml->end);
	as->files[as->n_files++] = f;
	return f;
}

/* A mapping read from maps, before it is merged into the address space. */
struct pending {
	struct mapping m;
	struct as_file *file;
};

static int pending_cmp(const void *a, const void *b)
{
	const struct pending *x = a, *y = b;

	return x->m.start < y->m.start ? -1 : x->m.start > y->m.start;
}

/* as_index() - index of the mapping holding @addr, or -1. */
ssize_t as_index(const struct addrspace *as, uint64_t addr)
{
	size_t lo = addr_upper_bound(as->maps, as->n_maps, sizeof(*as->maps),
				     offsetof(struct mapping, start), addr);

	if (lo == 0 || addr >= as->maps[lo - 1].end)
		return -1;
	return (ssize_t)lo - 1;
}

static bool as_overlaps(const struct pending *p, size_t n, const struct mapping *m)
{
	/* first pending entry ending after m->start; @p is sorted and disjoint */
	size_t lo = addr_upper_bound(p, n, sizeof(*p), offsetof(struct pending, m.end), m->start);

	return lo < n && p[lo].m.start < m->end;
}

/*
 * as_merge() - add the @n mappings in @p (sorted, disjoint) that @as does
 * not hold yet. An old mapping overlapping a new one is dropped: the range
 * was unmapped and reused, and new samples in it belong to the new file.
 * Returns the number added or -ENOMEM (@as unchanged).
 */
static int as_merge(struct addrspace *as, struct pending *p, size_t n)
{
	_cleanup_free_ struct pending *all = NULL;
	struct mapping *maps;
	struct as_file **owners;
	size_t n_all = 0, n_new = 0;

	all = calloc(as->n_maps + n + 1, sizeof(*all));
	if (!all)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		ssize_t j = as_index(as, p[i].m.start);

		if (j >= 0 && as->maps[j].start == p[i].m.start && as->maps[j].end == p[i].m.end &&
		    as->maps[j].file_offset == p[i].m.file_offset && as->owners[j] == p[i].file)
			continue; /* already known */
		all[n_all++] = p[i];
		n_new++;
	}
	if (n_new == 0)
		return 0;
	for (size_t i = 0; i < as->n_maps; i++) {
		if (as_overlaps(all, n_new, &as->maps[i]))
			continue;
		all[n_all++] = (struct pending){.m = as->maps[i], .file = as->owners[i]};
	}
	qsort(all, n_all, sizeof(*all), pending_cmp);

	maps = calloc(n_all, sizeof(*maps));
	owners = calloc(n_all, sizeof(*owners));
	if (!maps || !owners) {
		free(maps);
		free(owners);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n_all; i++) {
		maps[i] = all[i].m;
		owners[i] = all[i].file;
	}
	free(as->maps);
	free(as->owners);
	as->maps = maps;
	as->owners = owners;
	as->n_maps = n_all;
	return (int)MIN(n_new, (size_t)INT_MAX);
}

static int range_cmp(const void *a, const void *b)
{
	const struct addr_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/*
 * as_add_other_code() - add the @n executable ranges in @r (sorted) to
 * as->other_code, merging those that overlap or touch. Returns 0 or -ENOMEM
 * (@as unchanged).
 */
static int as_add_other_code(struct addrspace *as, const struct addr_range *r, size_t n)
{
	struct addr_range *all;
	size_t n_all = as->n_other_code + n, out = 0;

	if (n == 0)
		return 0;
	all = malloc(n_all * sizeof(*all));
	if (!all)
		return -ENOMEM;
	if (as->n_other_code)
		memcpy(all, as->other_code, as->n_other_code * sizeof(*all));
	memcpy(all + as->n_other_code, r, n * sizeof(*all));
	qsort(all, n_all, sizeof(*all), range_cmp);
	for (size_t i = 0; i < n_all; i++) {
		if (out > 0 && all[i].start <= all[out - 1].end)
			all[out - 1].end = MAX(all[out - 1].end, all[i].end);
		else
			all[out++] = all[i];
	}
	free(as->other_code);
	as->other_code = all;
	as->n_other_code = out;
	return 0;
}

/*
 * as_read_maps() - parse a maps stream @f into @as. Malformed lines are
 * skipped; input beyond MAPS_MAX_BYTES is ignored. Returns the number of
 * new mappings, -ENOMEM, or -errno of a read error (@as then unchanged but
 * for unused file entries).
 */
static int as_read_maps(struct addrspace *as, FILE *f)
{
	_cleanup_free_ char *line = NULL;
	_cleanup_free_ struct pending *p = NULL;
	_cleanup_free_ struct addr_range *code = NULL;
	size_t line_cap = 0, n = 0, cap = 0, n_code = 0, code_cap = 0;
	uint64_t total = 0;
	ssize_t len;
	int r;

	errno = 0;
	while ((len = getline(&line, &line_cap, f)) > 0) {
		struct maps_line ml;
		struct as_file *file;

		total += (uint64_t)len;
		if (total > MAPS_MAX_BYTES)
			break;
		if ((size_t)len > LINE_MAX_BYTES || maps_parse_line(line, (size_t)len, &ml) < 0)
			continue;
		if (!maps_line_wanted(&ml)) {
			if (ml.perms[2] != 'x' || ml.start >= ml.end ||
			    (n_code > 0 && ml.start < code[n_code - 1].end))
				continue;
			if (grow_array((void **)&code, &code_cap, n_code, sizeof(*code)) < 0)
				return -ENOMEM;
			code[n_code++] = (struct addr_range){.start = ml.start, .end = ml.end};
			continue;
		}
		/* the kernel prints maps sorted; anything else is not /proc, drop it */
		if (n > 0 && ml.start < p[n - 1].m.end)
			continue;
		file = as_file_get(as, &ml);
		if (!file)
			return -ENOMEM;
		if (grow_array((void **)&p, &cap, n, sizeof(*p)) < 0)
			return -ENOMEM;
		p[n].file = file;
		p[n].m = (struct mapping){
		    .start = ml.start,
		    .end = ml.end,
		    .file_offset = ml.offset,
		    .load_bias = mapping_load_bias(file, ml.start, ml.offset),
		    .path = file->path,
		    .build_id = file->build_id,
		};
		n++;
	}
	if (ferror(f))
		return -(errno ?: EIO);
	/* First: if the merge then fails, the ranges added are still code. */
	r = as_add_other_code(as, code, n_code);
	return r < 0 ? r : as_merge(as, p, n);
}

static int as_open_maps(pid_t pid, FILE **ret)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	*ret = f;
	return 0;
}

/*
 * addrspace__new() - read /proc/@pid/maps and the ELF headers (build ID,
 * PT_LOADs) of each executable file mapping, opened through
 * /proc/@pid/map_files or /proc/@pid/root when the process allows it, and
 * of its [vdso] (read from /proc/@pid/mem, else taken to be the daemon's own
 * vDSO when of its size: see as_file_load_vdso()).
 * @pid: a process ID (> 0).
 * @ret_as: on success a new address space the caller frees with
 *   addrspace__free().
 *
 * Returns 0, -ESRCH if the process is gone, -EACCES/-EPERM if its maps may
 * not be read, -ENOMEM. A process without executable file mappings (a
 * kernel thread) gives an empty address space. Blocks on /proc and file
 * reads; does not log.
 */
int addrspace__new(pid_t pid, struct addrspace **ret_as)
{
	_cleanup_fclose_ FILE *f = NULL;
	struct addrspace *as;
	int r;

	if (pid <= 0)
		return -ESRCH;
	elf_version(EV_CURRENT);
	r = as_open_maps(pid, &f);
	if (r < 0)
		return r;
	as = calloc(1, sizeof(*as));
	if (!as)
		return -ENOMEM;
	as->pid = pid;
	r = as_read_maps(as, f);
	if (r < 0) {
		addrspace__free(as);
		return r;
	}
	*ret_as = as;
	return 0;
}

/*
 * addrspace__refresh() - re-read /proc/PID/maps (after a dlopen, say). New
 * mappings are added; mappings that went away are kept (samples taken
 * before an munmap may still arrive), except those a new mapping overlaps.
 * The mapping array from addrspace__find()/addrspace__mappings() is
 * reallocated by a refresh that returns > 0; the path and build_id strings
 * of every mapping ever seen stay valid until addrspace__free().
 *
 * Returns the number of new mappings (>= 0), -ESRCH if the process is gone,
 * -EACCES/-EPERM, -ENOMEM; on error @as is left unchanged. Blocks on file
 * reads; does not log.
 */
int addrspace__refresh(struct addrspace *as)
{
	_cleanup_fclose_ FILE *f = NULL;
	int r;

	r = as_open_maps(as->pid, &f);
	if (r < 0)
		return r;
	return as_read_maps(as, f);
}

/*
 * addrspace__find() - the mapping holding @addr (a runtime address), or
 * NULL. The pointer is valid until the next addrspace__refresh() that adds
 * mappings, or addrspace__free(). O(log n), no allocation.
 */
const struct mapping *addrspace__find(const struct addrspace *as, uint64_t addr)
{
	ssize_t i = as_index(as, addr);

	return i < 0 ? NULL : &as->maps[i];
}

/*
 * addrspace__is_code() - whether @addr lies in an executable mapping of the
 * process as last read from /proc/PID/maps, or in one read before and gone
 * since: a file's, the vDSO, or anonymous code (JIT, the kernel's
 * [uprobes] page). A return address outside all of them is not a frame but
 * garbage (a frame-pointer walk through code without frame pointers).
 * O(log n), no allocation.
 */
bool addrspace__is_code(const struct addrspace *as, uint64_t addr)
{
	size_t lo;

	if (as_index(as, addr) >= 0)
		return true;
	lo = addr_upper_bound(as->other_code, as->n_other_code, sizeof(*as->other_code),
			      offsetof(struct addr_range, start), addr);
	return lo > 0 && addr < as->other_code[lo - 1].end;
}

/*
 * addrspace__mappings() - all mappings, sorted by start and disjoint;
 * count in *@ret_n. Same lifetime as addrspace__find()'s result.
 */
const struct mapping *addrspace__mappings(const struct addrspace *as, size_t *ret_n)
{
	*ret_n = as->n_maps;
	return as->maps;
}

/* addrspace__free() - release @as and every string of its mappings. Accepts NULL. */
void addrspace__free(struct addrspace *as)
{
	if (!as)
		return;
	for (size_t i = 0; i < as->n_files; i++) {
		free(as->files[i]->loads);
		free(as->files[i]);
	}
	free(as->files);
	free(as->maps);
	free(as->owners);
	free(as->other_code);
	free(as);
}

/*
 * elf_fd_matches() - whether @fd is an ELF file with build ID @build_id
 * ("" accepts any ELF: nothing to check against).
 */
bool elf_fd_matches(int fd, const char *build_id)
{
	_cleanup_(elf_endp) Elf *e = elf_begin_fd(fd);
	char id[2 * BUILD_ID_MAX_BYTES + 1];

	if (!e)
		return false;
	if (!build_id[0])
		return true;
	elf_build_id_hex(e, id);
	return strcmp(id, build_id) == 0;
}

/*
 * addrspace__open_file() - open the ELF file behind mapping @m of @as, the
 * way the symbolizer does: the first of /proc/PID/map_files/START-END,
 * /proc/PID/root/PATH and PATH that is a regular ELF file whose GNU build ID
 * is @m->build_id (any ELF file when @m has none), so a library replaced on
 * disk since is never taken for the one mapped.
 * @m: a mapping of @as (from addrspace__find() or addrspace__mappings()).
 * @ret_path: receives, NUL-terminated, the name under which separate debug
 *   files are looked for next to the file: /proc/PID/root/PATH when opened
 *   that way, else PATH (the path in the maps); @size bytes, PATH_MAX + 64
 *   is always enough.
 *
 * Returns a read-only O_CLOEXEC fd the caller owns, -ENOENT when no way
 * opens a matching file ([vdso], a file gone with its process),
 * -ENAMETOOLONG when @size is too small. Blocks on file I/O; does not log.
 */
int addrspace__open_file(const struct addrspace *as, const struct mapping *m, char *ret_path,
			 size_t size)
{
	char buf[PATH_MAX + 64];

	for (int how = 0; how < OPEN_N; how++) {
		_cleanup_close_ int fd = -1;
		int n;

		if (open_path(as, m->start, m->end, m->path, how, buf, sizeof(buf)) < 0)
			continue;
		fd = open_regular(buf);
		if (fd < 0 || !elf_fd_matches(fd, m->build_id))
			continue;
		n = snprintf(ret_path, size, "%s", how == OPEN_ROOT ? buf : m->path);
		if (n < 0 || (size_t)n >= size)
			return -ENAMETOOLONG;
		return TAKE_FD(fd);
	}
	return -ENOENT;
}

/*
 * addrspace__open_image() - the file to read mapping @m's CFI and symbols
 * from: addrspace__open_file() for a file; for [vdso], the daemon's own
 * vDSO (debuginfo__vdso_open()) when it has the mapping's size, the one
 * image the kernel maps into every 64-bit process (a 32-bit process's is of
 * another size), with "[vdso]" in @ret_path. Returns an O_CLOEXEC fd the
 * caller owns, -ENOENT when there is none (anonymous memory, a vDSO of
 * another size, a file gone), -ENAMETOOLONG. Blocks on file I/O; does not log.
 */
int addrspace__open_image(const struct addrspace *as, const struct mapping *m, char *ret_path,
			  size_t size)
{
	_cleanup_close_ int fd = -1;
	uint64_t bytes = 0;
	int n;

	if (m->path[0] == '/')
		return addrspace__open_file(as, m, ret_path, size);
	if (strcmp(m->path, "[vdso]") != 0)
		return -ENOENT;
	fd = debuginfo__vdso_open(&bytes);
	if (fd < 0 || bytes != m->end - m->start)
		return -ENOENT;
	n = snprintf(ret_path, size, "%s", m->path);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return TAKE_FD(fd);
}
