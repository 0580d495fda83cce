// SPDX-License-Identifier: MIT
/*
 * cfi_walk_test.bpf.c - a test and measuring program for cfi_walk.bpf.h:
 * attached to cpu-clock perf events of one process, it walks the sampled
 * thread's user stack with the CFI tables and (as configured) copies the
 * registers and the user stack as profile.bpf.c does, into one record, so
 * that tests/test-cfi-walk.c unwinds the copy with libdw and compares.
 * With copy_stack_bytes 0 and send_walk 0 it runs the walk alone: its
 * run time per sample is the walk's cost.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "user_regs.bpf.h"
#include "stack.bpf.h"
#include "events.bpf.h"
#include "cfi_walk.bpf.h"
#include "cfi_walk_test.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

const volatile __u32 target_tgid = 0;
const volatile __u32 walk = 1;		   /* 1: walk with the tables */
const volatile __u32 copy_stack_bytes = 0; /* 0: no copy; else up to this many bytes above rsp */
const volatile __u32 send = 1;		   /* 1: send the record; 0: only the work (figures) */

/* The record under construction, one per CPU (max_entries set to the CPUs before load). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfi_walk_test_event);
} scratch SEC(".maps");

/*
 * Page by page from rsp's page, as profile.bpf.c's copy_user_stack(), but
 * past a page that cannot be read, its bit set in e->missing_pages (so that
 * libdw can check the frames the walk finds above a large untouched frame).
 */
static __always_inline void copy_stack(struct cfi_walk_test_event *e, __u32 max)
{
	read_user_pages(e->stack, CFI_WALK_TEST_STACK_BYTES, e->regs[7], max, &e->stack_offset,
			&e->stack_size, &e->missing_pages);
}

/* e->stack serves as the walk's window first */
_Static_assert(sizeof(struct cfi_stack_window) <= CFI_WALK_TEST_STACK_BYTES, "window too large");

SEC("perf_event")
int cfi_walk_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 cpu = bpf_get_smp_processor_id(), stop = CFI_STOP_NR;
	struct cfi_walk_test_event *e;
	long size;

	if ((__u32)(id >> 32) != target_tgid)
		return 0;
	e = bpf_map_lookup_elem(&scratch, &cpu);
	if (!e)
		return 0;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->n_pcs = 0;
	e->stack_size = 0;
	e->stack_offset = 0;
	e->missing_pages = 0;
	read_user_regs(e->regs);
	if (walk)
		/* e->stack is the window: copy_stack() comes after the walk */
		e->n_pcs = cfi_walk_user(e->regs, e->pcs, CFI_WALK_MAX_FRAMES,
					 (struct cfi_stack_window *)e->stack, &stop);
	e->stop = stop;
	if (copy_stack_bytes)
		copy_stack(e, copy_stack_bytes);
	if (!send)
		return 0;
	size = offsetof(struct cfi_walk_test_event, stack) + e->stack_size;
	if (size < offsetof(struct cfi_walk_test_event, stack) || size > sizeof(*e))
		return 0;
	events_output(e, size);
	return 0;
}
