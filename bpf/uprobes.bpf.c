// SPDX-License-Identifier: MIT
/*
 * uprobes.bpf.c - entry and return probes on user functions: the CUDA
 * runtime and driver API, NVTX ranges and generic probes. Two programs
 * serve every probed symbol; each attachment carries a BPF cookie (probe
 * id, UPROBE_F_* flags, session slot: uprobes.h) and is attached for one
 * process only (perf_event uprobe with a pid), so the kernel does the
 * target filtering and no targets map is needed.
 *
 * At entry the record (arguments, time, optional string and user stack) is
 * built in a per-CPU scratch and kept in 'calls', keyed by tid + probe id;
 * at return it gets the return value and exit time and goes to the ring
 * buffer. A probe entered again on the same thread before it returned
 * (recursion) only bumps a counter: the outer call is the one timed. CUDA
 * probes (UPROBE_F_NEST) count the thread's active CUDA calls in 'depth',
 * so user space can tell cudaMemcpy from the cuMemcpy it calls inside.
 * A call whose return is never seen (longjmp, thread killed) leaves its
 * entry behind until the same thread calls the same probe again.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "uprobes.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#include "events.bpf.h"

#define DROPS_SLOTS UPROBE_MAX_SLOTS
#define DROPS_COUNTERS struct uprobe_counters
#include "drops.bpf.h"

struct call_key {
	__u32 tid;
	__u32 probe;
};

struct call_state {
	__u32 nest; /* recursive entries not yet returned */
	__u32 pad;
	struct uprobe_event e;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct call_key);
	__type(value, struct call_state);
} calls SEC(".maps");

/* tid -> CUDA calls (UPROBE_F_NEST) active on the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} depth SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct call_state);
} scratch SEC(".maps");

/*
 * Each slot's generation, which uprobes__detach() advances: the kernel
 * takes ~75 ms to remove each link, seconds for a CUDA session's, and until
 * then the probes of the detached attach still fire. Their entry records
 * nothing once their cookie's generation is not the slot's; calls already
 * entered still complete. Written by user space through the mmap of .bss.
 */
volatile __u8 slot_gen[UPROBE_MAX_SLOTS];

/* What 'drops' counts (count_drop()). */
#define DROP_RINGBUF COUNTER_INDEX(struct uprobe_counters, ringbuf_full)
#define DROP_MAP COUNTER_INDEX(struct uprobe_counters, entry_map_full)
#define DROP_RECURSIVE COUNTER_INDEX(struct uprobe_counters, recursive)
#define ENTERED COUNTER_INDEX(struct uprobe_counters, entered)

SEC("uprobe")
int uprobe_entry(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), id = bpf_get_current_pid_tgid();
	__u32 flags = (cookie >> 32) & 0xffff, slot = (cookie >> 48) & 0xff, zero = 0, one = 1;
	struct call_key key = {.tid = (__u32)id, .probe = (__u32)cookie};
	struct call_state *cs;
	struct uprobe_event *e;
	__u64 sp = PT_REGS_SP(ctx);
	long n;

	if (slot >= UPROBE_MAX_SLOTS || slot_gen[slot] != (__u8)(cookie >> 56))
		return 0;
	count_drop(slot, ENTERED);
	cs = bpf_map_lookup_elem(&calls, &key);
	if (cs) {
		cs->nest++;
		count_drop(slot, DROP_RECURSIVE);
		return 0;
	}
	cs = bpf_map_lookup_elem(&scratch, &zero);
	if (!cs)
		return 0;
	cs->nest = 0;
	e = &cs->e;
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->probe = (__u32)cookie;
	e->slot = slot;
	e->flags = 0;
	e->depth = 0;
	e->ret = 0;
	e->out = 0;
	e->exit_ns = 0;
	e->args[0] = PT_REGS_PARM1(ctx);
	e->args[1] = PT_REGS_PARM2(ctx);
	e->args[2] = PT_REGS_PARM3(ctx);
	e->args[3] = PT_REGS_PARM4(ctx);
	e->args[4] = PT_REGS_PARM5(ctx);
	e->args[5] = ctx->r9; /* PT_REGS_PARM6 is missing in older libbpf; x86-64 only */
	/* At entry the return address is at sp: arguments 7 and 8 follow it. */
	if (bpf_probe_read_user(&e->args[6], 2 * sizeof(__u64), (void *)(sp + 8)))
		e->args[6] = e->args[7] = 0;
	if (bpf_probe_read_user(&e->ret_addr, sizeof(e->ret_addr), (void *)sp))
		e->ret_addr = 0;
	e->str[0] = '\0';
	if (flags & UPROBE_F_STR0) {
		if (bpf_probe_read_user_str(e->str, sizeof(e->str), (void *)e->args[0]) < 0)
			e->str[0] = '\0';
	} else if (flags & UPROBE_F_WSTR0) {
		if (bpf_probe_read_user(e->str, sizeof(e->str), (void *)e->args[0]))
			e->str[0] = '\0';
	}
	if (flags & UPROBE_F_NEST) {
		__u32 *d = bpf_map_lookup_elem(&depth, &key.tid);

		if (d) {
			/* Only the thread itself touches its entry: no atomics needed. */
			e->depth = *d;
			*d += 1;
		} else {
			bpf_map_update_elem(&depth, &key.tid, &one, BPF_ANY);
		}
	}
	e->ustack_len = 0;
	if (flags & UPROBE_F_STACK) {
		n = bpf_get_stack(ctx, e->ips, sizeof(e->ips), BPF_F_USER_STACK);
		if (n <= 0) {
			e->flags |= UPROBE_EV_NO_STACK;
			n = 0;
		}
		n /= sizeof(__u64);
		if (n >= UPROBE_MAX_FRAMES) {
			n = UPROBE_MAX_FRAMES;
			e->flags |= UPROBE_EV_TRUNCATED;
		}
		e->ustack_len = n;
	}
	/* Last, so that the timed interval leaves out the work above. */
	e->entry_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&calls, &key, cs, BPF_NOEXIST))
		count_drop(slot, DROP_MAP);
	return 0;
}

SEC("uretprobe")
int uprobe_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns(), cookie = bpf_get_attach_cookie(ctx);
	__u64 id = bpf_get_current_pid_tgid();
	__u32 flags = (cookie >> 32) & 0xffff, slot = (cookie >> 48) & 0xff, *d;
	struct call_key key = {.tid = (__u32)id, .probe = (__u32)cookie};
	struct call_state *cs;
	struct uprobe_event *e;
	long size;
	__u32 n;

	cs = bpf_map_lookup_elem(&calls, &key);
	if (!cs)
		return 0;
	if (cs->nest) {
		cs->nest--;
		return 0;
	}
	if (flags & UPROBE_F_NEST) {
		d = bpf_map_lookup_elem(&depth, &key.tid);
		if (d && *d > 1)
			*d -= 1;
		else if (d)
			bpf_map_delete_elem(&depth, &key.tid);
	}
	e = &cs->e;
	e->exit_ns = now;
	e->ret = PT_REGS_RC(ctx);
	if ((flags & UPROBE_F_OUT0) && e->args[0] &&
	    bpf_probe_read_user(&e->out, sizeof(e->out), (void *)e->args[0]) == 0)
		e->flags |= UPROBE_EV_OUT_OK;
	/* Bounded where the verifier can see it (the compiler may reload the field). */
	n = e->ustack_len;
	if (n > UPROBE_MAX_FRAMES)
		n = UPROBE_MAX_FRAMES;
	size = offsetof(struct uprobe_event, ips) + n * sizeof(__u64);
	if (events_output(e, size))
		count_drop(slot, DROP_RINGBUF);
	bpf_map_delete_elem(&calls, &key);
	return 0;
}
