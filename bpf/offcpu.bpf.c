// SPDX-License-Identifier: MIT
/*
 * offcpu.bpf.c - off-CPU time: for each thread of a target process, how long
 * it stayed off the CPU each time it left it, why (sleeping, uninterruptible,
 * runnable) and the kernel and user stacks it left from. One tp_btf program
 * on sched_switch serves every session slot; a slot's threads are found
 * through the 'targets' map (tgid -> slot + 1), filled by user space.
 *
 * Design: at switch-out the record's header, user stack and user
 * registers (and, where the user stack was not walked whole from the CFI
 * tables, up to 1 KiB of it) are built in a per-CPU scratch and stored in
 * 'starts', keyed by tid. At switch-in the interval is kept or not
 * (keep_interval(): every interval as long as the slot's sampling period,
 * a shorter one with probability duration / period); a kept one gets its
 * duration and the kernel stack the thread saved when it switched out
 * (bpf_get_task_stack(): it has not run since) and goes to the ring buffer;
 * the entry is deleted either way. The threads of a busy multi-threaded
 * process leave the CPU thousands of times a second for 30-300 us each,
 * which hold ~2% of their off-CPU time: on a PyTorch training loop at
 * 999 Hz, 14,009 records in 20 s when every interval of 10 us or more was
 * sent, 3,324 sampled, for the same 37.7-38.1 s of off-CPU time. Each
 * record costs a kernel stack here and a stack resolved by profd.
 *
 * The user stack is walked at every switch-out of a target thread, though
 * only the kept intervals need it: about 1 in 5 on that PyTorch loop, where
 * the walks took 74 of the 153 ms this program ran in 20 s (BPF run-time
 * statistics; the walks timed in an instrumented build: ~22 frames, 2.7 us
 * each). Walking at the switch-in instead needs a program that runs in the
 * switched-in thread's context, since sched_switch runs in prev's address
 * space, where bpf_probe_read_user() cannot read next's stack: a kprobe or
 * fentry on finish_task_switch() (which kallsyms names
 * finish_task_switch.isra.0 on Linux 6.18). Neither works on the machine
 * these figures come from (a PVM guest: CONFIG_KPROBES is not set, and
 * fentry programs are refused with EPERM on each of the three functions
 * tried), so that path could not be tested and was not kept. There, the
 * kernel stack taken at switch-in cost more than the walk: 10-18 us a call
 * for ~6 frames (bpf_get_stack() of the current task at switch-out, tried
 * for comparison, 6 us for ~11 frames; the cause was not established).
 *
 * 'starts' is a hash map without preallocation (BPF_F_NO_PREALLOC,
 * allowed in tracing programs since Linux 6.1's BPF memory allocator): its
 * memory follows the number of target threads that are off the CPU right
 * now, not max_entries (set by user space, 16384 by default), which would
 * otherwise pin 54 MiB. An insert that fails (map full, no memory) is
 * counted per slot in 'drops' as tid_map_full.
 *
 * A switch-in can go unseen. On Linux 6.18 (a Firecracker VM), schedstat
 * (/proc/PID/task/TID/schedstat, switch-ins) counts a few per thousand that
 * never reached this program, with no recursion miss counted: 2-9 in the
 * ~1500 intervals of a 3 s test-offcpu run; in the cases traced, the CPU had
 * just run another process's task, mostly one outside the target's pid
 * namespace (cause not found). The thread's entry is
 * then found at its next switch-out, or at its exit (TASK_DEAD), counted
 * as switch_in_missed and replaced or deleted: that interval is lost,
 * visibly, and no entry leaks.
 *
 * Stacks are copied by content, never interned with bpf_get_stackid() (see
 * profile.bpf.c). At sched_switch the current task is still prev, so its
 * user stack (from task_pt_regs(): walked from the CFI tables of
 * cfi_walk.bpf.h, whose maps are the sampler's, else by frame pointers) is
 * the blocking one. The kernel stack comes from stack_trace_save_tsk(), as
 * /proc/PID/stack shows it: the scheduler's own functions (__schedule,
 * schedule, and the other __sched ones: do_nanosleep, schedule_timeout, the
 * mutex and rwsem slow paths) are left out, so it starts where the thread
 * waited (hrtimer_nanosleep, futex_do_wait, a driver's wait).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "user_regs.bpf.h"

#include "offcpu.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* include/linux/sched.h; the values are the same since Linux 4.14. */
#define TASK_INTERRUPTIBLE 0x0001
#define TASK_UNINTERRUPTIBLE 0x0002
#define TASK_DEAD 0x0080
#define EEXIST 17

/*
 * Per slot: the sampling period of off-CPU time, in nanoseconds (the
 * session's 1 / freq_hz, so that off-CPU time is sampled as often as CPU
 * time; 0: every interval is sent). Written by user space
 * (offcpu__add_target()) through the mmap-ed .bss before the slot's bit in
 * traced_slots is set; below OFFCPU_PERIOD_LIMIT_NS (offcpu.c checks).
 */
volatile __u64 period_ns[OFFCPU_MAX_SLOTS];

/*
 * Bit @slot: the session in that slot asked for off-CPU intervals. Set and
 * cleared by user space (offcpu__add_target(), offcpu__remove_target())
 * through the mmap-ed .bss. The targets map is the CPU sampler's, so it
 * also holds the processes of sessions that did not ask: their switches
 * cost one lookup here, not a kernel stack and a user-stack walk each
 * (~2 us per switch, all of it dropped by profd).
 */
volatile __u64 traced_slots = 0;

#include "stack.bpf.h"
#include "targets.bpf.h"
#include "events.bpf.h"

#define DROPS_SLOTS OFFCPU_MAX_SLOTS
#define DROPS_COUNTERS struct offcpu_counters
#include "drops.bpf.h"

/* The sampler's tables: user space gives this object the sampler's cfi_procs,
 * cfi_modules, cfi_rows and cfi_row_cache before load (offcpu.c). */
#include "cfi_walk.bpf.h"

/* The table walk's stack window (cfi_walk_user()): sched_switch runs with
 * interrupts off, and nothing else in this object walks. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cfi_stack_window);
} cfi_window SEC(".maps");

/* A thread that is off the CPU: its record so far, and when it was woken. */
struct offcpu_start {
	__u64 wake_ns; /* sched_wakeup time, 0 until then */
	__u32 target;  /* targets[tgid] at switch-out (slot + 1) */
	__u32 pad;
	struct offcpu_event e;
};

/* tid -> the thread's pending interval. max_entries set by user space before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} starts SEC(".maps");

/*
 * Where the record is built before it is copied into 'starts': too large
 * for the 512-byte BPF stack. sched_switch runs with interrupts off and the
 * run-queue lock held, and sched_wakeup does not use the scratch, so nothing
 * else touches a CPU's entry while it is in use.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} scratch SEC(".maps");

/*
 * Copy the user stack from rsp (e->regs, read by the caller) up to
 * the frame of the nearest caller with a frame pointer: rbp + 16 when rbp
 * points a little above rsp (the libc leaves that block, syscall wrappers
 * and lock slow paths, keep the caller's rbp), else OFFCPU_STACK_BYTES.
 * bpf_probe_read_user() fails whole if a byte faults: if the long read
 * fails, copy what is left of rsp's page. @off: where the bytes go in
 * e->ips, in 8-byte units (after the user frames), at most OFFCPU_MAX_FRAMES.
 */
static __always_inline void copy_user_stack(struct offcpu_event *e, long off)
{
	__u64 sp, bp, want;

	e->stack_size = 0;
	sp = e->regs[7];
	bp = e->regs[6];
	if (bp > sp && bp - sp <= OFFCPU_STACK_BYTES - 16)
		want = (bp + 16 - sp + 7) & ~7ULL;
	else
		want = OFFCPU_STACK_BYTES;
	/* Bounds the verifier can follow: the copy stays inside e->ips. */
	if (off < 0 || off > OFFCPU_MAX_FRAMES)
		return;
	e->stack_size = read_user_stack(&e->ips[off], sp, want, OFFCPU_STACK_BYTES);
}

/*
 * Walk the user stack from the CFI tables, from e->regs (read by the
 * caller), into e->ips (the kernel stack comes later, send_interval()): if
 * the walk reaches the root or the frame limit, the record gets its frames
 * (OFFCPU_CFI_WALKED) and no stack copy; returns 1. Else returns 0 and the
 * caller walks frame pointers and copies the stack; e->cfi_stop says why.
 */
static __always_inline int walk_user_stack(struct offcpu_event *e)
{
	__u32 stop = CFI_STOP_NR, n, zero = 0;
	struct cfi_stack_window *win;

	e->stack_size = 0;
	win = bpf_map_lookup_elem(&cfi_window, &zero);
	if (!win)
		return 0;
	n = cfi_walk_user(e->regs, e->ips, OFFCPU_MAX_FRAMES, win, &stop);
	e->cfi_stop = stop;
	if (!cfi_walk_whole(n, OFFCPU_MAX_FRAMES, stop))
		return 0;
	e->flags |= OFFCPU_CFI_WALKED;
	if (stop == CFI_STOP_MAX_FRAMES)
		e->flags |= OFFCPU_USER_TRUNCATED;
	e->ustack_len = n;
	return 1;
}

/* Linux 5.14 renamed task_struct::state to __state (and made it unsigned int). */
struct task_struct___pre_5_14 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline __u32 task_state(struct task_struct *t)
{
	struct task_struct___pre_5_14 *old = (void *)t;

	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return (__u32)old->state;
}

/* What 'drops' counts (count_drop()). */
#define DROP_RINGBUF COUNTER_INDEX(struct offcpu_counters, ringbuf_full)
#define DROP_TID_MAP COUNTER_INDEX(struct offcpu_counters, tid_map_full)
#define DROP_MISSED COUNTER_INDEX(struct offcpu_counters, switch_in_missed)

/*
 * An entry left in 'starts' for @tid means that its switch back in was
 * never seen (the thread ran without the program seeing it as next): that
 * interval is lost. Count it; the caller replaces or deletes the entry.
 */
static __always_inline void count_stale(__u32 tid)
{
	struct offcpu_start *old = bpf_map_lookup_elem(&starts, &tid);

	if (old)
		count_drop(old->e.slot, DROP_MISSED);
}

static __always_inline void switch_out(__u64 *ctx, bool preempt, struct task_struct *prev,
				       __u64 now)
{
	__u32 tgid = prev->tgid, tid = prev->pid, zero = 0;
	__u32 *target, state, slot;
	struct offcpu_start *s;
	struct offcpu_event *e;
	long ulen, r;
	bool full;

	state = task_state(prev);
	/* The last switch of an exiting thread (do_task_dead()): it never runs
	 * again, so no entry; and one left by a missed switch-in would stay in
	 * 'starts' for good. One hash lookup per thread exit, of any process. */
	if (state & TASK_DEAD) {
		count_stale(tid);
		bpf_map_delete_elem(&starts, &tid);
		return;
	}
	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target)
		return;
	slot = *target - 1;
	if (slot >= OFFCPU_MAX_SLOTS || !(traced_slots & (1ull << slot)))
		return;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return;
	s->wake_ns = 0;
	s->target = slot + 1;
	e = &s->e;
	e->time_ns = now;
	e->duration_ns = 0;
	e->runq_ns = 0;
	e->period_ns = 0;
	e->pid = tgid;
	e->tid = tid;
	e->slot = slot;
	e->task_state = state;
	e->flags = preempt ? OFFCPU_PREEMPTED : 0;
	/* A preempted task stays on the run queue whatever __state says (it
	 * may have been preempted between set_current_state() and schedule()):
	 * the tracepoint's own output reports it as running too. */
	if (preempt || state == 0)
		e->state = OFFCPU_STATE_RUNNABLE;
	else if (state & TASK_UNINTERRUPTIBLE)
		e->state = OFFCPU_STATE_IO;
	else if (state & TASK_INTERRUPTIBLE)
		e->state = OFFCPU_STATE_SLEEPING;
	else
		e->state = OFFCPU_STATE_OTHER;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));

	/* The kernel stack waits for the switch-in (send_interval()). */
	e->kstack_len = 0;
	/* The registers for the table walk, and for profd's CFI where it stops early. */
	read_user_regs(e->regs);
	e->flags |= OFFCPU_HAS_REGS;
	if (walk_user_stack(e) == 0) {
		ulen = get_stack(ctx, e->ips, OFFCPU_MAX_FRAMES, BPF_F_USER_STACK, &full);
		if (ulen == 0)
			e->flags |= OFFCPU_USER_MISSING;
		if (full)
			e->flags |= OFFCPU_USER_TRUNCATED;
		e->ustack_len = ulen;
		copy_user_stack(e, ulen);
	}

	/* -EEXIST: the last interval's switch-in was missed; count it and replace it. */
	r = bpf_map_update_elem(&starts, &tid, s, BPF_NOEXIST);
	if (r == -EEXIST) {
		count_stale(tid);
		r = bpf_map_update_elem(&starts, &tid, s, BPF_ANY);
	}
	if (r)
		count_drop(slot, DROP_TID_MAP);
}

/*
 * Send the interval of @s, whose thread @next runs again: its record as
 * struct offcpu_event lays it out, built in the per-CPU scratch (free
 * again: switch_out() has copied it into 'starts'), with the kernel stack
 * taken now. @next has not run since it switched out, so the stack it saved
 * then is the one it blocked in. Taking it here, not at switch-out, spares
 * the kernel unwind (about half of this program's cost per target switch)
 * for the intervals not sent (keep_interval()). Returns nonzero if the
 * record was not sent.
 */
static __always_inline long send_interval(struct offcpu_start *s, struct task_struct *next)
{
	struct offcpu_event *e = &s->e, *out;
	struct offcpu_start *o;
	long klen, rest, size;
	__u32 zero = 0;
	bool full;

	o = bpf_map_lookup_elem(&scratch, &zero);
	if (!o)
		return 1;
	out = &o->e;
	__builtin_memcpy(out, e, offsetof(struct offcpu_event, ips));
	klen = get_task_kernel_stack(next, out->ips, OFFCPU_MAX_FRAMES, &full);
	if (full)
		out->flags |= OFFCPU_KERNEL_TRUNCATED;
	/* Bounds the verifier can follow: both parts stay inside out->ips. */
	rest = (long)e->ustack_len * sizeof(__u64) + e->stack_size;
	if (klen < 0 || klen > OFFCPU_MAX_FRAMES || rest < 0 ||
	    rest > OFFCPU_MAX_FRAMES * sizeof(__u64) + OFFCPU_STACK_BYTES)
		return 1;
	out->kstack_len = klen;
	if (rest && bpf_probe_read_kernel(&out->ips[klen], rest, e->ips))
		return 1;
	size = offsetof(struct offcpu_event, ips) + klen * sizeof(__u64) + rest;
	if (size > sizeof(*out))
		return 1;
	return events_output(out, size);
}

/*
 * keep_interval() - whether an interval of @d ns that ends now is sent, for
 * a slot whose sampling period is @period ns: always when it lasted the
 * period or longer (or the period is 0), else with probability @d / @period,
 * so that about one record is sent per period of off-CPU time, however it
 * is cut into intervals. Each record carries the period; profd weights a
 * shorter interval by @period / @d (session.c), which makes the off-CPU time
 * and interval counts it stores unbiased estimates: Go's block profile
 * samples blocking events the same way (runtime.SetBlockProfileRate).
 */
static __always_inline bool keep_interval(__u64 d, __u64 period)
{
	if (d >= period)
		return true;
	/* A uniform 32-bit draw u: u * period < d * 2^32 with probability d / period
	 * (d < period < OFFCPU_PERIOD_LIMIT_NS = 2^32, so neither side overflows). */
	return (__u64)bpf_get_prandom_u32() * period < (d << 32);
}

static __always_inline void switch_in(struct task_struct *next, __u64 now)
{
	__u32 tid = next->pid, *target;
	struct offcpu_start *s;
	struct offcpu_event *e;
	__u32 slot;

	s = bpf_map_lookup_elem(&starts, &tid);
	if (!s)
		return;
	e = &s->e;
	slot = e->slot;
	target = bpf_map_lookup_elem(&targets, &e->pid);
	/* Send only if the process is still a target of the same slot: after
	 * a detach (or a detach and a new attach) the interval is not ours. */
	if (target && *target == s->target && slot < OFFCPU_MAX_SLOTS && now >= e->time_ns) {
		e->duration_ns = now - e->time_ns;
		e->period_ns = period_ns[slot];
		if (!keep_interval(e->duration_ns, e->period_ns))
			goto done;
		if (e->state == OFFCPU_STATE_RUNNABLE) {
			e->runq_ns = e->duration_ns;
		} else if (s->wake_ns >= e->time_ns && s->wake_ns <= now) {
			e->runq_ns = now - s->wake_ns;
			e->flags |= OFFCPU_WOKEN;
		}
		if (send_interval(s, next))
			count_drop(slot, DROP_RINGBUF);
	}
done:
	/* The value is not used after this: without preallocation it is freed
	 * for reuse at once. */
	bpf_map_delete_elem(&starts, &tid);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = bpf_ktime_get_ns();

	/* Both sides may be targets (two threads of one process): out, then in. */
	switch_out(ctx, preempt, prev, now);
	switch_in(next, now);
	return 0;
}

/*
 * The wakeup of a sleeping thread: from then on it waits for a CPU, and that
 * part of the interval is scheduling latency, not blocking. Only threads with
 * a pending interval are in 'starts', so for any other task this is one hash
 * lookup. sched_wakeup_new is not needed: a new thread has no interval yet.
 */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(offcpu_wakeup, struct task_struct *p)
{
	__u32 tid = p->pid;
	struct offcpu_start *s;

	s = bpf_map_lookup_elem(&starts, &tid);
	if (s && s->wake_ns == 0)
		s->wake_ns = bpf_ktime_get_ns();
	return 0;
}
