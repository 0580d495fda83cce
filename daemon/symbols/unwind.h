/*
 * unwind.h - DWARF unwinding of a copied user stack with libdw (CFI from
 * .eh_frame and .debug_frame), the way perf --call-graph dwarf does it
 * (tools/perf/util/unwind-libdw.c): a Dwfl whose modules sit at the
 * process's load addresses, attached to one "thread" whose registers are the
 * sample's and whose memory is the stack slice copied with the sample.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "symbols/symbolize.h"

/* x86-64 DWARF register numbers 0..16 (System V psABI, figure 3.36):
 * rax rdx rcx rbx rsi rdi rbp rsp r8 r9 r10 r11 r12 r13 r14 r15 rip. */
#define UNWIND_NREGS 17
#define UNWIND_REG_BP 6
#define UNWIND_REG_SP 7
#define UNWIND_REG_IP 16

enum unwind_status {
	UNWIND_END = 0,    /* reached the outermost frame (CFI has no caller: _start, clone, start_thread) */
	UNWIND_TRUNCATED,  /* stopped at @max frames */
	UNWIND_NO_CFI,     /* a PC has no CFI (JIT code, a stripped .eh_frame, an unmapped address) */
	UNWIND_NO_STACK,   /* a load fell outside the copied stack slice */
	UNWIND_ERROR,      /* any other libdw error */
};

struct unwinder;

/* unwinder__new() - NULL only on out-of-memory. */
struct unwinder *unwinder__new(void);
void unwinder__free(struct unwinder *u); /* accepts NULL */

/*
 * unwinder__unwind() - unwind one sample.
 * @as: the target's mappings; ELF files are opened once per (path, build ID)
 *   and reported at their load bias; the unwinder notices mappings added by
 *   addrspace__refresh() on its own.
 * @regs: user registers at the sample, DWARF numbering (UNWIND_NREGS).
 * @stack, @stack_len: bytes copied from the user stack, starting at
 *   regs[UNWIND_REG_SP]; 0..65536.
 * @ret_pcs: receives up to @max PCs, leaf first: ret_pcs[0] is regs[IP], the
 *   others are return addresses (callers). Stops at @max.
 * Returns the number of PCs (>= 1 when regs[IP] != 0) and the reason it
 * stopped in *@ret_status; -ENOMEM. Never fails on bad input: garbage
 * registers or stack give a short stack and a status other than UNWIND_END.
 * Does not log. Not thread-safe: one unwinder per thread.
 */
int unwinder__unwind(struct unwinder *u, const struct addrspace *as, const uint64_t *regs,
		     const void *stack, size_t stack_len, uint64_t *ret_pcs, size_t max,
		     enum unwind_status *ret_status);

/* unwinder__complete_walk() result flags. */
#define UNWIND_WALK_FIXED (1u << 0)     /* frames the frame-pointer walk skipped were put back */
#define UNWIND_WALK_CFI_ONLY (1u << 1)  /* the frame-pointer walk disagreed with a complete CFI
					 * unwind, which is used instead */
#define UNWIND_WALK_UNCHECKED (1u << 2) /* CFI could not check the frame-pointer walk: frames
					 * next to the leaf may be missing */
#define UNWIND_WALK_PARTIAL (1u << 3)   /* with UNWIND_WALK_FIXED: the CFI frames used stop short
					 * of the outermost frame (the stack copy ended) */

/* Each function is documented where it is defined, in unwind.c. */
int unwinder__complete_walk(struct unwinder *u, const struct addrspace *as, const uint64_t *regs,
			    const void *stack, size_t stack_len, const uint64_t *walk, size_t nwalk,
			    uint64_t *ret_pcs, size_t max, uint32_t *ret_flags);

/*
 * unwinder__forget() - drop the Dwfl and module state cached for @as (its
 * session ended; a new address space may reuse the pointer). Accepts an
 * address space the unwinder never saw.
 */
void unwinder__forget(struct unwinder *u, const struct addrspace *as);
int64_t unwinder__drop_pages(struct unwinder *u); /* documented in unwind.c */
