// SPDX-License-Identifier: MIT
/*
 * profile.bpf.c - CPU sampling: a perf_event program attached to one
 * cpu-clock (or cycles) event per CPU per session. It keeps samples of the
 * session's target processes and sends each one, with its kernel and user
 * call stacks, to user space through a ring buffer.
 *
 * Stacks are copied by content with bpf_get_stack(), not interned with
 * bpf_get_stackid(): a stack map with BPF_F_REUSE_STACKID silently mixes up
 * stacks on hash collisions, and without it drops them (bpftrace moved away
 * from stack ids for this reason, bpftrace issue 2962).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "profile.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* tgid -> session slot + 1 of the session that profiles it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024); /* resized by user space before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROFILE_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct slot_counters);
} drops SEC(".maps");

/* Scratch record: too large for the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} scratch SEC(".maps");

#define STACK_BYTES (PROFILE_MAX_FRAMES * sizeof(__u64))

SEC("perf_event")
int profile_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, zero = 0, slot, *target;
	struct slot_counters *cnt;
	struct sample_event *e;
	long klen, ulen, size;

	if (tgid == 0)
		return 0;
	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target)
		return 0;
	slot = (__u32)bpf_get_attach_cookie(ctx);
	/* Each session has its own events; keep only its own targets. */
	if (*target != slot + 1)
		return 0;

	e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	e->time_ns = bpf_ktime_get_ns();
	e->pid = tgid;
	e->tid = (__u32)id;
	e->slot = slot;
	e->cpu = bpf_get_smp_processor_id();
	e->flags = 0;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));

	/* In user mode the kernel call chain is empty (get_perf_callchain()
	 * only walks the kernel stack when !user_mode(regs)), so the kernel
	 * stack's length also tells the mode, without reading pt_regs.cs,
	 * whose layout changed with FRED (Linux 6.9). */
	klen = bpf_get_stack(ctx, e->ips, STACK_BYTES, 0);
	if (klen < 0)
		klen = 0;
	klen /= sizeof(__u64);
	if (klen >= PROFILE_MAX_FRAMES) {
		klen = PROFILE_MAX_FRAMES;
		e->flags |= SAMPLE_KERNEL_TRUNCATED;
	}
	if (klen > 0)
		e->flags |= SAMPLE_KERNEL_MODE;
	/* The verifier needs the offset bounded to know the write stays in e->ips. */
	if (klen < 0 || klen > PROFILE_MAX_FRAMES)
		return 0;
	ulen = bpf_get_stack(ctx, &e->ips[klen], STACK_BYTES, BPF_F_USER_STACK);
	if (ulen <= 0) {
		ulen = 0;
		e->flags |= SAMPLE_USER_MISSING;
	}
	ulen /= sizeof(__u64);
	if (ulen >= PROFILE_MAX_FRAMES) {
		ulen = PROFILE_MAX_FRAMES;
		e->flags |= SAMPLE_USER_TRUNCATED;
	}
	e->kstack_len = klen;
	e->ustack_len = ulen;

	size = offsetof(struct sample_event, ips) + (klen + ulen) * sizeof(__u64);
	if (size < offsetof(struct sample_event, ips) || size > sizeof(*e))
		return 0;
	if (bpf_ringbuf_output(&events, e, size, 0)) {
		cnt = bpf_map_lookup_elem(&drops, &slot);
		if (cnt)
			cnt->ringbuf_full++;
	}
	return 0;
}
