/*
 * uprobes.h - types shared by uprobes.bpf.c (kernel side) and daemon/collect/uprobes.c:
 * one record per completed call of a probed user function (CUDA runtime and
 * driver API, NVTX, generic --uprobe). Fixed-width types only.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames of the user call stack taken at entry. */
#define UPROBE_MAX_FRAMES 127
/* Session slots, numbered as PROFILE_MAX_SLOTS. */
#define UPROBE_MAX_SLOTS 64
/* Bytes of a string argument copied at entry (NVTX message). */
#define UPROBE_STR_BYTES 128
/* Integer arguments kept: rdi rsi rdx rcx r8 r9, then the first two stack slots. */
#define UPROBE_NARGS 8

/*
 * The BPF cookie of each attached probe (entry and return alike):
 * bits 0..31 the probe id (daemon/collect/uprobes.c's number for the probed symbol),
 * bits 32..47 UPROBE_F_* flags, bits 48..55 the session slot, bits 56..63 the
 * slot's generation at the attach (uprobes.bpf.c's slot_gen[]).
 */
#define UPROBE_F_STR0 (1u << 0)  /* copy the NUL-terminated string at arg 0 (char) */
#define UPROBE_F_WSTR0 (1u << 1) /* copy UPROBE_STR_BYTES at arg 0 (wchar_t string) */
#define UPROBE_F_OUT0 (1u << 2)  /* at return, read the 8 bytes arg 0 points to (cudaMalloc) */
#define UPROBE_F_NEST (1u << 3)  /* counts in, and reports, the thread's CUDA call depth */
#define UPROBE_F_STACK (1u << 4) /* take the user stack at entry */

#define UPROBE_COOKIE(id, flags, slot, gen)                                                        \
	((__u64)(__u32)(id) | ((__u64)((flags) & 0xffff) << 32) | ((__u64)((slot) & 0xff) << 48) | \
	 ((__u64)((gen) & 0xff) << 56))

/* uprobe_event.flags */
#define UPROBE_EV_TRUNCATED (1u << 0) /* the user stack filled all UPROBE_MAX_FRAMES */
#define UPROBE_EV_NO_STACK (1u << 1)  /* asked for, but bpf_get_stack() gave nothing */
#define UPROBE_EV_OUT_OK (1u << 2)    /* out holds *arg0 read at return */

/*
 * One call: entry and return times, integer arguments at entry, return
 * value, and the user stack at entry (ustack_len addresses, leaf first,
 * walked with frame pointers: ips[0] is the probed function's first
 * instruction; at that instruction the frame pointer is still the caller's,
 * so ips[1] is the caller's return address, and the direct caller is
 * ret_addr, which user space puts back). Variable-length:
 * offsetof(ips) + 8 * ustack_len.
 */
struct uprobe_event {
	__u64 entry_ns; /* CLOCK_MONOTONIC */
	__u64 exit_ns;
	__u64 args[UPROBE_NARGS];
	__u64 ret;      /* rax at return */
	__u64 out;      /* UPROBE_EV_OUT_OK: *(u64 *)args[0] at return */
	__u64 ret_addr; /* the return address at the stack pointer at entry, 0 if unreadable: the
			 * direct caller, which a frame-pointer walk from a function's first
			 * instruction skips */
	__u32 pid;
	__u32 tid;
	__u32 probe;    /* probe id of the cookie */
	__u32 slot;
	__u32 flags;    /* UPROBE_EV_* */
	__u16 depth;    /* UPROBE_F_NEST: nested CUDA calls active on the thread at entry */
	__u16 ustack_len;
	char str[UPROBE_STR_BYTES]; /* UPROBE_F_STR0/WSTR0: the string argument */
	__u64 ips[UPROBE_MAX_FRAMES];
};

/* Per-slot counters in the 'drops' per-CPU array, summed by user space. */
struct uprobe_counters {
	__u64 ringbuf_full;  /* calls lost: ring buffer had no room */
	__u64 entry_map_full; /* calls lost: no room to keep the entry state */
	__u64 recursive;     /* inner calls of a probe already active on the thread (counted, not timed) */
	__u64 entered;       /* calls entered (recursive ones too) while the slot's probes were on */
};
