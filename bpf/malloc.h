/*
 * malloc.h - types shared by malloc.bpf.c (kernel side) and daemon/collect/malloc_probes.c:
 * allocation samples taken by uprobes on the allocator a target process
 * really uses (glibc, jemalloc, tcmalloc), sampled by bytes. Fixed-width
 * types only: the layout must be the same on both sides.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Session slots (the same numbering as PROFILE_MAX_SLOTS). */
#define MALLOC_MAX_SLOTS 64
/* Frames of the user stack walked with frame pointers at the call. */
#define MALLOC_MAX_FRAMES 127
/* x86-64 DWARF registers 0..16 (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip). */
#define MALLOC_NREGS 17
/* User stack bytes copied from rsp at the call, for CFI unwinding (a multiple of 8). */
#define MALLOC_STACK_BYTES 2048
/* Entries of the table of sampling intervals (a power of two). */
#define MALLOC_INTERVALS 1024

/* The probed functions (malloc_event.func). */
#define MALLOC_FUNC_MALLOC 0
#define MALLOC_FUNC_CALLOC 1
#define MALLOC_FUNC_REALLOC 2
#define MALLOC_FUNC_POSIX_MEMALIGN 3
#define MALLOC_FUNC_ALIGNED_ALLOC 4
#define MALLOC_FUNC_MEMALIGN 5
#define MALLOC_FUNC_MMAP 6
#define MALLOC_FUNC_FREE 7
#define MALLOC_FUNC_MUNMAP 8
/* USDT probes of a process that samples its own allocations (OpenTelemetry's
 * contract, opentelemetry-ebpf-profiler design-docs/00003): otel_memory:alloc
 * (ptr, size, weight) fires for sampled allocations only, otel_memory:free
 * (ptr) for the frees of those. */
#define MALLOC_FUNC_USDT_ALLOC 9
#define MALLOC_FUNC_USDT_FREE 10
/* Objects jemalloc's own profiler sampled, read from its heap profiles by
 * user space (collect/jeprof.c): no probe. */
#define MALLOC_FUNC_JEMALLOC_PROF 11
#define MALLOC_NR_FUNCS 12

/* malloc_event.kind */
#define MALLOC_EV_ALLOC 0  /* a sampled call, at its entry: size, stack */
#define MALLOC_EV_RETURN 1 /* the same call's return: addr (0: it failed) */
#define MALLOC_EV_FREE 2   /* a sampled block freed (free, realloc, munmap): addr */

/* malloc_event.flags */
#define MALLOC_USER_TRUNCATED (1u << 0) /* the frame-pointer walk filled MALLOC_MAX_FRAMES */
#define MALLOC_HAS_REGS (1u << 1)       /* regs[] are valid */
#define MALLOC_UNTRACKED (1u << 2)      /* RETURN: 'live' was full; this block's free will not
					 * be seen, so it must not count as live */

/*
 * A record of the ring buffer: RETURN and FREE records are this header
 * alone; an ALLOC record is a struct malloc_alloc_event.
 */
struct malloc_event {
	__u64 time_ns;    /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 addr;       /* RETURN: the block's address (0: the call failed); FREE: the block */
	__u64 size;       /* ALLOC: bytes requested (calloc: n * size; mmap: length) */
	__u64 weight;     /* ALLOC: the bytes this sample stands for, as the process's own
			   * sampler says (USDT); 0: profd sampled it, and weighs it */
	__u32 pid;        /* tgid */
	__u32 tid;
	__u32 slot;       /* session slot of the target */
	__u16 kind;       /* MALLOC_EV_* */
	__u16 func;       /* MALLOC_FUNC_* */
	__u32 flags;      /* MALLOC_* flags */
	__u16 ustack_len; /* ALLOC: frames in ips, 0..MALLOC_MAX_FRAMES */
	__u16 pad;
	__u32 stack_size; /* ALLOC: user stack bytes after the ips, 0..MALLOC_STACK_BYTES */
	__u32 pad2;
	char comm[16];
};

/*
 * An ALLOC record, variable-length: the first ustack_len addresses of ips[]
 * are the user stack at the call (leaf first: the allocator function, then
 * its caller...), walked with frame pointers; right after them come
 * stack_size bytes of user stack from regs[7] (rsp), with which user space
 * puts back with CFI the frames the walk skips. Its size is
 * offsetof(ips) + 8 * ustack_len + stack_size. The RETURN record of the
 * same call follows it on the same thread; a thread has one sampled call in
 * flight at most.
 */
struct malloc_alloc_event {
	struct malloc_event h;
	__u64 regs[MALLOC_NREGS]; /* user registers at the call (MALLOC_HAS_REGS) */
	__u64 ips[MALLOC_MAX_FRAMES + MALLOC_STACK_BYTES / 8];
};

/* Per-thread sampling state ('threads' map values). */
struct malloc_thread {
	__s64 until_sample; /* bytes this thread may still allocate before the next sample */
	__u64 arg;          /* posix_memalign's memptr, for the return of a sampled call */
	__u32 depth;        /* probed calls in progress (nesting) */
	__u32 sampled;      /* the outermost call in progress was sampled */
	__u32 slot;
	__u32 func;
	__u32 tgid;         /* whose thread: user space deletes a process's entries at detach */
	__u32 pad;
};

/* 'live' map keys: a sampled block not freed yet. */
struct malloc_live_key {
	__u32 tgid;
	__u32 pad;
	__u64 addr;
};

/*
 * Per-slot counters in the 'stats' per-CPU array, summed by user space:
 * every call of every probed function is counted here, sampled or not.
 */
struct malloc_stats {
	__u64 calls[MALLOC_NR_FUNCS]; /* calls, by MALLOC_FUNC_* */
	__u64 alloc_bytes;            /* bytes requested by allocating calls */
	__u64 sampled;                /* calls sampled (ALLOC records sent or lost) */
	__u64 ringbuf_full;           /* records lost: the ring buffer had no room */
	__u64 live_full;              /* sampled blocks not tracked: 'live' was full */
	__u64 thread_map_full;        /* calls not counted toward sampling: 'threads' was full */
	__u64 profile_frees;          /* user space only: sampled objects gone from jemalloc's heap
				       * profiles (their allocations: calls[MALLOC_FUNC_JEMALLOC_PROF]) */
};
