/* offcpu.c - off-CPU intervals: the offcpu.bpf.c programs, their ring buffer and targets. */
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "collect/offcpu.h"
#include "offcpu.skel.h"
#include "collect/bpf_util.h"
#include "util.h"

struct offcpu {
	struct offcpu_bpf *skel;
	struct record_reader reader;
	offcpu_fn fn;
	void *ctx;
	unsigned nr_targets[OFFCPU_MAX_SLOTS]; /* processes added to each slot and not removed */
	bool shared_targets;		       /* targets is another object's map */
	bool attached; /* the programs are on sched_switch and sched_wakeup */
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct offcpu *, offcpu__free)

bool offcpu_event__valid(const void *data, size_t size)
{
	const struct offcpu_event *e = data;
	size_t frames;

	if (size < offsetof(struct offcpu_event, ips))
		return false;
	frames = (size_t)e->kstack_len + e->ustack_len;
	return !(e->kstack_len > OFFCPU_MAX_FRAMES || e->ustack_len > OFFCPU_MAX_FRAMES ||
		 e->stack_size > OFFCPU_STACK_BYTES || e->stack_size % sizeof(__u64) != 0 ||
		 (e->stack_size && !(e->flags & OFFCPU_HAS_REGS)) ||
		 size <
		     offsetof(struct offcpu_event, ips) + frames * sizeof(__u64) + e->stack_size ||
		 e->slot >= OFFCPU_MAX_SLOTS || e->state >= OFFCPU_NR_STATES ||
		 e->runq_ns > e->duration_ns || e->period_ns >= OFFCPU_PERIOD_LIMIT_NS ||
		 (e->period_ns && e->duration_ns == 0));
}

/* A bad record is refused (the reader counts it and goes on). */
static bool handle_record(void *ctx, const void *data, size_t size)
{
	struct offcpu *o = ctx;

	if (!offcpu_event__valid(data, size))
		return false;
	o->fn(o->ctx, data, size);
	return true;
}

/*
 * Whether the running kernel allocates hash map elements safely in tracing
 * programs: Linux 6.1 (BPF memory allocator). Before it, a tracing program
 * with a BPF_F_NO_PREALLOC hash map loads with a WARN_ONCE splat in the
 * kernel log (and is refused on PREEMPT_RT), so 'starts' is preallocated.
 */
static bool kernel_allocates_in_tracing(void)
{
	struct utsname u;
	int major = 0, minor = 0;

	if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &major, &minor) != 2)
		return false;
	return major > 6 || (major == 6 && minor >= 1);
}

/* Attach both programs (libbpf's skeleton skips a program already attached). */
static int programs_attach(struct offcpu *o)
{
	int r;

	if (o->attached)
		return 0;
	r = offcpu_bpf__attach(o->skel);
	if (r < 0) {
		offcpu_bpf__detach(o->skel);
		return r;
	}
	o->attached = true;
	return 0;
}

/*
 * Detach both programs, then forget every pending interval in 'starts':
 * with the hooks off, their switches back in are not seen, and an entry
 * left there would end, at the next attach, in an interval that spans the
 * time the hooks were off.
 */
static void programs_detach(struct offcpu *o)
{
	int fd = bpf_map__fd(o->skel->maps.starts);
	__u32 tid;

	offcpu_bpf__detach(o->skel);
	o->attached = false;
	while (bpf_map_get_next_key(fd, NULL, &tid) == 0)
		if (bpf_map_delete_elem(fd, &tid) < 0)
			break;
}

/*
 * offcpu__new() - load offcpu.bpf.c, and check that it attaches to
 * sched_switch and sched_wakeup. It stays attached only while a slot has a
 * target (offcpu__add_target() to the last offcpu__remove_target()): those
 * hooks run at every context switch and wakeup of the machine, targets or
 * not (~0.7 us a switch measured on this project's 2-core guest), which an
 * idle profd should not cost.
 * @ringbuf_bytes: ring buffer size, a power of two and a multiple of the
 *   page size; a record is 208 bytes + 8 per frame + up to 1 KiB of user
 *   stack (~0.5 KiB typically). The reader is woken only once 1/16 of it is
 *   full (a wakeup per record would preempt the targets and make records
 *   of its own): call offcpu__poll() on a timer too, every 100 ms to 1 s.
 * @fn, @ctx: called from offcpu__poll() for each well-formed record.
 * @ret: receives the object, owned by the caller (offcpu__free()).
 *
 * Returns 0, -EPERM without CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN),
 * -EINVAL for a bad @ringbuf_bytes, -ENOMEM, or the -errno libbpf gave
 * when loading or attaching (a kernel without BTF or tp_btf). *@ret is left
 * unchanged on failure. Allocates; does not log (libbpf's own messages go
 * through its print callback).
 */
int offcpu__new(size_t ringbuf_bytes, offcpu_fn fn, void *ctx, struct offcpu **ret)
{
	static const struct offcpu_shared_maps none = { -1, { -1, -1, -1, -1 } };

	return offcpu__new_shared(ringbuf_bytes, &none, fn, ctx, ret);
}

/*
 * offcpu__new_shared() - offcpu__new() with maps of the CPU sampler
 * (@maps, each -1 for a map of its own): its targets (a hash map of __u32
 * tgid -> __u32 slot + 1), so that processes it adds (followed children)
 * are traced off the CPU too; and the CFI tables its cfi_loader fills, so
 * that the user stacks of processes that have them are walked in BPF, as
 * their CPU samples are. Also returns bpf_map__reuse_fd()'s -errno (a map
 * of another type or size).
 */
int offcpu__new_shared(size_t ringbuf_bytes, const struct offcpu_shared_maps *maps, offcpu_fn fn,
		       void *ctx, struct offcpu **ret)
{
	_cleanup_(offcpu__freep) struct offcpu *o = NULL;
	int r;

	if (!ringbuf_size_ok(ringbuf_bytes))
		return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	*o = (struct offcpu){.fn = fn, .ctx = ctx, .shared_targets = maps->targets_fd >= 0};
	o->skel = offcpu_bpf__open();
	if (!o->skel)
		return -errno;
	{
		struct bpf_map *cfi[] = { o->skel->maps.cfi_procs, o->skel->maps.cfi_modules,
					  o->skel->maps.cfi_rows, o->skel->maps.cfi_row_cache };

		_Static_assert(ARRAY_SIZE(cfi) == ARRAY_SIZE(maps->cfi_fds), "the maps in order");
		for (size_t i = 0; i < ARRAY_SIZE(cfi); i++) {
			r = maps->cfi_fds[i] >= 0 ? bpf_map__reuse_fd(cfi[i], maps->cfi_fds[i]) : 0;
			if (r < 0)
				return r;
		}
	}
	o->skel->rodata->wakeup_bytes = ringbuf_bytes / 16;
	r = bpf_map__set_max_entries(o->skel->maps.starts, OFFCPU_MAX_THREADS);
	if (r < 0)
		return r;
	if (!kernel_allocates_in_tracing()) {
		r = bpf_map__set_map_flags(o->skel->maps.starts, 0);
		if (r < 0)
			return r;
	}
	r = collector__load(o->skel->skeleton, o->skel->maps.events, ringbuf_bytes,
			    o->skel->maps.targets, maps->targets_fd, handle_record, o, &o->reader);
	if (r < 0)
		return r;
	/* Attached once here: a kernel that refuses it fails now, not at the first attach. */
	r = programs_attach(o);
	if (r < 0)
		return r;
	programs_detach(o);
	*ret = TAKE_PTR(o);
	return 0;
}

/*
 * offcpu__free() - detach the programs and free everything, pending records
 * included. Accepts NULL and an object whose offcpu__new() failed half-way.
 */
void offcpu__free(struct offcpu *o)
{
	if (!o)
		return;
	record_reader__close(&o->reader);
	offcpu_bpf__destroy(o->skel);
	free(o);
}

struct record_reader *offcpu__reader(struct offcpu *o)
{
	return &o->reader;
}

/*
 * offcpu__period_ns() - the sampling period of off-CPU time for a session
 * sampling CPU time at @freq_hz (1..PROFD_MAX_FREQ_HZ): 1 / @freq_hz in
 * nanoseconds, so that off-CPU time gets about as many records per second
 * of it as CPU time gets samples (offcpu.bpf.c, keep_interval()).
 */
uint64_t offcpu__period_ns(unsigned freq_hz)
{
	return freq_hz ? NSEC_PER_SEC / freq_hz : 0;
}

/*
 * offcpu__add_target() - record the off-CPU intervals of every thread of
 * process @pid (threads created later included) for session @slot,
 * 0..OFFCPU_MAX_SLOTS-1. A slot may have several processes; its drop
 * counters restart from zero when it gets its first one. Intervals that
 * began before the call are not reported.
 * @period_ns: the slot's sampling period (offcpu__period_ns()): intervals at
 *   least this long are all sent, a shorter one of d ns with probability
 *   d / @period_ns; 0 sends every interval. Below OFFCPU_PERIOD_LIMIT_NS
 *   (4.29 s); the last value given for a slot holds for all its processes.
 *
 * Returns 0, -EINVAL for a bad @slot, @pid or @period_ns, -ESRCH if @pid does not exist,
 * -EBUSY if @pid is already a target (of any slot), -E2BIG if the targets
 * map is full (4096 processes), -errno of bpf() or of attaching the
 * programs (the first target of all attaches them). Leaves everything
 * unchanged on failure. Does not log; attaching waits for the kernel.
 * With a shared targets map, only the slots given here are traced: the
 * owner's other targets (sessions without off-CPU) cost one lookup per
 * switch, and its followed children of a traced slot are traced.
 */
_Static_assert(OFFCPU_MAX_SLOTS <= 64, "a bit per slot in traced_slots");

int offcpu__add_target(struct offcpu *o, unsigned slot, pid_t pid, uint64_t period_ns)
{
	__u32 key = (__u32)pid, val = slot + 1;
	int r;

	if (slot >= OFFCPU_MAX_SLOTS || pid <= 0 || period_ns >= OFFCPU_PERIOD_LIMIT_NS)
		return -EINVAL;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return -ESRCH;
	if (o->nr_targets[slot] == 0) {
		r = percpu_zero(o->skel->maps.drops, slot, sizeof(struct offcpu_counters));
		if (r < 0)
			return r;
	}
	r = programs_attach(o);
	if (r < 0)
		return r;
	if (bpf_map_update_elem(bpf_map__fd(o->skel->maps.targets), &key, &val, BPF_NOEXIST) < 0) {
		__u32 cur;

		/* A shared map may already hold it for this slot: the owner put it there. */
		r = errno == EEXIST ? -EBUSY : -errno;
		if (r == -EBUSY && o->shared_targets &&
		    bpf_map_lookup_elem(bpf_map__fd(o->skel->maps.targets), &key, &cur) == 0 &&
		    cur == val)
			r = 0;
		if (r < 0) {
			if (!o->skel->bss->traced_slots)
				programs_detach(o);
			return r;
		}
	}
	o->nr_targets[slot]++;
	/* Before the slot is traced: offcpu.bpf.c reads it at each switch-in. */
	__atomic_store_n(&o->skel->bss->period_ns[slot], period_ns, __ATOMIC_RELAXED);
	/* offcpu.bpf.c's traced_slots: the slot's switches are traced from now on */
	__atomic_fetch_or(&o->skel->bss->traced_slots, 1ull << slot, __ATOMIC_RELAXED);
	return 0;
}

/*
 * offcpu__remove_target() - stop recording @pid for @slot. Records already
 * in the ring buffer are still delivered by offcpu__poll(); intervals still
 * open are dropped, not reported (their map entries go when the threads next
 * run). The last target of all detaches the programs: no hook runs while
 * no slot is traced. Returns 0, -EINVAL for a bad @slot, -ENOENT if @pid is
 * not a target of @slot (nothing is changed), -errno of bpf(). Does not
 * log; detaching waits for the kernel.
 */
int offcpu__remove_target(struct offcpu *o, unsigned slot, pid_t pid)
{
	int fd = bpf_map__fd(o->skel->maps.targets);
	__u32 key = (__u32)pid, val;

	if (slot >= OFFCPU_MAX_SLOTS)
		return -EINVAL;
	if (bpf_map_lookup_elem(fd, &key, &val) < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if (val != slot + 1)
		return -ENOENT;
	if (bpf_map_delete_elem(fd, &key) < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	if (o->nr_targets[slot] > 0)
		o->nr_targets[slot]--;
	if (o->nr_targets[slot] == 0)
		__atomic_fetch_and(&o->skel->bss->traced_slots, ~(1ull << slot), __ATOMIC_RELAXED);
	if (!o->skel->bss->traced_slots)
		programs_detach(o);
	return 0;
}

/*
 * offcpu__counters() - @slot's drop counters since it got its first target,
 * summed over CPUs, in *@ret. Returns 0, -EINVAL for a bad @slot, -ENOMEM,
 * -errno of bpf() (*@ret unchanged on failure).
 */
int offcpu__counters(struct offcpu *o, unsigned slot, struct offcpu_counters *ret)
{
	if (slot >= OFFCPU_MAX_SLOTS)
		return -EINVAL;
	return percpu_sum(o->skel->maps.drops, slot, (uint64_t *)ret, U64S(*ret));
}

/*
 * offcpu__lost() - off-CPU intervals of @slot that were not reported: ring
 * buffer full, per-thread map full, switch-in missed (running total; 0 if
 * the counters cannot be read).
 */
uint64_t offcpu__lost(struct offcpu *o, unsigned slot)
{
	struct offcpu_counters c;

	if (offcpu__counters(o, slot, &c) < 0)
		return 0;
	return c.ringbuf_full + c.tid_map_full + c.switch_in_missed;
}

/*
 * offcpu__prog_stats() - what the BPF programs cost: runs and time spent in
 * them (nanoseconds), summed over sched_switch and sched_wakeup, since they
 * were loaded. The kernel counts only while BPF statistics are enabled
 * (bpf_enable_stats(BPF_STATS_RUN_TIME) or sysctl kernel.bpf_stats_enabled),
 * else both stay 0. Returns 0 or -errno of bpf() (outputs unchanged).
 */
int offcpu__prog_stats(struct offcpu *o, uint64_t *ret_run_cnt, uint64_t *ret_run_time_ns)
{
	struct bpf_program *progs[] = {o->skel->progs.offcpu_switch, o->skel->progs.offcpu_wakeup};
	uint64_t cnt = 0, time_ns = 0;

	for (size_t i = 0; i < ARRAY_SIZE(progs); i++) {
		struct bpf_prog_info info = {0};
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(bpf_program__fd(progs[i]), &info, &len) < 0)
			return -errno;
		cnt += info.run_cnt;
		time_ns += info.run_time_ns;
	}
	*ret_run_cnt = cnt;
	*ret_run_time_ns = time_ns;
	return 0;
}

/*
 * offcpu__user_stack() - the user stack of @e, leaf first: as the BPF
 * program walked it from the CFI tables (OFFCPU_CFI_WALKED), else its
 * frame-pointer walk completed with CFI from its registers and stack slice
 * (unwinder__complete_walk(), which says how). @as: the mappings of e->pid.
 * @ret_ips: up to @max addresses. *@ret_flags: UNWIND_WALK_* (0: the walk
 * was right).
 *
 * Returns the number of addresses (0..@max), or -ENOMEM. Allocates (the
 * unwinder's caches), may block on file I/O, does not log; @u is not
 * thread-safe (unwind.h).
 */
int offcpu__user_stack(struct unwinder *u, const struct addrspace *as, const struct offcpu_event *e,
		       uint64_t *ret_ips, size_t max, uint32_t *ret_flags)
{
	if (e->flags & OFFCPU_CFI_WALKED) {
		size_t n = MIN((size_t)e->ustack_len, max);

		memcpy(ret_ips, &e->ips[e->kstack_len], n * sizeof(*ret_ips));
		*ret_flags = 0;
		return (int)n;
	}
	return unwinder__complete_walk(
	    u, as, e->flags & OFFCPU_HAS_REGS ? (const uint64_t *)e->regs : NULL,
	    offcpu_event_stack(e), e->stack_size, (const uint64_t *)&e->ips[e->kstack_len],
	    e->ustack_len, ret_ips, max, ret_flags);
}
