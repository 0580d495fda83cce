/*
 * profile.h - types shared by profile.bpf.c (kernel side) and daemon/sampler.c.
 * Fixed-width types only: the layout must be the same on both sides.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames per stack (the kernel's default perf_event_max_stack is 127). */
#define PROFILE_MAX_FRAMES 127
/* Sessions that can sample at the same time (index = session slot). */
#define PROFILE_MAX_SLOTS 64

/* sample_event.flags */
#define SAMPLE_USER_TRUNCATED (1u << 0)   /* user stack filled all PROFILE_MAX_FRAMES */
#define SAMPLE_KERNEL_TRUNCATED (1u << 1) /* kernel stack filled all PROFILE_MAX_FRAMES */
#define SAMPLE_USER_MISSING (1u << 2)     /* bpf_get_stack(user) failed or returned 0 frames */
#define SAMPLE_KERNEL_MODE (1u << 3)      /* sampled while in the kernel */

/*
 * One CPU sample, written to the ring buffer by profile.bpf.c. Only the first
 * kstack_len + ustack_len addresses of the arrays are meaningful; the record
 * is variable-length: its size is offsetof(ips) + 8 * (kstack_len + ustack_len),
 * kernel frames first, each array leaf first.
 */
struct sample_event {
	__u64 time_ns;    /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u32 pid;        /* tgid */
	__u32 tid;
	__u32 slot;       /* session slot (the perf event's BPF cookie) */
	__u32 cpu;
	__u32 flags;      /* SAMPLE_* */
	__u16 kstack_len; /* frames, 0..PROFILE_MAX_FRAMES */
	__u16 ustack_len; /* frames, 0..PROFILE_MAX_FRAMES */
	char comm[16];    /* thread name at sample time */
	__u64 ips[2 * PROFILE_MAX_FRAMES];
};

/* Per-slot counters in the 'drops' per-CPU array, summed by user space. */
struct slot_counters {
	__u64 ringbuf_full; /* samples lost: ring buffer had no room */
};
