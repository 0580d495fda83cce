/*
 * cfi_walk.bpf.h - unwinding the current task's user stack in BPF from
 * compiled CFI tables (the rows of daemon/symbols/cfi_table.c, loaded by
 * daemon/collect/cfi_maps.c): the maps, and cfi_walk_user(), one frame per
 * bpf_loop() step. The same walk as cfi_unwinder__unwind()
 * (daemon/symbols/cfi_unwind.c), reading the live stack instead of a copy:
 * per frame, the mapping (the frame before's, else a binary search), the
 * row (from cfi_row_cache, else a binary search), the CFA, and the return
 * address and saved rbp, read from a window of the stack copied at most
 * once for several frames.
 * It never guesses a caller: anything the rows do not express stops it with
 * a reason.
 *
 * Include after vmlinux.h and bpf_helpers.h; cfi_walk.h holds the types and
 * the bounds.
 */
#pragma once

#include "cfi_walk.h"
#include "user_regs.bpf.h"

/* tgid -> its mappings. Not preallocated: an entry (16 KiB) takes kernel
 * memory only while a process is loaded, not 4 MiB in every profd. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CFI_WALK_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct cfi_walk_proc);
} cfi_procs SEC(".maps");

/* module id -> where its rows are in cfi_rows. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CFI_WALK_MAX_MODULES);
	__type(key, __u32);
	__type(value, struct cfi_walk_module);
} cfi_modules SEC(".maps");

/*
 * The modules' rows, in arrays in the slots of cfi_rows, several modules'
 * one after the other in each. User space (cfi_maps.c) creates an array
 * when a module fits in no other (512 KiB, or the module's size: up to
 * rows_cap rows in all, 32 MiB at the default) and removes it with its
 * last module: an array map is allocated whole when created, so a profd
 * with no walking session pays nothing for it, and one whose modules are
 * small pays little. An array is never grown, which would mean a copy
 * beside the old. The template below only types them; BPF_F_INNER_MAP
 * lets the real ones be of other sizes (Linux 5.10). mmap-able, so that a
 * module's rows are copied in with one memcpy, not a system call per row.
 * An empty slot: the walk stops there (CFI_STOP_NO_CFI).
 */
struct cfi_rows_array {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	/* sizes, not types: clang gives an inner map's value type to BTF as a
	 * forward declaration, which libbpf cannot size */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct cfi_walk_row));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, CFI_WALK_ROW_ARRAYS);
	__type(key, __u32);
	__array(values, struct cfi_rows_array);
} cfi_rows SEC(".maps");

/* Rows found lately (cfi_walk.h): a walk revisits the same return addresses. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CFI_ROW_CACHE_ENTRIES);
	__type(key, __u32);
	__type(value, struct cfi_row_cache_entry);
} cfi_row_cache SEC(".maps");

/* Walks per stop reason (enum cfi_walk_stop), then the rows found in cfi_row_cache
 * (CFI_WALK_ROW_CACHE_HITS) and by a search (..._MISSES), per CPU, summed by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CFI_WALK_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} cfi_walk_stops SEC(".maps");

/* The caller's rbp, as far as the walk knows it. */
#define CFI_BP_KNOWN 0
#define CFI_BP_UNDEF 1 /* CFI said undefined */
#define CFI_BP_FAULT 2 /* saved, but the read of it faulted */

struct cfi_walk_state {
	const struct cfi_walk_proc *proc;
	__u64 *pcs; /* room for CFI_WALK_MAX_FRAMES */
	struct cfi_stack_window *win;
	__u64 pc, sp, bp;
	__u32 n, max;
	__u32 bp_state;
	__u32 stop;
	__u32 cache_hits, cache_misses; /* rows found in cfi_row_cache, and by a search */
	struct uretprobe_fix uret;	/* return addresses a uretprobe's trampoline took */
};

/* cfi_find_mapping() - the mapping of @p holding @addr, or NULL. */
static __always_inline const struct cfi_walk_mapping *
cfi_find_mapping(const struct cfi_walk_proc *p, __u64 addr)
{
	__u32 lo = 0, hi = p->n, idx;

	if (hi > CFI_WALK_MAX_MAPPINGS)
		return NULL;
	/* the first mapping whose start is above @addr is at lo */
	for (int i = 0; i < CFI_WALK_MAPPING_STEPS && lo < hi; i++) {
		__u32 mid = (lo + hi) / 2;

		/* clang knows mid < hi <= the bound and would drop the check the
		 * verifier, which does not track lo + hi that closely, needs */
		barrier_var(mid);
		if (mid >= CFI_WALK_MAX_MAPPINGS)
			return NULL;
		if (p->m[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo < hi)
		return NULL;
	idx = lo - 1;
	barrier_var(idx);
	if (idx >= CFI_WALK_MAX_MAPPINGS || addr >= p->m[idx].end)
		return NULL;
	return &p->m[idx];
}

/*
 * cfi_search_row() - the row of module @mod covering module address @rel:
 * the last row whose pc is <= @rel. NULL when @rel is below the first row,
 * the search did not end within CFI_WALK_ROW_STEPS, or the module's slot
 * of cfi_rows holds no array. Each step is a lookup in the inner array, a
 * helper call (the verifier inlines no lookup in an array of
 * BPF_F_INNER_MAP).
 */
static __always_inline const struct cfi_walk_row *
cfi_search_row(const struct cfi_walk_module *mod, __u32 rel)
{
	__u32 first = mod->first, lo = 0, hi = mod->n, key = mod->array;
	void *rows;

	rows = bpf_map_lookup_elem(&cfi_rows, &key);
	if (!rows)
		return NULL;
	for (int i = 0; i < CFI_WALK_ROW_STEPS && lo < hi; i++) {
		__u32 mid = lo + (hi - lo) / 2;
		const struct cfi_walk_row *r;

		key = first + mid;
		r = bpf_map_lookup_elem(rows, &key);
		if (!r)
			return NULL;
		if (r->pc <= rel)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo < hi)
		return NULL;
	key = first + lo - 1;
	return bpf_map_lookup_elem(rows, &key);
}

/* What cfi_find_row() found. */
#define CFI_ROW_NOT_FOUND 0
#define CFI_ROW_SEARCHED 1
#define CFI_ROW_CACHED 2

/*
 * cfi_find_row() - cfi_search_row() through cfi_row_cache: *@ret gets the
 * row of module @mod covering module address @rel. Returns CFI_ROW_CACHED
 * or CFI_ROW_SEARCHED, or CFI_ROW_NOT_FOUND where cfi_search_row() finds
 * none, or @rel is out of 32 bits.
 */
static __always_inline int cfi_find_row(const struct cfi_walk_module *mod, __u64 rel,
					struct cfi_walk_row *ret)
{
	struct cfi_row_cache_entry *c;
	const struct cfi_walk_row *r;
	__u64 key, row;
	__u32 slot;

	if (rel > 0xffffffffull)
		return CFI_ROW_NOT_FOUND;
	key = (__u64)mod->fill << 32 | rel;
	slot = (__u32)((key * 0x9e3779b97f4a7c15ull) >> (64 - CFI_ROW_CACHE_BITS));
	c = bpf_map_lookup_elem(&cfi_row_cache, &slot);
	if (c) {
		row = c->row;
		if ((c->check ^ row) == key) {
			__builtin_memcpy(ret, &row, sizeof(*ret));
			return CFI_ROW_CACHED;
		}
	}
	r = cfi_search_row(mod, (__u32)rel);
	if (!r)
		return CFI_ROW_NOT_FOUND;
	__builtin_memcpy(&row, r, sizeof(row));
	__builtin_memcpy(ret, &row, sizeof(*ret));
	if (c) {
		c->row = row;
		c->check = key ^ row;
	}
	return CFI_ROW_SEARCHED;
}

/*
 * cfi_read_stack() - the 8 bytes of the user stack at @addr into *@ret,
 * from w->win if they are in it, else into a window read anew from @addr
 * up (what is left of @addr's page if the whole window faults, since a
 * read that faults fails whole), else with a read of their own. Returns 0,
 * or -1 if @addr cannot be read.
 */
static __always_inline int cfi_read_stack(struct cfi_walk_state *w, __u64 addr, __u64 *ret)
{
	struct cfi_stack_window *win = w->win;
	__u64 off = addr - win->start, len;

	if (addr & 7) {
		win->n_reads++;
		win->n_bytes += sizeof(*ret);
		return bpf_probe_read_user(ret, sizeof(*ret), (const void *)addr) ? -1 : 0;
	}
	/* written so that no sum wraps: a garbage CFA can be near 2^64 */
	if (addr < win->start || off >= win->len || win->len - off < 8) {
		len = CFI_WALK_WINDOW;
		win->n_reads++;
		win->n_bytes += CFI_WALK_WINDOW;
		if (bpf_probe_read_user(win->bytes, CFI_WALK_WINDOW, (const void *)addr)) {
			/* 8..PAGE_BYTES; a whole page is the read that just failed */
			len = PAGE_BYTES - (addr & (PAGE_BYTES - 1));
			if (len < CFI_WALK_WINDOW) {
				win->n_reads++;
				win->n_bytes += len;
			}
			if (len >= CFI_WALK_WINDOW ||
			    bpf_probe_read_user(win->bytes, len & (CFI_WALK_WINDOW - 1),
						(const void *)addr))
				len = 0;
		}
		win->start = addr;
		win->len = len;
		if (len < 8)
			return -1;
		off = 0;
	}
	/* off is a multiple of 8 below len <= CFI_WALK_WINDOW: the mask tells the verifier */
	off &= CFI_WALK_WINDOW - 8;
	*ret = *(__u64 *)(win->bytes + off);
	return 0;
}

/*
 * One frame, for bpf_loop(): frame @i; 1 stops the loop (w->stop says why).
 * The frame's index is bpf_loop()'s @i, not a count kept in @ctx: the
 * verifier checks a callback until its states converge (Linux 6.7,
 * "verify callbacks as if they are called unknown number of times"), and a
 * count used as an array index must be exact, so each of the 128 frames
 * would be checked again (735,000 instructions, of the 1,000,000 limit).
 */
static long cfi_walk_step(__u64 i, void *ctx)
{
	struct cfi_walk_state *w = ctx;
	struct cfi_walk_row row;
	const struct cfi_walk_module *mod;
	__u64 pc = w->pc, lookup, cfa, ra = 0, saved_bp = 0;
	const struct cfi_walk_mapping *m;
	__u32 kind, flags, mid;
	int found;

	if (i >= w->max || i >= CFI_WALK_MAX_FRAMES) {
		w->stop = CFI_STOP_MAX_FRAMES;
		return 1;
	}
	w->pcs[i] = pc;
	w->n = i + 1;
	/* a return address is looked up at - 1: the call, not what follows it */
	lookup = i == 0 ? pc : pc - 1;
	m = &w->win->last;
	if (lookup < m->start || lookup >= m->end) {
		const struct cfi_walk_mapping *found_m = cfi_find_mapping(w->proc, lookup);

		if (!found_m) {
			w->stop = CFI_STOP_NO_MAPPING;
			return 1;
		}
		w->win->last = *found_m;
	}
	mid = m->module;
	mod = bpf_map_lookup_elem(&cfi_modules, &mid);
	if (!mod || mod->n == 0) {
		w->stop = CFI_STOP_NO_TABLE;
		return 1;
	}
	found = cfi_find_row(mod, lookup - m->bias, &row);
	if (found == CFI_ROW_CACHED)
		w->cache_hits++;
	else if (found == CFI_ROW_SEARCHED)
		w->cache_misses++;
	kind = found != CFI_ROW_NOT_FOUND ? CFI_WALK_KIND(row.kind) : CFI_WALK_ROW_NONE;
	switch (kind) {
	case CFI_WALK_ROW_CFA:
		flags = row.kind;
		if (flags & CFI_WALK_CFA_BP) {
			if (w->bp_state != CFI_BP_KNOWN) {
				w->stop = CFI_STOP_BP_LOST;
				return 1;
			}
			cfa = w->bp + (__s64)row.cfa_off8 * 8;
		} else {
			cfa = w->sp + (__s64)row.cfa_off8 * 8;
		}
		break;
	case CFI_WALK_ROW_PLT:
		/* the index the PLT entry pushed at its byte fp_off is on the stack */
		flags = 0;
		cfa = w->sp + (__s64)row.cfa_off8 * 8 + ((__s64)(pc & 15) >= row.fp_off ? 8 : 0);
		break;
	case CFI_WALK_ROW_OUTERMOST:
		w->stop = CFI_STOP_END;
		return 1;
	case CFI_WALK_ROW_EXPR:
		w->stop = CFI_STOP_EXPR;
		return 1;
	case CFI_WALK_ROW_SIGNAL:
		/* stored + 1 as libdw stores a signal frame: the symbolizer's - 1
		 * then lands on the trampoline (__restore_rt) itself */
		if (i > 0)
			w->pcs[i] = pc + 1;
		w->stop = CFI_STOP_SIGNAL;
		return 1;
	default:
		w->stop = CFI_STOP_NO_CFI;
		return 1;
	}
	/*
	 * The saved rbp first: compilers save it below the return address
	 * (CFA - 16 or lower), so a window read for it, from its address up,
	 * holds the return address too; a window read for the return address,
	 * from CFA - 8 up, would not hold the rbp, which then cost a second
	 * read (measured: 3.4 window reads a walk on a PyTorch loop, 1.9 in
	 * this order; bench/cost prints them).
	 */
	if (flags & CFI_WALK_FP_SAVED) {
		/* a saved rbp that cannot be read is lost: only a later CFA in rbp stops */
		if (cfi_read_stack(w, cfa + (__s64)row.fp_off, &saved_bp) == 0) {
			w->bp = saved_bp;
			w->bp_state = CFI_BP_KNOWN;
		} else {
			w->bp_state = CFI_BP_FAULT;
		}
	} else if (flags & CFI_WALK_FP_UNDEF) {
		w->bp_state = CFI_BP_UNDEF;
	}
	if (cfi_read_stack(w, cfa - 8, &ra)) {
		w->stop = CFI_STOP_READ_FAULT;
		return 1;
	}
	if (ra == 0 || cfa <= w->sp) {
		w->stop = CFI_STOP_BAD_FRAME;
		return 1;
	}
	w->pc = w->uret.tramp ? uretprobe_fix_pc(&w->uret, ra) : ra;
	w->sp = cfa;
	return 0;
}

/*
 * cfi_walk_whole() - whether a walk of @n PCs (room for @max) that stopped
 * at @stop is the whole user stack: it reached the root or the frame limit.
 */
static __always_inline bool cfi_walk_whole(__u32 n, __u32 max, __u32 stop)
{
	return n > 0 && n <= max && (stop == CFI_STOP_END || stop == CFI_STOP_MAX_FRAMES);
}

/* cfi_walk_count() - add @n to this CPU's counter @key of cfi_walk_stops. */
static __always_inline void cfi_walk_count(__u32 key, __u64 n)
{
	__u64 *cnt = bpf_map_lookup_elem(&cfi_walk_stops, &key);

	if (cnt)
		*cnt += n;
}

/*
 * cfi_walk_user() - unwind the user stack of the current task, with its
 * process's entry in cfi_procs, from user registers @regs (x86-64 DWARF
 * numbering: rbp 6, rsp 7, rip 16).
 * @pcs: room for CFI_WALK_MAX_FRAMES PCs, leaf first: pcs[0] is rip, the
 * others return addresses (a signal frame's + 1). @max: 1..CFI_WALK_MAX_FRAMES.
 * @win: scratch in a map value that nothing else on this CPU uses until the
 * walk returns: the stack window.
 * Returns the number of PCs (0 only when rip is 0 or the process has no entry)
 * and stores the reason it stopped in *@ret_stop, which is also counted in
 * cfi_walk_stops. A separate function: the verifier checks it once.
 */
static __noinline __u32 cfi_walk_user(const __u64 *regs, __u64 *pcs, __u32 max,
				      struct cfi_stack_window *win, __u32 *ret_stop)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, stop;
	struct cfi_walk_state w = {};

	w.proc = bpf_map_lookup_elem(&cfi_procs, &tgid);
	w.pcs = pcs;
	w.win = win;
	win->len = 0;
	win->n_reads = win->n_bytes = 0;
	win->last.start = win->last.end = 0;
	w.max = max;
	uretprobe_fix_init(&w.uret);
	w.pc = uretprobe_fix_pc(&w.uret, regs[16]);
	w.sp = regs[7];
	w.bp = regs[6];
	w.stop = CFI_STOP_MAX_FRAMES;
	if (!w.proc) {
		w.stop = CFI_STOP_NO_PROCESS;
	} else if (w.pc == 0) {
		w.stop = CFI_STOP_NO_MAPPING;
	} else {
		/* one more step than frames: the last one says "max frames" */
		bpf_loop(CFI_WALK_MAX_FRAMES + 1, cfi_walk_step, &w, 0);
	}
	stop = w.stop < CFI_STOP_NR ? w.stop : CFI_STOP_BAD_FRAME;
	cfi_walk_count(stop, 1);
	/* a walk that looked up no row (no process: an off-CPU switch of a target
	 * without tables) and read no stack adds nothing more */
	if (w.cache_hits + w.cache_misses) {
		cfi_walk_count(CFI_WALK_ROW_CACHE_HITS, w.cache_hits);
		cfi_walk_count(CFI_WALK_ROW_CACHE_MISSES, w.cache_misses);
	}
	if (win->n_reads) {
		cfi_walk_count(CFI_WALK_STACK_READS, win->n_reads);
		cfi_walk_count(CFI_WALK_STACK_BYTES, win->n_bytes);
	}
	*ret_stop = stop;
	return w.n;
}
