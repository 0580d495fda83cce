/*
 * test-cfi-table.c - unit test of daemon/symbols/cfi_table.c and
 * cfi_unwind.c: the unwind tables compiled from CFI give the stacks libdw
 * gives (unwind.c, the reference), and stop visibly where they cannot.
 *
 * Parts:
 *  - modules: libc, libstdc++, libpython3.11, libtorch_cpu.so compiled;
 *    rows sorted, ending in no CFI, nearly all plain CFA rules; wherever
 *    libdw finds CFI (random .text PCs and row starts) the row says what
 *    libdw's row says (no FDE lost, no instruction run otherwise); libc's
 *    .plt is recognised; a relocatable object compiles; prints rows, bytes
 *    and compile time per module;
 *  - self: this process's own stack gives libdw's stack, to _start;
 *  - signal: a stack through a signal handler stops at the trampoline
 *    (__restore_rt, a signal frame) with the frames before it libdw's;
 *  - plt: a stack whose leaf is in a PLT entry, at each of its 16 bytes:
 *    the caller is found (the entry's push is accounted for), as libdw;
 *  - corrupt: thousands of truncated and byte-flipped .eh_frame and
 *    .debug_frame sections, from libc, libstdc++ and a fixture: an error
 *    or a table, never a crash, and every table well-formed; the intact
 *    .eh_frame gives the same rows as the file;
 *  - samples (root): real perf samples (registers + 16 KiB of stack) of
 *    deep-nofp, spin-threads, cxx-throw and a Python program: for each
 *    workload >= 99% of the samples give libdw's PCs and status, every
 *    difference is printed (both stacks, symbolized), and no table stack
 *    ever differs from libdw's before it stops. Prints the time per sample
 *    of both unwinders.
 *
 * Workload paths come from DEEP_NOFP, SPIN_THREADS, CXX_THROW, PY_WORKLOADS
 * (tests/meson.build); the .debug_frame fixture from UNWIND_NOCFI_DEBUG, a
 * relocatable object from RELOC_OBJECT.
 *
 * Exit status: 0 all parts passed, 1 a check failed, 77 nothing failed but
 * a part was skipped (the reason is printed), 99 setup error.
 */
#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include "check.h"
#include "check_samples.h"
#include "check_workload.h"
#include "symbols/cfi_table.h"
#include "symbols/cfi_unwind.h"
#include "symbols/debuginfo.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

#define MAX_FRAMES 128
#define N_SAMPLES 400
#define PASSES 3

static const char *kind_name(unsigned k)
{
	static const char *const names[] = {"none", "cfa", "plt", "expr", "signal", "outermost"};

	return k < ARRAY_SIZE(names) ? names[k] : "?";
}

/* ---------------------------------------------------------------------- */
/* Stacks */

struct stack {
	uint64_t pcs[MAX_FRAMES];
	int n;
	enum unwind_status status;
	enum cfi_row_kind stop_kind; /* the table unwinder's */
};

static bool stack_same(const struct stack *a, const struct stack *b)
{
	return a->n == b->n && a->status == b->status &&
	       memcmp(a->pcs, b->pcs, (size_t)a->n * sizeof(a->pcs[0])) == 0;
}

/* stack_prefix() - whether @t's PCs are the first of @ref's: no frame @ref does not have. */
static bool stack_prefix(const struct stack *t, const struct stack *ref)
{
	return t->n <= ref->n && memcmp(t->pcs, ref->pcs, (size_t)t->n * sizeof(t->pcs[0])) == 0;
}

static void stack_print(FILE *f, const char *title, const struct stack *st, struct symbolizer *s,
			const struct addrspace *as)
{
	fprintf(f, "  %s: status %s, %d frames:\n", title, status_name(st->status), st->n);
	for (int i = 0; i < st->n; i++) {
		struct frame_info fi;

		symbolizer__user(s, as, st->pcs[i], i > 0, &fi);
		fprintf(f, "    #%-2d %#" PRIx64 " %s (%s+%#" PRIx64 ")\n", i, st->pcs[i],
			fi.function ? fi.function : "?", fi.module, fi.rel_addr);
	}
}

static const char *fn_name(struct symbolizer *s, const struct addrspace *as, uint64_t pc, bool ret)
{
	struct frame_info fi;

	symbolizer__user(s, as, pc, ret, &fi);
	return fi.function ? fi.function : "?";
}

/* both() - unwind with libdw into @ref and with the tables into @t. */
static void both(struct unwinder *u, struct cfi_unwinder *cu, const struct addrspace *as,
		 const uint64_t *regs, const void *stack, size_t len, struct stack *ref,
		 struct stack *t)
{
	ref->n = unwinder__unwind(u, as, regs, stack, len, ref->pcs, MAX_FRAMES, &ref->status);
	t->n = cfi_unwinder__unwind(cu, as, regs, stack, len, t->pcs, MAX_FRAMES, &t->status,
				    &t->stop_kind);
}

/* ---------------------------------------------------------------------- */
/* Modules */

/* table_well_formed() - rows strictly increasing, kinds known, the last one no CFI. */
static bool table_well_formed(const struct cfi_table *t)
{
	size_t n;
	const struct cfi_row *rows = cfi_table__rows(t, &n);

	for (size_t i = 0; i < n; i++) {
		if (rows[i].kind > CFI_ROW_OUTERMOST || (i > 0 && rows[i].pc <= rows[i - 1].pc))
			return false;
		if (i > 0 && rows[i].kind == rows[i - 1].kind &&
		    rows[i].flags == rows[i - 1].flags && rows[i].cfa_off == rows[i - 1].cfa_off &&
		    rows[i].fp_off == rows[i - 1].fp_off)
			return false; /* not merged */
	}
	/* a last FDE cut at CFI_TABLE_MAX_FDE_ROWS ends in its EXPR row */
	return n == 0 || rows[n - 1].kind == CFI_ROW_NONE || rows[n - 1].kind == CFI_ROW_EXPR;
}

/* section_of() - address and size of section @name of the ELF file @path; false if none. */
static bool section_of(const char *path, const char *name, uint64_t *ret_addr, uint64_t *ret_size,
		       void **ret_copy)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	bool found = false;

	if (fd < 0)
		return false;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (e && elf_getshdrstrndx(e, &shstrndx) == 0) {
		while (!found && (scn = elf_nextscn(e, scn))) {
			GElf_Shdr sh;
			const char *s;

			if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
				continue;
			s = elf_strptr(e, shstrndx, sh.sh_name);
			if (!s || strcmp(s, name) != 0)
				continue;
			*ret_addr = sh.sh_addr;
			*ret_size = sh.sh_size;
			if (ret_copy) {
				Elf_Data *d = elf_getdata(scn, NULL);

				if (!d || !d->d_buf)
					break;
				*ret_copy = malloc(d->d_size ? d->d_size : 1);
				if (!*ret_copy)
					SETUP_FAIL("out of memory");
				memcpy(*ret_copy, d->d_buf, d->d_size);
				*ret_size = d->d_size;
			}
			found = true;
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	return found;
}

static const char *torch_cpu_path(void)
{
	static const char *const paths[] = {
	    "/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so",
	    "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so",
	};

	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		if (access(paths[i], R_OK) == 0)
			return paths[i];
	return NULL;
}

static uint64_t rng(void);

/* x86-64 DWARF registers (System V psABI, figure 3.36) */
#define REG_BP 6
#define REG_SP 7
#define REG_IP 16

/* cfa_plus() - whether @ops is a location CFA + *@ret_off (libdw: call_frame_cfa [plus_uconst]). */
static bool cfa_plus(const Dwarf_Op *ops, size_t nops, int64_t *ret_off)
{
	if (nops < 1 || nops > 2 || ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	if (nops == 1) {
		*ret_off = 0;
		return true;
	}
	if (ops[1].atom != DW_OP_plus_uconst)
		return false;
	*ret_off =
	    (int64_t)ops[1].number; /* libdw stores a negative offset as its 2's complement */
	return true;
}

/* breg() - whether @op is DW_OP_bregN/bregx: register in *@ret_reg, offset in *@ret_off. */
static bool breg(const Dwarf_Op *op, uint64_t *ret_reg, int64_t *ret_off)
{
	if (op->atom >= DW_OP_breg0 && op->atom <= DW_OP_breg31) {
		*ret_reg = op->atom - DW_OP_breg0;
		*ret_off = (int64_t)op->number;
		return true;
	}
	if (op->atom == DW_OP_bregx) {
		*ret_reg = op->number;
		*ret_off = (int64_t)op->number2;
		return true;
	}
	return false;
}

/*
 * plt_expression() - whether @ops is the CFA expression GNU ld gives a lazy
 * .plt (bfd/elf64-x86-64.c): rsp + A + (((rip & 15) >= K) << 3), the 8
 * bytes of the index a PLT entry pushes at its byte K. A in *@ret_off, K
 * in *@ret_threshold (11 for the classic PLT, 10 for the IBT one).
 */
static bool plt_expression(const Dwarf_Op *ops, size_t nops, int64_t *ret_off,
			   int64_t *ret_threshold)
{
	uint64_t reg;
	int64_t off;

	if (nops != 9 || !breg(&ops[0], &reg, ret_off) || reg != REG_SP ||
	    !breg(&ops[1], &reg, &off) || reg != REG_IP || off != 0 || ops[2].atom != DW_OP_lit15 ||
	    ops[3].atom != DW_OP_and || ops[4].atom < DW_OP_lit0 || ops[4].atom > DW_OP_lit15 ||
	    ops[5].atom != DW_OP_ge || ops[6].atom != DW_OP_lit3 || ops[7].atom != DW_OP_shl ||
	    ops[8].atom != DW_OP_plus)
		return false;
	*ret_threshold = ops[4].atom - DW_OP_lit0;
	return true;
}

/*
 * libdw_row() - the table row libdw's row @frame would give (the pc is set
 * by the caller), by libdw's own accessors: the reference for cfi_table.c,
 * which runs the CFI programs itself: a rule when the CFA is rsp or rbp plus an offset (or the
 * PLT expression), the return address at CFA - 8, and rbp unchanged, saved
 * at CFA + offset or undefined; else the kind that says why not.
 */
static void libdw_row(Dwarf_Frame *frame, struct cfi_row *row)
{
	Dwarf_Op ops_mem[3], *ops = NULL;
	size_t nops = 0;
	bool signal = false;
	int64_t off, threshold = 0;
	uint64_t reg;
	int ra = dwarf_frame_info(frame, NULL, NULL, &signal);

	row->kind = CFI_ROW_EXPR;
	row->flags = 0;
	row->cfa_off = 0;
	row->fp_off = 0;
	if (ra < 0)
		return;
	if (signal) {
		row->kind = CFI_ROW_SIGNAL;
		return;
	}
	if (dwarf_frame_register(frame, ra, ops_mem, &ops, &nops) != 0)
		return;
	if (nops == 0 && ops == ops_mem) {
		row->kind = CFI_ROW_OUTERMOST;
		return;
	}
	if (!cfa_plus(ops, nops, &off) || off != -8)
		return;

	if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops == 0)
		return;
	if (nops == 1 && breg(&ops[0], &reg, &off) && (reg == REG_SP || reg == REG_BP)) {
		if (off < INT32_MIN || off > INT32_MAX)
			return;
		row->kind = CFI_ROW_CFA;
		row->flags = reg == REG_BP ? CFI_ROW_CFA_BP : 0;
	} else if (plt_expression(ops, nops, &off, &threshold)) {
		if (off < INT32_MIN || off > INT32_MAX)
			return;
		row->kind = CFI_ROW_PLT;
	} else {
		return;
	}
	row->cfa_off = (int32_t)off;

	if (dwarf_frame_register(frame, REG_BP, ops_mem, &ops, &nops) != 0)
		goto expr;
	if (nops == 0 && ops == ops_mem) {
		row->flags |= CFI_ROW_FP_UNDEF;
	} else if (nops == 0) {
		/* same value */
	} else if (cfa_plus(ops, nops, &off) && off >= INT16_MIN && off <= INT16_MAX) {
		row->flags |= CFI_ROW_FP_SAVED;
		row->fp_off = (int16_t)off;
	} else {
		goto expr;
	}
	if (row->kind == CFI_ROW_PLT) {
		if (row->flags & (CFI_ROW_FP_SAVED | CFI_ROW_FP_UNDEF))
			goto expr;
		row->fp_off = (int16_t)threshold;
	}
	return;
expr:
	*row = (struct cfi_row){.pc = row->pc, .kind = CFI_ROW_EXPR};
}

/* row_same_rule() - whether @a and @b say the same (their pc aside). */
static bool row_same_rule(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->kind == b->kind && a->flags == b->flags && a->cfa_off == b->cfa_off &&
	       a->fp_off == b->fp_off;
}

/*
 * check_libdw() - wherever libdw (a Dwarf_CFI of its own over @path's
 * .eh_frame) finds CFI for a PC, @t's row says what libdw's row says
 * (libdw_row()): at 20,000 PCs of .text drawn at random and at the first
 * PC of 20,000 rows drawn at random. An FDE whose rows the compile lost,
 * or a CFI instruction run differently from libdw, would show here.
 */
static void check_libdw(const char *path, const struct cfi_table *t)
{
	uint64_t text = 0, size = 0, covered = 0, missed = 0, differ = 0;
	const struct cfi_row *rows;
	Dwarf_CFI *cfi;
	size_t n;
	Elf *elf;
	int fd;

	rows = cfi_table__rows(t, &n);
	if (!section_of(path, ".text", &text, &size, NULL) || size == 0 || n == 0)
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		SETUP_FAIL("open %s: %m", path);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	cfi = elf ? dwarf_getcfi_elf(elf) : NULL;
	for (int k = 0; cfi && k < 40000; k++) {
		uint64_t pc = k % 2 ? text + rng() % size : rows[rng() % n].pc;
		struct cfi_row want = {.pc = pc};
		Dwarf_Frame *frame = NULL;
		const struct cfi_row *row;

		if (dwarf_cfi_addrframe(cfi, pc, &frame) != 0)
			continue;
		libdw_row(frame, &want);
		free(frame);
		covered++;
		row = cfi_table__find(t, pc);
		if (!row || row->kind == CFI_ROW_NONE) {
			missed++;
		} else if (!row_same_rule(row, &want) && differ++ < 5) {
			printf("modules: %s: pc %#" PRIx64 ": libdw kind %s flags %u cfa %d fp %d, "
			       "table kind %s flags %u cfa %d fp %d\n",
			       path, pc, kind_name(want.kind), want.flags, want.cfa_off,
			       want.fp_off, kind_name(row->kind), row->flags, row->cfa_off,
			       row->fp_off);
		}
	}
	printf("modules: %s: %" PRIu64 " of 40000 PCs have CFI in libdw, %" PRIu64
	       " of them no row, %" PRIu64 " another rule\n",
	       path, covered, missed, differ);
	CHECK(covered > 0);
	CHECK_INT_EQ(missed, 0);
	CHECK_INT_EQ(differ, 0);
	if (cfi)
		dwarf_cfi_end(cfi);
	if (elf)
		elf_end(elf);
	close(fd);
}

/* What check_rows_stream() compares the rows given to a cfi_row_fn with. */
struct stream_check {
	const struct cfi_row *want; /* the table's rows */
	size_t n_want, n, differ;
	size_t fail_at; /* the call that fails with -EOVERFLOW; SIZE_MAX: none */
};

static int stream_row(void *ctx, const struct cfi_row *r)
{
	struct stream_check *c = ctx;
	const struct cfi_row *w = c->n < c->n_want ? &c->want[c->n] : NULL;

	if (c->n++ == c->fail_at)
		return -EOVERFLOW;
	if (!w || memcmp(w, r, sizeof(*r)) != 0)
		c->differ++;
	return 0;
}

/*
 * check_rows_stream() - cfi_table__compile_rows() of @path gives its
 * function the rows of @t, cfi_table__compile()'s table of it, one by one
 * (no table held: the form cfi_maps narrows as they come), and the first
 * error the function returns ends the compile with it.
 */
static void check_rows_stream(const char *path, const struct debuginfo *d,
			      const struct cfi_table *t)
{
	struct stream_check c = {.fail_at = SIZE_MAX};
	struct cfi_table_stats st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		SETUP_FAIL("open %s: %m", path);
	c.want = cfi_table__rows(t, &c.n_want);
	CHECK_INT_EQ(cfi_table__compile_rows(fd, path, d, stream_row, &c, &st), 0);
	CHECK_INT_EQ(c.n, c.n_want);
	CHECK_INT_EQ(c.differ, 0);
	CHECK_INT_EQ(memcmp(&st, cfi_table__stats(t), sizeof(st)), 0);
	c = (struct stream_check){.want = c.want, .n_want = c.n_want, .fail_at = 2};
	if (c.n_want > 3) {
		CHECK_INT_EQ(cfi_table__compile_rows(fd, path, d, stream_row, &c, &st), -EOVERFLOW);
		CHECK_INT_EQ(c.n, 3);
	}
	close(fd);
}

static void test_modules(void)
{
	const char *paths[] = {
	    "/lib/x86_64-linux-gnu/libc.so.6",
	    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
	    "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
	    torch_cpu_path(),
	};
	struct debuginfo d;

	if (debuginfo__init(&d, NULL, true) < 0)
		SETUP_FAIL("out of memory");
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		struct cfi_table *t = NULL;
		const struct cfi_table_stats *st;
		uint64_t t0, ns, plt_addr, plt_size;
		size_t n;
		int fd, r;

		if (!paths[i] || access(paths[i], R_OK) != 0) {
			printf("modules: %s not installed, left out\n",
			       paths[i] ? paths[i] : "libtorch_cpu.so");
			continue;
		}
		fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			SETUP_FAIL("open %s: %m", paths[i]);
		t0 = now_ns(CLOCK_MONOTONIC);
		r = cfi_table__compile(fd, paths[i], &d, &t);
		ns = now_ns(CLOCK_MONOTONIC) - t0;
		close(fd);
		CHECK_INT_EQ(r, 0);
		if (r < 0)
			continue;
		cfi_table__rows(t, &n);
		st = cfi_table__stats(t);
		printf("modules: %s: %zu rows, %zu bytes (%.1f MiB), compiled in %.1f ms; %" PRIu64
		       " FDEs (%" PRIu64 " skipped, %" PRIu64 " cut), %" PRIu64
		       " CFI rows; kinds: cfa %" PRIu64 ", plt %" PRIu64 ", expr %" PRIu64
		       ", signal %" PRIu64 ", outermost %" PRIu64 ", none %" PRIu64 "%s\n",
		       paths[i], n, cfi_table__bytes(t), cfi_table__bytes(t) / 1048576.0, ns / 1e6,
		       st->fdes, st->fdes_skipped, st->fdes_cut, st->rows_read,
		       st->rows_by_kind[CFI_ROW_CFA], st->rows_by_kind[CFI_ROW_PLT],
		       st->rows_by_kind[CFI_ROW_EXPR], st->rows_by_kind[CFI_ROW_SIGNAL],
		       st->rows_by_kind[CFI_ROW_OUTERMOST], st->rows_by_kind[CFI_ROW_NONE],
		       st->debug_frame ? ", with .debug_frame" : "");
		CHECK(table_well_formed(t));
		check_libdw(paths[i], t);
		check_rows_stream(paths[i], &d, t);
		CHECK(n > 1000);
		CHECK_INT_EQ(st->fdes_skipped, 0);
		/* what the table cannot express is rare in compiled code */
		CHECK(st->rows_by_kind[CFI_ROW_CFA] * 100 >=
		      95 * (n - st->rows_by_kind[CFI_ROW_NONE]));
		/* every lazy .plt has the expression: recognised, at its first and 11th byte */
		if (section_of(paths[i], ".plt", &plt_addr, &plt_size, NULL) && plt_size >= 32) {
			const struct cfi_row *a = cfi_table__find(t, plt_addr + 16);
			const struct cfi_row *b = cfi_table__find(t, plt_addr + 16 + 11);

			CHECK(a && a->kind == CFI_ROW_PLT && a->cfa_off == 8 && a->fp_off == 11);
			CHECK(a == b);
		}
		cfi_table__free(t);
	}
	/* CFI only in .debug_frame, in a separate debug file found by .gnu_debuglink */
	if (getenv("UNWIND_NOCFI_LIB")) {
		const char *lib = getenv("UNWIND_NOCFI_LIB");
		struct cfi_table *t = NULL;
		int fd = open(lib, O_RDONLY | O_CLOEXEC);
		size_t n = 0;

		if (fd < 0)
			SETUP_FAIL("open %s: %m", lib);
		CHECK_INT_EQ(cfi_table__compile(fd, lib, &d, &t), 0);
		if (t) {
			cfi_table__rows(t, &n);
			CHECK(cfi_table__stats(t)->debug_frame);
			CHECK(n >= 3 && table_well_formed(t));
			check_rows_stream(lib, &d, t);
			printf("modules: %s: %zu rows from the .debug_frame of its debug file\n",
			       lib, n);
			cfi_table__free(t);
		}
		/* without the debug-file search: nothing to compile, an empty table */
		CHECK_INT_EQ(cfi_table__compile(fd, lib, NULL, &t), 0);
		if (t) {
			cfi_table__rows(t, &n);
			CHECK_INT_EQ(n, 0);
			cfi_table__free(t);
		}
		close(fd);
	} else {
		check_skip("modules", "UNWIND_NOCFI_LIB not set: .debug_frame of a debug file not tried");
	}
	{
		/* not ELF */
		struct cfi_table *t = NULL;
		int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

		CHECK_INT_EQ(cfi_table__compile(fd, "cmdline", &d, &t), -EBADF);
		close(fd);
	}
	{
		/* a relocatable object with debug info, without a debug-file search: a table */
		const char *obj = getenv("RELOC_OBJECT");
		struct cfi_table *t = NULL;
		int fd = obj ? open(obj, O_RDONLY | O_CLOEXEC) : -1;

		if (!obj) {
			check_skip("modules",
				   "RELOC_OBJECT not set: a relocatable object not tried");
		} else if (fd < 0) {
			SETUP_FAIL("open %s: %m", obj);
		} else {
			CHECK_INT_EQ(cfi_table__compile(fd, obj, NULL, &t), 0);
			CHECK(t && table_well_formed(t));
			cfi_table__free(t);
			close(fd);
		}
	}
	debuginfo__done(&d);
	cfi_table__free(NULL);
}

/* ---------------------------------------------------------------------- */
/* This process's own stack */
/* self_sample(), self_caller(): check_samples.h */

__attribute__((noipa)) static void test_self(struct unwinder *u, struct cfi_unwinder *cu,
					     struct symbolizer *s, const struct addrspace *as)
{
	uint64_t regs[UNWIND_NREGS];
	size_t len = self_caller(regs);
	struct stack ref = {}, t = {};

	CHECK(len > 0);
	both(u, cu, as, regs, self_stack, len, &ref, &t);
	printf("self: %d frames to %s, status %s; libdw's: %d frames, status %s\n", t.n,
	       fn_name(s, as, t.pcs[t.n - 1], true), status_name(t.status), ref.n,
	       status_name(ref.status));
	CHECK_INT_EQ(ref.status, UNWIND_END);
	CHECK_INT_EQ(t.status, UNWIND_END);
	CHECK_INT_EQ(t.stop_kind, CFI_ROW_OUTERMOST);
	CHECK(stack_same(&ref, &t));
	CHECK(t.n >= 5);
	CHECK_STR_EQ(fn_name(s, as, t.pcs[1], true), "self_caller");
	CHECK_STR_EQ(fn_name(s, as, t.pcs[2], true), "test_self");
	if (!stack_same(&ref, &t)) {
		stack_print(stderr, "libdw", &ref, s, as);
		stack_print(stderr, "table", &t, s, as);
	}
	/* a copy cut short: the walk stops where the copy ends, as libdw's */
	both(u, cu, as, regs, self_stack, 64, &ref, &t);
	CHECK(stack_same(&ref, &t));
	CHECK_INT_EQ(t.status, UNWIND_NO_STACK);
	/* @max reached */
	t.n = cfi_unwinder__unwind(cu, as, regs, self_stack, len, t.pcs, 2, &t.status, NULL);
	CHECK_INT_EQ(t.n, 2);
	CHECK_INT_EQ(t.status, UNWIND_TRUNCATED);
}

/* ---------------------------------------------------------------------- */
/* Through a signal frame */

/* signal_sample(), sig_regs: check_samples.h */

/*
 * test_signal() - the stack of a signal handler: libdw goes on through
 * __restore_rt (its CIE says 'S') to the interrupted code; the table stops
 * at __restore_rt, visibly (UNWIND_ERROR, a signal row), with libdw's frames
 * up to there.
 */
__attribute__((noipa)) static void test_signal(struct unwinder *u, struct cfi_unwinder *cu,
					       struct symbolizer *s, const struct addrspace *as)
{
	struct stack ref = {}, t = {};
	size_t sig_len = signal_sample();

	CHECK(sig_len > 0);
	both(u, cu, as, sig_regs, self_stack, sig_len, &ref, &t);
	CHECK_INT_EQ(ref.status, UNWIND_END);
	CHECK_INT_EQ(t.status, UNWIND_ERROR);
	CHECK_INT_EQ(t.stop_kind, CFI_ROW_SIGNAL);
	CHECK(stack_prefix(&t, &ref));
	CHECK_INT_EQ(t.n, 4); /* self_sample, self_caller, signal_handler, __restore_rt */
	CHECK(t.n > 0 && strcmp(fn_name(s, as, t.pcs[t.n - 1], true), "__restore_rt") == 0);
	if (check_failures) {
		stack_print(stderr, "libdw", &ref, s, as);
		stack_print(stderr, "table", &t, s, as);
	}
	printf("signal: the table stops at %s (%s row) after %d frames, libdw goes on to %d\n",
	       t.n ? fn_name(s, as, t.pcs[t.n - 1], true) : "-", kind_name(t.stop_kind), t.n,
	       ref.n);
}

/* ---------------------------------------------------------------------- */
/* A leaf in a PLT entry */

/*
 * test_plt() - a sample whose leaf is in this executable's second PLT
 * entry, at each of its 16 bytes, made from a real one: the stack as the
 * entry sees it after `call foo@plt` from self_sample()'s captured IP (the
 * return address on top, and from byte 11 on, the index the entry pushed
 * above it). The caller must be found at every byte, as libdw finds it by
 * evaluating the CFA expression; a wrong rule would take the pushed index
 * for the return address.
 */
__attribute__((noipa)) static void test_plt(struct unwinder *u, struct cfi_unwinder *cu,
					    struct symbolizer *s, const struct addrspace *as)
{
	static unsigned char stack[sizeof(self_stack) + 16];
	uint64_t regs[UNWIND_NREGS], plt_addr, plt_size, bias = 0;
	size_t len = self_caller(regs), n_maps;
	const struct mapping *maps = addrspace__mappings(as, &n_maps);
	struct stack self_ref = {}, self_t = {};
	char exe[PATH_MAX];
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int ok = 0;

	if (l <= 0)
		SETUP_FAIL("readlink /proc/self/exe: %m");
	exe[l] = 0;
	if (!section_of(exe, ".plt", &plt_addr, &plt_size, NULL) || plt_size < 32) {
		check_skip("plt", "this executable has no lazy .plt");
		return;
	}
	for (size_t i = 0; i < n_maps; i++)
		if (strcmp(maps[i].path, exe) == 0)
			bias = maps[i].load_bias;
	both(u, cu, as, regs, self_stack, len, &self_ref, &self_t);
	for (uint64_t byte = 0; byte < 16; byte++) {
		uint64_t r[UNWIND_NREGS], ret = regs[UNWIND_REG_IP] + 1;
		size_t pushed = byte >= 11 ? 16 : 8;
		struct stack ref = {}, t = {};

		memcpy(r, regs, sizeof(r));
		r[UNWIND_REG_IP] = bias + plt_addr + 16 + byte;
		r[UNWIND_REG_SP] = regs[UNWIND_REG_SP] - pushed;
		memset(stack, 0x5a, pushed); /* the pushed index: not a return address */
		memcpy(stack + pushed - 8, &ret, 8);
		memcpy(stack + pushed, self_stack, len);
		both(u, cu, as, r, stack, len + pushed, &ref, &t);
		CHECK(stack_same(&ref, &t));
		CHECK_INT_EQ(t.status, UNWIND_END);
		CHECK(t.n == self_t.n + 1 && t.pcs[1] == ret &&
		      memcmp(t.pcs + 2, self_t.pcs + 1, (size_t)(self_t.n - 1) * 8) == 0);
		if (!stack_same(&ref, &t) || t.pcs[1] != ret) {
			fprintf(stderr, "PLT byte %" PRIu64 ":\n", byte);
			stack_print(stderr, "libdw", &ref, s, as);
			stack_print(stderr, "table", &t, s, as);
		} else {
			ok++;
		}
	}
	printf("plt: a leaf at each of the 16 bytes of a PLT entry: %d of 16 unwound as libdw, "
	       "caller %s\n",
	       ok, fn_name(s, as, regs[UNWIND_REG_IP] + 1, true));
}

/* ---------------------------------------------------------------------- */
/* Corrupt CFI */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/*
 * corrupt_one() - compile @len bytes of @sec (a copy, then damaged in
 * @flips places) as an .eh_frame at @addr or a .debug_frame. Returns 1 if
 * a table came back (checked well-formed), 0 for an error.
 */
static int corrupt_one(const unsigned char *sec, size_t len, bool eh, uint64_t addr, int flips,
		       unsigned char *buf)
{
	struct cfi_table *t = NULL;
	int r;

	memcpy(buf, sec, len);
	for (int f = 0; f < flips && len; f++) {
		size_t at = rng() % len;

		if (rng() & 1)
			buf[at] ^= (unsigned char)(1u << (rng() % 8));
		else
			buf[at] = (unsigned char)rng();
	}
	r = eh ? cfi_table__from_sections(buf, len, addr, NULL, 0, &t)
	       : cfi_table__from_sections(NULL, 0, 0, buf, len, &t);
	CHECK(r == 0 || r == -E2BIG);
	if (r < 0)
		return 0;
	CHECK(table_well_formed(t));
	cfi_table__free(t);
	return 1;
}

/*
 * check_same_as_file() - the @n @rows compiled from a copy of @path's
 * .eh_frame are the rows cfi_table__compile() gives for the file itself
 * (no debug file).
 */
static void check_same_as_file(const char *path, const struct cfi_row *rows, size_t n)
{
	struct cfi_table *t = NULL;
	const struct cfi_row *file_rows;
	size_t n_file = 0;
	bool same;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		SETUP_FAIL("open %s: %m", path);
	CHECK_INT_EQ(cfi_table__compile(fd, path, NULL, &t), 0);
	close(fd);
	if (!t)
		return;
	file_rows = cfi_table__rows(t, &n_file);
	same = n_file == n && memcmp(file_rows, rows, n * sizeof(*rows)) == 0;
	printf("corrupt: %s: its .eh_frame alone gives the file's %zu rows: %s\n", path, n_file,
	       same ? "same" : "DIFFERENT");
	CHECK_INT_EQ(n_file, n);
	CHECK(same);
	cfi_table__free(t);
}

static void test_corrupt(void)
{
	const char *nocfi_debug = getenv("UNWIND_NOCFI_DEBUG");
	struct {
		const char *path, *section;
	} srcs[] = {
	    {"/lib/x86_64-linux-gnu/libc.so.6", ".eh_frame"},
	    {"/usr/lib/x86_64-linux-gnu/libstdc++.so.6", ".eh_frame"},
	    {nocfi_debug, ".debug_frame"},
	};
	unsigned long variants = 0, tables = 0;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);

	for (size_t i = 0; i < ARRAY_SIZE(srcs); i++) {
		_cleanup_free_ unsigned char *sec = NULL, *buf = NULL;
		void *copy = NULL;
		uint64_t addr = 0, size = 0;
		bool eh = strcmp(srcs[i].section, ".eh_frame") == 0;
		struct cfi_table *whole = NULL;
		size_t n_whole = 0;

		if (!srcs[i].path ||
		    !section_of(srcs[i].path, srcs[i].section, &addr, &size, &copy)) {
			printf("corrupt: no %s in %s, left out\n", srcs[i].section,
			       srcs[i].path ? srcs[i].path : "(UNWIND_NOCFI_DEBUG unset)");
			continue;
		}
		sec = copy;
		buf = malloc(size + 1);
		if (!buf)
			SETUP_FAIL("out of memory");
		/* the intact section: the same table as from the file (both compiles
		 * renew libdw's CFI as they go, each its own way: cfi_table.c) */
		CHECK_INT_EQ(eh ? cfi_table__from_sections(sec, size, addr, NULL, 0, &whole)
				: cfi_table__from_sections(NULL, 0, 0, sec, size, &whole),
			     0);
		if (whole) {
			const struct cfi_row *rows = cfi_table__rows(whole, &n_whole);

			CHECK(n_whole > 2);
			if (eh)
				check_same_as_file(srcs[i].path, rows, n_whole);
			cfi_table__free(whole);
		}
		/* the whole section, a few places damaged */
		for (int v = 0; v < 40; v++, variants++)
			tables += (unsigned long)corrupt_one(sec, size, eh, addr, 1 + v % 8, buf);
		/* truncated anywhere, damaged or not */
		for (int v = 0; v < 300; v++, variants++)
			tables +=
			    (unsigned long)corrupt_one(sec, rng() % size, eh, addr, v % 3, buf);
		/* its first 4 KiB (CIEs and the first FDEs), damaged hard */
		for (int v = 0; v < 1500; v++, variants++)
			tables += (unsigned long)corrupt_one(sec, MIN(size, (uint64_t)4096), eh,
							     addr, 1 + v % 16, buf);
	}
	/* nothing at all, and garbage */
	{
		unsigned char junk[512];
		struct cfi_table *t = NULL;

		CHECK_INT_EQ(cfi_table__from_sections(NULL, 0, 0, NULL, 0, &t), 0);
		if (t) {
			size_t n;

			cfi_table__rows(t, &n);
			CHECK_INT_EQ(n, 0);
			CHECK(cfi_table__find(t, 0x1000) == NULL);
			cfi_table__free(t);
		}
		for (int v = 0; v < 200; v++, variants++) {
			for (size_t k = 0; k < sizeof(junk); k++)
				junk[k] = (unsigned char)rng();
			tables +=
			    (unsigned long)corrupt_one(junk, sizeof(junk), v & 1, 0x1000, 0, junk);
		}
	}
	printf("corrupt: %lu damaged sections compiled in %.1f s: %lu tables (all well-formed), "
	       "%lu errors, no crash\n",
	       variants, (now_ns(CLOCK_MONOTONIC) - t0) / 1e9, tables, variants - tables);
	CHECK(variants >= 5000);
}

/* ---------------------------------------------------------------------- */
/* Samples of real workloads */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * compare_workload() - sample @argv and compare the table unwinder with
 * libdw on every sample: >= 99% the same PCs and status; none with a frame
 * libdw does not have before the table's stops. Prints the differences and
 * the time per sample of both.
 */
static void compare_workload(const char *name, char *const argv[], const char *env,
			     enum collect_mode mode, int settle_ms)
{
	static struct sample samples[N_SAMPLES];
	static struct stack ref[N_SAMPLES], tab[N_SAMPLES];
	static uint64_t ns_ref[N_SAMPLES], ns_tab[N_SAMPLES];
	unsigned long same = 0, prefix = 0, printed = 0, st_ref[5] = {}, st_tab[5] = {};
	unsigned long stop_kinds[CFI_ROW_OUTERMOST + 1] = {}, frames = 0;
	struct ring_stats ring = {};
	struct addrspace *as = NULL;
	struct unwinder *u;
	struct cfi_unwinder *cu;
	struct symbolizer *s;
	uint64_t cold_ns;
	int n;

	n = collect(argv, env, mode, settle_ms, samples, N_SAMPLES, &as, &ring);
	if (n < 0) {
		char reason[128];

		snprintf(reason, sizeof(reason), "%s: perf_event_open: %s", name, strerror(-n));
		check_skip("samples", reason);
		addrspace__free(as);
		return;
	}
	u = unwinder__new();
	cu = cfi_unwinder__new();
	s = symbolizer__new();
	if (!u || !cu || !s)
		SETUP_FAIL("out of memory");
	CHECK(n >= 100);
	CHECK_INT_EQ(ring.bad, 0);

	/* cold: tables compiled, Dwfls built */
	cold_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < n; i++)
		tab[i].n = cfi_unwinder__unwind(cu, as, samples[i].regs, samples[i].stack,
						samples[i].stack_len, tab[i].pcs, MAX_FRAMES,
						&tab[i].status, &tab[i].stop_kind);
	cold_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cold_ns;
	for (int i = 0; i < n; i++)
		ref[i].n =
		    unwinder__unwind(u, as, samples[i].regs, samples[i].stack, samples[i].stack_len,
				     ref[i].pcs, MAX_FRAMES, &ref[i].status);
	/* warm: per sample, the best of PASSES passes of each */
	for (int pass = 0; pass < PASSES; pass++) {
		for (int i = 0; i < n; i++) {
			struct stack again;
			uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID), t1, t2;

			again.n = unwinder__unwind(u, as, samples[i].regs, samples[i].stack,
						   samples[i].stack_len, again.pcs, MAX_FRAMES,
						   &again.status);
			t1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
			again.n = cfi_unwinder__unwind(cu, as, samples[i].regs, samples[i].stack,
						       samples[i].stack_len, again.pcs, MAX_FRAMES,
						       &again.status, NULL);
			t2 = now_ns(CLOCK_THREAD_CPUTIME_ID);
			if (pass == 0 || t1 - t0 < ns_ref[i])
				ns_ref[i] = t1 - t0;
			if (pass == 0 || t2 - t1 < ns_tab[i])
				ns_tab[i] = t2 - t1;
		}
	}

	for (int i = 0; i < n; i++) {
		bool eq = stack_same(&ref[i], &tab[i]);

		same += eq;
		prefix += stack_prefix(&tab[i], &ref[i]);
		st_ref[ref[i].status]++;
		st_tab[tab[i].status]++;
		stop_kinds[tab[i].stop_kind]++;
		frames += (unsigned long)ref[i].n;
		if (!eq && printed++ < 20) {
			fprintf(stderr,
				"%s: sample %d (tid %u) differs (table stopped at a %s row):\n",
				name, i, samples[i].tid, kind_name(tab[i].stop_kind));
			stack_print(stderr, "libdw", &ref[i], s, as);
			stack_print(stderr, "table", &tab[i], s, as);
		}
	}
	if (printed > 20)
		fprintf(stderr, "%s: %lu more differences not printed\n", name, printed - 20);
	qsort(ns_ref, (size_t)n, sizeof(ns_ref[0]), cmp_u64);
	qsort(ns_tab, (size_t)n, sizeof(ns_tab[0]), cmp_u64);
	{
		double mean_ref = 0, mean_tab = 0;

		for (int i = 0; i < n; i++) {
			mean_ref += (double)ns_ref[i] / n;
			mean_tab += (double)ns_tab[i] / n;
		}
		printf(
		    "samples %s: %d samples, %.1f frames each; same PCs and status as libdw: %lu "
		    "(%.1f%%); table stack a prefix of libdw's: %lu\n",
		    name, n, (double)frames / n, same, 100.0 * same / n, prefix);
		printf(
		    "samples %s: libdw END %lu TRUNC %lu NO_CFI %lu NO_STACK %lu ERROR %lu; table "
		    "END %lu TRUNC %lu NO_CFI %lu NO_STACK %lu ERROR %lu; table stops at rows: "
		    "none %lu, expr %lu, signal %lu, outermost %lu\n",
		    name, st_ref[0], st_ref[1], st_ref[2], st_ref[3], st_ref[4], st_tab[0],
		    st_tab[1], st_tab[2], st_tab[3], st_tab[4], stop_kinds[CFI_ROW_NONE],
		    stop_kinds[CFI_ROW_EXPR], stop_kinds[CFI_ROW_SIGNAL],
		    stop_kinds[CFI_ROW_OUTERMOST]);
		printf("samples %s: CPU per sample, warm (best of %d): libdw mean %.2f us, median "
		       "%.2f, p95 %.2f; table mean %.2f us, median %.2f, p95 %.2f (%.0fx); table's "
		       "first pass with compiling %.1f ms\n",
		       name, PASSES, mean_ref / 1e3, ns_ref[n / 2] / 1e3,
		       ns_ref[n * 95 / 100] / 1e3, mean_tab / 1e3, ns_tab[n / 2] / 1e3,
		       ns_tab[n * 95 / 100] / 1e3, mean_tab > 0 ? mean_ref / mean_tab : 0,
		       cold_ns / 1e6);
	}
	CHECK(same * 100 >= 99UL * (unsigned long)n);
	CHECK_INT_EQ(prefix, n); /* never a caller libdw does not give */

	unwinder__free(u);
	cfi_unwinder__free(cu);
	symbolizer__free(s);
	samples_free(samples, n);
	addrspace__free(as);
	workload_kill();
}

static void test_samples(void)
{
	const char *deep = getenv("DEEP_NOFP"), *spin = getenv("SPIN_THREADS");
	const char *cxx = getenv("CXX_THROW"), *py_dir = getenv("PY_WORKLOADS");
	char py[PATH_MAX];

	if (geteuid() != 0) {
		check_skip("samples",
		     "not root (perf_event_open on another process and /proc/PID/map_files)");
		return;
	}
	if (!deep || !spin || !cxx || !py_dir)
		SETUP_FAIL("DEEP_NOFP, SPIN_THREADS, CXX_THROW and PY_WORKLOADS must be set");
	compare_workload("deep-nofp", (char *[]){(char *)deep, "30", NULL}, "DEEP_NOFP_WAIT=1",
			 COLLECT_STDIN_GO, 0);
	compare_workload("spin-threads", (char *[]){(char *)spin, "--seconds", "30", NULL}, NULL,
			 COLLECT_THREADS, 300);
	compare_workload("cxx-throw", (char *[]){(char *)cxx, "30", NULL}, NULL, COLLECT_THREADS,
			 200);
	snprintf(py, sizeof(py), "%s/py-deep.py", py_dir);
	if (access("/usr/bin/python3", X_OK) != 0)
		check_skip("samples", "no /usr/bin/python3");
	else
		compare_workload("python", (char *[]){"/usr/bin/python3", py, "30", NULL}, NULL,
				 COLLECT_THREADS, 500);
}

int main(int argc, char **argv)
{
	struct addrspace *self = NULL;
	struct unwinder *u;
	struct cfi_unwinder *cu;
	struct symbolizer *s;
	int r;

	r = addrspace__new(getpid(), &self);
	if (r < 0)
		SETUP_FAIL("addrspace__new(self): %s", strerror(-r));
	u = unwinder__new();
	cu = cfi_unwinder__new();
	s = symbolizer__new();
	if (!u || !cu || !s)
		SETUP_FAIL("out of memory");
	test_modules();
	test_self(u, cu, s, self);
	test_signal(u, cu, s, self);
	test_plt(u, cu, s, self);
	unwinder__free(u);
	cfi_unwinder__free(cu);
	cfi_unwinder__free(NULL);
	symbolizer__free(s);
	addrspace__free(self);
	test_corrupt();
	test_samples();

	return check_exit_skip("test-cfi-table");
}
