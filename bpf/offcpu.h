/*
 * offcpu.h - types shared by offcpu.bpf.c (kernel side) and daemon/collect/offcpu.c:
 * one record per off-CPU interval of a target thread. Fixed-width types
 * only: the layout must be the same on both sides.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames per stack (the kernel's default perf_event_max_stack is 127). */
#define OFFCPU_MAX_FRAMES 127
/* Session slots (index = session slot, the same numbering as PROFILE_MAX_SLOTS). */
#define OFFCPU_MAX_SLOTS 64
/* x86-64 DWARF registers 0..16 (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip). */
#define OFFCPU_NREGS 17
/* Most user stack bytes copied per record, from rsp (a multiple of 8). */
#define OFFCPU_STACK_BYTES 1024
/* Sampling periods (ns) are below this: offcpu.bpf.c's keep_interval() multiplies
 * a period by a 32-bit draw and shifts a shorter duration left by 32 in 64 bits. */
#define OFFCPU_PERIOD_LIMIT_NS (1ULL << 32)

/*
 * offcpu_event.state: why the thread left the CPU.
 *   RUNNABLE  preempted, or switched out still TASK_RUNNING: it waited for a CPU;
 *   SLEEPING  TASK_INTERRUPTIBLE: futex, nanosleep, poll, read on a pipe;
 *   IO        TASK_UNINTERRUPTIBLE (D state, killable included): disk I/O,
 *             page faults, some kernel locks;
 *   OTHER     anything else: stopped, traced, frozen, parked.
 */
#define OFFCPU_STATE_RUNNABLE 0
#define OFFCPU_STATE_SLEEPING 1
#define OFFCPU_STATE_IO 2
#define OFFCPU_STATE_OTHER 3
#define OFFCPU_NR_STATES 4

/* offcpu_event.flags */
#define OFFCPU_USER_TRUNCATED (1u << 0)   /* user stack filled all OFFCPU_MAX_FRAMES */
#define OFFCPU_KERNEL_TRUNCATED (1u << 1) /* kernel stack filled all OFFCPU_MAX_FRAMES */
#define OFFCPU_USER_MISSING (1u << 2)     /* bpf_get_stack(user) failed or gave 0 frames */
#define OFFCPU_PREEMPTED (1u << 3)        /* switched out by preemption (sched_switch's preempt) */
#define OFFCPU_WOKEN (1u << 4)            /* the wakeup was seen: runq_ns is the time after it */
#define OFFCPU_HAS_REGS (1u << 5)         /* regs[] are valid (stack_size may still be 0) */
#define OFFCPU_CFI_WALKED (1u << 6)       /* the user stack was walked whole from the CFI
					   * tables (cfi_stop END or MAX_FRAMES): no copy */

/*
 * One off-CPU interval of a thread of a target process, written to the ring
 * buffer by offcpu.bpf.c when the thread runs again. Only the first
 * kstack_len + ustack_len addresses of ips[] are addresses (kernel frames
 * first, each part leaf first): the stacks at the moment it left the CPU,
 * the kernel one without the scheduler's functions (offcpu.bpf.c).
 * The user one is walked from the CFI tables of the sampler's cfi_walk
 * maps (cfi_walk.bpf.h) where the process has them; a walk that reaches
 * the root (or the frame limit) is the whole user stack (OFFCPU_CFI_WALKED),
 * and the record carries no stack copy. Otherwise (cfi_stop says why) the
 * user stack is walked with frame pointers, and right after it come stack_size
 * bytes of the user stack from regs[7] (rsp): up to the frame of the
 * nearest caller that keeps a frame pointer (rbp + 16), at most
 * OFFCPU_STACK_BYTES. With regs[], they let user space unwind with CFI the
 * frames a frame-pointer walk skips: the caller of a libc function built
 * without frame pointers (the libc function leaves rbp alone, so the walk
 * goes from the libc leaf straight to the caller's caller).
 * The record is variable-length: its size is
 * offsetof(ips) + 8 * (kstack_len + ustack_len) + stack_size.
 */
struct offcpu_event {
	__u64 time_ns;     /* switch-out time, CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 duration_ns; /* switch-out to switch-in */
	__u64 runq_ns;     /* part of duration_ns spent runnable, waiting for a CPU: all of it
			    * for OFFCPU_STATE_RUNNABLE, the time after the wakeup with
			    * OFFCPU_WOKEN, else 0 */
	__u64 period_ns;   /* the slot's sampling period when the interval ended (0: every
			    * interval is sent). An interval shorter than it was sent with
			    * probability duration_ns / period_ns, and stands for period_ns
			    * of off-CPU time and period_ns / duration_ns intervals */
	__u32 pid;         /* tgid */
	__u32 tid;
	__u32 slot;        /* session slot of the target */
	__u32 state;       /* OFFCPU_STATE_* */
	__u32 task_state;  /* raw task_struct::__state at switch-out (TASK_* bits) */
	__u32 flags;       /* OFFCPU_* */
	__u16 kstack_len;  /* frames, 0..OFFCPU_MAX_FRAMES */
	__u16 ustack_len;  /* frames, 0..OFFCPU_MAX_FRAMES */
	__u32 stack_size;  /* user stack bytes after the ips: 0..OFFCPU_STACK_BYTES, multiple of 8 */
	__u32 cfi_stop;    /* why the table walk stopped (enum cfi_walk_stop; CFI_STOP_NO_PROCESS
			    * for a process without tables) */
	__u32 pad;
	char comm[16];     /* thread name at switch-out */
	__u64 regs[OFFCPU_NREGS]; /* user registers at switch-out, DWARF order (OFFCPU_HAS_REGS) */
	__u64 ips[2 * OFFCPU_MAX_FRAMES + OFFCPU_STACK_BYTES / 8]; /* ips, then the stack bytes */
};

/* Per-slot counters in the 'drops' per-CPU array, summed by user space. */
struct offcpu_counters {
	__u64 ringbuf_full;     /* intervals lost: ring buffer had no room */
	__u64 tid_map_full;     /* intervals lost: the per-thread map was full (or out of memory) */
	__u64 switch_in_missed; /* intervals lost: the thread ran again unseen (offcpu.bpf.c) */
};
