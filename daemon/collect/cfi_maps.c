/*
 * cfi_maps.c - fill the maps of cfi_walk.bpf.h (cfi_maps.h): per process
 * its executable mappings; per module (build ID, else path) its CFI table
 * compiled once (or read from the table cache on disk, cfi_cache.h, by
 * build ID), narrowed to 8-byte rows and copied into one of the mmap'ed
 * row arrays of cfi_rows, at the first free place that holds it (first
 * fit), else into a new array. Modules are reference-counted by the
 * processes that map them and their rows freed with the last one.
 *
 * Owns: the module and process bookkeeping, and the row arrays in the
 * slots of cfi_rows with their mmaps: each made when a module fits in no
 * other (CFI_MAPS_FIRST_ROWS rows, or the module's rows if more, all of
 * them at most rows_cap) and dropped when its last module goes (not the
 * other map fds, which belong to the BPF object). An array is never
 * grown: a larger one would be a copy, held beside the old one while the
 * rows are copied (13 + 19 MiB for a PyTorch job's). Files are untrusted: a
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
	uint32_t array; /* its rows: [first, first + n) of the array in this slot of cfi_rows */
	uint32_t first;
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

/* One row array: a slot of cfi_rows. */
struct row_array {
	int fd;			   /* -1: free slot */
	struct cfi_walk_row *rows; /* fd, mmap'ed: len rows */
	size_t map_bytes;
	uint32_t len;
};

struct cfi_maps {
	int procs_fd, modules_fd, rows_outer_fd;
	struct row_array arrays[CFI_WALK_ROW_ARRAYS];
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
 * the loader). @rows_cap: the most rows the row arrays in cfi_rows
 * (@rows_outer_fd) may hold together, 1..CFI_WALK_MAX_ROWS
 * (CFI_MAPS_DEFAULT_ROWS: 32 MiB); nothing is allocated for rows before
 * the first module that has some. Separate debug files are searched as the
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
	    .stats.rows_cap = rows_cap,
	};
	for (size_t i = 0; i < CFI_WALK_ROW_ARRAYS; i++)
		m->arrays[i].fd = -1;
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
 * array_open() - a row array of @len rows in the free slot @slot of
 * cfi_rows. Returns 0, or rows_map()'s or the update's -errno (the slot
 * stays free).
 */
static int array_open(struct cfi_maps *m, uint32_t slot, uint32_t len)
{
	struct row_array *a = &m->arrays[slot];
	int r;

	r = rows_map(len, &a->fd, &a->rows, &a->map_bytes);
	if (r < 0)
		return r;
	if (bpf_map_update_elem(m->rows_outer_fd, &slot, &a->fd, BPF_ANY) < 0) {
		r = -errno;
		munmap(a->rows, a->map_bytes);
		close(a->fd);
		*a = (struct row_array){.fd = -1};
		return r;
	}
	a->len = len;
	m->stats.rows_len += len;
	m->stats.row_arrays++;
	m->stats.row_arrays_made++;
	return 0;
}

/*
 * array_close() - take the row array in slot @slot out of cfi_rows and let
 * it go: the kernel frees it once no walk holds it, after an RCU grace
 * period. A free slot is left as it is.
 */
static void array_close(struct cfi_maps *m, uint32_t slot)
{
	struct row_array *a = &m->arrays[slot];

	if (a->fd < 0)
		return;
	bpf_map_delete_elem(m->rows_outer_fd, &slot);
	munmap(a->rows, a->map_bytes);
	close(a->fd);
	m->stats.rows_len -= a->len;
	m->stats.row_arrays--;
	*a = (struct row_array){.fd = -1};
}

/* array_close_unused() - array_close() slot @slot if no module has rows in it. */
static void array_close_unused(struct cfi_maps *m, uint32_t slot)
{
	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		if (m->modules[i].key && m->modules[i].n && m->modules[i].array == slot)
			return;
	array_close(m, slot);
}

/* rows_close() - array_close() every row array. */
static void rows_close(struct cfi_maps *m)
{
	for (uint32_t i = 0; i < CFI_WALK_ROW_ARRAYS; i++)
		array_close(m, i);
}

static int cmp_place(const void *a, const void *b)
{
	const struct module *x = *(const struct module *const *)a;
	const struct module *y = *(const struct module *const *)b;

	if (x->array != y->array)
		return (x->array > y->array) - (x->array < y->array);
	return (x->first > y->first) - (x->first < y->first);
}

/*
 * array_new() - a new row array for @n rows: CFI_MAPS_FIRST_ROWS rows, or
 * @n in whole CFI_MAPS_FIRST_ROWS steps if more, cut to what rows_cap has
 * left, in the first free slot. Returns its slot, -ENOSPC when rows_cap
 * or the slots are used up, or array_open()'s -errno.
 */
static int array_new(struct cfi_maps *m, uint32_t n)
{
	uint64_t len = ((uint64_t)MAX(n, 1u) + CFI_MAPS_FIRST_ROWS - 1) / CFI_MAPS_FIRST_ROWS *
		       CFI_MAPS_FIRST_ROWS;
	int r;

	len = MIN(len, m->stats.rows_cap - m->stats.rows_len);
	if (len < n)
		return -ENOSPC;
	for (uint32_t i = 0; i < CFI_WALK_ROW_ARRAYS; i++) {
		if (m->arrays[i].fd >= 0)
			continue;
		r = array_open(m, i, (uint32_t)len);
		return r < 0 ? r : (int)i;
	}
	return -ENOSPC;
}

/*
 * rows_alloc() - the first free place for @n rows in the row arrays (first
 * fit between the modules that have rows, and after the last one of each
 * array), else the start of a new array (array_new()). Returns 0 with
 * *@ret_array (the slot) and *@ret_first, -ENOSPC when no gap is large
 * enough and rows_cap is reached, -ENOMEM, or array_new()'s -errno.
 */
static int rows_alloc(struct cfi_maps *m, uint32_t n, uint32_t *ret_array, uint32_t *ret_first)
{
	_cleanup_free_ struct module **used = NULL;
	size_t n_used = 0, k = 0;
	int r;

	used = malloc(CFI_WALK_MAX_MODULES * sizeof(*used));
	if (!used)
		return -ENOMEM;
	for (size_t i = 0; i < CFI_WALK_MAX_MODULES; i++)
		if (m->modules[i].key && m->modules[i].n)
			used[n_used++] = &m->modules[i];
	qsort(used, n_used, sizeof(*used), cmp_place);
	for (uint32_t a = 0; a < CFI_WALK_ROW_ARRAYS; a++) {
		uint64_t at = 0;

		if (m->arrays[a].fd < 0)
			continue;
		for (; k <= n_used; k++) {
			bool in = k < n_used && used[k]->array == a;
			uint64_t next = in ? used[k]->first : m->arrays[a].len;

			if (next >= at && next - at >= n) {
				*ret_array = a;
				*ret_first = (uint32_t)at;
				return 0;
			}
			if (!in)
				break;
			at = (uint64_t)used[k]->first + used[k]->n;
		}
	}
	r = array_new(m, n);
	if (r < 0)
		return r;
	*ret_array = (uint32_t)r;
	*ret_first = 0;
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
	uint32_t array;
	bool had_rows;

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
	array = mod->array;
	had_rows = mod->n > 0;
	*mod = (struct module){};
	if (had_rows)
		array_close_unused(m, array);
}

/*
 * rows_from_cache() - the rows of module @key from the table cache into
 * cfi_rows: true with *@ret_array, *@ret_first and *@ret_n (0: a module
 * known to have no CFI, or no room left, counted as a compile would count
 * it), false when the cache has no good entry (then compile it).
 */
static bool rows_from_cache(struct cfi_maps *m, const char *key, uint32_t *ret_array,
			    uint32_t *ret_first, size_t *ret_n)
{
	struct cfi_cache_entry e;
	uint32_t array = 0, first = 0;
	bool placed = false;
	int r;

	if (!m->cache)
		return false;
	r = cfi_cache__find(m->cache, key, &e);
	if (r == 0 && e.rows > 0) {
		if (rows_alloc(m, e.rows, &array, &first) < 0) {
			close(e.fd);
			m->stats.modules_no_room++;
			*ret_n = 0;
			return true;
		}
		placed = true;
	}
	if (r == 0)
		r = cfi_cache__read(m->cache, &e, placed ? &m->arrays[array].rows[first] : NULL);
	if (r == -EBADMSG)
		m->stats.cache_rejected++;
	if (r < 0) {
		if (placed)
			array_close_unused(m, array); /* if an array was made for it */
		return false;
	}
	m->stats.cache_hits++;
	m->stats.rows_narrowed += e.narrowed;
	*ret_array = array;
	*ret_first = first;
	*ret_n = e.rows;
	return true;
}

/* A module's rows in BPF's 8-byte form, as its table compiles (narrow_append()). */
struct narrow_rows {
	struct cfi_walk_row *rows;
	size_t n, cap;
	uint64_t narrowed; /* rows that did not fit: CFI_ROW_EXPR */
};

/*
 * narrow_append() - a cfi_row_fn: @r, row_narrow()ed, appended to the
 * narrow_rows @ctx. libtorch_cpu.so's 1.4 million rows are 10.7 MiB so,
 * not the 21.4 of a cfi_table held beside them. Returns 0, -ENOMEM, or
 * -EOVERFLOW for a row beyond 32 bits (a module BPF cannot hold).
 */
static int narrow_append(void *ctx, const struct cfi_row *r)
{
	struct narrow_rows *b = ctx;

	if (r->pc > UINT32_MAX)
		return -EOVERFLOW;
	if (grow_array_gently((void **)&b->rows, &b->cap, b->n, sizeof(*b->rows)) < 0)
		return -ENOMEM;
	if (!row_narrow(r, &b->rows[b->n++]))
		b->narrowed++;
	return 0;
}

/*
 * rows_compile() - compile the table of the module behind @mp of @as into
 * cfi_rows (timed in compile_ns): *@ret_array, *@ret_first and *@ret_n (0:
 * none, no room, or addresses beyond 32 bits, counted). A table compiled
 * whole (with rows or none) goes to the table cache under the build ID
 * @key.
 */
static void rows_compile(struct cfi_maps *m, const char *key, const struct addrspace *as,
			 const struct mapping *mp, uint32_t *ret_array, uint32_t *ret_first,
			 size_t *ret_n)
{
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	struct narrow_rows b = {};
	struct cfi_walk_row *to = NULL;
	struct cfi_table_stats stats;
	uint32_t array = 0, first = 0;
	size_t n = 0;
	int r;

	r = cfi_table__compile_mapping_rows(as, mp, &m->debuginfo, narrow_append, &b, &stats);
	m->stats.compile_ns += now_ns(CLOCK_MONOTONIC) - t0;
	if (r == -EOVERFLOW)
		m->stats.modules_wide++;
	if (r >= 0)
		n = b.n;
	if (n > 0) {
		b.rows = shrink_alloc(b.rows, n * sizeof(*b.rows));
		if (n > UINT32_MAX || rows_alloc(m, (uint32_t)n, &array, &first) < 0) {
			m->stats.modules_no_room++;
			n = 0;
			r = -ENOSPC;
		}
	}
	if (n) {
		to = &m->arrays[array].rows[first];
		memcpy(to, b.rows, n * sizeof(*b.rows));
		m->stats.rows_narrowed += b.narrowed;
	}
	free(b.rows);
	if (r >= 0 && m->cache) {
		r = cfi_cache__store(m->cache, key, to, (uint32_t)n, b.narrowed);
		if (r >= 0) {
			m->stats.cache_stored++;
			m->stats.cache_evicted += (uint64_t)r;
		} else if (r != -EINVAL) { /* -EINVAL: no build ID, not cached */
			m->stats.cache_failed++;
		}
		m->stats.cache_bytes = cfi_cache__bytes(m->cache);
	}
	*ret_array = array;
	*ret_first = first;
	*ret_n = n;
}

/*
 * module_publish() - publish in cfi_modules the @n rows at @first of the
 * row array in slot @array of cfi_rows (0: none) as module @id's. Returns
 * 0 or the -errno of the map update (the module is then left without
 * rows).
 */
static int module_publish(struct cfi_maps *m, uint32_t id, uint32_t array, uint32_t first, size_t n)
{
	struct module *mod = &m->modules[id];
	struct cfi_walk_module info = {};

	mod->array = array;
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
	info = (struct cfi_walk_module){
	    .array = array, .first = first, .n = (uint32_t)n, .fill = m->fills};
	if (bpf_map_update_elem(m->modules_fd, &id, &info, BPF_ANY) < 0) {
		int r = -errno;

		if (n) {
			m->stats.modules--;
			m->stats.rows_used -= n;
			m->stats.modules_empty++;
			mod->n = 0;
			array_close_unused(m, array);
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
	uint32_t array = 0, first = 0;
	size_t n = 0;

	if (!rows_from_cache(m, m->modules[id].key, &array, &first, &n))
		rows_compile(m, m->modules[id].key, as, mp, &array, &first, &n);
	return module_publish(m, id, array, first, n);
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
	uint32_t id = 0, array = 0, first = 0;
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
	if (m->lazy && rows_from_cache(m, key, &array, &first, &n)) {
		r = module_publish(m, id, array, first, n);
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
 * update's -errno. On failure a previous entry of @tgid is left
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
 * cfi_maps__free() - free @m's bookkeeping and the row arrays; the entries
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
