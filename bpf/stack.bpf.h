/*
 * stack.bpf.h - what the BPF programs share to take a call stack by
 * content: bpf_get_stack() into an array of frames, with the count in
 * frames and a stack that filled the array flagged, never cut silently.
 */
#pragma once

/* x86-64's page size: user stacks are copied by the page, since a read that faults fails whole. */
#define PAGE_BYTES 4096

/*
 * get_stack() - the stack of @ctx (kernel, or user with BPF_F_USER_STACK in
 * @flags) into @ips, room for @max frames: the number of frames, 0..@max
 * (0 when there is none); *@full is set when the array filled, so that the
 * caller flags the stack as possibly truncated.
 */
static __always_inline long get_stack(void *ctx, __u64 *ips, long max, __u64 flags, bool *full)
{
	long n = bpf_get_stack(ctx, ips, max * sizeof(__u64), flags);

	if (n < 0)
		n = 0;
	n /= sizeof(__u64);
	*full = n >= max;
	if (n >= max)
		n = max;
	return n;
}
