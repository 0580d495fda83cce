/* profd.c - the daemon: options, capability checks, the event loop, sessions and commands. */
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

#include "counters.h"
#include "log.h"
#include "offcpu.h"
#include "gpu.h"
#include "query_gpu.h"
#include "protocol.h"
#include "query.h"
#include "request.h"
#include "resymbolize.h"
#include "sampler.h"
#include "server.h"
#include "session.h"
#include "store.h"
#include "symbolize.h"
#include "threads_report.h"
#include "unwind_worker.h"
#include "util.h"

/* Ring buffer between the BPF program and profd: 32 MiB holds ~2000 samples
 * with 16 KiB stack copies, ~16000 frame-pointer samples. */
#define RINGBUF_BYTES (32u << 20)
/* Samples waiting for or in DWARF unwinding, at most (~20 KiB each). */
#define UNWIND_QUEUE 1024
/* Off-CPU intervals: the ring buffer, and the shortest interval recorded. Shorter
 * blocks are not counted (a lock handed over in microseconds is noise here). */
#define OFFCPU_RINGBUF_BYTES (16u << 20)
#define OFFCPU_MIN_BLOCK_NS (10 * NSEC_PER_USEC)
/* CUDA/NVTX/uprobe call records: ~330 bytes + 8 per stack frame each. */
#define GPU_RINGBUF_BYTES (8u << 20)
/* How often the loop wakes up to end expired sessions; flushes are every PROFD_WINDOW_NS. */
#define TICK_NS (200 * NSEC_PER_MSEC)

struct profd {
	int epfd;
	bool quit;
	struct session_env env;
	struct server *server;
	struct unwind_worker *worker;
	struct offcpu *offcpu;
	struct gpu *gpu;                  /* uprobes: CUDA, NVTX, --uprobe; NULL if unavailable */
	struct unwinder *unwinder;        /* the main thread's, for off-CPU stacks */
	struct counters_support counters; /* what this machine can count */
	struct session *slots[PROFILE_MAX_SLOTS];
	struct watch sampler_watch, timer_watch, signal_watch, worker_watch, offcpu_watch,
		gpu_watch;
	int timer_fd, signal_fd;
	uint64_t last_flush_ns;
	uint64_t last_rescan_ns; /* CLOCK_MONOTONIC of the last gpu__rescan() round */
	uint64_t flush_errors;
	/* A session's pidfd, watched for the target's exit. */
	struct pid_watch {
		struct watch watch;
		struct profd *profd;
		unsigned slot;
	} pid_watches[PROFILE_MAX_SLOTS];
};

static struct options {
	const char *db_path;
	const char *socket_path;
	bool foreground;
} opts = { PROFD_DEFAULT_DB, PROFD_DEFAULT_SOCKET, false };

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

/* An attach outcome of a probe (gpu_note_fn), kept for the session's next flush. */
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

	if (s->gpu_stopped || !s->gpu_max_calls_per_s || !gpu__wanted(p->gpu, slot) ||
	    dt < NSEC_PER_SEC / 2)
		return;
	/* Calls lost in the kernel ran in the target all the same. */
	calls = s->gpu_calls + gpu__lost(p->gpu, slot);
	rate = (double)(calls - s->gpu_calls_seen) * 1e9 / (double)dt;
	s->gpu_calls_seen = calls;
	s->gpu_rate_mono_ns = now;
	if (rate <= (double)s->gpu_max_calls_per_s)
		return;
	s->gpu_stopped = true;
	gpu__detach(p->gpu, slot);
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
	for (unsigned i = 0; p->gpu && i < PROFILE_MAX_SLOTS; i++) {
		struct session *s = p->slots[i];
		struct proc *proc;

		if (!s || !s->follow_children || !gpu__wanted(p->gpu, i))
			continue;
		hashmap__for_each(&s->procs, k, proc)
		{
			int r;

			if (proc->gpu_tried || proc == s->main)
				continue;
			proc->gpu_tried = true;
			pthread_rwlock_rdlock(&proc->as_lock);
			r = gpu__attach_more(p->gpu, i, proc->pid, proc->as, note_probe, s->gpu);
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

static void on_gpu_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, gpu_watch));

	gpu__poll(p->gpu);
}

/* Probe calls lost in the kernel (a running total per slot), charged to their sessions. */
static void collect_gpu_lost(struct profd *p)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS && p->gpu; i++) {
		struct session *s = p->slots[i];
		uint64_t lost;

		if (!s)
			continue;
		lost = gpu__lost(p->gpu, i);
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
	if (p->gpu) {
		gpu__poll(p->gpu);
		collect_gpu_lost(p);
	}
	sampler__poll(p->env.sampler);
	if (wait_for_unwinder)
		unwind_worker__wait_idle(p->worker);
	unwind_worker__drain(p->worker, on_sample, p);
}

/* Write every running session's pending samples in one transaction. */
static int flush_all(struct profd *p)
{
	int r;

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
	return 0;
fail:
	store__rollback(p->env.store);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			session__flush_failed(p->slots[i]);
	/* Report once per burst of failures (a full disk fails every second). */
	if (p->flush_errors++ == 0)
		log_error_errno(r, "Failed to write samples to the database: %s (will retry)",
				store__errmsg(p->env.store));
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
	int r;

	if (!s)
		return -ENOENT;
	/* The last counter values, before the events stop. */
	session__read_counters(s, &p->env);
	/* Before the sampler drops the slot's targets from the map both share. */
	if (p->offcpu)
		offcpu__remove_target(p->offcpu, slot, s->pid);
	if (p->gpu)
		gpu__detach(p->gpu, slot);
	session__stop(s, &p->env);
	collect(p, true);
	collect_offcpu_lost(p);
	r = flush_all(p);
	if (r == 0) {
		r = store__session_end(p->env.store, s->id, reason, now_ns(CLOCK_REALTIME));
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
	return r;
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
	collect(p, false);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && session__expired(p->slots[i], now))
			end_session(p, i, "duration");
	/* Libraries mapped since the attach (libcuda.so at cuInit()) get their
	 * probes. Its own clock: queries flush too, and may keep the flush
	 * below from running for a while. */
	for (unsigned i = 0; p->gpu && i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			check_gpu_rate(p, i, now);
	attach_gpu_children(p);
	if (p->gpu && now - p->last_rescan_ns >= PROFD_WINDOW_NS) {
		p->last_rescan_ns = now;
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				gpu__rescan(p->gpu, i, note_probe, p->slots[i]->gpu);
	}
	if (now - p->last_flush_ns >= PROFD_WINDOW_NS) {
		collect_offcpu_lost(p);
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				session__read_counters(p->slots[i], &p->env);
		if (flush_all(p) == 0)
			p->flush_errors = 0;
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

/* Sessions that are not the requester's are invisible to it, as if absent. */
static bool may_see(struct profd *p, const struct ucred *peer, int64_t id)
{
	sqlite3_stmt *stmt;
	bool ok = false;

	if (peer->uid == 0)
		return true;
	if (sqlite3_prepare_v2(store__db(p->env.store), "SELECT uid FROM sessions WHERE id = ?1",
			       -1, &stmt, NULL) != SQLITE_OK)
		return false;
	sqlite3_bind_int64(stmt, 1, id);
	ok = sqlite3_step(stmt) == SQLITE_ROW && (uid_t)sqlite3_column_int64(stmt, 0) == peer->uid;
	sqlite3_finalize(stmt);
	return ok;
}

static json_t *cmd_attach(struct profd *p, const struct ucred *peer, const struct request *req)
{
	struct session_params params = {
		.pid = (pid_t)req->pid,
		.uid = peer->uid,
		.freq_hz = req->freq_hz,
		.duration_ns = req->duration_ns,
		.events = req->events_str,
		.unwind = req->unwind,
		.stack_bytes = req->stack_bytes,
		.follow_children = req->children,
		.event_bits = req->events,
		.sampled_event = req->sampled_event,
	};
	struct session *s;
	json_t *fields;
	unsigned slot;
	int r;

	if (params.pid == getpid())
		return json_error_response(-EINVAL, "refusing to profile profd itself");
	for (slot = 0; slot < PROFILE_MAX_SLOTS; slot++) {
		if (p->slots[slot] && p->slots[slot]->pid == params.pid)
			return json_error_response(-EBUSY, "PID %d is already profiled by session %lld",
						   params.pid, (long long)p->slots[slot]->id);
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
	case -EPERM:
	case -EACCES:
		return json_error_response(-EPERM, "not allowed to profile PID %d", params.pid);
	case -EBUSY:
		return json_error_response(r, "PID %d is already being profiled", params.pid);
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
	if ((req->events & (EVENT_CUDA | EVENT_NVTX)) || req->uprobes[0]) {
		unsigned want = ((req->events & EVENT_CUDA) ? GPU_WANT_CUDA : 0) |
				((req->events & EVENT_NVTX) ? GPU_WANT_NVTX : 0);

		if (!p->gpu) {
			gpu_acc__note_probe(s->gpu, s->pid, "uprobes", "",
					    "failed: BPF uprobes unavailable");
		} else {
			s->gpu_lost_kernel = gpu__lost(p->gpu, slot);
			s->gpu_max_calls_per_s = req->uprobe_max_calls_per_s;
			s->gpu_rate_mono_ns = now_ns(CLOCK_MONOTONIC);
			s->gpu_calls_seen = s->gpu_lost_kernel;
			pthread_rwlock_rdlock(&s->main->as_lock);
			r = gpu__attach(p->gpu, slot, s->id, s->pid, s->main->as, want, req->uprobes,
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
	log_info("session %lld: attached to PID %d (%s), %s at %u Hz, unwind %s", (long long)s->id,
		 s->pid, s->comm, s->event, req->freq_hz, unwind_mode_name(s->unwind));

	r = query__session(store__db(p->env.store), s->id, &fields);
	if (r < 0)
		return query_response(r, NULL, s->id);
	/* The attach response is the session object, with "session" its id (docs/protocol.md). */
	json_object_set_new(fields, "session", json_integer(s->id));
	return ok_response(fields);
}

static json_t *handle_request(void *ctx, const struct ucred *peer, const char *line, size_t len)
{
	struct profd *p = ctx;
	struct request req;
	char err[256];
	json_t *fields = NULL;
	int r;

	r = request__parse(line, len, &req, err, sizeof(err));
	if (r < 0)
		return json_error_response(r, "%s", err);

	if (req.session && !may_see(p, peer, req.session))
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
		return cmd_attach(p, peer, &req);
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
		if (r == 0 && peer->uid != 0) {
			/* Only the requester's own sessions. */
			json_t *list = json_object_get(fields, "sessions"), *item;
			size_t i;

			json_array_foreach(list, i, item)
			{
				if (json_integer_value(json_object_get(item, "uid")) !=
				    (json_int_t)peer->uid) {
					json_array_remove(list, i);
					i--;
				}
			}
		}
		return query_response(r, fields, 0);
	case CMD_TOP:
		r = query__top(store__db(p->env.store), req.session, req.limit, req.sampled_event,
			       &fields);
		return event_response(r, fields, &req);
	case CMD_HOTPATHS:
		r = query__hotpaths(store__db(p->env.store), req.session, req.limit,
				    req.sampled_event, &fields);
		return event_response(r, fields, &req);
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
	fputs("profd: libbpf: ", stderr);
	return vfprintf(stderr, fmt, ap);
}

static void help(void)
{
	printf("Usage: profd [OPTIONS]\n"
	       "\n"
	       "Sampling profiler daemon: profiles processes on request from profctl(1),\n"
	       "and stores call stacks and counters in an SQLite database.\n"
	       "\n"
	       "Options:\n"
	       "  --db PATH          database file (default %s)\n"
	       "  --socket PATH      Unix socket to listen on (default %s)\n"
	       "  --foreground       stay in the foreground (profd never forks; accepted for\n"
	       "                     compatibility with init scripts)\n"
	       "  --log-level LEVEL  error, warning, info (default) or debug\n"
	       "  -h, --help         show this help\n"
	       "  --version          show the version\n"
	       "\n"
	       "profd must run as root (it needs CAP_BPF and CAP_PERFMON).\n"
	       "Example:\n"
	       "  profd --db /tmp/p.db --socket /tmp/p.sock &\n"
	       "  PROFD_SOCKET=/tmp/p.sock profctl attach $(pidof myjob) --duration 10 --wait\n",
	       PROFD_DEFAULT_DB, PROFD_DEFAULT_SOCKET);
}

static int parse_args(int argc, char **argv)
{
	enum { OPT_DB = 256, OPT_SOCKET, OPT_FOREGROUND, OPT_LOG_LEVEL, OPT_VERSION };
	static const struct option longopts[] = {
		{ "db", required_argument, NULL, OPT_DB },
		{ "socket", required_argument, NULL, OPT_SOCKET },
		{ "foreground", no_argument, NULL, OPT_FOREGROUND },
		{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, OPT_VERSION },
		{},
	};
	int c, r;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		switch (c) {
		case OPT_DB:
			opts.db_path = optarg;
			break;
		case OPT_SOCKET:
			opts.socket_path = optarg;
			break;
		case OPT_FOREGROUND:
			opts.foreground = true;
			break;
		case OPT_LOG_LEVEL:
			r = log_parse_level(optarg);
			if (r < 0) {
				log_error("invalid --log-level '%s' (error, warning, info, debug)",
					  optarg);
				return -EINVAL;
			}
			log_set_level(r);
			break;
		case 'h':
			help();
			return 0;
		case OPT_VERSION:
			printf("profd %s\n", PROFD_VERSION);
			return 0;
		default:
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (see profd --help)", argv[optind]);
		return -EINVAL;
	}
	return 1;
}

static int add_watch(int epfd, int fd, struct watch *w, void (*fn)(struct watch *, uint32_t))
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = w };

	w->fn = fn;
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
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

	r = store__open(opts.db_path, &p.env.store);
	if (r < 0) {
		if (r == -EPROTO)
			log_error("Database '%s' has schema version %d, newer than this profd (%d)",
				  opts.db_path, store__schema_version(p.env.store),
				  store__latest_version());
		else if (r == -EIO)
			log_error("Failed to open database '%s': %s", opts.db_path,
				  store__errmsg(p.env.store));
		else
			log_error_errno(r, "Failed to open database '%s': %m", opts.db_path);
		goto out;
	}
	r = store__mark_interrupted(p.env.store);
	if (r > 0)
		log_warning("%d session(s) left running by a previous profd marked 'interrupted'", r);

	p.env.sym = symbolizer__new();
	if (!p.env.sym) {
		r = log_error_errno(-ENOMEM, "Out of memory");
		goto out;
	}
	libbpf_set_print(libbpf_print);
	r = sampler__new(RINGBUF_BYTES, on_sample, &p, &p.env.sampler);
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
	r = offcpu__new_shared(OFFCPU_RINGBUF_BYTES, OFFCPU_MIN_BLOCK_NS,
			       sampler__targets_fd(p.env.sampler), on_offcpu, &p, &p.offcpu);
	if (r < 0) {
		/* Off-CPU time is one report among others: run without it, and say so. */
		log_warning_errno(r, "Off-CPU tracing unavailable (sched_switch BPF program): %m");
		p.offcpu = NULL;
	}

	r = gpu__new(GPU_RINGBUF_BYTES, on_gpu, &p, &p.gpu);
	if (r < 0) {
		log_warning_errno(r, "CUDA/NVTX/user probes unavailable (uprobe BPF program): %m");
		p.gpu = NULL;
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
	     (r = add_watch(p.epfd, offcpu__fd(p.offcpu), &p.offcpu_watch, on_offcpu_ready)) < 0) ||
	    (p.gpu && (r = add_watch(p.epfd, gpu__fd(p.gpu), &p.gpu_watch, on_gpu_ready)) < 0)) {
		log_error_errno(r, "Failed to set up the event loop: %m");
		goto out;
	}

	r = server__new(opts.socket_path, p.epfd, handle_request, &p, &p.server);
	if (r == -EADDRINUSE) {
		log_error("Another profd is already listening on %s", opts.socket_path);
		goto out;
	}
	if (r < 0) {
		log_error_errno(r, "Failed to listen on %s: %m", opts.socket_path);
		goto out;
	}
	p.last_flush_ns = now_ns(CLOCK_MONOTONIC);
	log_info("profd %s: listening on %s, database %s", PROFD_VERSION, opts.socket_path,
		 opts.db_path);

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
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p.slots[i])
			end_session(&p, i, "daemon_stopped");
	if (r > 0)
		r = 0;
out:
	server__free(p.server);
	unwind_worker__free(p.worker);
	offcpu__free(p.offcpu);
	gpu__free(p.gpu);
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
	if (r <= 0)
		return r < 0 ? 2 : 0;
	r = run();
	return r < 0 ? 1 : 0;
}
