/*
 * cfi_unwind.h - unwinding a copied user stack with compiled CFI tables
 * (cfi_table.h) instead of libdw: the walk a BPF program will do, in user
 * space, where it is checked against unwinder__unwind() (unwind.h). The
 * tables are compiled on first use, one per module (build ID, else path)
 * and kept in a bounded cache.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "symbols/cfi_table.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"

/* Modules whose table is kept; the least recently used is dropped beyond. */
#define CFI_UNWINDER_MAX_TABLES 64

struct cfi_unwinder;

/* Documented where they are defined, in cfi_unwind.c. */
struct cfi_unwinder *cfi_unwinder__new(void);
void cfi_unwinder__free(struct cfi_unwinder *u); /* accepts NULL */
int cfi_unwinder__unwind(struct cfi_unwinder *u, const struct addrspace *as, const uint64_t *regs,
			 const void *stack, size_t stack_len, uint64_t *ret_pcs, size_t max,
			 enum unwind_status *ret_status, enum cfi_row_kind *ret_stop_kind);
const struct cfi_table *cfi_unwinder__table(struct cfi_unwinder *u, const struct addrspace *as,
					    const struct mapping *m);
struct debuginfo;
struct cfi_table *cfi_table__compile_mapping(const struct addrspace *as, const struct mapping *m,
					     const struct debuginfo *d);
int cfi_table__compile_mapping_rows(const struct addrspace *as, const struct mapping *m,
				    const struct debuginfo *d, cfi_row_fn *fn, void *ctx,
				    struct cfi_table_stats *ret_stats);
const char *cfi_table__key(const struct mapping *m, char *buf, size_t size);
