// SPDX-License-Identifier: MIT
/*
 * malloc.bpf.c - allocation sampling by bytes, with uprobes on the entry
 * and return of the allocator's functions (malloc, calloc, realloc,
 * posix_memalign, aligned_alloc, memalign, mmap) and the entry of free and
 * munmap, attached by user space to the allocator libraries a target
 * process has mapped.
 *
 * Sampling, as tcmalloc's heap profiler does it: each thread counts down
 * the bytes it allocates; the call that takes the count to zero or below is
 * sampled, and the count restarts from a random interval drawn from an
 * exponential distribution of mean sample_bytes ('intervals', filled by user
 * space). A call of s bytes is therefore sampled with probability
 * 1 - exp(-s / mean), whatever happened before it, and user space weighs
 * each sample by s / (1 - exp(-s / mean)) bytes: an unbiased estimate of
 * the bytes allocated, and with the frees matched, of the live bytes.
 *
 * A sampled call sends an ALLOC record at its entry (size, user stack,
 * registers and a slice of stack for CFI unwinding) and a RETURN record at
 * its return (the block's address), and the block goes into 'live'
 * (tgid, address). free() and munmap() delete their argument from 'live':
 * a block found there was sampled, and a FREE record is sent. Unsampled
 * calls cost the uprobe traps, a hash lookup and a few adds; every call is
 * counted in 'stats'.
 *
 * Nesting: glibc's realloc(NULL, n) calls malloc, malloc calls mmap for
 * large blocks. Only the outermost probed call of a thread counts
 * ('threads'.depth), so a block is sampled and counted once.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "user_regs.bpf.h"
#include "malloc.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define MAP_ANONYMOUS 0x20 /* include/uapi/asm-generic/mman-common.h */

/*
 * Quantiles of the exponential distribution of mean 1, in 1/65536 units:
 * -ln((i + 0.5) / MALLOC_INTERVALS) * 65536 (user space fills it before
 * load). An interval is one of them, at random, times the slot's mean.
 */
const volatile __u32 intervals_q16[MALLOC_INTERVALS] = {};

#include "stack.bpf.h"
#include "targets.bpf.h"
#include "events.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MALLOC_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct malloc_stats);
} stats SEC(".maps");

/* tid -> state; deleted at the thread's exit. max_entries set by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct malloc_thread);
} threads SEC(".maps");

/* Sampled blocks not freed yet -> their slot. max_entries set by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct malloc_live_key);
	__type(value, __u32);
} live SEC(".maps");

/* Where an ALLOC record is built: too large for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct malloc_alloc_event);
} scratch SEC(".maps");

/* Slot -> mean bytes between samples, set by user space at attach. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MALLOC_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} sample_bytes SEC(".maps");

static __always_inline struct malloc_stats *slot_stats(__u32 slot)
{
	return bpf_map_lookup_elem(&stats, &slot);
}

static __always_inline __s64 next_interval(__u32 slot)
{
	__u32 i = bpf_get_prandom_u32() & (MALLOC_INTERVALS - 1);
	__u64 *mean = bpf_map_lookup_elem(&sample_bytes, &slot);

	if (!mean || *mean == 0)
		return 0;
	/* mean <= 2^40 (user space checks) and the quantile < 2^20: no overflow */
	return (__s64)((intervals_q16[i] * *mean) >> 16);
}

/*
 * Slots whose probes are being removed (malloc_probes__detach(); cleared by
 * the slot's next attach, which waits until they are gone). The kernel
 * takes ~75 ms a link, and until then the probes fire: after a
 * --malloc-max-rate stop, whose session goes on, they would record
 * allocations whose frees nothing watches any more. Written by user space
 * through the mmap of .bss.
 */
volatile __u8 slot_off[MALLOC_MAX_SLOTS];

/* The session slot of the current process, or -1 if it is not a target (or its probes are off). */
static __always_inline int current_slot(__u32 *ret_tgid)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, *target, slot;

	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target || *target == 0 || *target > MALLOC_MAX_SLOTS)
		return -1;
	/* The mask (MALLOC_MAX_SLOTS is a power of two) is a bound the verifier can see. */
	slot = (*target - 1) & (MALLOC_MAX_SLOTS - 1);
	if (slot_off[slot])
		return -1;
	*ret_tgid = tgid;
	return (int)slot;
}

/*
 * Copy the registers and up to MALLOC_STACK_BYTES of stack from rsp, or
 * what is left of rsp's page if the long read faults. @off: where the bytes
 * go in e->ips, in 8-byte units.
 */
static __always_inline void copy_user_regs_stack(struct malloc_alloc_event *e, long off)
{
	e->h.stack_size = 0;
	read_user_regs(e->regs);
	e->h.flags |= MALLOC_HAS_REGS;
	if (off < 0 || off > MALLOC_MAX_FRAMES)
		return;
	e->h.stack_size =
	    read_user_stack(&e->ips[off], e->regs[7], MALLOC_STACK_BYTES, MALLOC_STACK_BYTES);
}

/*
 * Send the ALLOC record of a sampled call (@weight: 0, or the bytes it stands
 * for by the process's own sampler). Returns 0, or -1 if it was lost.
 */
static __always_inline int send_alloc(struct pt_regs *ctx, __u32 tgid, __u32 tid, __u32 slot,
				      __u32 func, __u64 size, __u64 weight)
{
	struct malloc_alloc_event *a;
	struct malloc_event *e;
	__u32 zero = 0;
	long ulen, bytes;
	bool full;

	a = bpf_map_lookup_elem(&scratch, &zero);
	if (!a)
		return -1;
	e = &a->h;
	e->time_ns = bpf_ktime_get_ns();
	e->addr = 0;
	e->size = size;
	e->weight = weight;
	e->pid = tgid;
	e->tid = tid;
	e->slot = slot;
	e->kind = MALLOC_EV_ALLOC;
	e->func = func;
	e->flags = 0;
	e->pad = 0;
	e->pad2 = 0;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
	ulen = get_stack(ctx, a->ips, MALLOC_MAX_FRAMES, BPF_F_USER_STACK, &full);
	if (full)
		e->flags |= MALLOC_USER_TRUNCATED;
	e->ustack_len = ulen;
	copy_user_regs_stack(a, ulen);
	bytes = offsetof(struct malloc_alloc_event, ips) + ulen * sizeof(__u64) + e->stack_size;
	if (bytes < 0 || bytes > sizeof(*a))
		return -1;
	return events_output(a, bytes) == 0 ? 0 : -1;
}

/* The entry of an allocating call of @size bytes. @arg: kept for its return. */
static __always_inline int alloc_entry(struct pt_regs *ctx, __u32 func, __u64 size, __u64 arg)
{
	struct malloc_thread *st, init = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid;
	struct malloc_stats *cnt;
	int slot = current_slot(&tgid);

	if (slot < 0)
		return 0;
	cnt = slot_stats(slot);
	if (!cnt)
		return 0;
	st = bpf_map_lookup_elem(&threads, &tid);
	if (!st) {
		init.until_sample = next_interval(slot);
		init.tgid = tgid;
		if (bpf_map_update_elem(&threads, &tid, &init, BPF_NOEXIST) != 0) {
			cnt->thread_map_full++;
			return 0;
		}
		st = bpf_map_lookup_elem(&threads, &tid);
		if (!st)
			return 0;
	}
	if (st->depth++ > 0)
		return 0;
	if (func < MALLOC_NR_FUNCS)
		cnt->calls[func]++;
	cnt->alloc_bytes += size;
	st->sampled = 0;
	st->until_sample -= (__s64)size;
	if (st->until_sample > 0 || size == 0)
		return 0;
	st->until_sample = next_interval(slot);
	cnt->sampled++;
	if (send_alloc(ctx, tgid, tid, slot, func, size, 0) < 0) {
		cnt->ringbuf_full++;
		return 0;
	}
	st->sampled = 1;
	st->slot = slot;
	st->func = func;
	st->arg = arg;
	return 0;
}

/*
 * Send a RETURN or FREE record (@kind) of block @addr of a call of @func in
 * @slot; one the ring buffer has no room for is counted in @cnt (if set).
 */
static __always_inline void send_block_event(struct malloc_stats *cnt, __u16 kind, __u32 tgid,
					     __u32 tid, __u32 slot, __u32 func, __u64 addr,
					     __u32 flags)
{
	struct malloc_event e = {};

	e.time_ns = bpf_ktime_get_ns();
	e.addr = addr;
	e.pid = tgid;
	e.tid = tid;
	e.slot = slot;
	e.kind = kind;
	e.func = func;
	e.flags = flags;
	if (events_output(&e, sizeof(e)) != 0 && cnt)
		cnt->ringbuf_full++;
}

/*
 * The RETURN record of a sampled call of @func in @slot that gave block @addr
 * (0: it failed), which 'live' then holds until its free.
 */
static __always_inline int send_return(__u32 tgid, __u32 tid, __u32 slot, __u32 func, __u64 addr)
{
	struct malloc_stats *cnt = slot_stats(slot);
	struct malloc_live_key key = {};
	__u32 flags = 0;

	if (addr) {
		key.tgid = tgid;
		key.addr = addr;
		if (bpf_map_update_elem(&live, &key, &slot, BPF_ANY) != 0) {
			flags |= MALLOC_UNTRACKED;
			if (cnt)
				cnt->live_full++;
		}
	}
	send_block_event(cnt, MALLOC_EV_RETURN, tgid, tid, slot, func, addr, flags);
	return 0;
}

/* The return of an allocating call: @addr is the block (0 if the call failed). */
static __always_inline int alloc_return(__u64 addr, bool memptr)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid, tgid = pid_tgid >> 32;
	struct malloc_thread *st = bpf_map_lookup_elem(&threads, &tid);

	if (!st || st->depth == 0)
		return 0;
	if (--st->depth > 0 || !st->sampled)
		return 0;
	st->sampled = 0;
	/* posix_memalign() returns 0 and stores the block at *memptr. */
	if (memptr) {
		if (addr != 0 || bpf_probe_read_user(&addr, sizeof(addr), (void *)st->arg) != 0)
			addr = 0;
	}
	return send_return(tgid, tid, st->slot, st->func, addr);
}

/* free(@addr), munmap(@addr, ...): a sampled block leaves 'live' with a FREE record. */
static __always_inline int free_entry(__u32 func, __u64 addr)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), tgid;
	struct malloc_live_key key = {};
	struct malloc_stats *cnt;
	int slot = current_slot(&tgid);

	if (slot < 0)
		return 0;
	cnt = slot_stats(slot);
	if (cnt && func < MALLOC_NR_FUNCS)
		cnt->calls[func]++;
	if (!addr)
		return 0;
	key.tgid = tgid;
	key.addr = addr;
	if (bpf_map_delete_elem(&live, &key) != 0)
		return 0;
	send_block_event(cnt, MALLOC_EV_FREE, tgid, tid, slot, func, addr, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(malloc_entry, size_t size)
{
	return alloc_entry(ctx, MALLOC_FUNC_MALLOC, size, 0);
}

SEC("uprobe")
int BPF_KPROBE(calloc_entry, size_t n, size_t size)
{
	__u64 bytes = 0;

	/* n * size without a 128-bit multiply, which BPF lacks: exact when both
	 * fit in 32 bits or one is 1; otherwise (blocks of 4 GiB or more) 0. */
	if ((((__u64)n | size) >> 32) == 0)
		bytes = (__u64)n * size;
	else if (n == 1)
		bytes = size;
	else if (size == 1)
		bytes = n;
	return alloc_entry(ctx, MALLOC_FUNC_CALLOC, bytes, 0);
}

/* realloc(p, n) frees p and allocates n: the block, if sampled, ends here. */
SEC("uprobe")
int BPF_KPROBE(realloc_entry, void *ptr, size_t size)
{
	free_entry(MALLOC_FUNC_FREE, (__u64)ptr);
	return alloc_entry(ctx, MALLOC_FUNC_REALLOC, size, 0);
}

SEC("uprobe")
int BPF_KPROBE(posix_memalign_entry, void **memptr, size_t align, size_t size)
{
	return alloc_entry(ctx, MALLOC_FUNC_POSIX_MEMALIGN, size, (__u64)memptr);
}

SEC("uprobe")
int BPF_KPROBE(aligned_alloc_entry, size_t align, size_t size)
{
	return alloc_entry(ctx, MALLOC_FUNC_ALIGNED_ALLOC, size, 0);
}

SEC("uprobe")
int BPF_KPROBE(memalign_entry, size_t align, size_t size)
{
	return alloc_entry(ctx, MALLOC_FUNC_MEMALIGN, size, 0);
}

/* Anonymous mappings only: file mappings are not heap. */
SEC("uprobe")
int BPF_KPROBE(mmap_entry, void *addr, size_t len, int prot, int flags)
{
	if (!(flags & MAP_ANONYMOUS))
		len = 0;
	return alloc_entry(ctx, MALLOC_FUNC_MMAP, len, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(ptr_return, void *ret)
{
	return alloc_return((__u64)ret, false);
}

SEC("uretprobe")
int BPF_KRETPROBE(posix_memalign_return, int ret)
{
	return alloc_return(ret == 0 ? 0 : 1, true);
}

SEC("uretprobe")
int BPF_KRETPROBE(mmap_return, void *ret)
{
	/* MAP_FAILED is (void *)-1 */
	return alloc_return((long)ret == -1 ? 0 : (__u64)ret, false);
}

SEC("uprobe")
int BPF_KPROBE(free_probe, void *ptr)
{
	return free_entry(MALLOC_FUNC_FREE, (__u64)ptr);
}

SEC("uprobe")
int BPF_KPROBE(munmap_entry, void *addr, size_t len)
{
	return free_entry(MALLOC_FUNC_MUNMAP, (__u64)addr);
}

/*
 * otel_memory:alloc(ptr, size, weight): an allocation the process sampled
 * itself. Its ALLOC and RETURN records go out at once, weighed as the
 * process says; nothing is counted or sampled here per allocation, because
 * the probe fires only for sampled ones.
 */
SEC("usdt")
int malloc_usdt_alloc(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), tgid;
	int slot = current_slot(&tgid);
	struct malloc_stats *cnt;
	long ptr = 0, size = 0, weight = 0;

	if (slot < 0)
		return 0;
	cnt = slot_stats(slot);
	if (!cnt)
		return 0;
	if (bpf_usdt_arg(ctx, 0, &ptr) || bpf_usdt_arg(ctx, 1, &size) ||
	    bpf_usdt_arg(ctx, 2, &weight))
		return 0;
	cnt->calls[MALLOC_FUNC_USDT_ALLOC]++;
	cnt->alloc_bytes += (__u64)weight;
	cnt->sampled++;
	if (send_alloc(ctx, tgid, tid, slot, MALLOC_FUNC_USDT_ALLOC, (__u64)size,
		       weight > 0 ? (__u64)weight : 1) < 0) {
		cnt->ringbuf_full++;
		return 0;
	}
	return send_return(tgid, tid, (__u32)slot, MALLOC_FUNC_USDT_ALLOC, (__u64)ptr);
}

/* otel_memory:free(ptr): a block the process sampled is freed. */
SEC("usdt")
int malloc_usdt_free(struct pt_regs *ctx)
{
	long ptr = 0;

	if (bpf_usdt_arg(ctx, 0, &ptr))
		return 0;
	return free_entry(MALLOC_FUNC_USDT_FREE, (__u64)ptr);
}

/* A thread's sampling state goes with it (any process: one hash delete per thread exit). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(malloc_thread_exit, struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	bpf_map_delete_elem(&threads, &tid);
	return 0;
}
