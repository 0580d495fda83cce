/*
 * cfi_walk_test.h - the record of cfi_walk_test.bpf.c, a test program that
 * takes, per CPU sample of one process, both the BPF walk's PCs
 * (cfi_walk.bpf.h) and the registers + a user stack copy that libdw
 * unwinds, so tests/test-cfi-walk.c compares the two on the same sample.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "cfi_walk.h"

/* User stack bytes copied per sample, whole pages from the page holding rsp. */
#define CFI_WALK_TEST_STACK_BYTES 32768

/*
 * One sample. Variable length: offsetof(stack) + stack_size bytes;
 * stack[] holds stack_size bytes (whole pages) from the page holding
 * regs[7], rsp at stack[stack_offset], up to the last page that could be
 * read. A page below it that could not be read (not present: a large frame
 * that never touched it) has its bit in missing_pages and is garbage, for
 * the reader to zero: an anonymous page never touched reads as zeros.
 * profile.bpf.c stops its copy at such a page instead. Without a copy
 * (copy_stack_bytes 0) stack_size is 0.
 */
struct cfi_walk_test_event {
	__u32 pid;
	__u32 tid;
	__u32 n_pcs;	     /* 0..CFI_WALK_MAX_FRAMES; 0 with the walk off */
	__u32 stop;	     /* enum cfi_walk_stop */
	__u32 stack_size;    /* bytes in stack[], a multiple of 4096 */
	__u32 stack_offset;  /* where rsp points in stack[], < 4096 */
	__u32 missing_pages; /* bit i: page i of stack[] could not be read */
	__u32 pad;
	__u64 regs[17]; /* user registers, DWARF numbering */
	__u64 pcs[CFI_WALK_MAX_FRAMES];
	__u8 stack[CFI_WALK_TEST_STACK_BYTES];
};
