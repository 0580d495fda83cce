/*
 * unwind.c - DWARF (CFI) unwinding of user stacks copied with a sample, with
 * libdwfl, in the manner of perf's tools/perf/util/unwind-libdw.c: a Dwfl
 * per address space whose modules are the process's ELF files at their load
 * addresses, attached (dwfl_attach_state) to one pretend thread whose
 * registers are the sample's and whose memory is the copied stack slice.
 *
 * Owns: the Dwfl cache (one per address space, rebuilt when the address
 * space gains or loses mappings), a copy of our own vDSO for frames in the
 * target's, and the mapping of libdwfl's outcome to enum unwind_status.
 * Everything unwound is untrusted: registers and stack bytes from a sample,
 * CFI from arbitrary binaries. Bad input gives a short stack and a status,
 * never a crash or an unbounded walk. Not thread-safe.
 */
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
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
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbols/elf_util.h"
#include "symbols/debuginfo.h"
#include "symbols/elf_pages.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

/* The largest stack slice read; perf caps sample_stack_user just below 64 KiB. */
#define STACK_MAX_BYTES 65536
/*
 * Address spaces whose Dwfl is kept. Each Dwfl holds one open fd per ELF
 * file it reported (libdwfl keeps the fd for the life of the module), and a
 * file is reported the first time a walk reaches a PC in it (as perf's
 * unwind-libdw.c does): the fds are about CACHE_MAX times the number of
 * files the process's stacks go through (tens for a PyTorch job), not
 * CACHE_MAX times every library it maps (315 for one: reporting them all
 * took profd past 20,000 fds on a job that forks DataLoader workers).
 */
#define CACHE_MAX 32
/* The tid of the one thread each Dwfl pretends to have (any value > 0). */
#define FAKE_TID 1
/* A Dwfl missing a file that could not be opened is rebuilt after this long. */
#define RETRY_NS (10 * NSEC_PER_SEC)
/* Remembered answers to "does CFI cover this PC?", per address space (a power of two). */
#define CFI_CACHE_SLOTS 2048

/* One remembered answer: @key is the lookup PC + 1 (0: empty slot). */
struct cfi_slot {
	uint64_t key;
	bool has_cfi;
};


/* The Dwfl built for one address space, and the mappings it was built from. */
struct as_entry {
	const struct addrspace *as; /* NULL: free slot */
	struct mapping *maps;	    /* copy of addrspace__mappings() at build time */
	bool *tried;		    /* tried[i]: maps[i]'s file was reported, or failed to be */
	size_t n_maps;
	Dwfl *dwfl;		    /* NULL: no module could be reported (nothing to unwind with) */
	struct cfi_slot *cfi_cache; /* CFI_CACHE_SLOTS, allocated with @dwfl */
	uint64_t retry_ns;	    /* CLOCK_MONOTONIC time to rebuild; 0: nothing is missing */
	uint64_t last_use;	    /* for LRU eviction */
};

struct unwinder {
	struct as_entry cache[CACHE_MAX];
	uint64_t use_clock;

	/* Where the separate debug files with .debug_frame are (debuginfo.h). */
	struct debuginfo debuginfo;

	/* The sample being unwound, read by the Dwfl callbacks. */
	const uint64_t *regs;
	const unsigned char *stack;
	uint64_t stack_start; /* regs[UNWIND_REG_SP] */
	size_t stack_len;
	bool read_failed; /* a load fell outside the slice */

	/* The walk's output and state. */
	struct as_entry *entry;
	uint64_t *pcs;
	size_t max, n;
	uint64_t last_sp;
	Dwarf_Addr last_lookup_pc; /* the address the last frame's CFI is looked up at */
	bool stopped;		   /* frame_cb stopped the walk, with status @stop */
	enum unwind_status stop;
};

/* ---------------------------------------------------------------------- */
/* The Dwfl state callbacks: one thread, registers and stack from the sample */

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	return 0; /* no threads to enumerate: the walk asks for FAKE_TID by number */
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	*thread_argp = arg;
	return tid == FAKE_TID;
}

/*
 * memory_read() - one 8-byte word at @addr. Only the copied stack slice is
 * readable: x86-64 CFI loads saved registers and return addresses from the
 * stack and nothing else (reading text from the ELF files, as perf can, is
 * not needed for CFI). A load outside it is remembered: it is why a walk
 * that stops early stopped (UNWIND_NO_STACK).
 */
static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct unwinder *u = arg;
	uint64_t off = addr - u->stack_start;

	if (addr < u->stack_start || off > u->stack_len || u->stack_len - off < sizeof(*result)) {
		u->read_failed = true;
		return false;
	}
	memcpy(result, u->stack + off, sizeof(*result));
	return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	struct unwinder *u = arg;
	Dwarf_Word regs[UNWIND_NREGS];

	for (size_t i = 0; i < UNWIND_NREGS; i++)
		regs[i] = u->regs[i];
	/* DWARF 0..16 are the x86-64 ebl's frame registers, rip (16) included */
	if (!dwfl_thread_state_registers(thread, 0, UNWIND_NREGS, regs))
		return false;
	dwfl_thread_state_register_pc(thread, regs[UNWIND_REG_IP]);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

/* ---------------------------------------------------------------------- */
/* The cache of Dwfls */

/*
 * unwinder__new() - an unwinder with an empty cache: address spaces' files
 * are opened on their first sample. Returns NULL only on out-of-memory. Does
 * not log.
 */
struct unwinder *unwinder__new(void)
{
	struct unwinder *u;

	elf_version(EV_CURRENT);
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	/* The same places as the symbolizer's (symbolizer__new()), with $PROFD_DEBUG_PATH. */
	if (debuginfo__init(&u->debuginfo, getenv("PROFD_DEBUG_PATH"), true) < 0) {
		free(u);
		return NULL;
	}
	return u;
}

static void entry_clear(struct as_entry *e)
{
	if (e->dwfl)
		dwfl_end(e->dwfl); /* closes the fds dwfl_report_elf() consumed */
	free(e->cfi_cache);
	free(e->maps);
	free(e->tried);
	*e = (struct as_entry){};
}

/* unwinder__free() - close every Dwfl and file of @u and free it. Accepts NULL. */
void unwinder__free(struct unwinder *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < CACHE_MAX; i++)
		entry_clear(&u->cache[i]);
	debuginfo__done(&u->debuginfo);
	free(u);
}

/*
 * unwinder__forget() - close the Dwfl and the files cached for @as, before
 * @as is freed (a new address space may get its address). An address space
 * the unwinder never saw is fine. Does not block on I/O; does not log.
 */
void unwinder__forget(struct unwinder *u, const struct addrspace *as)
{
	for (size_t i = 0; i < CACHE_MAX; i++)
		if (u->cache[i].as == as)
			entry_clear(&u->cache[i]);
}

/*
 * unwinder__drop_pages() - drop from profd's RSS the pages libdw read from
 * the files of @u's cached address spaces (elf_pages.h): their
 * .eh_frame_hdr and .eh_frame, read for every sample until a process's
 * unwind tables are loaded. Later walks read what they need again, from
 * the page cache. Must be called on the thread that uses @u. Returns the
 * resident bytes dropped, or -errno if /proc/self/maps cannot be read.
 */
int64_t unwinder__drop_pages(struct unwinder *u)
{
	struct elf_pages ep;
	int r = elf_pages__begin(&ep);

	if (r < 0)
		return r;
	for (size_t i = 0; i < CACHE_MAX; i++)
		elf_pages__drop_dwfl(&ep, u->cache[i].dwfl);
	elf_pages__end(&ep);
	return (int64_t)ep.bytes;
}

static bool mapping_eq(const struct mapping *a, const struct mapping *b)
{
	return a->start == b->start && a->end == b->end && a->file_offset == b->file_offset &&
	       a->load_bias == b->load_bias && a->path == b->path && a->build_id == b->build_id;
}

/*
 * report_mapping() - report the file of mapping @i of @e to its Dwfl, at its
 * load bias (add_p_vaddr: module address = ELF address + bias, whatever the
 * first PT_LOAD's address), opened by addrspace__open_image() (build ID
 * checked; [vdso] from our own copy), once: every mapping of the same file
 * at the same bias is marked tried with it. A file that cannot be opened is
 * left out (its frames stop the walk with UNWIND_NO_CFI) and tried again
 * after RETRY_NS (EMFILE, say, can pass). Can be called between frames of a
 * walk: libdwfl looks a frame's module up when it unwinds it. Returns
 * whether the file is now in the Dwfl.
 */
static bool report_mapping(struct unwinder *u, struct as_entry *e, Dwfl *dwfl, size_t i)
{
	const struct mapping *m = &e->maps[i];
	char path[PATH_MAX + 64];
	Dwfl_Module *dm = NULL;
	int fd;

	for (size_t j = 0; j < e->n_maps; j++)
		if (e->maps[j].path == m->path && e->maps[j].load_bias == m->load_bias)
			e->tried[j] = true;
	fd = addrspace__open_image(e->as, m, path, sizeof(path));
	if (fd < 0) {
		if (m->path[0] == '/' && !e->retry_ns) /* a file may come back: retried */
			e->retry_ns = now_ns(CLOCK_MONOTONIC) + RETRY_NS;
		return false;
	}
	dwfl_report_begin_add(dwfl);
	dm = dwfl_report_elf(dwfl, m->path, path, fd, m->load_bias, true);
	dwfl_report_end(dwfl, NULL, NULL);
	if (!dm) {
		close(fd); /* not consumed on failure (an overlap, a bad ELF) */
		return false;
	}
	debuginfo__attach(dm, &u->debuginfo);
	return true;
}

/* mapping_index() - the index in @e->maps (sorted by start) of the mapping holding @addr, or -1. */
static ssize_t mapping_index(const struct as_entry *e, uint64_t addr)
{
	size_t lo = 0, hi = e->n_maps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (addr < e->maps[mid].start)
			hi = mid;
		else if (addr >= e->maps[mid].end)
			lo = mid + 1;
		else
			return (ssize_t)mid;
	}
	return -1;
}

/* report_pc() - make sure the file holding @pc, if any, has been reported to @e's Dwfl. */
static void report_pc(struct unwinder *u, struct as_entry *e, uint64_t pc)
{
	ssize_t i = mapping_index(e, pc);

	if (i >= 0 && !e->tried[i])
		report_mapping(u, e, e->dwfl, (size_t)i);
}

/*
 * entry_build() - a Dwfl for @as in the free slot @e, with one file
 * reported: the one holding @pc (the sampled PC), else the first that can
 * be (libdwfl takes the machine from it at dwfl_attach_state()). The rest
 * are reported as walks reach them (report_pc()). Returns 0 (e->dwfl NULL
 * if no file could be reported) or -ENOMEM.
 */
static int entry_build(struct unwinder *u, struct as_entry *e, const struct addrspace *as,
		       uint64_t pc)
{
	size_t n;
	const struct mapping *maps = addrspace__mappings(as, &n);
	bool reported = false;
	ssize_t first;
	Dwfl *dwfl;

	e->maps = calloc(n ? n : 1, sizeof(*e->maps));
	e->tried = calloc(n ? n : 1, sizeof(*e->tried));
	if (!e->maps || !e->tried)
		return -ENOMEM;
	memcpy(e->maps, maps, n * sizeof(*maps));
	e->n_maps = n;
	e->as = as;

	e->cfi_cache = calloc(CFI_CACHE_SLOTS, sizeof(*e->cfi_cache));
	dwfl = e->cfi_cache ? dwfl_begin(&u->debuginfo.callbacks) : NULL;
	if (!dwfl)
		return -ENOMEM;
	first = mapping_index(e, pc);
	if (first >= 0)
		reported = report_mapping(u, e, dwfl, (size_t)first);
	for (size_t i = 0; i < n && !reported; i++)
		if (!e->tried[i])
			reported = report_mapping(u, e, dwfl, i);
	/* the pid is only a label here: memory and registers come from the sample */
	if (!reported || !dwfl_attach_state(dwfl, NULL, FAKE_TID, &thread_callbacks, u)) {
		dwfl_end(dwfl);
		return 0;
	}
	e->dwfl = dwfl;
	return 0;
}

/*
 * entry_get() - the cache entry for @as, built on first use and rebuilt when
 * its mappings differ from those it was built from (addrspace__refresh()
 * added some, or dropped some a new mapping overlapped; or @as is a new
 * address space at a freed one's address), or when a missing file is due to
 * be tried again. Returns NULL on OOM.
 *
 * The comparison is of every field, string pointers included: O(mappings)
 * per sample, well under a microsecond for hundreds of mappings, and what
 * keeps a Dwfl from outliving the address space it describes.
 */
static struct as_entry *entry_get(struct unwinder *u, const struct addrspace *as, uint64_t pc)
{
	size_t n;
	const struct mapping *maps = addrspace__mappings(as, &n);
	struct as_entry *e = NULL, *victim = NULL;

	for (size_t i = 0; i < CACHE_MAX; i++) {
		struct as_entry *c = &u->cache[i];

		if (c->as == as) {
			e = c;
			break;
		}
		/* a free slot, else the least recently used */
		if (!victim || (victim->as && (!c->as || c->last_use < victim->last_use)))
			victim = c;
	}
	if (e) {
		bool same = e->n_maps == n;

		for (size_t i = 0; same && i < n; i++)
			same = mapping_eq(&e->maps[i], &maps[i]);
		if (!same || (e->retry_ns && now_ns(CLOCK_MONOTONIC) >= e->retry_ns))
			entry_clear(e);
	} else {
		e = victim;
		entry_clear(e);
	}
	if (!e->as && entry_build(u, e, as, pc) < 0) {
		entry_clear(e);
		return NULL;
	}
	e->last_use = ++u->use_clock;
	return e;
}

/* ---------------------------------------------------------------------- */
/* The walk */

/*
 * cfi_frame() - the CFI row for lookup address @pc: from .eh_frame, else
 * from .debug_frame (in the file or its separate debug file). NULL when no
 * module holds @pc or no CFI covers it. The caller frees the result.
 */
static Dwarf_Frame *cfi_frame(Dwfl *dwfl, Dwarf_Addr pc)
{
	Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
	Dwarf_Frame *frame;
	Dwarf_Addr bias;
	Dwarf_CFI *cfi;

	if (!mod)
		return NULL;
	cfi = dwfl_module_eh_cfi(mod, &bias);
	if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) == 0)
		return frame;
	cfi = dwfl_module_dwarf_cfi(mod, &bias);
	if (cfi && dwarf_cfi_addrframe(cfi, pc - bias, &frame) == 0)
		return frame;
	return NULL;
}

/* ra_undefined() - whether CFI row @frame says the caller's return address is undefined. */
static bool ra_undefined(Dwarf_Frame *frame)
{
	Dwarf_Op ops_mem[3], *ops = NULL;
	size_t nops = 0;
	int ra = dwarf_frame_info(frame, NULL, NULL, NULL);

	if (ra < 0 || dwarf_frame_register(frame, ra, ops_mem, &ops, &nops) != 0)
		return false;
	/* libdw: no ops, *ops == ops_mem is "undefined"; *ops == NULL is "same value" */
	return nops == 0 && ops == ops_mem;
}

/*
 * pc_has_cfi() - whether CFI covers lookup address @pc, remembered per
 * address space: return addresses repeat from sample to sample, so this
 * mostly costs a hash; a miss costs a CFI lookup libdw then repeats.
 */
static bool pc_has_cfi(struct as_entry *e, Dwarf_Addr pc)
{
	struct cfi_slot *slot = &e->cfi_cache[((pc + 1) * 0x9e3779b97f4a7c15ULL) >>
					      (64 - __builtin_ctz(CFI_CACHE_SLOTS))];
	Dwarf_Frame *frame;

	if (slot->key == pc + 1)
		return slot->has_cfi;
	frame = cfi_frame(e->dwfl, pc);
	free(frame);
	*slot = (struct cfi_slot){.key = pc + 1, .has_cfi = frame != NULL};
	return frame != NULL;
}

static void walk_stop(struct unwinder *u, enum unwind_status status)
{
	u->stopped = true;
	u->stop = status;
}

/*
 * frame_cb() - store one frame's PC. ret_pcs[0] is the sampled PC; a caller
 * frame's PC is a return address (libdw: not an "activation"), stored as is
 * since the symbolizer looks up return addresses at - 1. A caller frame that
 * is an activation (the frame a signal interrupted, or the signal
 * trampoline) holds the exact PC; it is stored + 1 so that the same - 1
 * lands on it.
 *
 * Bounds the walk: at most @max frames, and each caller's SP (its CFA) must
 * be above its callee's. A real call always pushes a return address, so an
 * SP that does not grow is corrupt CFI or stack, and a PC that repeats with
 * the same SP (a loop) can never pass this test.
 *
 * Stops at a PC no CFI covers, with UNWIND_NO_CFI: libdw would go on with
 * its x86-64 fallback, a frame-pointer step, which in code built without
 * frame pointers reads %rbp's garbage as a frame and invents callers. The
 * stack stays right up to that PC; the caller may try frame pointers from
 * there (JIT code) knowing it is a guess.
 */
static int frame_cb(Dwfl_Frame *state, void *arg)
{
	struct unwinder *u = arg;
	bool activation = false;
	Dwarf_Word sp;
	Dwarf_Addr pc;

	if (u->n == u->max) {
		walk_stop(u, UNWIND_TRUNCATED);
		return DWARF_CB_ABORT;
	}
	if (!dwfl_frame_pc(state, &pc, &activation) ||
	    dwfl_frame_reg(state, UNWIND_REG_SP, &sp) != 0 || (u->n > 0 && sp <= u->last_sp)) {
		walk_stop(u, UNWIND_ERROR);
		return DWARF_CB_ABORT;
	}
	if (u->n == 0) {
		u->pcs[0] = pc;
		u->last_lookup_pc = pc;
	} else {
		u->pcs[u->n] = activation ? pc + 1 : pc;
		u->last_lookup_pc = activation ? pc : pc - 1;
	}
	u->last_sp = sp;
	u->n++;
	report_pc(u, u->entry, u->last_lookup_pc);
	if (!pc_has_cfi(u->entry, u->last_lookup_pc)) {
		walk_stop(u, UNWIND_NO_CFI);
		return DWARF_CB_ABORT;
	}
	return DWARF_CB_OK;
}

/*
 * walk_status() - why a walk that libdw ended (@r: dwfl_getthread_frames()'s
 * result, 0 or -1) stopped. libdw's own answer is not enough:
 *  - it returns 0 ("no more frames") both when the CFI of the outermost frame
 *    marks the return address undefined (_start, clone3: the real end) and
 *    when the load of the return address failed or gave 0 (a stack copy too
 *    short, or garbage), so END is only given when the CFI says so;
 *  - it returns -1 with an error only libdwfl can decode, so the cause is
 *    found again (frame_cb already stopped at PCs without CFI): a load
 *    outside the copy → NO_STACK; anything else (bad CFI, a register the
 *    CFI needs but lost) → ERROR.
 */
static enum unwind_status walk_status(struct unwinder *u, Dwfl *dwfl, int r)
{
	Dwarf_Frame *frame;
	bool outermost;

	frame = cfi_frame(dwfl, u->last_lookup_pc);
	if (!frame)
		return UNWIND_NO_CFI;
	outermost = r == 0 && ra_undefined(frame);
	free(frame);
	if (outermost)
		return UNWIND_END;
	return u->read_failed ? UNWIND_NO_STACK : UNWIND_ERROR;
}

/*
 * unwinder__unwind() - unwind one sample with CFI.
 * @u: the unwinder; its cache keeps one Dwfl per address space (at most
 *   CACHE_MAX, least recently used evicted), rebuilt when addrspace__mappings()
 *   no longer equals what it was built from.
 * @as: the sampled process's mappings; each executable ELF file is opened
 *   with addrspace__open_file() and reported at its load bias, once per
 *   Dwfl, the first time a walk reaches a PC in it;
 *   [vdso] is unwound with a copy of our own vDSO.
 * @regs: UNWIND_NREGS user registers, DWARF numbering.
 * @stack, @stack_len: the bytes copied from the user stack starting at
 *   regs[UNWIND_REG_SP]; only the first 64 KiB are used. NULL with 0 is fine.
 * @ret_pcs, @max: receives up to @max PCs, leaf first. ret_pcs[0] is
 *   regs[UNWIND_REG_IP]; the others are return addresses, except that a
 *   frame interrupted by a signal is stored as its PC + 1, so that every
 *   entry after the first is looked up at - 1.
 * @ret_status: why the walk stopped:
 *   UNWIND_END        the outermost frame's CFI marks the return address
 *                     undefined (glibc's _start and clone3);
 *   UNWIND_TRUNCATED  there were more than @max frames;
 *   UNWIND_NO_CFI     the last PC is in no reported file (JIT code, an
 *                     anonymous mapping, a file that could not be opened) or
 *                     no CFI covers it; also regs[IP] == 0 (0 PCs);
 *   UNWIND_NO_STACK   a load the CFI needed fell outside the stack copy;
 *   UNWIND_ERROR      anything else: a return address of 0 or garbage where
 *                     CFI expects one, an SP that does not grow, corrupt CFI.
 *
 * Every frame comes from CFI: where a PC has none the walk stops there
 * (libdw's frame-pointer fallback is never used), so a stack is right as
 * far as it goes.
 *
 * Returns the number of PCs stored (>= 1 when regs[IP] != 0 and @max > 0), or
 * -ENOMEM (nothing stored). Blocks on file I/O when it (re)builds a Dwfl;
 * allocates; does not log; never asks debuginfod.
 */
int unwinder__unwind(struct unwinder *u, const struct addrspace *as, const uint64_t *regs,
		     const void *stack, size_t stack_len, uint64_t *ret_pcs, size_t max,
		     enum unwind_status *ret_status)
{
	struct as_entry *e;
	int r;

	if (regs[UNWIND_REG_IP] == 0) {
		*ret_status = UNWIND_NO_CFI;
		return 0;
	}
	if (max == 0) {
		*ret_status = UNWIND_TRUNCATED;
		return 0;
	}
	e = entry_get(u, as, regs[UNWIND_REG_IP]);
	if (!e)
		return -ENOMEM;
	if (!e->dwfl) {
		ret_pcs[0] = regs[UNWIND_REG_IP];
		*ret_status = UNWIND_NO_CFI;
		return 1;
	}

	u->entry = e;
	u->regs = regs;
	u->stack = stack;
	u->stack_start = regs[UNWIND_REG_SP];
	u->stack_len = stack ? MIN(stack_len, (size_t)STACK_MAX_BYTES) : 0;
	u->read_failed = false;
	u->pcs = ret_pcs;
	u->max = max;
	u->n = 0;
	u->last_sp = 0;
	u->stopped = false;

	r = dwfl_getthread_frames(e->dwfl, FAKE_TID, frame_cb, u);
	u->stack = NULL;
	u->regs = NULL;
	if (u->n == 0) {
		/* libdw refused the registers: still give the sampled PC */
		ret_pcs[0] = regs[UNWIND_REG_IP];
		*ret_status = UNWIND_ERROR;
		return 1;
	}
	*ret_status = u->stopped ? u->stop : walk_status(u, e->dwfl, r);
	return (int)MIN(u->n, (size_t)INT_MAX);
}

/* Whether a return address of @walk (past its leaf) is in a file mapping of @as. */
static bool walk_mapped(const struct addrspace *as, const uint64_t *walk, size_t nwalk)
{
	for (size_t i = 1; i < nwalk; i++)
		if (addrspace__find(as, walk[i] - 1))
			return true;
	return false;
}

/*
 * unwinder__complete_walk() - a user stack, leaf first: the frame-pointer
 * walk @walk (@nwalk addresses, leaf first, as bpf_get_stack() gives it)
 * with the frames it skipped put back by CFI. A walk from a leaf built
 * without frame pointers (libc's clock_nanosleep, malloc,
 * __lll_lock_wait...) goes from the leaf to the return address in the
 * caller's caller: the direct caller is missing, and nothing in the stack
 * says so. @regs (UNWIND_NREGS, DWARF order; NULL: none were copied) and
 * @stack (@stack_len bytes from regs[SP]) are unwound with @u; where the
 * CFI unwind meets the walk's first return address, its frames up to there
 * replace the walk's: result = cfi[0..j] + walk[2..], walk[1] == cfi[j]. If
 * they never meet and the CFI unwind reached the outermost frame, the walk
 * was wrong and the CFI stack is used; so it is when the walk has no frame
 * past the leaf (a process without frame pointers) and CFI found more, even
 * if it stopped short (UNWIND_WALK_FIXED, and UNWIND_WALK_PARTIAL if it
 * did), and when no return address of the walk is in a file mapping
 * while CFI found a caller that is (a leaf called from code built without
 * frame pointers that uses rbp for data, as python3.11 does: the walk read
 * garbage; a walk through JIT code reaches the file mappings of the
 * runtime that runs it). Otherwise, if the CFI unwind
 * stopped short (no CFI, slice too short), the walk is returned as it is,
 * marked UNWIND_WALK_UNCHECKED.
 * @as: the mappings of the process. @ret_pcs: up to @max addresses.
 * *@ret_flags: UNWIND_WALK_* (0: the walk was right).
 *
 * Returns the number of addresses (0..@max), or -ENOMEM. Allocates (the
 * unwinder's caches), may block on file I/O, does not log; @u is not
 * thread-safe.
 */
int unwinder__complete_walk(struct unwinder *u, const struct addrspace *as, const uint64_t *regs,
			    const void *stack, size_t stack_len, const uint64_t *walk, size_t nwalk,
			    uint64_t *ret_pcs, size_t max, uint32_t *ret_flags)
{
	/*
	 * The walk usually misses only frames next to the leaf (an allocator
	 * built without frame pointers): a short CFI unwind meets it, and the
	 * whole stack is unwound only when that one does not. Both give the
	 * same frames, the short one being the long one's start.
	 */
	static const size_t tries[] = { 8, 128 };
	uint64_t cfi[128];
	size_t n = 0, j = 0;
	enum unwind_status st = UNWIND_ERROR;
	int ncfi = 0;

	*ret_flags = 0;
	if (!regs || regs[UNWIND_REG_IP] == 0) {
		*ret_flags = UNWIND_WALK_UNCHECKED;
		goto walk;
	}
	for (size_t t = 0; t < ARRAY_SIZE(tries); t++) {
		ncfi = unwinder__unwind(u, as, regs, stack, stack_len, cfi, tries[t], &st);
		if (ncfi < 0)
			return ncfi;
		/* The walk's first return address, among the CFI frames. */
		for (j = 1; nwalk >= 2 && j < (size_t)ncfi; j++)
			if (cfi[j] == walk[1])
				break;
		if ((nwalk >= 2 && j < (size_t)ncfi) || st != UNWIND_TRUNCATED)
			break;
	}
	if (nwalk >= 2 && j < (size_t)ncfi) {
		for (size_t i = 0; i <= j && n < max; i++)
			ret_pcs[n++] = cfi[i];
		for (size_t i = 2; i < nwalk && n < max; i++)
			ret_pcs[n++] = walk[i];
		if (j > 1)
			*ret_flags = UNWIND_WALK_FIXED;
		return (int)n;
	}
	/* They never meet: a complete CFI unwind wins over the walk, and so does
	 * a partial one where the walk has nothing past the leaf (a process
	 * built without frame pointers), or nothing in a file mapping (garbage
	 * read through rbp): it is right as far as it goes. */
	if ((st == UNWIND_END && ncfi > 0) || (nwalk < 2 && ncfi > (int)nwalk) ||
	    (ncfi >= 2 && addrspace__find(as, cfi[1] - 1) && !walk_mapped(as, walk, nwalk))) {
		for (int i = 0; i < ncfi && n < max; i++)
			ret_pcs[n++] = cfi[i];
		*ret_flags = nwalk >= 2 ? UNWIND_WALK_CFI_ONLY
			   : ncfi > (int)nwalk ? UNWIND_WALK_FIXED : 0;
		if (st != UNWIND_END)
			*ret_flags |= UNWIND_WALK_PARTIAL;
		return (int)n;
	}
	*ret_flags = UNWIND_WALK_UNCHECKED;
walk:
	for (size_t i = 0; i < nwalk && n < max; i++)
		ret_pcs[n++] = walk[i];
	return (int)n;
}
