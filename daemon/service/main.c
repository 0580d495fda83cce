/* main.c - the daemon: options, capability checks, the event loop, sessions and commands. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "report/analyze.h"
#include "service/authz.h"
#include "service/config.h"
#include "collect/counters.h"
#include "collect/malloc_probes.h"
#include "log.h"
#include "report/memory.h"
#include "service/notify.h"
#include "collect/offcpu.h"
#include "collect/uprobes.h"
#include "report/gpu.h"
#include "protocol.h"
#include "report/query.h"
#include "service/request.h"
#include "symbols/resymbolize.h"
#include "collect/sampler.h"
#include "service/server.h"
#include "session/session.h"
#include "report/sql.h"
#include "store/store.h"
#include "symbols/symbolize.h"
#include "report/threads.h"
#include "collect/unwind_worker.h"
#include "util.h"

/* Samples waiting for or in DWARF unwinding, at most (~20 KiB each). */
#define UNWIND_QUEUE 1024
/* Off-CPU intervals: the ring buffer is half the samples' (ring_buffer_bytes).
 * The shortest interval recorded: shorter
 * blocks are not counted (a lock handed over in microseconds is noise here). */
#define OFFCPU_MIN_BLOCK_NS (10 * NSEC_PER_USEC)
/* Allocation samples: ~2.5 KiB per sampled call, 64 bytes per return and free. */
#define MALLOC_RINGBUF_BYTES (4u << 20)
/* profctl sql: result size cap, and how long a statement may hold up the loop. */
#define SQL_MAX_RESULT_BYTES (16u << 20)
#define SQL_TIMEOUT_NS (5 * NSEC_PER_SEC)
/* How often retention runs (and once at start), when configured. */
#define RETENTION_INTERVAL_NS (600 * NSEC_PER_SEC)
/* CUDA/NVTX/uprobe call records: ~330 bytes + 8 per stack frame each. */
#define UPROBES_RINGBUF_BYTES (8u << 20)
/* How often the loop wakes up to end expired sessions; flushes are every PROFD_WINDOW_NS. */
#define TICK_NS (200 * NSEC_PER_MSEC)

struct profd {
	int epfd;
	bool quit;
	struct session_env env;
	struct server *server;
	struct unwind_worker *worker;
	struct offcpu *offcpu;
	struct malloc_probes *malloc_probes;              /* allocation probes; NULL if they cannot load */
	struct uprobes *uprobes;                /* uprobes: CUDA, NVTX, --uprobe; NULL if unavailable */
	struct unwinder *unwinder;        /* the main thread's, for off-CPU and allocation stacks */
	struct counters_support counters; /* what this machine can count */
	struct session *slots[PROFILE_MAX_SLOTS];
	struct watch sampler_watch, timer_watch, signal_watch, worker_watch, offcpu_watch, malloc_watch,
		uprobes_watch;
	int timer_fd, signal_fd;
	uint64_t last_flush_ns;
	uint64_t last_rescan_ns; /* CLOCK_MONOTONIC of the last uprobes__rescan() round */
	uint64_t last_retention_ns; /* CLOCK_MONOTONIC */
	uint64_t watchdog_ns;       /* WATCHDOG=1 this often; 0: no watchdog */
	uint64_t last_watchdog_ns;
	uint64_t flush_errors;      /* failed flushes in a row */
	uint64_t flush_failing_since_ns; /* CLOCK_REALTIME of the first of them */
	char flush_error[256];      /* SQLite's message for the last one */
	/* A session's pidfd, watched for the target's exit. */
	struct pid_watch {
		struct watch watch;
		struct profd *profd;
		unsigned slot;
	} pid_watches[PROFILE_MAX_SLOTS];
};

/* The effective settings: defaults, then profd.conf, then the command line. */
static struct profd_config cfg;

/* A sample from the ring buffer, or back from the unwinding thread. */
static void on_sample(void *ctx, const struct sample_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = p->slots[e->slot];
	struct proc *proc;

	/* A sample of a session that already ended (or never started) is dropped. */
	if (!s)
		return;
	if (e->event == PROFILE_EVENT_THREAD_EXIT) {
		session__on_thread_exit(s, e);
		return;
	}
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc) {
		/* Not the session's process, or a child gone before its mappings were read. */
		if ((pid_t)e->pid != s->pid && s->follow_children)
			session__count_dropped(s, e);
		return;
	}
	if (e->flags & SAMPLE_HAS_REGS) {
		if (unwind_worker__submit(p->worker, e, size, proc->as, &proc->as_lock, s->unwind) < 0)
			session__count_dropped(s, e);
		return;
	}
	session__on_sample(s, e);
}

static const char *const offcpu_state_names[OFFCPU_NR_STATES] = {
	[OFFCPU_STATE_RUNNABLE] = "runnable",
	[OFFCPU_STATE_SLEEPING] = "sleeping",
	[OFFCPU_STATE_IO] = "io",
	[OFFCPU_STATE_OTHER] = "other",
};

/* An off-CPU interval from the BPF program: split into its blocked and its runnable part. */
static void on_offcpu(void *ctx, const struct offcpu_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = e->slot < PROFILE_MAX_SLOTS ? p->slots[e->slot] : NULL;
	uint64_t ips[2 * OFFCPU_MAX_FRAMES];
	uint32_t flags = 0;
	struct proc *proc;
	int ulen;

	if (!s || !(s->events & EVENT_OFFCPU))
		return;
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc) {
		session__count_offcpu_lost(s, 1);
		return;
	}
	memcpy(ips, e->ips, e->kstack_len * sizeof(uint64_t));
	pthread_rwlock_rdlock(&proc->as_lock);
	ulen = offcpu__user_stack(p->unwinder, proc->as, e, ips + e->kstack_len,
				  OFFCPU_MAX_FRAMES, &flags);
	pthread_rwlock_unlock(&proc->as_lock);
	if (ulen < 0)
		ulen = 0;
	if (e->state < OFFCPU_NR_STATES && e->duration_ns > e->runq_ns)
		session__on_offcpu(s, (pid_t)e->pid, (pid_t)e->tid, e->comm,
				   e->time_ns + e->duration_ns, offcpu_state_names[e->state], e->duration_ns - e->runq_ns, ips,
				   e->kstack_len, (unsigned)ulen);
	/* Woken but waiting for a CPU: runnable time, in the same blocking stack. */
	if (e->runq_ns && e->state != OFFCPU_STATE_RUNNABLE)
		session__on_offcpu(s, (pid_t)e->pid, (pid_t)e->tid, e->comm,
				   e->time_ns + e->duration_ns, "runnable", e->runq_ns, ips, e->kstack_len, (unsigned)ulen);
}

/* A record of the allocation probes; an allocation's user stack is completed with CFI here. */
static void on_malloc(void *ctx, const struct malloc_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = p->slots[e->slot];
	const struct malloc_alloc_event *a = (const void *)e;
	uint64_t ips[MALLOC_MAX_FRAMES];
	uint32_t flags;
	struct proc *proc;
	int n;

	if (!s)
		return;
	if (e->kind != MALLOC_EV_ALLOC) {
		session__on_malloc(s, e, NULL, 0);
		return;
	}
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc)
		return;
	pthread_rwlock_rdlock(&proc->as_lock);
	n = unwinder__complete_walk(p->unwinder, proc->as,
				    e->flags & MALLOC_HAS_REGS ? (const uint64_t *)a->regs : NULL,
				    malloc_alloc_event_stack(a), e->stack_size,
				    (const uint64_t *)a->ips, e->ustack_len, ips, ARRAY_SIZE(ips),
				    &flags);
	pthread_rwlock_unlock(&proc->as_lock);
	session__on_malloc(s, e, ips, n > 0 ? (unsigned)n : 0);
}

static void on_malloc_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, malloc_watch));

	malloc_probes__poll(p->malloc_probes);
}

static void on_offcpu_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, offcpu_watch));

	offcpu__poll(p->offcpu);
}

/* Off-CPU intervals lost in the kernel (a running total per slot), charged to their sessions. */
static void collect_offcpu_lost(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		struct session *s = p->slots[i];
		uint64_t lost;

		if (!s || !p->offcpu)
			continue;
		lost = offcpu__lost(p->offcpu, i);
		if (lost > s->offcpu_lost_kernel)
			session__count_offcpu_lost(s, lost - s->offcpu_lost_kernel);
		s->offcpu_lost_kernel = lost;
	}
}

/* An attach outcome of a probe (uprobes_note_fn), kept for the session's next flush. */
static void note_probe(void *ctx, pid_t pid, const char *what, const char *file,
		       const char *status)
{
	gpu_acc__note_probe(ctx, pid, what, file, status);
}

/*
 * Detach the CUDA/NVTX/generic probes of the session in @slot if its
 * processes make more probed calls per second than its limit: each costs
 * the target microseconds, and a probe on a hot function would slow it
 * many times. What they recorded stays; `gpu` says when and why they went.
 */
static void check_gpu_rate(struct profd *p, unsigned slot, uint64_t now)
{
	struct session *s = p->slots[slot];
	uint64_t dt = now - s->gpu_rate_mono_ns, calls;
	char status[160];
	double rate;

	if (s->gpu_stopped || !s->gpu_max_calls_per_s || !uprobes__wanted(p->uprobes, slot) ||
	    dt < NSEC_PER_SEC / 2)
		return;
	/* Calls lost in the kernel ran in the target all the same. */
	calls = s->gpu_calls + uprobes__lost(p->uprobes, slot);
	rate = (double)(calls - s->gpu_calls_seen) * 1e9 / (double)dt;
	s->gpu_calls_seen = calls;
	s->gpu_rate_mono_ns = now;
	if (rate <= (double)s->gpu_max_calls_per_s)
		return;
	s->gpu_stopped = true;
	uprobes__detach(p->uprobes, slot);
	snprintf(status, sizeof(status),
		 "detached: %.0f probed calls/s, over the limit of %llu/s (attach --uprobe-max-rate)",
		 rate, (unsigned long long)s->gpu_max_calls_per_s);
	gpu_acc__note_probe(s->gpu, s->pid, "all probes", "", status);
	log_warning("Session %lld: uprobes %s", (long long)s->id, status);
}

/*
 * CUDA/NVTX/generic probes for the processes a session follows
 * (--children): uprobes are per process, so a forked child has none of its
 * parent's. Its calls from its start to here are not seen.
 */
static void attach_gpu_children(struct profd *p)
{
	for (unsigned i = 0; p->uprobes && i < PROFILE_MAX_SLOTS; i++) {
		struct session *s = p->slots[i];
		struct proc *proc;

		if (!s || !s->follow_children || !uprobes__wanted(p->uprobes, i))
			continue;
		if (session__discover_children(s, sampler__targets_fd(p->env.sampler)) < 0)
			log_warning("Session %lld: out of memory for its children", (long long)s->id);
		hashmap__for_each(&s->procs, k, proc)
		{
			int r;

			if (proc->gpu_tried || proc == s->main)
				continue;
			proc->gpu_tried = true;
			pthread_rwlock_rdlock(&proc->as_lock);
			r = uprobes__attach_more(p->uprobes, i, proc->pid, proc->as, note_probe, s->gpu);
			pthread_rwlock_unlock(&proc->as_lock);
			if (r < 0 && r != -EBUSY)
				log_warning_errno(r, "Session %lld: no CUDA/NVTX probes in child %d: %m",
						  (long long)s->id, proc->pid);
		}
	}
}

/* A call record of a CUDA/NVTX/generic probe. */
static void on_gpu(void *ctx, const struct gpu_probe *probe, const struct uprobe_event *e,
		   size_t size)
{
	struct profd *p = ctx;
	struct session *s = e->slot < PROFILE_MAX_SLOTS ? p->slots[e->slot] : NULL;
	struct proc *proc;

	/* A late record of a session that ended, its slot taken by another: not ours. */
	if (!s || probe->owner != s->id)
		return;
	s->gpu_calls++;
	proc = session__proc(s, (pid_t)e->pid);
	if (proc)
		pthread_rwlock_rdlock(&proc->as_lock);
	gpu_acc__on_event(s->gpu, s, p->env.sym, proc ? proc->as : NULL, probe, e);
	if (proc)
		pthread_rwlock_unlock(&proc->as_lock);
}

static void on_uprobes_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, uprobes_watch));

	uprobes__poll(p->uprobes);
}

/* Probe calls lost in the kernel (a running total per slot), charged to their sessions. */
static void collect_gpu_lost(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS && p->uprobes; i++) {
		struct session *s = p->slots[i];
		uint64_t lost;

		if (!s)
			continue;
		lost = uprobes__lost(p->uprobes, i);
		if (lost > s->gpu_lost_kernel)
			gpu_acc__count_lost(s->gpu, lost - s->gpu_lost_kernel);
		s->gpu_lost_kernel = lost;
	}
}

/* Take everything the sampler and the unwinding thread have for us. */
static void collect(struct profd *p, bool wait_for_unwinder)
{
	if (p->offcpu)
		offcpu__poll(p->offcpu);
	if (p->malloc_probes)
		malloc_probes__poll(p->malloc_probes);
	if (p->uprobes) {
		uprobes__poll(p->uprobes);
		collect_gpu_lost(p);
	}
	sampler__poll(p->env.sampler);
	if (wait_for_unwinder)
		unwind_worker__wait_idle(p->worker);
	unwind_worker__drain(p->worker, on_sample, p);
}

/*
 * Allocation probes for the processes a session follows (--children): the
 * uprobes are per process, so a forked child has none of its parent's.
 * Its calls from its start to here are not seen.
 */
static void attach_malloc_children(struct profd *p)
{
	for (unsigned i = 0; p->malloc_probes && i < PROFILE_MAX_SLOTS; i++) {
		struct session *s = p->slots[i];
		struct proc *proc;

		if (!s || !s->malloc_sample_bytes || !s->follow_children || s->malloc_totals.stopped_ns)
			continue;
		if (session__discover_children(s, sampler__targets_fd(p->env.sampler)) < 0)
			log_warning("Session %lld: out of memory for its children", (long long)s->id);
		hashmap__for_each(&s->procs, k, proc)
		{
			char probes[256];
			int r;

			if (proc->malloc_tried || proc == s->main)
				continue;
			proc->malloc_tried = true;
			r = malloc_probes__attach(p->malloc_probes, i, proc->pid, s->malloc_sample_bytes, probes,
					 sizeof(probes));
			if (r < 0 && r != -EBUSY)
				log_warning_errno(r, "Session %lld: no allocation probes in child %d: %m",
						  (long long)s->id, proc->pid);
		}
	}
}

/*
 * Detach the allocation probes of session @s (in @slot) if they trap more
 * than its limit: each hit costs the target a few microseconds, and an
 * allocation-heavy program would run many times slower. What they recorded
 * stays; the report says when they stopped.
 */
static void check_malloc_rate(struct profd *p, unsigned slot, struct session *s, uint64_t hits)
{
	uint64_t now = now_ns(CLOCK_MONOTONIC), dt = now - s->malloc_hits_mono_ns;
	double rate;

	if (dt < NSEC_PER_SEC / 2)
		return;
	rate = (double)(hits - s->malloc_hits_seen) * 1e9 / (double)dt;
	s->malloc_hits_seen = hits;
	s->malloc_hits_mono_ns = now;
	if (!s->malloc_max_hits_per_s || rate <= (double)s->malloc_max_hits_per_s)
		return;
	s->malloc_totals.stopped_ns = now_ns(CLOCK_REALTIME);
	malloc_probes__detach(p->malloc_probes, slot);
	log_warning("Session %lld: allocation probes detached: %.0f probe hits/s, over the limit of "
		    "%llu/s (attach --malloc-max-rate)",
		    (long long)s->id, rate, (unsigned long long)s->malloc_max_hits_per_s);
}

/* The allocation probes' counters, into each session that traces allocations, before a flush. */
static void collect_malloc_stats(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		struct session *s = p->slots[i];
		struct malloc_stats st;
		uint64_t stopped_ns;

		if (!s || !s->malloc_sample_bytes || !p->malloc_probes || malloc_probes__stats(p->malloc_probes, i, &st) < 0)
			continue;
		stopped_ns = s->malloc_totals.stopped_ns;
		s->malloc_totals = (struct store_malloc){
			.stopped_ns = stopped_ns,
			.free_calls = st.calls[MALLOC_FUNC_FREE] + st.calls[MALLOC_FUNC_MUNMAP],
			.malloc_bytes = st.alloc_bytes,
			.sampled = st.sampled,
			.lost = st.ringbuf_full,
		};
		for (unsigned f = 0; f < MALLOC_NR_FUNCS; f++)
			if (f != MALLOC_FUNC_FREE && f != MALLOC_FUNC_MUNMAP)
				s->malloc_totals.malloc_calls += st.calls[f];
		if (!stopped_ns && malloc_probes__probing(p->malloc_probes, i))
			check_malloc_rate(p, i, s,
					2 * s->malloc_totals.malloc_calls + s->malloc_totals.free_calls);
	}
}

/* STATUS= for systemctl status: what profd is doing. */
static void notify_status(struct profd *p)
{
	unsigned running = 0;

	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		running += p->slots[i] != NULL;
	notify__send("STATUS=%u session(s) running%s", running,
		     p->flush_errors ? "; database writes failing" : "");
}

/* Write every running session's pending samples in one transaction. */
static int flush_all(struct profd *p)
{
	int r;

	/* Every flush, the timer's and the one before each report alike. */
	collect_malloc_stats(p);
	r = store__begin(p->env.store);
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		if (!p->slots[i])
			continue;
		r = session__flush(p->slots[i], &p->env);
		if (r < 0)
			goto fail;
	}
	r = store__commit(p->env.store);
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			session__flush_done(p->slots[i]);
	p->last_flush_ns = now_ns(CLOCK_MONOTONIC);
	if (p->flush_errors)
		log_info("Database writes work again, after %llu failed flush(es)",
			 (unsigned long long)p->flush_errors);
	p->flush_errors = 0;
	return 0;
fail:
	store__rollback(p->env.store);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			session__flush_failed(p->slots[i]);
	/* Report once per burst of failures (a full disk fails every second). */
	snprintf(p->flush_error, sizeof(p->flush_error), "%s", store__errmsg(p->env.store));
	if (p->flush_errors++ == 0) {
		p->flush_failing_since_ns = now_ns(CLOCK_REALTIME);
		log_error_errno(r, "Failed to write samples to the database: %s (will retry)",
				p->flush_error);
	}
	p->last_flush_ns = now_ns(CLOCK_MONOTONIC);
	return r;
}

/*
 * End the session in @slot: stop sampling, take the samples still in the
 * ring buffer, write them and the end state. The session is freed even if
 * the write fails (its row then stays 'running' and is marked 'interrupted'
 * at the next start).
 */
static int end_session(struct profd *p, unsigned slot, const char *reason)
{
	struct session *s = p->slots[slot];
	uint64_t ended_ns = now_ns(CLOCK_REALTIME); /* when sampling stops, not when the flush ends */
	int r;

	if (!s)
		return -ENOENT;
	/* The last counter values, before the events stop. */
	session__read_counters(s, &p->env);
	/* Before the sampler drops the slot's targets from the map both share. */
	if (p->offcpu)
		offcpu__remove_target(p->offcpu, slot, s->pid);
	if (p->malloc_probes)
		malloc_probes__detach(p->malloc_probes, slot);
	if (p->uprobes)
		uprobes__detach(p->uprobes, slot);
	session__stop(s, &p->env);
	collect(p, true);
	collect_offcpu_lost(p);
	r = flush_all(p);
	if (r == 0) {
		r = store__session_end(p->env.store, s->id, reason, ended_ns);
		if (r < 0)
			log_error_errno(r, "Failed to mark session %lld ended: %s",
					(long long)s->id, store__errmsg(p->env.store));
	}
	log_info("session %lld ended (%s): %llu samples", (long long)s->id, reason,
		 (unsigned long long)s->samples);
	p->slots[slot] = NULL;
	{
		struct proc *proc;

		hashmap__for_each(&s->procs, i, proc) unwind_worker__forget(p->worker, proc->as);
	}
	session__free(s);
	notify_status(p);
	return r;
}

/*
 * Delete what retention_days and max_db_bytes say is too old or too much
 * (never a running session), and log what was done.
 */
static void run_retention(struct profd *p)
{
	struct store_retention res;
	int r;

	p->last_retention_ns = now_ns(CLOCK_MONOTONIC);
	if (!cfg.retention_ns && !cfg.max_db_bytes)
		return;
	/* Pending samples first, so that the deletes run in a quiet store
	 * (at start, before the sampler exists, there are none). */
	if (p->env.sampler) {
		collect(p, false);
		flush_all(p);
	}
	r = store__retention(p->env.store, now_ns(CLOCK_REALTIME), cfg.retention_ns,
			     cfg.max_db_bytes, &res);
	if (r < 0) {
		log_error_errno(r, "Retention failed: %s", store__errmsg(p->env.store));
		return;
	}
	if (res.sessions_deleted) {
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				session__forget_row_ids(p->slots[i]);
		log_info("retention: deleted %u ended session(s); database %llu -> %llu bytes",
			 res.sessions_deleted, (unsigned long long)res.bytes_before,
			 (unsigned long long)res.bytes_after);
	}
	if (res.over_limit)
		log_warning("database is larger than max_db_bytes (%llu) with only running "
			    "sessions left to delete",
			    (unsigned long long)cfg.max_db_bytes);
}

static void on_pid_exit(struct watch *w, uint32_t events)
{
	struct pid_watch *pw = (struct pid_watch *)w;

	end_session(pw->profd, pw->slot, "target_exited");
}

static void on_sampler(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, sampler_watch));

	sampler__poll(p->env.sampler);
}

static void on_worker(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, worker_watch));

	unwind_worker__drain(p->worker, on_sample, p);
}

static void on_timer(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, timer_watch));
	uint64_t expirations, now = now_ns(CLOCK_MONOTONIC);

	if (read(p->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		return;
	/* From the loop itself: a loop stuck in a slow query or a deadlock stops it. */
	if (p->watchdog_ns && now - p->last_watchdog_ns >= p->watchdog_ns) {
		notify__send("WATCHDOG=1");
		p->last_watchdog_ns = now;
	}
	collect(p, false);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && session__expired(p->slots[i], now))
			end_session(p, i, "duration");
	attach_malloc_children(p);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && session__read_memory(p->slots[i], now) < 0)
			log_warning("Session %lld: out of memory for its memory readings",
				    (long long)p->slots[i]->id);
	if (now - p->last_retention_ns >= RETENTION_INTERVAL_NS)
		run_retention(p);
	/* Libraries mapped since the attach (libcuda.so at cuInit()) get their
	 * probes. Its own clock: queries flush too, and may keep the flush
	 * below from running for a while. */
	for (unsigned i = 0; p->uprobes && i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			check_gpu_rate(p, i, now);
	attach_gpu_children(p);
	if (p->uprobes && now - p->last_rescan_ns >= PROFD_WINDOW_NS) {
		p->last_rescan_ns = now;
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				uprobes__rescan(p->uprobes, i, note_probe, p->slots[i]->gpu);
	}
	if (now - p->last_flush_ns >= PROFD_WINDOW_NS) {
		collect_offcpu_lost(p);
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				session__read_counters(p->slots[i], &p->env);
		flush_all(p);
	}
}

static void on_signal(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, signal_watch));
	struct signalfd_siginfo si;

	if (read(p->signal_fd, &si, sizeof(si)) == sizeof(si)) {
		log_info("received %s, stopping", strsignal((int)si.ssi_signo));
		p->quit = true;
	}
}

static json_t *ok_response(json_t *fields)
{
	json_t *resp = json_pack("{s:i, s:b}", "v", PROFD_PROTOCOL_VERSION, "ok", 1);

	if (fields)
		json_object_update(resp, fields);
	json_decref(fields);
	return resp;
}

static json_t *query_response(int r, json_t *fields, int64_t id)
{
	if (r == -ENOENT)
		return json_error_response(r, "no session %lld", (long long)id);
	if (r < 0)
		return json_error_response(r, "query failed: %s", strerror(-r));
	return ok_response(fields);
}

/* A report of a sampled event: say why there is none. */
static json_t *event_response(int r, json_t *fields, const struct request *req)
{
	if (r == -ENODATA)
		return json_error_response(r, "session %lld did not sample %s (attach --events cpu,%s)",
					   (long long)req->session, req->sampled_event,
					   req->sampled_event);
	if (r == -EOPNOTSUPP)
		return json_error_response(r, "%s is unsupported on this machine (no hardware PMU): "
					      "session %lld has no samples of it",
					   req->sampled_event, (long long)req->session);
	return query_response(r, fields, req->session);
}

/*
 * The one check every command naming a session goes through: sessions that
 * are not the requester's are invisible to it, as if absent (authz.h).
 */
static bool may_see(struct profd *p, const struct ucred *peer, bool admin, int64_t id)
{
	sqlite3_stmt *stmt;
	bool ok = false;

	if (admin)
		return true;
	if (sqlite3_prepare_v2(store__db(p->env.store), "SELECT uid FROM sessions WHERE id = ?1",
			       -1, &stmt, NULL) != SQLITE_OK)
		return false;
	sqlite3_bind_int64(stmt, 1, id);
	ok = sqlite3_step(stmt) == SQLITE_ROW &&
	     authz__may_see(peer, admin, (uid_t)sqlite3_column_int64(stmt, 0));
	sqlite3_finalize(stmt);
	return ok;
}

/* Drop from a sessions list those the requester may not see. */
static void filter_sessions(json_t *list, const struct ucred *peer, bool admin)
{
	json_t *item;
	size_t i;

	json_array_foreach(list, i, item)
	{
		if (!authz__may_see(peer, admin,
				    (uid_t)json_integer_value(json_object_get(item, "uid")))) {
			json_array_remove(list, i);
			i--;
		}
	}
}

static json_t *not_allowed(pid_t pid)
{
	return json_error_response(-EPERM,
				   "not allowed to profile PID %d: it is not yours (same uid and gid, "
				   "not setuid), and you are not root or in group '%s'",
				   pid, PROFD_ADMIN_GROUP);
}

static int add_watch(int epfd, int fd, struct watch *w, void (*fn)(struct watch *, uint32_t))
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };

	w->fn = fn;
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/*
 * The uprobe BPF objects (allocation probes; CUDA, NVTX and --uprobe) are
 * loaded at their first use, not at start: their ring buffers are resident
 * as soon as they are mapped, and mapped twice (24 MiB of RSS together), for
 * features most sessions do not ask for. Each returns 0 or -errno (logged).
 */
static int malloc_probes_load(struct profd *p)
{
	int r;

	if (p->malloc_probes)
		return 0;
	r = malloc_probes__new(MALLOC_RINGBUF_BYTES, sampler__targets_fd(p->env.sampler), on_malloc, p, &p->malloc_probes);
	if (r < 0)
		return log_warning_errno(r, "Allocation probes unavailable (uprobe BPF programs): %m");
	r = add_watch(p->epfd, malloc_probes__fd(p->malloc_probes), &p->malloc_watch, on_malloc_ready);
	if (r < 0) {
		malloc_probes__free(p->malloc_probes);
		p->malloc_probes = NULL;
		return log_warning_errno(r, "Allocation probes unavailable: %m");
	}
	return 0;
}

static int uprobes_load(struct profd *p)
{
	int r;

	if (p->uprobes)
		return 0;
	r = uprobes__new(UPROBES_RINGBUF_BYTES, on_gpu, p, &p->uprobes);
	if (r < 0)
		return log_warning_errno(r, "CUDA/NVTX/user probes unavailable (uprobe BPF program): %m");
	r = add_watch(p->epfd, uprobes__fd(p->uprobes), &p->uprobes_watch, on_uprobes_ready);
	if (r < 0) {
		uprobes__free(p->uprobes);
		p->uprobes = NULL;
		return log_warning_errno(r, "CUDA/NVTX/user probes unavailable: %m");
	}
	return 0;
}

static json_t *cmd_attach(struct profd *p, const struct ucred *peer, bool admin,
			  const struct request *req)
{
	struct session_params params = {
		.pid = (pid_t)req->pid,
		.uid = peer->uid,
		.gid = peer->gid,
		.admin = admin,
		.freq_hz = req->freq_hz ? req->freq_hz : cfg.default_freq_hz,
		.duration_ns = req->duration_ns,
		.events = req->events_str,
		.unwind = req->unwind,
		.stack_bytes = req->stack_bytes,
		.follow_children = req->children,
		.python = req->python,
		.event_bits = req->events,
		.sampled_event = req->sampled_event,
		.memory_interval_ns = req->memory_interval_ns,
		.malloc_sample_bytes = req->malloc_sample_bytes,
		.malloc_max_hits_per_s = req->malloc_max_hits_per_s,
		.pid_start_ticks = req->pid_start_ticks,
		.label = req->label,
		.max_threads = cfg.max_threads,
		.max_stacks = cfg.max_stacks,
	};
	char probes[256] = "";
	struct session *s;
	json_t *fields;
	unsigned slot;
	int r;

	if (params.pid == getpid())
		return json_error_response(-EINVAL, "refusing to profile profd itself");
	if ((req->events & EVENT_MALLOC) && malloc_probes_load(p) < 0)
		return json_error_response(-EOPNOTSUPP, "allocation probes are unavailable: their BPF "
							"program did not load (see profd's log)");
	/* Before saying who profiles it: another user's process is not the requester's business.
	 * session__new() checks again, on the process its pidfd pins. */
	if (!admin && authz__may_trace(params.pid, peer->uid, peer->gid) == -EPERM)
		return not_allowed(params.pid);
	for (slot = 0; slot < PROFILE_MAX_SLOTS; slot++) {
		if (p->slots[slot] && p->slots[slot]->pid == params.pid)
			return json_error_response(-EBUSY, "PID %d is already profiled by session %lld",
						   params.pid, (long long)p->slots[slot]->id);
	}
	{
		unsigned running = 0;

		for (slot = 0; slot < PROFILE_MAX_SLOTS; slot++)
			running += p->slots[slot] != NULL;
		if (running >= cfg.max_sessions)
			return json_error_response(-EBUSY,
						   "%u sessions are running, profd's limit "
						   "(max_sessions in profd.conf): detach one first",
						   running);
	}
	for (slot = 0; slot < PROFILE_MAX_SLOTS && p->slots[slot]; slot++)
		;
	if (slot == PROFILE_MAX_SLOTS)
		return json_error_response(-EBUSY, "too many running sessions (%d)",
					   PROFILE_MAX_SLOTS);

	r = session__new(&p->env, slot, &params, &s);
	switch (r) {
	case 0:
		break;
	case -ESRCH:
		return json_error_response(r, "no process with PID %d", params.pid);
	case -ESTALE:
		return json_error_response(r, "PID %d now is another process (its start time is not "
					      "%llu): the process asked for has exited",
					   params.pid, (unsigned long long)params.pid_start_ticks);
	case -EPERM:
	case -EACCES:
		return not_allowed(params.pid);
	case -EBUSY:
		return json_error_response(r, "PID %d is already being profiled", params.pid);
	case -E2BIG:
		return json_error_response(r, "PID %d has more than %u threads, profd's limit per "
					      "session (max_threads_per_session in profd.conf)",
					   params.pid, cfg.max_threads);
	case -EOPNOTSUPP:
		return json_error_response(r, "no CPU sampling event can be opened on this machine");
	case -EIO:
		return json_error_response(r, "database error: %s", store__errmsg(p->env.store));
	default:
		return json_error_response(r, "cannot attach to PID %d: %s", params.pid,
					   strerror(-r));
	}
	p->slots[slot] = s;
	if ((req->events & EVENT_OFFCPU) && p->offcpu) {
		s->offcpu_lost_kernel = offcpu__lost(p->offcpu, slot);
		r = offcpu__add_target(p->offcpu, slot, s->pid);
		if (r < 0)
			log_warning_errno(r, "Session %lld: off-CPU tracing not started: %m",
					  (long long)s->id);
	}
	if (req->events & EVENT_MALLOC) {
		r = malloc_probes__attach(p->malloc_probes, slot, s->pid, req->malloc_sample_bytes, probes,
				 sizeof(probes));
		if (r < 0) {
			int64_t id = s->id;

			end_session(p, slot, "error");
			if (r == -ENOENT)
				return json_error_response(-ENOENT, "no allocator found in PID %d "
								    "(malloc in libc, jemalloc, "
								    "tcmalloc or the executable)",
							   params.pid);
			return json_error_response(r, "cannot probe the allocator of PID %d: %s "
						      "(session %lld ended)",
						   params.pid, strerror(-r), (long long)id);
		}
	}
	r = store__session_memory_config(p->env.store, s->id, s->memory_interval_ns,
					 s->malloc_sample_bytes, probes[0] ? probes : NULL,
					 s->malloc_max_hits_per_s);
	if (r < 0)
		log_warning("Session %lld: cannot store its memory settings: %s", (long long)s->id,
			    store__errmsg(p->env.store));
	if ((req->events & (EVENT_CUDA | EVENT_NVTX)) || req->uprobes[0]) {
		unsigned want = ((req->events & EVENT_CUDA) ? GPU_WANT_CUDA : 0) |
				((req->events & EVENT_NVTX) ? GPU_WANT_NVTX : 0);

		if (uprobes_load(p) < 0) {
			gpu_acc__note_probe(s->gpu, s->pid, "uprobes", "",
					    "failed: BPF uprobes unavailable");
		} else {
			s->gpu_lost_kernel = uprobes__lost(p->uprobes, slot);
			s->gpu_max_calls_per_s = req->uprobe_max_calls_per_s;
			s->gpu_rate_mono_ns = now_ns(CLOCK_MONOTONIC);
			s->gpu_calls_seen = s->gpu_lost_kernel;
			pthread_rwlock_rdlock(&s->main->as_lock);
			r = uprobes__attach(p->uprobes, slot, s->id, s->pid, s->main->as, want, req->uprobes,
					note_probe, s->gpu);
			pthread_rwlock_unlock(&s->main->as_lock);
			if (r < 0)
				log_warning_errno(r, "Session %lld: uprobes not all attached: %m",
						  (long long)s->id);
		}
	}
	p->pid_watches[slot] = (struct pid_watch){ { on_pid_exit }, p, slot };
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &p->pid_watches[slot].watch };
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, s->pidfd, &ev) < 0)
		log_warning_errno(-errno, "Cannot watch PID %d for exit: %m", s->pid);
	notify_status(p);
	log_info("session %lld: attached to PID %d (%s), %s at %u Hz, unwind %s", (long long)s->id,
		 s->pid, s->comm, s->event, params.freq_hz, unwind_mode_name(s->unwind));

	r = query__session(store__db(p->env.store), s->id, &fields);
	if (r < 0)
		return query_response(r, NULL, s->id);
	/* The attach response is the session object, with "session" its id (docs/protocol.md). */
	json_object_set_new(fields, "session", json_integer(s->id));
	return ok_response(fields);
}

static json_t *handle_request_unchecked(struct profd *p, const struct ucred *peer, const char *line,
					size_t len)
{
	static struct request req; /* 16 KiB of SQL text: not on the stack */
	struct query_range range;
	char err[512];
	json_t *fields = NULL;
	bool admin;
	int r;

	r = request__parse(line, len, &req, err, sizeof(err));
	if (r < 0)
		return json_error_response(r, "%s", err);
	range = (struct query_range){ .from_ns = req.from_ns, .to_ns = req.to_ns };

	admin = authz__is_admin(peer);
	if (req.session && !may_see(p, peer, admin, req.session))
		return json_error_response(-ENOENT, "no session %lld", (long long)req.session);

	/* Reports read the store: give them what was sampled up to now. */
	if (req.cmd != CMD_PING && req.cmd != CMD_ATTACH) {
		collect(p, false);
		flush_all(p);
	}

	switch (req.cmd) {
	case CMD_PING:
		return ok_response(json_pack("{s:s, s:i}", "version", PROFD_VERSION, "protocol",
					     PROFD_PROTOCOL_VERSION));
	case CMD_ATTACH:
		return cmd_attach(p, peer, admin, &req);
	case CMD_DETACH:
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i] && p->slots[i]->id == req.session)
				end_session(p, i, "detached");
		/* answer with the session as it is now */
		__attribute__((fallthrough));
	case CMD_SESSION:
		r = query__session(store__db(p->env.store), req.session, &fields);
		if (r == 0 && req.cmd == CMD_SESSION)
			fields = json_pack("{s:o}", "session", fields);
		return query_response(r, fields, req.session);
	case CMD_SESSIONS:
		r = query__sessions(store__db(p->env.store), &fields);
		if (r == 0)
			filter_sessions(json_object_get(fields, "sessions"), peer, admin);
		return query_response(r, fields, 0);
	case CMD_TOP:
		r = query__top(store__db(p->env.store), req.session, req.limit, req.sampled_event,
			       req.has_range ? &range : NULL, &fields);
		return event_response(r, fields, &req);
	case CMD_HOTPATHS:
		r = query__hotpaths(store__db(p->env.store), req.session, req.limit,
				    req.sampled_event, req.has_range ? &range : NULL, &fields);
		return event_response(r, fields, &req);
	case CMD_PROFILE:
		r = query__profile(store__db(p->env.store), req.session, req.sampled_event,
				   req.has_range ? &range : NULL, req.per_window, &fields);
		return event_response(r, fields, &req);
	case CMD_ANALYZE:
		r = analyze__session(store__db(p->env.store), req.session, &fields);
		return query_response(r, fields, req.session);
	case CMD_SQL:
		r = sql__run(cfg.db_path, req.sql, admin, peer->uid, (size_t)req.max_rows,
			     SQL_MAX_RESULT_BYTES, SQL_TIMEOUT_NS, &fields, err, sizeof(err));
		if (r < 0)
			return json_error_response(r, "%s", err[0] ? err : strerror(-r));
		return ok_response(fields);
	case CMD_THREADS: {
		struct threads_opts topts = { .group_by_name = req.group_by_name,
					      .window_s = req.window_s };

		r = query__threads(store__db(p->env.store), req.session, &fields);
		if (r == 0)
			r = threads_report__extend(store__db(p->env.store), req.session, &topts,
						   fields);
		return query_response(r, fields, req.session);
	}
	case CMD_OFFCPU:
		r = query__offcpu(store__db(p->env.store), req.session, req.limit, &fields);
		return query_response(r, fields, req.session);
	case CMD_MEMORY:
		r = query__memory(store__db(p->env.store), req.session, req.limit, &fields);
		return query_response(r, fields, req.session);
	case CMD_GPU:
		r = query__gpu(store__db(p->env.store), req.session, req.limit, &fields);
		return query_response(r, fields, req.session);
	case CMD_RANGES:
		r = query__ranges(store__db(p->env.store), req.session, &fields);
		return query_response(r, fields, req.session);
	case CMD_RESYMBOLIZE:
		r = resymbolize__session(p->env.store, req.session, req.debuginfod, &fields);
		if (r == -EIO)
			return json_error_response(r, "resymbolize failed: %s",
						   store__errmsg(p->env.store));
		return query_response(r, fields, req.session);
	}
	return json_error_response(-EINVAL, "unknown command");
}

/*
 * Answer one request. While the database cannot be written (a full disk),
 * queries still answer from what is stored, and every answer says that
 * newer samples are waiting: the requester learns it, not only the log.
 */
static json_t *handle_request(void *ctx, const struct ucred *peer, const char *line, size_t len)
{
	struct profd *p = ctx;
	json_t *resp = handle_request_unchecked(p, peer, line, len);

	if (p->flush_errors && json_is_true(json_object_get(resp, "ok"))) {
		char msg[512];
		time_t since = (time_t)(p->flush_failing_since_ns / NSEC_PER_SEC);
		struct tm tm;
		char when[32] = "";

		if (gmtime_r(&since, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(msg, sizeof(msg),
			 "the database cannot be written since %s (%s): samples since then are "
			 "held in memory and not in these results; profd retries every second",
			 when, p->flush_error);
		json_object_set_new(resp, "warning", json_string(msg));
	}
	return resp;
}

/* profd needs CAP_BPF + CAP_PERFMON (Linux >= 5.8), or CAP_SYS_ADMIN before them. */
static int check_capabilities(void)
{
	cap_t caps = cap_get_proc();
	cap_flag_value_t bpf = CAP_CLEAR, perfmon = CAP_CLEAR, admin = CAP_CLEAR;

	if (!caps)
		return -errno;
	cap_get_flag(caps, CAP_SYS_ADMIN, CAP_EFFECTIVE, &admin);
#ifdef CAP_BPF
	cap_get_flag(caps, CAP_BPF, CAP_EFFECTIVE, &bpf);
	cap_get_flag(caps, CAP_PERFMON, CAP_EFFECTIVE, &perfmon);
#endif
	cap_free(caps);
	if (admin == CAP_SET || (bpf == CAP_SET && perfmon == CAP_SET))
		return 0;
	return -EPERM;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && log_get_level() < LOG_LEVEL_DEBUG)
		return 0;
	if (level != LIBBPF_WARN && log_get_level() < LOG_LEVEL_INFO)
		return 0;
	fprintf(stderr, "%sprofd: libbpf: ",
		log_priority_prefix(level == LIBBPF_WARN    ? LOG_LEVEL_WARNING
				    : level == LIBBPF_INFO ? LOG_LEVEL_INFO
							   : LOG_LEVEL_DEBUG));
	return vfprintf(stderr, fmt, ap);
}

static void help(void)
{
	printf("Usage: profd [OPTIONS]\n"
	       "\n"
	       "Sampling profiler daemon: profiles processes on request from profctl(1),\n"
	       "and stores call stacks and counters in an SQLite database.\n"
	       "Settings come from the configuration file, then from these options.\n"
	       "\n"
	       "Options:\n"
	       "  --config PATH          configuration file (default %s; a missing\n"
	       "                         default file is not an error)\n"
	       "  --check-config         check the configuration file and options, print\n"
	       "                         the effective settings, and exit (0 if valid)\n"
	       "  --db PATH              database file (default %s)\n"
	       "  --socket PATH          Unix socket to listen on (default %s)\n"
	       "  --log-level LEVEL      error, warning, info (default) or debug\n"
	       "  --default-freq HZ      samples per second when attach gives none (default %d)\n"
	       "  --retention-days DAYS  delete ended sessions older than DAYS (0: keep; default)\n"
	       "  --max-db-bytes SIZE    delete the oldest ended sessions while the database is\n"
	       "                         larger than SIZE (K, M, G suffixes; 0: no limit)\n"
	       "  --max-sessions N       sessions running at once (default %d, at most %d)\n"
	       "  --max-threads N        threads sampled per session (default %d)\n"
	       "  --max-stacks N         distinct call stacks per session (default %d); samples\n"
	       "                         past it are counted as limit_dropped_samples\n"
	       "  --ring-buffer-bytes SIZE  BPF ring buffer for samples (default 8M, a power of\n"
	       "                         2; off-CPU intervals get half): kernel memory, mapped\n"
	       "                         twice into profd, so counted twice in its RSS\n"
	       "  --foreground           stay in the foreground (profd never forks; accepted for\n"
	       "                         compatibility with init scripts)\n"
	       "  -h, --help             show this help\n"
	       "  --version              show the version\n"
	       "\n"
	       "profd must run as root (it needs CAP_BPF and CAP_PERFMON). Under systemd it\n"
	       "notifies readiness (Type=notify), pets the watchdog, takes its socket from\n"
	       "profd.socket if activated so, and logs with journald priorities.\n"
	       "Examples:\n"
	       "  profd --db /tmp/p.db --socket /tmp/p.sock &\n"
	       "  PROFD_SOCKET=/tmp/p.sock profctl attach $(pidof myjob) --duration 10 --wait\n"
	       "  profd --config /etc/profd/profd.conf --retention-days 30 --check-config\n",
	       PROFD_DEFAULT_CONFIG, PROFD_DEFAULT_DB, PROFD_DEFAULT_SOCKET, PROFD_DEFAULT_FREQ_HZ,
	       PROFD_DEFAULT_MAX_SESSIONS, PROFILE_MAX_SLOTS, PROFD_DEFAULT_MAX_THREADS,
	       PROFD_DEFAULT_MAX_STACKS);
}

enum {
	OPT_DB = 256,
	OPT_SOCKET,
	OPT_FOREGROUND,
	OPT_LOG_LEVEL,
	OPT_VERSION,
	OPT_CONFIG,
	OPT_CHECK_CONFIG,
	OPT_DEFAULT_FREQ,
	OPT_RETENTION_DAYS,
	OPT_MAX_DB_BYTES,
	OPT_MAX_SESSIONS,
	OPT_MAX_THREADS,
	OPT_MAX_STACKS,
	OPT_RING_BUFFER_BYTES,
};

static const struct option longopts[] = {
	{ "db", required_argument, NULL, OPT_DB },
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "foreground", no_argument, NULL, OPT_FOREGROUND },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "config", required_argument, NULL, OPT_CONFIG },
	{ "check-config", no_argument, NULL, OPT_CHECK_CONFIG },
	{ "default-freq", required_argument, NULL, OPT_DEFAULT_FREQ },
	{ "retention-days", required_argument, NULL, OPT_RETENTION_DAYS },
	{ "max-db-bytes", required_argument, NULL, OPT_MAX_DB_BYTES },
	{ "max-sessions", required_argument, NULL, OPT_MAX_SESSIONS },
	{ "max-threads", required_argument, NULL, OPT_MAX_THREADS },
	{ "max-stacks", required_argument, NULL, OPT_MAX_STACKS },
	{ "ring-buffer-bytes", required_argument, NULL, OPT_RING_BUFFER_BYTES },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{},
};

/* The configuration key each option overrides. */
static const char *option_key(int c)
{
	switch (c) {
	case OPT_DB: return "db";
	case OPT_SOCKET: return "socket";
	case OPT_LOG_LEVEL: return "log_level";
	case OPT_DEFAULT_FREQ: return "default_freq_hz";
	case OPT_RETENTION_DAYS: return "retention_days";
	case OPT_MAX_DB_BYTES: return "max_db_bytes";
	case OPT_MAX_SESSIONS: return "max_sessions";
	case OPT_MAX_THREADS: return "max_threads_per_session";
	case OPT_MAX_STACKS: return "max_stacks_per_session";
	case OPT_RING_BUFFER_BYTES: return "ring_buffer_bytes";
	}
	return NULL;
}

/*
 * Two passes: the first finds --config (and --help, --version), the file is
 * read, then the second applies the other options over it.
 * Returns 1 to run, 0 to exit with success, -EINVAL (logged).
 */
static int parse_args(int argc, char **argv)
{
	const char *config_path = NULL;
	bool check_config = false;
	char err[512];
	int c, r;

	r = config__init(&cfg);
	if (r < 0)
		return log_error_errno(r, "Out of memory");
	opterr = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		switch (c) {
		case OPT_CONFIG:
			config_path = optarg;
			break;
		case OPT_CHECK_CONFIG:
			check_config = true;
			break;
		case 'h':
			help();
			return 0;
		case OPT_VERSION:
			printf("profd %s\n", PROFD_VERSION);
			return 0;
		case '?':
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (see profd --help)", argv[optind]);
		return -EINVAL;
	}
	r = config__load(&cfg, config_path ? config_path : PROFD_DEFAULT_CONFIG, !config_path, err,
			 sizeof(err));
	if (r < 0) {
		log_error("invalid configuration: %s", err);
		return -EINVAL;
	}
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		const char *key = option_key(c);

		if (!key)
			continue;
		r = config__set(&cfg, key, optarg, err, sizeof(err));
		if (r == -ENOMEM)
			return log_error_errno(r, "Out of memory");
		if (r < 0) {
			/* The message names the key; say which option it came from. */
			const char *name = "";

			for (const struct option *o = longopts; o->name; o++)
				if (o->val == c)
					name = o->name;
			log_error("invalid --%s: %s", name, err);
			return -EINVAL;
		}
	}
	log_set_level(cfg.log_level);
	if (check_config) {
		config__print(&cfg, stdout);
		return 0;
	}
	return 1;
}


static int run(void)
{
	struct profd p = { .epfd = -1, .timer_fd = -1, .signal_fd = -1 };
	struct itimerspec tick = {
		.it_interval = { 0, TICK_NS },
		.it_value = { 0, TICK_NS },
	};
	sigset_t mask;
	int r;

	/* Before any thread exists, so that every thread inherits the mask and
	 * the signals reach the signalfd, not a default action in some thread. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = check_capabilities();
	if (r < 0)
		return log_error_errno(r, "profd needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): "
					  "run it as root");

	/* The symbolizer and the unwinder keep one fd per mapped file of every
	 * target (a PyTorch job maps hundreds of libraries): raise the soft
	 * limit to the hard one. Failing that, files past the limit show up as
	 * unsymbolized frames, and are retried. */
	{
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
	}

	r = store__open(cfg.db_path, &p.env.store);
	if (r < 0) {
		if (r == -EPROTO)
			log_error("Database '%s' has schema version %d, newer than this profd (%d)",
				  cfg.db_path, store__schema_version(p.env.store),
				  store__latest_version());
		else if (r == -EIO)
			log_error("Failed to open database '%s': %s", cfg.db_path,
				  store__errmsg(p.env.store));
		else
			log_error_errno(r, "Failed to open database '%s': %m", cfg.db_path);
		goto out;
	}
	r = store__mark_interrupted(p.env.store);
	if (r > 0)
		log_warning("%d session(s) left running by a previous profd marked 'interrupted'", r);
	if (cfg.retention_ns || cfg.max_db_bytes) {
		/* Deleted sessions should give their space back to the file system.
		 * Converting an older database rewrites it: tell systemd to wait. */
		notify__send("STATUS=checking the database for incremental vacuum (a one-time "
			     "VACUUM may take a while)\nEXTEND_TIMEOUT_USEC=%llu",
			     3600ULL * 1000000);
		r = store__enable_incremental_vacuum(p.env.store);
		if (r < 0)
			log_warning("Cannot switch the database to incremental vacuum (%s): deleted "
				    "sessions leave free pages in the file, reused by new data",
				    store__errmsg(p.env.store));
		else if (r > 0)
			log_info("Database rewritten once (VACUUM) for incremental vacuum");
		run_retention(&p);
	}

	p.env.sym = symbolizer__new();
	if (!p.env.sym) {
		r = log_error_errno(-ENOMEM, "Out of memory");
		goto out;
	}
	libbpf_set_print(libbpf_print);
	r = sampler__new(cfg.ring_buffer_bytes, on_sample, &p, &p.env.sampler);
	if (r < 0) {
		log_error_errno(r, "Failed to load the BPF sampling program: %m");
		goto out;
	}

	r = counters__probe(&p.counters);
	if (r < 0)
		log_warning_errno(r, "Cannot probe perf counters: %m");
	else
		p.env.counters = &p.counters;
	p.unwinder = unwinder__new();
	if (!p.unwinder) {
		r = log_error_errno(-ENOMEM, "Out of memory");
		goto out;
	}
	/* Sharing the sampler's targets: children it follows are traced off the CPU too. */
	r = offcpu__new_shared(cfg.ring_buffer_bytes / 2, OFFCPU_MIN_BLOCK_NS,
			       sampler__targets_fd(p.env.sampler), on_offcpu, &p, &p.offcpu);
	if (r < 0) {
		/* Off-CPU time is one report among others: run without it, and say so. */
		log_warning_errno(r, "Off-CPU tracing unavailable (sched_switch BPF program): %m");
		p.offcpu = NULL;
	}

	r = unwind_worker__new(UNWIND_QUEUE, &p.worker);
	if (r < 0) {
		log_error_errno(r, "Failed to start the unwinding thread: %m");
		goto out;
	}

	p.epfd = epoll_create1(EPOLL_CLOEXEC);
	p.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	p.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (p.epfd < 0 || p.signal_fd < 0 || p.timer_fd < 0 ||
	    timerfd_settime(p.timer_fd, 0, &tick, NULL) < 0) {
		r = log_error_errno(-errno, "Failed to set up the event loop: %m");
		goto out;
	}
	if ((r = add_watch(p.epfd, sampler__fd(p.env.sampler), &p.sampler_watch, on_sampler)) < 0 ||
	    (r = add_watch(p.epfd, p.timer_fd, &p.timer_watch, on_timer)) < 0 ||
	    (r = add_watch(p.epfd, p.signal_fd, &p.signal_watch, on_signal)) < 0 ||
	    (r = add_watch(p.epfd, unwind_worker__fd(p.worker), &p.worker_watch, on_worker)) < 0 ||
	    (p.offcpu &&
	     (r = add_watch(p.epfd, offcpu__fd(p.offcpu), &p.offcpu_watch, on_offcpu_ready)) < 0)) {
		log_error_errno(r, "Failed to set up the event loop: %m");
		goto out;
	}

	r = notify__listen_fd();
	if (r >= 0) {
		/* Socket activation (profd.socket): systemd made the socket and its mode. */
		int fd = r;

		r = server__new_from_fd(fd, p.epfd, handle_request, &p, &p.server);
		if (r < 0) {
			log_error_errno(r, "Failed to serve on the socket systemd passed: %m");
			goto out;
		}
		log_info("serving on the socket passed by systemd (--socket is ignored)");
	} else if (r != -ENOENT) {
		log_error_errno(r, "systemd passed sockets profd cannot use (one listening Unix "
				   "stream socket expected): %m");
		goto out;
	} else {
		r = server__new(cfg.socket_path, p.epfd, handle_request, &p, &p.server);
	}
	if (r == -EADDRINUSE) {
		log_error("Another profd is already listening on %s", cfg.socket_path);
		goto out;
	}
	if (r < 0) {
		log_error_errno(r, "Failed to listen on %s: %m", cfg.socket_path);
		goto out;
	}
	p.last_flush_ns = now_ns(CLOCK_MONOTONIC);
	log_info("profd %s: listening on %s, database %s", PROFD_VERSION, cfg.socket_path,
		 cfg.db_path);
	p.watchdog_ns = notify__watchdog_ns();
	p.last_watchdog_ns = now_ns(CLOCK_MONOTONIC);
	notify__send("READY=1\nSTATUS=0 session(s) running");

	while (!p.quit) {
		struct epoll_event evs[16];
		int n = epoll_wait(p.epfd, evs, ARRAY_SIZE(evs), -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = log_error_errno(-errno, "epoll_wait failed: %m");
			break;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;

			w->fn(w, evs[i].events);
		}
	}
	notify__send("STOPPING=1\nSTATUS=stopping: ending the running sessions");
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p.slots[i])
			end_session(&p, i, "daemon_stopped");
	if (r > 0)
		r = 0;
out:
	server__free(p.server);
	unwind_worker__free(p.worker);
	offcpu__free(p.offcpu);
	malloc_probes__free(p.malloc_probes);
	uprobes__free(p.uprobes);
	unwinder__free(p.unwinder);
	sampler__free(p.env.sampler);
	symbolizer__free(p.env.sym);
	store__close(p.env.store);
	if (p.timer_fd >= 0)
		close(p.timer_fd);
	if (p.signal_fd >= 0)
		close(p.signal_fd);
	if (p.epfd >= 0)
		close(p.epfd);
	return r;
}

int main(int argc, char **argv)
{
	int r;

	log_set_program("profd");
	r = parse_args(argc, argv);
	if (r <= 0) {
		config__done(&cfg);
		return r < 0 ? 2 : 0;
	}
	r = run();
	config__done(&cfg);
	return r < 0 ? 1 : 0;
}
