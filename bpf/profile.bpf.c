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
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>

#include "user_regs.bpf.h"

#include "profile.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#include "stack.bpf.h"
#include "targets.bpf.h"
#include "events.bpf.h"

#define DROPS_SLOTS PROFILE_MAX_SLOTS
#define DROPS_COUNTERS struct slot_counters
#include "drops.bpf.h"

#include "cfi_walk.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PROFILE_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct slot_config);
} slot_configs SEC(".maps");

/*
 * Scratch record, one per CPU: too large for the 512-byte BPF stack and for
 * a per-CPU map value (32 KiB limit), so an array indexed by CPU (a
 * perf_event program runs with interrupts off: nothing else uses the slot).
 * max_entries is set to the number of possible CPUs before load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} scratch SEC(".maps");

/*
 * Copy the user registers (DWARF order) and the user stack from the page
 * holding rsp, enough pages for @max bytes above rsp, stopping at the first
 * page that is not readable (read_user_pages()).
 */
static __always_inline void copy_user_stack(struct sample_event *e, __u32 max)
{
	read_user_regs(e->regs);
	e->flags |= SAMPLE_HAS_REGS;
	read_user_pages(e->stack, PROFILE_MAX_STACK_BYTES, e->regs[7], max, &e->stack_offset,
			&e->stack_size, NULL);
}

static __always_inline __u64 read_user_u64(__u64 addr)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
	return v;
}

/*
 * The PyThreadState of the sampled thread @tid: the GIL holder's if it is
 * this thread (the usual case for a thread on the CPU running Python), else
 * found in the main interpreter's list of thread states. 0 if none: the
 * thread is not a Python thread, or the list is longer than the scan.
 */
static __always_inline __u64 python_thread_state(const struct python_config *pc, __u32 tid)
{
	__u64 ts, interp;

	if (pc->runtime_tstate_current != PY_NO_OFFSET) {
		ts = read_user_u64(pc->runtime_addr + pc->runtime_tstate_current);
		if (ts && read_user_u64(ts + pc->tstate_native_thread_id) == tid)
			return ts;
	}
	interp = read_user_u64(pc->runtime_addr + pc->runtime_interp_main);
	if (!interp)
		return 0;
	ts = read_user_u64(interp + pc->interp_threads_head);
	for (int i = 0; i < PROFILE_PY_THREAD_SCAN && ts; i++) {
		if (read_user_u64(ts + pc->tstate_native_thread_id) == tid)
			return ts;
		ts = read_user_u64(ts + pc->tstate_next);
	}
	return 0;
}

/*
 * Walk the sampled thread's Python frames (thread state -> [cframe ->]
 * current_frame -> previous ...), at the same instant as the native stack,
 * so user space can put each Python frame in place of the
 * _PyEval_EvalFrameDefault call running it. Each call's first frame is
 * marked PY_FRAME_ENTRY: 3.11 flags it (is_entry); 3.12+ puts an entry frame
 * owned by the C stack just behind it, which is not a Python frame and is
 * skipped. Only pointers and each code object's tag (code_tag()) are
 * copied here; user space reads the names, files and line tables of a code
 * object the first time it sees its tag at that address. A
 * separate function: the verifier checks it once, not inline in every path
 * of the caller.
 */
struct py_walk {
	struct sample_event *e;
	const struct python_config *pc;
	__u64 frame; /* the next frame to read; 0 at the end of the chain */
	__u32 n;     /* frames in e->py */
};

/*
 * code_tag() - py_code_tag() of the code object at @code: its identity
 * fields read with one bpf_probe_read_user() of PY_CODE_ID_BYTES from
 * code_filename (they lie before co_code_adaptive, so inside the object).
 * 0 if the read fails.
 */
static __always_inline __u32 code_tag(const struct python_config *pc, __u64 code)
{
	__u8 id[PY_CODE_ID_BYTES];

	if (bpf_probe_read_user(id, sizeof(id), (const void *)(code + pc->code_filename)))
		return 0;
	return py_code_tag_of(id, pc);
}

/* The 8-byte field @at bytes into a frame's head @h (PY_FRAME_HEAD_BYTES); 0 beyond it. */
static __always_inline __u64 py_frame_u64(const __u8 *h, __u32 at)
{
	__u64 v = 0;

	if (at <= PY_FRAME_HEAD_BYTES - sizeof(v))
		__builtin_memcpy(&v, h + at, sizeof(v));
	return v;
}

/* The byte @at bytes into a frame's head @h; 0 beyond it (PY_NO_OFFSET too). */
static __always_inline __u8 py_frame_u8(const __u8 *h, __u32 at)
{
	return at < PY_FRAME_HEAD_BYTES ? h[at] : 0;
}

/*
 * One step of the frame chain, for bpf_loop(): 1 stops the loop. The
 * fields of the frame come from one read of its head; a read that faults
 * leaves the head zeroed, which ends the chain after a frame without code,
 * as each field read alone used to.
 */
static long py_walk_step(__u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	const struct python_config *pc = w->pc;
	struct sample_event *e = w->e;
	__u8 head[PY_FRAME_HEAD_BYTES];
	__u32 n = w->n;
	__u64 code, instr;
	__u8 entry;

	if (!w->frame)
		return 1;
	bpf_probe_read_user(head, sizeof(head), (const void *)w->frame);
	if (pc->frame_owner != PY_NO_OFFSET &&
	    py_frame_u8(head, pc->frame_owner) == pc->owner_cstack) {
		if (n > 0 && n <= PROFILE_MAX_PY_FRAMES)
			e->py[n - 1].code |= PY_FRAME_ENTRY;
		w->frame = py_frame_u64(head, pc->frame_previous);
		return 0;
	}
	if (n >= PROFILE_MAX_PY_FRAMES)
		return 1;
	entry = py_frame_u8(head, pc->frame_is_entry);
	code = py_frame_u64(head, pc->frame_code);
	instr = py_frame_u64(head, pc->frame_prev_instr);
	e->py[n].code = code | (entry ? PY_FRAME_ENTRY : 0);
	e->py[n].instr_off =
		instr >= code && instr - code < PY_NO_INSTR ? (__u32)(instr - code) : PY_NO_INSTR;
	e->py[n].tag = code ? code_tag(pc, code) : 0;
	w->n = n + 1;
	w->frame = py_frame_u64(head, pc->frame_previous);
	return 0;
}

/* The walk itself: bpf_loop() (Linux 5.17) verifies the step once, not once per frame. */
static __noinline void walk_python(struct sample_event *e, const struct python_config *pc)
{
	struct py_walk w = { .e = e, .pc = pc };
	__u64 ts;

	e->py_len = 0;
	ts = python_thread_state(pc, e->tid);
	if (!ts) {
		e->flags |= SAMPLE_PY_NO_THREAD;
		return;
	}
	if (pc->tstate_cframe != PY_NO_OFFSET) {
		w.frame = read_user_u64(ts + pc->tstate_cframe);
		w.frame = w.frame ? read_user_u64(w.frame + pc->current_frame) : 0;
	} else {
		w.frame = read_user_u64(ts + pc->current_frame);
	}
	/* Entry frames do not take a slot: up to one per Python frame. */
	bpf_loop(2 * PROFILE_MAX_PY_FRAMES, py_walk_step, &w, 0);
	if (w.frame)
		e->flags |= SAMPLE_PY_TRUNCATED;
	e->py_len = w.n;
}

/* e->stack serves as the table walk's window first */
_Static_assert(sizeof(struct cfi_stack_window) <= PROFILE_MAX_STACK_BYTES, "window too large");

/*
 * With cfi_walk: walk the user stack from the CFI tables into e->ips[@klen]
 * (cfi_walk.bpf.h). Returns the frames if the walk reached the root or the
 * frame limit (the record then carries no registers and no stack copy),
 * else -1: the caller takes what the slot's other settings ask for, and
 * user space unwinds that copy (the fallback, counted by e->cfi_stop).
 */
static __always_inline long walk_user_stack(struct sample_event *e, long klen)
{
	__u32 stop = CFI_STOP_NR, n;

	if (klen < 0 || klen > PROFILE_MAX_FRAMES)
		return -1;
	read_user_regs(e->regs);
	/* e->stack is the window: the stack copy, if any, comes after the walk */
	n = cfi_walk_user(e->regs, &e->ips[klen], PROFILE_MAX_FRAMES,
			  (struct cfi_stack_window *)e->stack, &stop);
	e->cfi_stop = stop;
	e->cfi_frames = n;
	/* Kept apart: with auto, the frame-pointer walk overwrites ips[] next. */
	if (n > 0) {
		__u64 *pcs = &e->ips[klen];
		__u32 last = n - 1;

		/* the bound on last, as checked, is what the verifier must see */
		asm volatile("" : "+r"(last));
		if (last < PROFILE_MAX_FRAMES)
			e->cfi_stop_pc = pcs[last];
	}
	e->flags |= SAMPLE_CFI_TRIED;
	if (!cfi_walk_whole(n, PROFILE_MAX_FRAMES, stop))
		return -1;
	e->flags |= SAMPLE_CFI_WALKED;
	if (stop == CFI_STOP_MAX_FRAMES)
		e->flags |= SAMPLE_USER_TRUNCATED;
	return n;
}

/*
 * The user part of @e's stack, as the slot's settings ask: CFI-table walk,
 * frame-pointer walk, registers and stack copy for CFI, Python frames.
 * Returns the number of user frames put at e->ips[@klen].
 */
static __always_inline long take_user_stack(void *ctx, struct sample_event *e,
					    const struct slot_config *cfg, long klen)
{
	long ulen = 0;
	bool full;

	/* The verifier needs the offset bounded to know the write stays in e->ips. */
	if (klen < 0 || klen > PROFILE_MAX_FRAMES)
		return 0;
	if (cfg->cfi_walk) {
		ulen = walk_user_stack(e, klen);
		if (ulen > 0)
			goto python;
		ulen = 0;
	}
	if (cfg->fp_stack) {
		ulen = get_stack(ctx, &e->ips[klen], PROFILE_MAX_FRAMES, BPF_F_USER_STACK, &full);
		if (ulen == 0)
			e->flags |= SAMPLE_USER_MISSING;
		if (full)
			e->flags |= SAMPLE_USER_TRUNCATED;
	}
	if (cfg->copy_stack_bytes)
		copy_user_stack(e, cfg->copy_stack_bytes);
python:
	if (cfg->python.runtime_addr)
		walk_python(e, &cfg->python);
	return ulen;
}

/* The header of a record of the current thread for @slot; the caller fills the rest. */
static __always_inline void start_record(struct sample_event *e, __u64 id, __u32 slot, __u32 cpu,
					 __u32 event)
{
	e->time_ns = bpf_ktime_get_ns();
	e->pid = id >> 32;
	e->tid = (__u32)id;
	e->slot = slot;
	e->cpu = cpu;
	e->flags = 0;
	e->event = event;
	e->stack_size = 0;
	e->stack_offset = 0;
	e->py_len = 0;
	e->cfi_stop = 0;
	e->cfi_frames = 0;
	e->cfi_stop_pc = 0;
	bpf_get_current_comm(&e->comm, sizeof(e->comm));
}

/*
 * send_compact() - send @e as a compact record (struct sample_event): its
 * header, its @n addresses, then its @py (e->py_len) Python frames, written
 * into the ring buffer in place (bpf_ringbuf_reserve_dynptr(), Linux
 * 5.19), so that the unused part of ips[] and of py[] is neither copied nor
 * sent. A global function, verified once on its own: inlined, its branches
 * took profile_sample past the verifier's 1,000,000 instructions.
 * Returns 0, 1 if @n or @py is out of bounds (nothing sent), or a negative
 * error if the ring buffer had no room.
 */
__noinline int send_compact(struct sample_event *e, __u32 n, __u32 py)
{
	__u32 ips_bytes, py_bytes, size;
	struct bpf_dynptr rec;
	long r;

	if (!e || n > sizeof(e->ips) / sizeof(e->ips[0]) || py > PROFILE_MAX_PY_FRAMES)
		return 1;
	/* Bounds in the registers the verifier follows: the masks change no value. */
	_Static_assert(sizeof(e->ips) / sizeof(e->ips[0]) <= 0xff && PROFILE_MAX_PY_FRAMES <= 0x7f,
		       "the masks below must keep every bounded value");
	barrier_var(n);
	barrier_var(py);
	ips_bytes = (n & 0xff) * sizeof(__u64);
	py_bytes = (py & 0x7f) * sizeof(struct py_frame);
	size = SAMPLE_COMPACT_BYTES(n, py);
	r = bpf_ringbuf_reserve_dynptr(&events, size, 0, &rec);
	if (!r)
		r = bpf_dynptr_write(&rec, 0, e, SAMPLE_HEAD_BYTES, 0);
	if (!r && ips_bytes)
		r = bpf_dynptr_write(&rec, SAMPLE_HEAD_BYTES, e->ips, ips_bytes, 0);
	if (!r && py_bytes)
		r = bpf_dynptr_write(&rec, SAMPLE_HEAD_BYTES + ips_bytes, e->py, py_bytes, 0);
	/* Discarded even when the reservation failed: the helper's contract. */
	if (r) {
		bpf_ringbuf_discard_dynptr(&rec, 0);
		return -1;
	}
	bpf_ringbuf_submit_dynptr(&rec, events_wakeup(size));
	return 0;
}

/*
 * Send @e with its @klen kernel and @ulen user frames, in the layout its
 * flags call for (struct sample_event); a full ring buffer is counted.
 */
static __always_inline void send_record(struct sample_event *e, long klen, long ulen, __u32 slot)
{
	long size, r;

	e->kstack_len = klen;
	e->ustack_len = ulen;
	if (e->flags & SAMPLE_HAS_REGS) {
		size = offsetof(struct sample_event, stack) + e->stack_size;
		if (size < offsetof(struct sample_event, stack) || size > sizeof(*e))
			return;
		r = events_output(e, size);
	} else {
		r = send_compact(e, klen + ulen, e->py_len);
	}
	if (r < 0)
		count_drop(slot, COUNTER_INDEX(struct slot_counters, ringbuf_full));
}

SEC("perf_event")
int profile_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, cpu = bpf_get_smp_processor_id(), slot, *target;
	__u64 cookie;
	struct slot_config *cfg;
	struct sample_event *e;
	long klen;
	bool full;

	if (tgid == 0)
		return 0;
	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target)
		return 0;
	cookie = bpf_get_attach_cookie(ctx);
	slot = (__u32)(cookie & 0xffff);
	/* Each session has its own events; keep only its own targets. */
	if (*target != slot + 1)
		return 0;

	cfg = bpf_map_lookup_elem(&slot_configs, &slot);
	if (!cfg)
		return 0;
	e = bpf_map_lookup_elem(&scratch, &cpu);
	if (!e)
		return 0;
	start_record(e, id, slot, cpu, (__u32)(cookie >> 16));

	/*
	 * The mode from the interrupted instruction's address, not pt_regs.cs,
	 * whose layout changed with FRED (Linux 6.9): x86-64 kernel addresses
	 * have the top bit set, user ones never do (Documentation/arch/x86/
	 * x86_64/mm.rst). In user mode the kernel call chain is empty
	 * (get_perf_callchain() walks the kernel stack only when
	 * !user_mode(regs)), so the helper, ~0.6 us a call on a PVM guest
	 * (bench/cost), is not called.
	 */
	klen = 0;
	full = false;
	if ((__s64)ctx->regs.ip < 0)
		klen = get_stack(ctx, e->ips, PROFILE_MAX_FRAMES, 0, &full);
	if (full)
		e->flags |= SAMPLE_KERNEL_TRUNCATED;
	if (klen > 0)
		e->flags |= SAMPLE_KERNEL_MODE;
	if (klen < 0 || klen > PROFILE_MAX_FRAMES)
		return 0;
	send_record(e, klen, take_user_stack(ctx, e, cfg, klen), slot);
	return 0;
}

/*
 * Address-space changes of targets: brk, mmap, munmap and mremap at their
 * return (their syscalls:sys_exit_* tracepoints), and write faults to pages not present (first touches), one in
 * the slot's vm_fault_period. Each sends a PROFILE_EVENT_VM record with the
 * user stack (no kernel frames), so that user space can tell which code
 * grows the address space, Python frames merged. They cost per change, not
 * per allocation: glibc's malloc asks the kernel for memory in steps of
 * 128 KiB or more.
 *
 * The stack is what costs (a copy of the user stack here, CFI unwinding in
 * user space), and only growth needs one: a shrinking change (munmap, a
 * lower break) is credited by user space to the stack that made the region,
 * so its record goes without (SAMPLE_NO_STACK). Growth records carry a
 * stack up to vm_stack_per_s per CPU per slot, and beyond it go without
 * one too, so that their bytes are still counted ('bare' in vm_stats).
 * Records of either kind beyond vm_max_per_s per CPU per slot (a job that
 * maps and unmaps in a tight loop) are not sent; every change is counted
 * in 'vm_stats' all the same.
 */
const volatile __u32 vm_stack_per_s = 50;
const volatile __u32 vm_max_per_s = 20000;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROFILE_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct vm_stats);
} vm_stats SEC(".maps");

/* Per CPU and slot: the start of the current second, records sent in it, faults counted. */
struct vm_budget {
	__u64 second_ns;
	__u64 sent;	  /* records sent this second */
	__u64 with_stack; /* of which with a stack */
	__u64 faults;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROFILE_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct vm_budget);
} vm_budget SEC(".maps");

/* tid -> the break when its brk() started. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} vm_brk_before SEC(".maps");

/*
 * The record of an address-space change, one per CPU (max_entries set to
 * the number of possible CPUs before load), apart from 'scratch': these
 * programs run in process context and a CPU sample can interrupt them.
 * 'vm_busy' guards it against a program preempted on the same CPU (a
 * preemptible kernel).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_event);
} vm_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} vm_busy SEC(".maps");

/* The slot of the current process if its session follows address-space changes, else -1. */
static __always_inline int vm_slot(struct slot_config **ret_cfg)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, slot, *target;
	struct slot_config *cfg;

	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target || *target == 0 || *target > PROFILE_MAX_SLOTS)
		return -1;
	slot = *target - 1;
	cfg = bpf_map_lookup_elem(&slot_configs, &slot);
	if (!cfg || !cfg->vm_fault_period)
		return -1;
	*ret_cfg = cfg;
	return (int)slot;
}

/*
 * Count @vm->kind for @slot and send its record unless the slot's budget is
 * spent; with the user stack if @grows and the stack budget is not spent.
 */
static __always_inline void vm_send(void *ctx, __u32 slot, const struct slot_config *cfg,
				    const struct vm_change *vm, bool grows)
{
	__u32 cpu = bpf_get_smp_processor_id(), *busy;
	struct vm_budget *b = bpf_map_lookup_elem(&vm_budget, &slot);
	struct vm_stats *st = bpf_map_lookup_elem(&vm_stats, &slot);
	struct sample_event *e;
	__u64 now = bpf_ktime_get_ns();
	__u32 kind = vm->kind;

	if (!b || !st || kind >= VM_NR_KINDS)
		return;
	st->events[kind]++;
	if (now - b->second_ns >= 1000000000ull) {
		b->second_ns = now;
		b->sent = 0;
		b->with_stack = 0;
	}
	busy = bpf_map_lookup_elem(&vm_busy, &cpu);
	e = bpf_map_lookup_elem(&vm_scratch, &cpu);
	if (b->sent >= vm_max_per_s || !busy || !e) {
		st->unsent++;
		return;
	}
	/* Not an atomic test-and-set (it needs -mcpu=v3): the window is a few
	 * instructions, and only a fully preemptible kernel can open it. */
	if (*busy) {
		st->unsent++;
		return;
	}
	*busy = 1;
	b->sent++;
	start_record(e, bpf_get_current_pid_tgid(), slot, cpu, PROFILE_EVENT_VM);
	e->vm = *vm;
	if (grows && b->with_stack < vm_stack_per_s) {
		b->with_stack++;
		send_record(e, 0, take_user_stack(ctx, e, cfg, 0), slot);
	} else {
		if (grows)
			st->bare++;
		e->flags |= SAMPLE_NO_STACK;
		send_record(e, 0, 0, slot);
	}
	*busy = 0;
}

/* A system call's result is an error if it is in [-4095, -1] (include/linux/err.h). */
#define SYSCALL_FAILED(ret) ((unsigned long)(ret) >= (unsigned long)-4095)

/*
 * The system calls' own tracepoints (syscalls:sys_enter_*, sys_exit_*), not
 * raw_syscalls, which would run for every system call of the machine. The
 * arguments at the exit come from the user registers saved at the entry
 * (x86-64: rdi, rsi, rdx, r10, r8), which the call does not change.
 */
SEC("tracepoint/syscalls/sys_enter_brk")
int vm_brk_entry(struct trace_event_raw_sys_enter *ctx)
{
	struct slot_config *cfg;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 brk;

	if (vm_slot(&cfg) < 0)
		return 0;
	brk = BPF_CORE_READ(bpf_get_current_task_btf(), mm, brk);
	bpf_map_update_elem(&vm_brk_before, &tid, &brk, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_brk")
int vm_brk_exit(struct trace_event_raw_sys_exit *ctx)
{
	struct vm_change vm = { .kind = VM_BRK, .fd = -1 };
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct slot_config *cfg;
	__u64 *before;
	int slot;

	before = bpf_map_lookup_elem(&vm_brk_before, &tid);
	if (!before)
		return 0;
	vm.old_addr = *before;
	bpf_map_delete_elem(&vm_brk_before, &tid);
	/* brk(0) asks where the break is; a refused move leaves it where it was. */
	vm.addr = (__u64)ctx->ret;
	slot = vm_slot(&cfg);
	if (slot < 0 || vm.addr == vm.old_addr)
		return 0;
	vm_send(ctx, (__u32)slot, cfg, &vm, vm.addr > vm.old_addr);
	return 0;
}

/* The user registers of the current system call. */
static __always_inline struct pt_regs *syscall_regs(void)
{
	return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
}

/* File system magics (include/uapi/linux/magic.h) and file types (S_IFMT, stat(2)). */
#define TMPFS_MAGIC 0x01021994
#define HUGETLBFS_MAGIC 0x958458f6
#define RAMFS_MAGIC 0x858458f6
#define S_IFMT 0170000
#define S_IFREG 0100000
#define S_IFCHR 0020000
#define S_IFBLK 0060000
#define MAP_ANONYMOUS 0x20

/*
 * VM_FILE_* of the current task's file descriptor @fd: its file from the
 * task's fd table (files->fdt->fd[fd], as fget() finds it, without taking
 * a reference: the task is in its own syscall's return, the fd still
 * open), then its inode's type and its file system's magic.
 */
static __always_inline __u32 fd_file_kind(int fd)
{
	struct task_struct *t = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
	struct file **fds, *f = NULL;
	struct inode *inode;
	unsigned long magic;
	umode_t mode;

	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return VM_FILE_UNKNOWN;
	fds = BPF_CORE_READ(fdt, fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) < 0 || !f)
		return VM_FILE_UNKNOWN;
	inode = BPF_CORE_READ(f, f_inode);
	if (!inode)
		return VM_FILE_UNKNOWN;
	mode = BPF_CORE_READ(inode, i_mode) & S_IFMT;
	if (mode == S_IFCHR || mode == S_IFBLK)
		return VM_FILE_DEVICE;
	if (mode != S_IFREG)
		return VM_FILE_OTHER;
	magic = BPF_CORE_READ(inode, i_sb, s_magic);
	return magic == TMPFS_MAGIC || magic == HUGETLBFS_MAGIC || magic == RAMFS_MAGIC
		   ? VM_FILE_SHMEM
		   : VM_FILE_REGULAR;
}

/*
 * The exit of mmap, munmap or mremap (@kind: VM_MMAP, VM_MUNMAP,
 * VM_MREMAP), which returned @ret: sent if the call succeeded and the
 * process's session follows address-space changes. @kind is a constant in
 * each caller, so each program keeps only its own case.
 */
static __always_inline int vm_syscall_exit(void *ctx, __u32 kind, long ret)
{
	struct vm_change vm = { .kind = kind, .fd = -1 };
	struct slot_config *cfg;
	int slot = vm_slot(&cfg);
	struct pt_regs *regs;

	if (slot < 0 || (kind == VM_MUNMAP ? ret != 0 : SYSCALL_FAILED(ret)))
		return 0;
	regs = syscall_regs();
	switch (kind) {
	case VM_MMAP: /* mmap(addr, len, prot, flags, fd, off) */
		vm.addr = (__u64)ret;
		vm.len = BPF_CORE_READ(regs, si);
		vm.flags = (__u32)BPF_CORE_READ(regs, r10);
		vm.fd = (__s32)BPF_CORE_READ(regs, r8);
		if (!(vm.flags & MAP_ANONYMOUS))
			vm.file_kind = fd_file_kind(vm.fd);
		break;
	case VM_MUNMAP: /* munmap(addr, len) */
		vm.addr = BPF_CORE_READ(regs, di);
		vm.len = BPF_CORE_READ(regs, si);
		break;
	case VM_MREMAP: /* mremap(old_addr, old_len, new_len, flags, new_addr) */
		vm.addr = (__u64)ret;
		vm.old_addr = BPF_CORE_READ(regs, di);
		vm.old_len = BPF_CORE_READ(regs, si);
		vm.len = BPF_CORE_READ(regs, dx);
		break;
	}
	vm_send(ctx, (__u32)slot, cfg, &vm,
		kind == VM_MMAP || (kind == VM_MREMAP && vm.len > vm.old_len));
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int vm_mmap_exit(struct trace_event_raw_sys_exit *ctx)
{
	return vm_syscall_exit(ctx, VM_MMAP, ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_munmap")
int vm_munmap_exit(struct trace_event_raw_sys_exit *ctx)
{
	return vm_syscall_exit(ctx, VM_MUNMAP, ctx->ret);
}

SEC("tracepoint/syscalls/sys_exit_mremap")
int vm_mremap_exit(struct trace_event_raw_sys_exit *ctx)
{
	return vm_syscall_exit(ctx, VM_MREMAP, ctx->ret);
}

/* x86 page fault error code bits (arch/x86/include/asm/trap_pf.h). */
#define X86_PF_PROT 1  /* the page was present: a protection fault */
#define X86_PF_WRITE 2

SEC("tp_btf/page_fault_user")
int BPF_PROG(vm_fault, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	struct vm_change vm = { .kind = VM_FAULT, .fd = -1 };
	struct slot_config *cfg;
	struct vm_budget *b;
	int slot;

	if ((error_code & (X86_PF_PROT | X86_PF_WRITE)) != X86_PF_WRITE)
		return 0;
	slot = vm_slot(&cfg);
	if (slot < 0)
		return 0;
	b = bpf_map_lookup_elem(&vm_budget, &slot);
	if (!b)
		return 0;
	if (b->faults++ % cfg->vm_fault_period) {
		struct vm_stats *st = bpf_map_lookup_elem(&vm_stats, &slot);

		if (st)
			st->events[VM_FAULT]++;
		return 0;
	}
	vm.addr = address;
	vm.len = (__u64)cfg->vm_fault_period * PAGE_BYTES;
	vm.flags = (__u32)error_code;
	vm_send(ctx, (__u32)slot, cfg, &vm, true);
	return 0;
}

/*
 * A target that forks: with follow_children, the child process (a new tgid;
 * a new thread keeps its tgid and needs nothing) becomes a target of the
 * same slot before it runs, so its first instructions are sampled too.
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(profile_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	__u32 *target, slot;
	struct slot_config *cfg;

	if (ptgid == ctgid)
		return 0;
	target = bpf_map_lookup_elem(&targets, &ptgid);
	if (!target)
		return 0;
	slot = *target - 1;
	cfg = bpf_map_lookup_elem(&slot_configs, &slot);
	if (!cfg || !cfg->follow_children)
		return 0;
	bpf_map_update_elem(&targets, &ctgid, target, BPF_NOEXIST);
	return 0;
}

/*
 * A thread of a target exits: user space gets a record of it. When the
 * whole process goes, forget it, so that a new process that reuses its PID
 * is never sampled by mistake. Only when the whole thread group is gone:
 * do_exit() decrements signal->live before this tracepoint, and the last
 * thread to exit (not always the leader) sees 0.
 */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(profile_exit, struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid), *target;
	struct sample_event *e;

	target = bpf_map_lookup_elem(&targets, &tgid);
	if (!target)
		return 0;
	/* Tell user space the thread ended: a record with no stack, event 2. */
	e = bpf_ringbuf_reserve(&events, SAMPLE_HEAD_BYTES, 0);
	if (e) {
		/* @task is current: do_exit() traces its own task (kernel/exit.c). */
		start_record(e, bpf_get_current_pid_tgid(), *target - 1, bpf_get_smp_processor_id(),
			     PROFILE_EVENT_THREAD_EXIT);
		e->kstack_len = 0;
		e->ustack_len = 0;
		bpf_ringbuf_submit(e, 0);
	}
	if (BPF_CORE_READ(task, signal, live.counter) > 0)
		return 0;
	bpf_map_delete_elem(&targets, &tgid);
	return 0;
}
