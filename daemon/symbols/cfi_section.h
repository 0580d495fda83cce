/*
 * cfi_section.h - one CFI section (.eh_frame or .debug_frame) read into its
 * CIEs and FDEs, and each FDE's CFI program run once into rows of the
 * unwind table (struct cfi_row): the rules libdw's dwarf_cfi_addrframe()
 * gives at each PC, without its per-PC re-run of the program. cfi_table.c
 * walks the FDEs into a module's table.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symbols/cfi_table.h"

/*
 * One FDE: 24 bytes, as libtorch_cpu.so has 220,000 of them, held while its
 * table compiles (they took 8.4 MiB at 40 bytes, and as much again for the
 * sort). Sections and ranges fit 32 bits (cfi_section__read()).
 */
struct cfi_fde {
	uint64_t start;		 /* the first PC it covers, in the section's addresses */
	uint32_t range;		 /* the PCs it covers: [start, start + range) */
	uint32_t insn, insn_end; /* its CFI program: offsets in the section */
	uint32_t cie;		 /* index in cfi_section.cies */
};
_Static_assert(sizeof(struct cfi_fde) == 24, "struct cfi_fde is 24 bytes");

/* cfi_fde_end() - the first PC past @f's range. */
static inline uint64_t cfi_fde_end(const struct cfi_fde *f)
{
	return f->start + f->range;
}

/* One row of an FDE: its rule (row.pc its first PC), up to @end (excluded). */
struct cfi_fde_row {
	struct cfi_row row;
	uint64_t end;
};

struct cfi_cie;
struct cfi_fde_rows;

/* A CFI section and its entries. The caller sets base, size and addr; the rest is read. */
struct cfi_section {
	const uint8_t *base;
	size_t size;
	uint64_t addr; /* the section's address: pc-relative pointers are from addr + offset */
	struct cfi_cie *cies;
	size_t n_cies;
	struct cfi_fde *fdes; /* sorted by start, then by their order in the section */
	size_t n_fdes;
	struct cfi_fde_rows *run; /* the rows of the FDE run last */
};

/* Documented where they are defined, in cfi_section.c. */
int cfi_section__read(const unsigned char *ident, bool eh_frame, struct cfi_section *sec,
		      struct cfi_table_stats *stats);
const struct cfi_fde_row *cfi_section__row_at(struct cfi_section *sec, size_t fde, uint64_t pc);
void cfi_section__done(struct cfi_section *sec);
