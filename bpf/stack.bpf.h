/*
 * stack.bpf.h - what the BPF programs share to take a call stack by
 * content: bpf_get_stack() into an array of frames, with the count in
 * frames and a stack that filled the array flagged, never cut silently.
 */
#pragma once

/* x86-64's page size: user stacks are copied by the page, since a read that faults fails whole. */
#define PAGE_BYTES 4096

/* What a stack helper returned (bytes, or -errno), as frames in 0..@max. */
static __always_inline long stack_frames(long n, long max, bool *full)
{
	if (n < 0)
		n = 0;
	n /= sizeof(__u64);
	*full = n >= max;
	if (n >= max)
		n = max;
	return n;
}

/*
 * get_stack() - the stack of @ctx (kernel, or user with BPF_F_USER_STACK in
 * @flags) into @ips, room for @max frames: the number of frames, 0..@max
 * (0 when there is none); *@full is set when the array filled, so that the
 * caller flags the stack as possibly truncated.
 */
static __always_inline long get_stack(void *ctx, __u64 *ips, long max, __u64 flags, bool *full)
{
	return stack_frames(bpf_get_stack(ctx, ips, max * sizeof(__u64), flags), max, full);
}

/*
 * get_task_kernel_stack() - the kernel stack of @task, a task that is off
 * the CPU, as get_stack() gives the current one's: bpf_get_task_stack()
 * (Linux 5.9; stack_trace_save_tsk() from the frame the task saved when it
 * switched out). Same return value and *@full.
 */
static __always_inline long get_task_kernel_stack(struct task_struct *task, __u64 *ips, long max,
						  bool *full)
{
	return stack_frames(bpf_get_task_stack(task, ips, max * sizeof(__u64), 0), max, full);
}

/*
 * read_user_stack() - copy @want bytes of the current task's user stack,
 * from @sp up, to @dst; if any of them faults (bpf_probe_read_user() fails
 * whole, and pages cannot be faulted in here), what is left of @sp's page
 * instead. @want: a multiple of 8. @max: the room at @dst in bytes, a
 * constant, which bounds both reads for the verifier. Returns the bytes
 * copied, a multiple of 8 in 0..@max (0 if neither read worked).
 */
static __always_inline __u32 read_user_stack(void *dst, __u64 sp, __u64 want, __u64 max)
{
	if (want > max || want == 0)
		return 0;
	if (bpf_probe_read_user(dst, want, (void *)sp) == 0)
		return want;
	want = (PAGE_BYTES - (sp & (PAGE_BYTES - 1))) & ~7ULL;
	if (want > max || want == 0)
		return 0;
	if (bpf_probe_read_user(dst, want, (void *)sp) == 0)
		return want;
	return 0;
}

/*
 * read_user_pages() - copy the current task's user stack in whole pages,
 * from the page holding @sp, enough of them for @above bytes above @sp, to
 * @dst. @room: the bytes at @dst, a constant multiple of PAGE_BYTES: whole
 * pages at constant offsets keep every access provably inside @dst for the
 * verifier. bpf_probe_read_user() fails whole if any byte faults, and pages
 * cannot be faulted in here: a page that cannot be read (above the top of
 * the stack, or swapped out) ends the copy, as perf's PERF_SAMPLE_STACK_USER
 * does with copy_from_user_nmi(); with @missing, it sets the page's bit in
 * *@missing instead and the copy goes on past it. Sets *@offset to where @sp
 * is in @dst and *@size to the bytes copied, up to the end of the last page
 * read (0 if none was).
 */
static __always_inline void read_user_pages(__u8 *dst, __u32 room, __u64 sp, __u64 above,
					    __u32 *offset, __u32 *size, __u32 *missing)
{
	__u64 start = sp & ~((__u64)PAGE_BYTES - 1), want = (sp - start) + above;

	*offset = sp - start;
	*size = 0;
#pragma unroll
	for (int i = 0; i < room / PAGE_BYTES; i++) {
		if ((__u64)i * PAGE_BYTES >= want)
			break;
		if (bpf_probe_read_user(&dst[i * PAGE_BYTES], PAGE_BYTES,
					(void *)(start + (__u64)i * PAGE_BYTES))) {
			if (!missing)
				break;
			*missing |= 1u << i;
		} else {
			*size = (i + 1) * PAGE_BYTES;
		}
	}
}
