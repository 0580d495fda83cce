/*
 * cfi_table.h - one module's CFI (.eh_frame, and .debug_frame of the file
 * or of its separate debug file) compiled once into a compact table sorted
 * by PC: for each PC range, how to find the caller's SP (the CFA), its
 * return address and its frame pointer on x86-64. The form later put in
 * BPF maps; libdw (unwind.c) stays the reference and the fallback.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct debuginfo;

/*
 * What a row says. Every kind but CFI_ROW_CFA and CFI_ROW_PLT stops an
 * unwind: the table does not guess what it cannot express.
 */
enum cfi_row_kind {
	CFI_ROW_NONE = 0,  /* no CFI covers these PCs (between FDEs, before the first, after the
			    * last): the unwind stops (UNWIND_NO_CFI) */
	CFI_ROW_CFA,	   /* CFA = (CFI_ROW_CFA_BP ? rbp : rsp) + cfa_off; return address at
			    * CFA - 8; caller's rsp = CFA; rbp per the FP flags */
	CFI_ROW_PLT,	   /* a .plt stub's DW_CFA_def_cfa_expression, recognised: CFA = rsp +
			    * cfa_off, + 8 more when (pc & 15) >= fp_off; return address at CFA - 8,
			    * rbp unchanged */
	CFI_ROW_EXPR,	   /* a rule the row cannot hold: a DWARF expression, a CFA in another
			    * register, a return address not at CFA - 8, rbp in a register, an
			    * offset out of range, or an FDE with more than CFI_TABLE_MAX_FDE_ROWS */
	CFI_ROW_SIGNAL,	   /* a signal trampoline's frame (CIE augmentation 'S', __restore_rt):
			    * the caller's registers are in a ucontext the row does not describe */
	CFI_ROW_OUTERMOST, /* the return address is undefined: the thread's first frame (_start,
			    * clone3); the unwind ends here (UNWIND_END) */
};

/*
 * cfi_row.flags. The caller's rbp: CFI_ROW_FP_SAVED, the 8 bytes at CFA +
 * fp_off; CFI_ROW_FP_UNDEF, undefined (lost); neither, this frame's rbp
 * (same value).
 */
#define CFI_ROW_CFA_BP (1u << 0) /* CFI_ROW_CFA: the CFA is rbp + cfa_off (else rsp + cfa_off) */
#define CFI_ROW_FP_SAVED (1u << 1)
#define CFI_ROW_FP_UNDEF (1u << 2)

/*
 * One row: 16 bytes, no padding, 8-byte aligned, the same layout on both
 * sides of a future BPF array map. It covers [pc, next row's pc); the last
 * row of a table is CFI_ROW_NONE (the end of the last FDE), or CFI_ROW_EXPR
 * when the last FDE was cut at CFI_TABLE_MAX_FDE_ROWS.
 */
struct cfi_row {
	uint64_t pc;	 /* first PC covered: module-relative, i.e. the ELF virtual address
			  * (runtime address - load bias) */
	int32_t cfa_off; /* bytes added to the CFA register */
	int16_t fp_off;	 /* CFI_ROW_FP_SAVED: bytes from the CFA to the saved rbp (negative);
			  * CFI_ROW_PLT: the (pc & 15) threshold */
	uint8_t kind;	 /* enum cfi_row_kind */
	uint8_t flags;	 /* CFI_ROW_* flags */
};
_Static_assert(sizeof(struct cfi_row) == 16, "struct cfi_row is 16 bytes");

/*
 * Bounds. A module with more rows than CFI_TABLE_MAX_ROWS (64 MiB of rows)
 * gets no table: cfi_table__compile() fails with -E2BIG and its frames stop
 * an unwind with UNWIND_NO_CFI (libtorch_cpu.so, the largest library we
 * know, needs 1.4 million rows, a third of it). An FDE with more than
 * CFI_TABLE_MAX_FDE_ROWS rows (the rows of one FDE are held while its
 * program runs, cfi_section.c) keeps the rows up to there and is
 * CFI_ROW_EXPR for the rest.
 */
#define CFI_TABLE_MAX_ROWS (4u << 20)
#define CFI_TABLE_MAX_FDE_ROWS 4096u

/* What the compilation found, for figures and counters. */
struct cfi_table_stats {
	uint64_t fdes;	       /* FDEs whose start was decoded, both sections */
	uint64_t fdes_skipped; /* FDEs whose start could not be decoded (left as no CFI) */
	uint64_t fdes_cut;     /* FDEs cut at CFI_TABLE_MAX_FDE_ROWS (the rest CFI_ROW_EXPR) */
	uint64_t rows_read;    /* rows the FDEs gave, before merging */
	uint64_t rows_by_kind[CFI_ROW_OUTERMOST + 1]; /* after merging */
	bool debug_frame; /* .debug_frame (of the file or its debug file) was used */
};

struct cfi_table;

/*
 * A consumer of a table's rows as they are compiled
 * (cfi_table__compile_rows()): called with each row, in order, once.
 * Returns 0, or a -errno that ends the compilation with it.
 */
typedef int cfi_row_fn(void *ctx, const struct cfi_row *row);

/* Documented where they are defined, in cfi_table.c. */
int cfi_table__compile_rows(int fd, const char *name, const struct debuginfo *d, cfi_row_fn *fn,
			    void *ctx, struct cfi_table_stats *ret_stats);
int cfi_table__compile(int fd, const char *name, const struct debuginfo *d, struct cfi_table **ret);
int cfi_table__from_sections(const void *eh_frame, size_t eh_frame_bytes, uint64_t eh_frame_addr,
			     const void *debug_frame, size_t debug_frame_bytes,
			     struct cfi_table **ret);
const struct cfi_row *cfi_table__find(const struct cfi_table *t, uint64_t pc);
const struct cfi_row *cfi_table__rows(const struct cfi_table *t, size_t *ret_n);
const struct cfi_table_stats *cfi_table__stats(const struct cfi_table *t);
size_t cfi_table__bytes(const struct cfi_table *t);
void cfi_table__free(struct cfi_table *t); /* accepts NULL */
