/*
 * cfi_maps.c - fill the maps of cfi_walk.bpf.h (cfi_maps.h): per process
 * its executable mappings; per module (build ID, else path) its CFI table
 * compiled once (or read from the table cache on disk, cfi_cache.h, by
 * build ID), narrowed to 8-byte rows and copied into the shared,
 * mmap'ed row array at the first free place that holds it (first fit).
 * Modules are reference-counted by the processes that map them and their
 * rows freed with the last one.
 *
 * Owns: the module and process bookkeeping, and the row array in slot 0
 * of cfi_rows with its mmap, made for the first process (CFI_MAPS_FIRST_ROWS
 * rows), grown when a module does not fit (rows_grow()) up to rows_cap, and
 * dropped after the last process (not the other map fds, which belong to
 * the BPF object). Files are untrusted: a
 * module that cannot be opened or compiled gets no rows and is remembered
 * as such. Not thread-safe.
 *
 * A row region is reused only after no process refers to its module, but a
 * BPF walk that started before that may still be reading it: the window is
 * one walk (microseconds), and the worst it can do is one wrong row.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "collect/cfi_cache.h"
#include "collect/cfi_maps.h"
#include "symbols/cfi_table.h"
#include "symbols/cfi_unwind.h"
#include "symbols/debuginfo.h"
#include "util.h"

_Static_assert(CFI_WALK_ROW_NONE == CFI_ROW_NONE && CFI_WALK_ROW_CFA == CFI_ROW_CFA &&
		   CFI_WALK_ROW_PLT == CFI_ROW_PLT && CFI_WALK_ROW_EXPR == CFI_ROW_EXPR &&
		   CFI_WALK_ROW_SIGNAL == CFI_ROW_SIGNAL &&
		   CFI_WALK_ROW_OUTERMOST == CFI_ROW_OUTERMOST,
	       "cfi_walk.h numbers the row kinds as cfi_table.h");
_Static_assert(sizeof(struct cfi_walk_row) == 8, "a BPF row is 8 bytes");
_Static_assert(CFI_WALK_MAX_ROWS <= (1u << (CFI_WALK_ROW_STEPS - 1)),
	       "the BPF binary search ends within CFI_WALK_ROW_STEPS");
_Static_assert(CFI_WALK_MAX_MAPPINGS <= (1u << (CFI_WALK_MAPPING_STEPS - 1)),
	       "the BPF mapping search ends within CFI_WALK_MAPPING_STEPS");

const char *cfi_walk_stop_name(unsigned stop)
{
	static const char *const names[CFI_STOP_NR] = {
	    [CFI_STOP_END] = "end",		  [CFI_STOP_MAX_FRAMES] = "max_frames",
	    [CFI_STOP_NO_PROCESS] = "no_process", [CFI_STOP_NO_MAPPING] = "no_mapping",
	    [CFI_STOP_NO_TABLE] = "no_table",	  [CFI_STOP_NO_CFI] = "no_cfi",
	    [CFI_STOP_EXPR] = "expr",		  [CFI_STOP_SIGNAL] = "signal",
	    [CFI_STOP_READ_FAULT] = "read_fault", [CFI_STOP_BP_LOST] = "bp_lost",
	    [CFI_STOP_BAD_FRAME] = "bad_frame",
	};

	return stop < CFI_STOP_NR ? names[stop] : "unknown";
}

/* One module: a slot of cfi_modules (its index is the module id). */
struct module {
	char *key;	/* build ID, else "path:" + path; NULL: free slot */
	uint32_t first; /* rows in cfi_rows: [first, first + n) */
	uint32_t n;
	uint32_t refs; /* processes mapping it */
	bool pending;  /* lazy: known, not compiled yet (cfi_maps__load_module()) */
};

/* One process: the modules it holds a reference on. */
struct proc {
	uint32_t tgid;
	uint32_t *modules;
	size_t n;
};

struct cfi_maps {
	int procs_fd, modules_fd, rows_outer_fd;
	int rows_fd;		   /* the row array in cfi_rows' slot 0; -1 while no process */
	struct cfi_walk_row *rows; /* rows_fd, mmap'ed: stats.rows_len rows */
	size_t rows_map_bytes;
	struct module modules[CFI_WALK_MAX_MODULES];
	struct proc *procs;
	size_t n_procs, cap_procs;
	struct debuginfo debuginfo;
	bool lazy; /* modules are compiled on demand, not by add_process() */
	struct cfi_cache *cache; /* borrowed; NULL: every module is compiled */
	uint32_t fills; /* the last cfi_walk_module.fill given (0: none yet) */
	struct cfi_maps_stats stats;
};

/*
 * cfi_maps__new() - the loader of a loaded BPF object's cfi_procs,
 * cfi_modules and cfi_rows maps (their fds: borrowed, they must outlive
 * the loader). @rows_cap: the most rows the row array in cfi_rows
 * (@rows_outer_fd) may grow to, 1..CFI_WALK_MAX_ROWS (CFI_MAPS_DEFAULT_ROWS:
 * 32 MiB); the first cfi_maps__add_process() creates it with
 * CFI_MAPS_FIRST_ROWS rows (at most @rows_cap), nothing is allocated for
 * rows before that. Separate debug files are searched as the
 * unwinder does ($PROFD_DEBUG_PATH, /usr/lib/debug). Returns 0 and *@ret,
 * -EINVAL for a bad @rows_cap, -ENOMEM. Does not log.
 */
int cfi_maps__new(int procs_fd, int modules_fd, int rows_outer_fd, uint32_t rows_cap,
		  struct cfi_maps **ret)
{
	struct cfi_maps *m;

	if (rows_cap == 0 || rows_cap > CFI_WALK_MAX_ROWS)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	*m = (struct cfi_maps){
	    .procs_fd = procs_fd,
	    .modules_fd = modules_fd,
	    .rows_outer_fd = rows_outer_fd,
	    .rows_fd = -1,
	    .stats.rows_cap = rows_cap,
	};
	if (debuginfo__init(&m->debuginfo, getenv("PROFD_DEBUG_PATH"), true) < 0) {
		free(m);
		return -ENOMEM;
	}
	*ret = m;
	return 0;
}

/*
 * rows_map() - create a row array of @len rows (allocated whole by the
 * kernel) and mmap it. Returns 0 with *@ret_fd, *@ret_rows and
 * *@ret_bytes (the mapping's length), or bpf_map_create()'s or mmap()'s
 * -errno (nothing is left behind).
 */
static int rows_map(uint32_t len, int *ret_fd, struct cfi_walk_row **ret_rows, size_t *ret_bytes)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t bytes = ((size_t)len * sizeof(struct cfi_walk_row) + page - 1) & ~(page - 1);
	void *p;
	int fd, r;

	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "cfi_rows_array", sizeof(uint32_t),
			    sizeof(struct cfi_walk_row), len, &opts);
	if (fd < 0)
		return -errno;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		close(fd);
		return r;
	}
	*ret_fd = fd;
	*ret_rows = p;
	*ret_bytes = bytes;
	return 0;
}

/*
 * rows_install() - make a new row array of @len rows holding the first
 * @keep rows of the current one (if any), put it in slot 0 of cfi_rows and
 * let the old one go. A BPF walk that already looked the old array up
 * keeps reading it: the kernel frees it after an RCU grace period, and its
 * rows are the same. Returns 0, or rows_map()'s or the update's -errno
 * (the current array, if any, is left in place).
 */
static int rows_install(struct cfi_maps *m, uint32_t len, uint32_t keep)
{
	struct cfi_walk_row *rows = NULL;
	uint32_t zero = 0;
	size_t bytes = 0;
	int fd, r;

	r = rows_map(len, &fd, &rows, &bytes);
	if (r < 0)
		return r;
	if (m->rows && keep)
		memcpy(rows, m->rows, (size_t)MIN(keep, len) * sizeof(*rows));
	/* the rows are in place before walks can find them */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (bpf_map_update_elem(m->rows_outer_fd, &zero, &fd, BPF_ANY) < 0) {
		r = -errno;
		munmap(rows, bytes);
		close(fd);
		return r;
	}
	if (m->rows_fd >= 0) {
		munmap(m->rows, m->rows_map_bytes);
		close(m->rows_fd);
	}
	m->rows = rows;
	m->rows_fd = fd;
	m->rows_map_bytes = bytes;
	m->stats.rows_len = len;
	return 0;
}

/* rows_open() - the first row array: CFI_MAPS_FIRST_ROWS rows, at most rows_cap. */
static int rows_open(struct cfi_maps *m)
{
	return rows_install(m, (uint32_t)MIN(m->stats.rows_cap, (uint64_t)CFI_MAPS_FIRST_ROWS), 0);
}

/*
 * rows_close() - take the row array out of cfi_rows and let it go (the
 * kernel frees it once no walk holds it: after an RCU grace period).
 */
static void rows_close(struct cfi_maps *m)
{
	uint32_t zero = 0;

	if (m->rows_fd < 0)
		return;
	bpf_map_delete_elem(m->rows_outer_fd, &zero);
	munmap(m->rows, m->rows_map_bytes);
	close(m->rows_fd);
	m->rows = NULL;
	m->rows_fd = -1;
	m->stats.rows_len = 0;
}

/*
 * rows_grow() - grow the row array so that @end rows fit: to half as large
 * again, or to @end if more, in whole CFI_MAPS_FIRST_ROWS steps, at most
 * rows_cap. The copy is of every row below the current length (a few ms
 * for 32 MiB). Returns 0, -ENOSPC when @end is beyond rows_cap, or
 * rows_install()'s -errno (the array is left as it was).
 */
static int rows_grow(struct cfi_maps *m, uint64_t end)
{
	uint64_t len = m->stats.rows_len + m->stats.rows_len / 2;

	if (end > m->stats.rows_cap)
		return -ENOSPC;
	len = MAX(len, end);
	len = (len + CFI_MAPS_FIRST_ROWS - 1) / CFI_MAPS_FIRST_ROWS * CFI_MAPS_FIRST_ROWS;
	len = MIN(len, m->stats.rows_cap);
	m->stats.rows_grown++;
	return rows_install(m, (uint32_t)len, (uint32_t)m->stats.rows_len);
}

/* table_compile() - cfi_table__compile_mapping(), timed in m->stats.compile_ns. */
static struct cfi_table *table_compile(struct cfi_maps *m, const struct addrspace *as,
				       const struct mapping *mp)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	struct cfi_table *t = cfi_table__compile_mapping(as, mp, &m->debuginfo);

	m->stats.compile_ns += now_ns(CLOCK_MONOTONIC) - t0;
	return t;
}

static int cmp_first(const void *a, const void *b)
{
	const struct module *x = *(const struct module *const *)a;
	const struct module *y = *(const struct module *const *)b;

	return (x->first > y->first) - (x->first < y->first);
}

/*
 * rows_alloc() - the first free place for @n rows in cfi_rows (first fit
 * between the modules that have rows), else after the last module, the
 * array grown to hold them (rows_grow()). Returns 0 and *@ret_first,
 * -ENOSPC when no gap is large enough and rows_cap is reached, -ENOMEM, or
 * rows_grow()'s -errno.
 */
static int rows_alloc(struct cfi_maps *m, uint32_t n, uint32_t *ret_first)
{
	_cleanup_free_ struct module **used = NULL;
	size_t n_used = 0;
	uint64_t at = 0;
	int r;

	used = malloc(CFI_WALK_MAX_MODULES * sizeof(*used));
	if (!used)
		return -ENOMEM;
	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		if (m->modules[i].key && m->modules[i].n)
			used[n_used++] = &m->modules[i];
	qsort(used, n_used, sizeof(*used), cmp_first);
	for (size_t i = 0; i <= n_used; i++) {
		uint64_t next = i < n_used ? used[i]->first : m->stats.rows_len;

		if (next >= at && next - at >= n) {
			*ret_first = (uint32_t)at;
			return 0;
		}
		if (i < n_used)
			at = (uint64_t)used[i]->first + used[i]->n;
	}
	/* at: the end of the last module's rows */
	r = rows_grow(m, at + n);
	if (r < 0)
		return r;
	*ret_first = (uint32_t)at;
	return 0;
}

/*
 * row_narrow() - @r as an 8-byte BPF row (cfi_walk.h); false when its
 * offsets do not fit (the row is then CFI_ROW_EXPR: the walk stops there).
 */
static bool row_narrow(const struct cfi_row *r, struct cfi_walk_row *ret)
{
	*ret = (struct cfi_walk_row){
	    .pc = (uint32_t)r->pc,
	    .cfa_off8 = (int16_t)(r->cfa_off / 8),
	    .fp_off = (int8_t)r->fp_off,
	    .kind = (uint8_t)(CFI_WALK_KIND(r->kind) |
			      ((r->flags & CFI_ROW_CFA_BP) ? CFI_WALK_CFA_BP : 0) |
			      ((r->flags & CFI_ROW_FP_SAVED) ? CFI_WALK_FP_SAVED : 0) |
			      ((r->flags & CFI_ROW_FP_UNDEF) ? CFI_WALK_FP_UNDEF : 0)),
	};
	if (r->cfa_off % 8 != 0 || r->cfa_off / 8 != ret->cfa_off8 || r->fp_off != ret->fp_off) {
		*ret = (struct cfi_walk_row){.pc = (uint32_t)r->pc, .kind = CFI_WALK_ROW_EXPR};
		return false;
	}
	return true;
}

/* module_put() - drop a reference on module @id; at the last, free its rows and slot. */
static void module_put(struct cfi_maps *m, uint32_t id)
{
	struct cfi_walk_module none = {};
	struct module *mod;

	if (id >= CFI_WALK_MAX_MODULES)
		return;
	mod = &m->modules[id];
	if (!mod->key || --mod->refs > 0)
		return;
	/* no process refers to it any more: the slot reads "no table" before reuse */
	bpf_map_update_elem(m->modules_fd, &id, &none, BPF_ANY);
	if (mod->n) {
		m->stats.modules--;
		m->stats.rows_used -= mod->n;
	} else if (mod->pending) {
		m->stats.modules_pending--;
	} else {
		m->stats.modules_empty--;
	}
	free(mod->key);
	*mod = (struct module){};
}

/*
 * rows_from_cache() - the rows of module @key from the table cache into
 * cfi_rows: true with *@ret_first and *@ret_n (0: a module known to have
 * no CFI, or no room left, counted as a compile would count it), false
 * when the cache has no good entry (then compile it).
 */
static bool rows_from_cache(struct cfi_maps *m, const char *key, uint32_t *ret_first,
			    size_t *ret_n)
{
	struct cfi_cache_entry e;
	uint32_t first = 0;
	int r;

	if (!m->cache)
		return false;
	r = cfi_cache__find(m->cache, key, &e);
	if (r == 0 && e.rows > 0 && rows_alloc(m, e.rows, &first) < 0) {
		close(e.fd);
		m->stats.modules_no_room++;
		*ret_n = 0;
		return true;
	}
	if (r == 0)
		r = cfi_cache__read(m->cache, &e, &m->rows[first]);
	if (r == -EBADMSG)
		m->stats.cache_rejected++;
	if (r < 0)
		return false;
	m->stats.cache_hits++;
	m->stats.rows_narrowed += e.narrowed;
	*ret_first = first;
	*ret_n = e.rows;
	return true;
}

/*
 * rows_compile() - compile the table of the module behind @mp of @as and
 * narrow its rows into cfi_rows: *@ret_first and *@ret_n (0: none, no room,
 * or addresses beyond 32 bits, counted). A table compiled whole (with rows
 * or none) goes to the table cache under the build ID @key.
 */
static void rows_compile(struct cfi_maps *m, const char *key, const struct addrspace *as,
			 const struct mapping *mp, uint32_t *ret_first, size_t *ret_n)
{
	struct cfi_table *t = table_compile(m, as, mp);
	const struct cfi_row *rows;
	uint64_t narrowed = 0;
	uint32_t first = 0;
	bool keep = t != NULL;
	size_t n = 0;
	int r;

	rows = t ? cfi_table__rows(t, &n) : NULL;
	if (n > 0 && rows[n - 1].pc > UINT32_MAX) {
		m->stats.modules_wide++;
		n = 0;
		keep = false;
	} else if (n > 0 && (n > UINT32_MAX || rows_alloc(m, (uint32_t)n, &first) < 0)) {
		m->stats.modules_no_room++;
		n = 0;
		keep = false;
	}
	for (size_t i = 0; i < n; i++)
		if (!row_narrow(&rows[i], &m->rows[first + i]))
			narrowed++;
	m->stats.rows_narrowed += narrowed;
	cfi_table__free(t);
	if (keep && m->cache) {
		r = cfi_cache__store(m->cache, key, &m->rows[first], (uint32_t)n, narrowed);
		if (r >= 0) {
			m->stats.cache_stored++;
			m->stats.cache_evicted += (uint64_t)r;
		} else if (r != -EINVAL) { /* -EINVAL: no build ID, not cached */
			m->stats.cache_failed++;
		}
		m->stats.cache_bytes = cfi_cache__bytes(m->cache);
	}
	*ret_first = first;
	*ret_n = n;
}

/*
 * module_publish() - publish in cfi_modules the @n rows at @first of
 * cfi_rows (0: none) as module @id's. Returns 0 or the -errno of the map
 * update (the module is then left without rows).
 */
static int module_publish(struct cfi_maps *m, uint32_t id, uint32_t first, size_t n)
{
	struct module *mod = &m->modules[id];
	struct cfi_walk_module info = {};

	mod->first = first;
	mod->n = (uint32_t)n;
	if (n) {
		m->stats.modules++;
		m->stats.rows_used += n;
	} else {
		m->stats.modules_empty++;
	}
	/* the rows are in place before the module says where they are */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	/* a new fill number: what BPF cached under an earlier one is not this module's */
	if (++m->fills == 0)
		m->fills = 1;
	info = (struct cfi_walk_module){.first = first, .n = (uint32_t)n, .fill = m->fills};
	if (bpf_map_update_elem(m->modules_fd, &id, &info, BPF_ANY) < 0) {
		int r = -errno;

		if (n) {
			m->stats.modules--;
			m->stats.rows_used -= n;
			m->stats.modules_empty++;
			mod->n = 0;
		}
		return r;
	}
	return 0;
}

/*
 * module_fill() - the rows of module @id (behind @mp of @as), from the
 * table cache or compiled, copied into cfi_rows and published. A module
 * that cannot be compiled or does not fit is published without rows.
 * Returns 0 or module_publish()'s -errno.
 */
static int module_fill(struct cfi_maps *m, uint32_t id, const struct addrspace *as,
		       const struct mapping *mp)
{
	uint32_t first = 0;
	size_t n = 0;

	if (!rows_from_cache(m, m->modules[id].key, &first, &n))
		rows_compile(m, m->modules[id].key, as, mp, &first, &n);
	return module_publish(m, id, first, n);
}

/*
 * module_find() - the id of the module whose key is @key, or -ENOENT.
 */
static int module_find(const struct cfi_maps *m, const char *key)
{
	for (uint32_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		if (m->modules[i].key && strcmp(m->modules[i].key, key) == 0)
			return (int)i;
	return -ENOENT;
}

/*
 * module_get() - the id of the module behind @mp, with a reference taken:
 * found by key, else compiled and its rows copied into cfi_rows (lazy:
 * read from the table cache if it is there, a file read, else only
 * registered, without rows, until cfi_maps__load_module()). A module
 * that cannot be compiled or does not fit still gets an id (no rows: the
 * walk stops there, counted). Returns the id, -ENOSPC when every module
 * slot is taken, -ENOMEM, or the -errno of the map update.
 */
static int module_get(struct cfi_maps *m, const struct addrspace *as, const struct mapping *mp)
{
	char buf[PATH_MAX + 8];
	const char *key = cfi_table__key(mp, buf, sizeof(buf));
	struct cfi_walk_module none = {};
	struct module *mod = NULL;
	uint32_t id = 0, first = 0;
	size_t n = 0;
	int r;

	r = module_find(m, key);
	if (r >= 0) {
		m->modules[r].refs++;
		return r;
	}
	for (uint32_t i = 0; i < CFI_WALK_MAX_MODULES && !mod; i++)
		if (!m->modules[i].key) {
			mod = &m->modules[i];
			id = i;
		}
	if (!mod) {
		m->stats.modules_no_room++;
		return -ENOSPC;
	}
	mod->key = strdup(key);
	if (!mod->key)
		return -ENOMEM;
	mod->refs = 1;
	if (m->lazy && rows_from_cache(m, key, &first, &n)) {
		r = module_publish(m, id, first, n);
	} else if (m->lazy) {
		mod->pending = true;
		m->stats.modules_pending++;
		r = bpf_map_update_elem(m->modules_fd, &id, &none, BPF_ANY) < 0 ? -errno : 0;
	} else {
		r = module_fill(m, id, as, mp);
	}
	if (r < 0) {
		module_put(m, id);
		return r;
	}
	return (int)id;
}

/*
 * cfi_maps__set_lazy() - with @lazy, cfi_maps__add_process() only
 * registers the modules it has not seen (their PCs stop the walk at
 * CFI_STOP_NO_TABLE) and cfi_maps__load_module() compiles each one when
 * asked: a process that maps hundreds of libraries it never runs (a
 * Python that imported torch: 315, 44.7 MiB of rows) loads the few its
 * stacks go through. Modules registered before keep their state.
 */
void cfi_maps__set_lazy(struct cfi_maps *m, bool lazy)
{
	m->lazy = lazy;
}

/*
 * cfi_maps__set_cache() - take the rows of modules with a build ID from
 * @cache (borrowed: it must outlive @m; NULL: none) when it has them, and
 * write the tables compiled from now on to it (counted in the stats).
 */
void cfi_maps__set_cache(struct cfi_maps *m, struct cfi_cache *cache)
{
	m->cache = cache;
	if (cache)
		m->stats.cache_bytes = cfi_cache__bytes(cache);
}

/*
 * cfi_maps__load_module() - compile and load the rows of the module behind
 * mapping @mp of @as (added with cfi_maps__add_process() while lazy), once.
 * Returns 1 if it was compiled now (with rows or without: see the stats),
 * 0 if it was already, -ENOENT if no process added maps it, or a map
 * update's -errno. Blocks: opens and compiles the file. Does not log.
 */
int cfi_maps__load_module(struct cfi_maps *m, const struct addrspace *as, const struct mapping *mp)
{
	char buf[PATH_MAX + 8];
	int id = module_find(m, cfi_table__key(mp, buf, sizeof(buf))), r;
	struct module *mod;

	if (id < 0)
		return id;
	mod = &m->modules[id];
	if (!mod->pending)
		return 0;
	mod->pending = false;
	m->stats.modules_pending--;
	r = module_fill(m, (uint32_t)id, as, mp);
	return r < 0 ? r : 1;
}

/*
 * rows_reserve() - grow the row array once so that the modules of @as the
 * table cache holds and no process has loaded yet fit after the last
 * module's rows: loading them one by one would grow it by half each time
 * (an array a third larger than its rows, and a copy per step). Errors are
 * left to rows_alloc(), module by module.
 */
static void rows_reserve(struct cfi_maps *m, const struct mapping *maps, size_t n_maps)
{
	char buf[PATH_MAX + 8];
	uint64_t need = 0, end = 0;
	struct cfi_cache_entry e;

	if (!m->cache || !m->lazy)
		return;
	for (size_t i = 0; i < n_maps && i < CFI_WALK_MAX_MAPPINGS; i++) {
		const char *key = cfi_table__key(&maps[i], buf, sizeof(buf));

		if (module_find(m, key) >= 0 || cfi_cache__find(m->cache, key, &e) < 0)
			continue;
		need += e.rows;
		close(e.fd);
	}
	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		if (m->modules[i].key && m->modules[i].n)
			end = MAX(end, (uint64_t)m->modules[i].first + m->modules[i].n);
	if (need && end + need > m->stats.rows_len)
		rows_grow(m, MIN(end + need, m->stats.rows_cap));
}

static struct proc *proc_find(struct cfi_maps *m, uint32_t tgid)
{
	for (size_t i = 0; i < m->n_procs; i++)
		if (m->procs[i].tgid == tgid)
			return &m->procs[i];
	return NULL;
}

/*
 * cfi_maps__add_process() - put process @tgid's executable mappings (@as,
 * sorted by start) into cfi_procs, loading the tables of modules not yet
 * loaded. Called again for the same @tgid (after addrspace__refresh(): a
 * dlopen), it replaces the entry; modules still mapped are kept, not
 * reloaded. Mappings beyond CFI_WALK_MAX_MAPPINGS, or overlapping an
 * earlier one (addrspace keeps mappings that went away), are left out and
 * counted. Returns 0, -ENOSPC when cfi_procs is full (counted; the
 * process's samples stop at CFI_STOP_NO_PROCESS), -ENOMEM, or a map
 * update's -errno (for the first process also the creation of the row
 * array: -ENOMEM, -EPERM). On failure a previous entry of @tgid is left
 * as it was. Blocks: opens and compiles files (tens of ms for libc, seconds for
 * libtorch_cpu.so). Does not log.
 */
int cfi_maps__add_process(struct cfi_maps *m, uint32_t tgid, const struct addrspace *as)
{
	_cleanup_free_ struct cfi_walk_proc *val = calloc(1, sizeof(*val));
	_cleanup_free_ uint32_t *ids = NULL;
	const struct mapping *maps;
	struct proc *p = proc_find(m, tgid);
	size_t n_maps, n = 0;
	uint64_t prev_end = 0;
	int r = 0;

	if (!val)
		return -ENOMEM;
	if (!p && m->n_procs >= CFI_WALK_MAX_PROCS) {
		m->stats.procs_refused++;
		return -ENOSPC;
	}
	maps = addrspace__mappings(as, &n_maps);
	ids = calloc(MIN(n_maps, (size_t)CFI_WALK_MAX_MAPPINGS) + 1, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	if (m->rows_fd < 0) {
		r = rows_open(m);
		if (r < 0)
			return r;
	}
	rows_reserve(m, maps, n_maps);
	for (size_t i = 0; i < n_maps; i++) {
		const struct mapping *mp = &maps[i];

		if (n >= CFI_WALK_MAX_MAPPINGS || mp->start < prev_end || mp->end <= mp->start) {
			m->stats.mappings_dropped++;
			continue;
		}
		r = module_get(m, as, mp);
		if (r == -ENOSPC) { /* no module slot: the mapping is left out */
			m->stats.mappings_dropped++;
			continue;
		}
		if (r < 0)
			goto fail;
		ids[n] = (uint32_t)r;
		val->m[n] = (struct cfi_walk_mapping){
		    .start = mp->start, .end = mp->end, .bias = mp->load_bias, .module = ids[n]};
		n++;
		prev_end = mp->end;
	}
	val->n = (uint32_t)n;
	if (!p) {
		r = grow_array((void **)&m->procs, &m->cap_procs, m->n_procs, sizeof(*m->procs));
		if (r < 0)
			goto fail;
	}
	if (bpf_map_update_elem(m->procs_fd, &tgid, val, BPF_ANY) < 0) {
		r = errno == E2BIG ? -ENOSPC : -errno;
		if (r == -ENOSPC)
			m->stats.procs_refused++;
		goto fail;
	}
	if (p) {
		/* the new entry is in place: the old one's references go */
		for (size_t i = 0; i < p->n; i++)
			module_put(m, p->modules[i]);
		free(p->modules);
	} else {
		p = &m->procs[m->n_procs++];
		m->stats.procs++;
	}
	p->tgid = tgid;
	p->modules = TAKE_PTR(ids);
	p->n = n;
	return 0;
fail:
	for (size_t i = 0; i < n; i++)
		module_put(m, ids[i]);
	if (m->n_procs == 0)
		rows_close(m);
	return r;
}

/*
 * cfi_maps__remove_process() - delete @tgid's entry from cfi_procs and
 * drop its modules (the rows of a module no other process maps are freed).
 * Returns 0, -ENOENT if @tgid was not added. Does not log.
 */
int cfi_maps__remove_process(struct cfi_maps *m, uint32_t tgid)
{
	struct proc *p = proc_find(m, tgid);

	if (!p)
		return -ENOENT;
	bpf_map_delete_elem(m->procs_fd, &tgid);
	for (size_t i = 0; i < p->n; i++)
		module_put(m, p->modules[i]);
	free(p->modules);
	*p = m->procs[--m->n_procs];
	m->stats.procs--;
	if (m->n_procs == 0)
		rows_close(m); /* every module went with its last process */
	return 0;
}

/*
 * cfi_maps__module_rows() - the rows loaded for the module behind mapping
 * @mp in *@ret_rows (0: known, without rows). Returns 0, or -ENOENT when no
 * process added so far maps it.
 */
int cfi_maps__module_rows(const struct cfi_maps *m, const struct mapping *mp, uint32_t *ret_rows)
{
	char buf[PATH_MAX + 8];
	const char *key = cfi_table__key(mp, buf, sizeof(buf));

	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++) {
		if (m->modules[i].key && strcmp(m->modules[i].key, key) == 0) {
			*ret_rows = m->modules[i].n;
			return 0;
		}
	}
	return -ENOENT;
}

/* cfi_maps__stats() - what the maps hold now and what was refused so far. */
const struct cfi_maps_stats *cfi_maps__stats(const struct cfi_maps *m)
{
	return &m->stats;
}

/*
 * cfi_maps__free() - free @m's bookkeeping and the row array; the entries
 * of cfi_procs and cfi_modules stay (they go with the BPF object). Accepts
 * NULL.
 */
void cfi_maps__free(struct cfi_maps *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n_procs; i++)
		free(m->procs[i].modules);
	free(m->procs);
	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		free(m->modules[i].key);
	rows_close(m);
	debuginfo__done(&m->debuginfo);
	free(m);
}
