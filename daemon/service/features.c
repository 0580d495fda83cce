/*
 * features.c - the probe features a session adds to CPU sampling (off-CPU
 * intervals, allocation probes, CUDA/NVTX/--uprobe probes), behind one
 * table: what the service does for each alike is written once here —
 * probes for the children a session follows, the limit on probed calls per
 * second, records lost in the kernel charged to their session — and each
 * feature says only how it does its part.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "collect/malloc_probes.h"
#include "collect/offcpu.h"
#include "collect/sampler.h"
#include "collect/uprobes.h"
#include "log.h"
#include "service/daemon.h"
#include "session/gpu_acc.h"
#include "util.h"

/* Allocation samples: ~2.5 KiB per sampled call, 64 bytes per return and free. A drain
 * thread empties the ring as it fills (collect/bpf_util.h): it holds what arrives while
 * that thread waits for a CPU, ~30,000 returns and frees. */
#define MALLOC_RINGBUF_BYTES (2u << 20)
/* CUDA/NVTX/uprobe call records: ~330 bytes + 8 per stack frame each: ~3,500 calls of 30
 * frames. */
#define UPROBES_RINGBUF_BYTES (2u << 20)

struct probe_feature {
	const char *what;	/* in messages: "uprobes" */
	const char *child_what; /* "no %s in child": "allocation probes" */
	const char *calls_unit; /* the rate limit's unit: "probe hits/s" */
	const char *limit_option;
	/* Whether the session in @slot has this feature's probes attached now. */
	bool (*active)(struct profd *p, unsigned slot);
	/* Attach the probes to @proc, a child the session follows; NULL: children need nothing. */
	int (*attach_child)(struct profd *p, unsigned slot, struct proc *proc);
	/* The running total of the slot's records lost in the kernel; NULL: none. */
	uint64_t (*lost)(struct profd *p, unsigned slot);
	void (*charge_lost)(struct profd *p, unsigned slot, uint64_t n);
	/* The running total of probed calls, for the rate limit; NULL: no limit. */
	uint64_t (*calls)(struct profd *p, unsigned slot);
	/* The probes were detached for their rate: record it where the report reads it. */
	void (*stopped)(struct profd *p, unsigned slot, const char *status);
	/* Once per flush window: look again at what the session's processes map. */
	void (*refresh)(struct profd *p, unsigned slot);
	void (*before_flush)(struct profd *p, unsigned slot);
	/* Stop the slot's probes (the session ends). */
	void (*stop)(struct profd *p, unsigned slot);
};

/* Off-CPU intervals: children are traced through the sampler's target map they share. */

static bool offcpu_active(struct profd *p, unsigned slot)
{
	return p->offcpu && (session__events(p->slots[slot]) & EVENT_OFFCPU);
}

static uint64_t offcpu_lost(struct profd *p, unsigned slot)
{
	return p->offcpu ? offcpu__lost(p->offcpu, slot) : 0;
}

static void offcpu_charge_lost(struct profd *p, unsigned slot, uint64_t n)
{
	session__count_offcpu_lost(p->slots[slot], n);
}

static void offcpu_stop(struct profd *p, unsigned slot)
{
	if (p->offcpu)
		offcpu__remove_target(p->offcpu, slot, session__pid(p->slots[slot]));
}

/* Allocation probes. */

static bool malloc_active(struct profd *p, unsigned slot)
{
	return p->malloc_probes && session__malloc_probing(p->slots[slot]);
}

static int malloc_attach_child(struct profd *p, unsigned slot, struct proc *proc)
{
	char probes[256];

	return malloc_probes__attach(p->malloc_probes, slot, proc->pid,
				     session__malloc_sample_bytes(p->slots[slot]), probes,
				     sizeof(probes));
}

/* Probe hits: an allocation traps at its entry and its return, a free at its entry; a USDT
 * probe (a sampled allocation or its free) traps once; objects read from jemalloc's heap
 * profiles trap never. */
static uint64_t malloc_calls(struct profd *p, unsigned slot)
{
	struct malloc_stats st;
	uint64_t calls = 0;

	if (!malloc_probes__probing(p->malloc_probes, slot) ||
	    malloc_probes__stats(p->malloc_probes, slot, &st) < 0)
		return p->probes[slot][PROBE_MALLOC].calls_seen;
	for (unsigned f = 0; f < MALLOC_NR_FUNCS; f++) {
		bool once = f == MALLOC_FUNC_FREE || f == MALLOC_FUNC_MUNMAP ||
			    f == MALLOC_FUNC_USDT_ALLOC || f == MALLOC_FUNC_USDT_FREE;

		if (f != MALLOC_FUNC_JEMALLOC_PROF)
			calls += (once ? 1 : 2) * st.calls[f];
	}
	return calls;
}

static void malloc_stopped(struct profd *p, unsigned slot, const char *status)
{
	session__malloc_stopped(p->slots[slot], now_ns(CLOCK_REALTIME));
	malloc_probes__detach(p->malloc_probes, slot);
}

/* The allocation probes' counters, into the session, before each flush. */
static void malloc_before_flush(struct profd *p, unsigned slot)
{
	struct malloc_stats st;
	int r;

	if (!p->malloc_probes || !session__malloc_sample_bytes(p->slots[slot]))
		return;
	/* Heap profiles jemalloc wrote since the last flush become records now. */
	r = malloc_probes__poll(p->malloc_probes, slot);
	if (r < 0)
		log_warning_errno(r, "session %lld: a jemalloc heap profile could not be read, "
				  "skipped: %m", (long long)session__id(p->slots[slot]));
	if (malloc_probes__stats(p->malloc_probes, slot, &st) == 0)
		session__set_malloc_stats(p->slots[slot], &st);
}

static void malloc_stop(struct profd *p, unsigned slot)
{
	if (p->malloc_probes)
		malloc_probes__detach(p->malloc_probes, slot);
}

/* CUDA, NVTX and --uprobe probes. */

/* An attach outcome of a probe (uprobes_note_fn), kept for the session's next flush. */
static void note_probe(void *ctx, pid_t pid, const char *what, const char *file, const char *status)
{
	gpu_acc__note_probe(ctx, pid, what, file, status);
}

static bool uprobes_active(struct profd *p, unsigned slot)
{
	return p->uprobes && uprobes__wanted(p->uprobes, slot);
}

/* A forked child has none of its parent's uprobes; its calls up to here are not seen. */
static int uprobes_attach_child(struct profd *p, unsigned slot, struct proc *proc)
{
	int r;

	pthread_rwlock_rdlock(&proc->as_lock);
	r = uprobes__attach_more(p->uprobes, slot, proc->pid, proc->as, note_probe,
				 session__gpu(p->slots[slot]));
	pthread_rwlock_unlock(&proc->as_lock);
	return r;
}

static uint64_t uprobes_lost(struct profd *p, unsigned slot)
{
	return p->uprobes ? uprobes__lost(p->uprobes, slot) : 0;
}

static void uprobes_charge_lost(struct profd *p, unsigned slot, uint64_t n)
{
	gpu_acc__count_lost(session__gpu(p->slots[slot]), n);
}

/* Counted as the kernel enters them, not as their records arrive: a reader
 * behind by a ring's worth, or records lost, do not delay the limit. */
static uint64_t uprobes_calls(struct profd *p, unsigned slot)
{
	return p->uprobes ? uprobes__entered(p->uprobes, slot) : 0;
}

static void uprobes_stopped(struct profd *p, unsigned slot, const char *status)
{
	struct session *s = p->slots[slot];

	uprobes__detach(p->uprobes, slot);
	gpu_acc__note_probe(session__gpu(s), session__pid(s), "all probes", "", status);
}

/* Libraries mapped since the attach (libcuda.so at cuInit()) get their probes. */
static void uprobes_refresh(struct profd *p, unsigned slot)
{
	uprobes__rescan(p->uprobes, slot, note_probe, session__gpu(p->slots[slot]));
}

static void uprobes_stop(struct profd *p, unsigned slot)
{
	if (p->uprobes)
		uprobes__detach(p->uprobes, slot);
}

static const struct probe_feature features[PROBE_NR] = {
    [PROBE_OFFCPU] =
	{
	    .what = "off-CPU tracing",
	    .active = offcpu_active,
	    .lost = offcpu_lost,
	    .charge_lost = offcpu_charge_lost,
	    .stop = offcpu_stop,
	},
    [PROBE_MALLOC] =
	{
	    .what = "allocation probes",
	    .child_what = "allocation probes",
	    .calls_unit = "probe hits/s",
	    .limit_option = "--malloc-max-rate",
	    .active = malloc_active,
	    .attach_child = malloc_attach_child,
	    .calls = malloc_calls,
	    .stopped = malloc_stopped,
	    .before_flush = malloc_before_flush,
	    .stop = malloc_stop,
	},
    [PROBE_UPROBES] =
	{
	    .what = "uprobes",
	    .child_what = "CUDA/NVTX probes",
	    .calls_unit = "probed calls/s",
	    .limit_option = "--uprobe-max-rate",
	    .active = uprobes_active,
	    .attach_child = uprobes_attach_child,
	    .lost = uprobes_lost,
	    .charge_lost = uprobes_charge_lost,
	    .calls = uprobes_calls,
	    .stopped = uprobes_stopped,
	    .refresh = uprobes_refresh,
	    .stop = uprobes_stop,
	},
};

/* A call record of a CUDA/NVTX/generic probe (uprobes_event_fn). */
static void on_uprobe(void *ctx, const struct gpu_probe *probe, const struct uprobe_event *e,
		      size_t size)
{
	struct profd *p = ctx;
	struct session *s = e->slot < PROFILE_MAX_SLOTS ? p->slots[e->slot] : NULL;
	struct proc *proc;

	/* A late record of a session that ended, its slot taken by another: not ours. */
	if (!s || probe->owner != session__id(s))
		return;
	proc = session__proc(s, (pid_t)e->pid);
	if (proc)
		pthread_rwlock_rdlock(&proc->as_lock);
	gpu_acc__on_event(session__gpu(s), p->env.sym, proc ? proc->as : NULL, probe, e);
	if (proc)
		pthread_rwlock_unlock(&proc->as_lock);
}

static void on_malloc_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, malloc_watch));

	record_reader__poll(malloc_probes__reader(p->malloc_probes));
}

static void on_uprobes_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, uprobes_watch));

	record_reader__poll(uprobes__reader(p->uprobes));
}

/*
 * features__load_malloc(), features__load_uprobes() - load the allocation
 * probes' or the CUDA/NVTX/--uprobe BPF object at its first use, not at
 * start: their ring buffers are resident as soon as they are mapped, and
 * mapped twice (8 MiB of RSS together), for features most sessions do not
 * ask for. Return 0 or -errno (logged).
 */
int features__load_malloc(struct profd *p)
{
	int r;

	if (p->malloc_probes)
		return 0;
	r = malloc_probes__new(MALLOC_RINGBUF_BYTES, sampler__targets_fd(p->env.sampler),
			       profd__on_malloc, p, &p->malloc_probes);
	if (r < 0)
		return log_warning_errno(r,
					 "Allocation probes unavailable (uprobe BPF programs): %m");
	r = profd__add_watch(p, record_reader__fd(malloc_probes__reader(p->malloc_probes)), &p->malloc_watch,
			     on_malloc_ready);
	if (r < 0) {
		malloc_probes__free(p->malloc_probes);
		p->malloc_probes = NULL;
		return log_warning_errno(r, "Allocation probes unavailable: %m");
	}
	return 0;
}

int features__load_uprobes(struct profd *p)
{
	int r;

	if (p->uprobes)
		return 0;
	r = uprobes__new(UPROBES_RINGBUF_BYTES, on_uprobe, p, &p->uprobes);
	if (r < 0)
		return log_warning_errno(
		    r, "CUDA/NVTX/user probes unavailable (uprobe BPF program): %m");
	r = profd__add_watch(p, record_reader__fd(uprobes__reader(p->uprobes)), &p->uprobes_watch, on_uprobes_ready);
	if (r < 0) {
		uprobes__free(p->uprobes);
		p->uprobes = NULL;
		return log_warning_errno(r, "CUDA/NVTX/user probes unavailable: %m");
	}
	return 0;
}

/*
 * features__attach_uprobes() - attach the CUDA/NVTX/--uprobe probes @req
 * asks for to the target of the session in @slot. What could not be
 * attached is noted for the gpu report, and logged; the session runs on.
 */
void features__attach_uprobes(struct profd *p, unsigned slot, const struct request *req)
{
	struct session *s = p->slots[slot];
	struct proc *main = session__main_proc(s);
	unsigned want = ((req->events & EVENT_CUDA) ? GPU_WANT_CUDA : 0) |
			((req->events & EVENT_NVTX) ? GPU_WANT_NVTX : 0);
	int r;

	if (features__load_uprobes(p) < 0) {
		gpu_acc__note_probe(session__gpu(s), session__pid(s), "uprobes", "",
				    "failed: BPF uprobes unavailable");
		return;
	}
	pthread_rwlock_rdlock(&main->as_lock);
	r = uprobes__attach(p->uprobes, slot, session__id(s), session__pid(s), main->as, want,
			    req->uprobes, note_probe, session__gpu(s));
	pthread_rwlock_unlock(&main->as_lock);
	if (r < 0)
		log_warning_errno(r, "Session %lld: uprobes not all attached: %m",
				  (long long)session__id(s));
}

/*
 * features__start() - the bookkeeping of the session just attached in
 * @slot, before its probes are attached: lost counts from here on are its
 * own, and its probe rates are measured from now, with the limits @req
 * asked for.
 */
void features__start(struct profd *p, unsigned slot, const struct request *req)
{
	uint64_t now = now_ns(CLOCK_MONOTONIC);

	for (unsigned k = 0; k < PROBE_NR; k++) {
		const struct probe_feature *f = &features[k];
		struct probe_state *st = &p->probes[slot][k];

		*st = (struct probe_state){.rate_mono_ns = now};
		if (f->lost)
			st->lost_charged = f->lost(p, slot);
	}
	p->probes[slot][PROBE_MALLOC].max_per_s = req->malloc_max_hits_per_s;
	p->probes[slot][PROBE_UPROBES].max_per_s = req->uprobe_max_calls_per_s;
	p->probes[slot][PROBE_UPROBES].calls_base = uprobes_calls(p, slot);
	p->probes[slot][PROBE_UPROBES].calls_seen = p->probes[slot][PROBE_UPROBES].calls_base;
}

/* features__charge_lost() - records lost in the kernel since the last call, charged to their
 * sessions. */
void features__charge_lost(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		if (!p->slots[i])
			continue;
		for (unsigned k = 0; k < PROBE_NR; k++) {
			const struct probe_feature *f = &features[k];
			struct probe_state *st = &p->probes[i][k];
			uint64_t lost;

			if (!f->lost)
				continue;
			lost = f->lost(p, i);
			if (lost > st->lost_charged)
				f->charge_lost(p, i, lost - st->lost_charged);
			st->lost_charged = lost;
		}
	}
}

/*
 * Detach a feature's probes of the session in @slot if its processes make
 * more probed calls per second than the session's limit: each costs the
 * target microseconds, and a probe on a hot function would slow it many
 * times. What they recorded stays; the report says when and why they went.
 */
static void check_rate(struct profd *p, unsigned slot, unsigned k, uint64_t now)
{
	const struct probe_feature *f = &features[k];
	struct probe_state *st = &p->probes[slot][k];
	uint64_t dt = now - st->rate_mono_ns, calls;
	char status[192];
	double rate;

	if (!f->calls || st->stopped || !st->max_per_s || !f->active(p, slot) ||
	    dt < NSEC_PER_SEC / 2)
		return;
	calls = f->calls(p, slot);
	rate = calls > st->calls_seen ? (double)(calls - st->calls_seen) * 1e9 / (double)dt : 0;
	st->calls_seen = calls;
	st->rate_mono_ns = now;
	if (rate <= (double)st->max_per_s)
		return;
	st->stopped = true;
	snprintf(
	    status, sizeof(status),
	    "detached: %.0f %s, over the limit of %llu/s (attach %s), after %llu since the attach",
	    rate, f->calls_unit, (unsigned long long)st->max_per_s, f->limit_option,
	    (unsigned long long)(calls - st->calls_base));
	f->stopped(p, slot, status); /* first: calls entered after the count are not recorded */
	log_warning("Session %lld: %s %s", (long long)session__id(p->slots[slot]), f->what, status);
}

/*
 * Probes for the processes a session follows (--children): uprobes are per
 * process, so a forked child has none of its parent's. Each feature is
 * tried once per child.
 */
static void attach_children(struct profd *p, unsigned slot)
{
	struct session *s = p->slots[slot];
	unsigned wanted = 0;
	struct proc *proc;
	size_t iter = 0;

	for (unsigned k = 0; k < PROBE_NR; k++)
		if (features[k].attach_child && features[k].active(p, slot))
			wanted |= 1u << k;
	if (!wanted || !session__follows_children(s))
		return;
	if (session__discover_children(s, sampler__targets_fd(p->env.sampler)) < 0)
		log_warning("Session %lld: out of memory for its children",
			    (long long)session__id(s));
	while ((proc = session__next_proc(s, &iter))) {
		if (proc == session__main_proc(s))
			continue;
		for (unsigned k = 0; k < PROBE_NR; k++) {
			int r;

			if (!(wanted & (1u << k)) || (proc->probes_tried & (1u << k)))
				continue;
			proc->probes_tried |= 1u << k;
			r = features[k].attach_child(p, slot, proc);
			if (r < 0 && r != -EBUSY)
				log_warning_errno(r, "Session %lld: no %s in child %d: %m",
						  (long long)session__id(s), features[k].child_what,
						  proc->pid);
		}
	}
}

/*
 * features__tick() - the loop's periodic work for every running session's
 * features (@mono_ns: CLOCK_MONOTONIC now): rate limits, probes for new
 * children, and once per flush window a look at newly mapped libraries.
 */
void features__tick(struct profd *p, uint64_t mono_ns)
{
	bool refresh = mono_ns - p->last_refresh_ns >= PROFD_WINDOW_NS;

	if (refresh)
		p->last_refresh_ns = mono_ns;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		if (!p->slots[i])
			continue;
		for (unsigned k = 0; k < PROBE_NR; k++)
			check_rate(p, i, k, mono_ns);
		attach_children(p, i);
		for (unsigned k = 0; refresh && k < PROBE_NR; k++)
			if (features[k].refresh && features[k].active(p, i))
				features[k].refresh(p, i);
	}
}

/* features__before_flush() - what each feature's collector counted, into its session. */
void features__before_flush(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		for (unsigned k = 0; p->slots[i] && k < PROBE_NR; k++)
			if (features[k].before_flush)
				features[k].before_flush(p, i);
}

/* features__stop() - stop every probe of the session in @slot (it ends). */
void features__stop(struct profd *p, unsigned slot)
{
	for (unsigned k = 0; k < PROBE_NR; k++)
		features[k].stop(p, slot);
}
