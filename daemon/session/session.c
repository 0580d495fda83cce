/*
 * session.c - a profiling session: attach checks, per-sample aggregation,
 * flush to the store (its stacks' rows: stacks.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "collect/offcpu.h"
#include "protocol.h"
#include "service/request.h"
#include "service/authz.h"
#include "session/owned_map.h"
#include "session/session.h"
#include "session/session_internal.h"
#include "util.h"

struct pending_sample {
	uint64_t window; /* index of the window since the session start */
	int tid;
	int event; /* 0: CPU event; 1: the second sampled event */
	struct raw_stack *stack;
	uint64_t count;
};

struct thread_acc {
	int pid;
	int tid;
	uint64_t exited_ns; /* CLOCK_MONOTONIC; 0 while it lives */
	char name[16];
	uint64_t last_seen_ns; /* CLOCK_MONOTONIC */
	uint64_t samples;
};

struct window_acc {
	uint64_t window;
	struct store_counts counts;
	/* CPU samples of the flush under way whose stacks the flush cut
	 * (session__resolve_stack()): truncated, counted at each attempt. */
	uint64_t cut_flushing;
};

static int read_small_file(const char *path, char *buf, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return (int)n;
}

/* Threads of @pid now (entries of /proc/PID/task), or -errno. */
static long count_threads(pid_t pid)
{
	char path[64];
	struct dirent *de;
	long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

static void threads_scan(struct session *s);

/* The session's stack table, as its CUDA/NVTX/uprobe accounting sees it (struct gpu_acc_owner). */
static struct raw_stack *gpu_stack_intern(void *ctx, pid_t pid, const uint64_t *ips, unsigned n,
					  uint32_t flags)
{
	return session__stack_intern(ctx, pid, ips, 0, n, flags, NULL);
}

static int gpu_stack_resolve(void *ctx, const struct session_env *env, struct raw_stack *stack,
			     bool *refreshed, int64_t *ret_id)
{
	int r = session__resolve_stack(ctx, env, stack, refreshed);

	if (r < 0)
		return r;
	*ret_id = stack->stack_id;
	return 0;
}

int session__new(const struct session_env *env, unsigned slot, const struct session_params *p,
		 struct session **ret)
{
	_cleanup_free_ struct session *s = NULL;
	char path[64], exe[PATH_MAX];
	const char *extra_status = NULL;
	uint64_t ticks;
	ssize_t n;
	int r;

	if (p->pid <= 0)
		return -ESRCH;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->slot = slot;
	s->pid = p->pid;
	s->uid = p->uid;
	s->duration_ns = p->duration_ns;
	s->unwind = p->unwind;
	s->walks_tables = unwind_walks_tables(p->unwind, p->duration_ns, p->freq_hz,
						env->sampler && sampler__has_table_cache(env->sampler));
	s->follow_children = p->follow_children;
	s->events = p->event_bits;
	s->max_threads = p->max_threads ? p->max_threads : UINT_MAX;
	s->max_stacks = p->max_stacks ? p->max_stacks : UINT_MAX;
	s->pidfd = -1;
	s->memory_interval_ns = (s->events & EVENT_RSS) ? p->memory_interval_ns : 0;
	s->maps_cost_factor = p->maps_cost_factor ? p->maps_cost_factor : MAPS_COST_FACTOR;
	s->malloc_sample_bytes = (s->events & EVENT_MALLOC) ? p->malloc_sample_bytes : 0;
	s->malloc_max_hits_per_s = p->malloc_max_hits_per_s;
	s->gpu = gpu_acc__new(&(struct gpu_acc_owner){
	    .ctx = s, .intern = gpu_stack_intern, .resolve = gpu_stack_resolve});
	if (!s->gpu)
		return -ENOMEM; /* @s is freed on return */

	/* The pidfd pins the process identity: from here on a reused PID cannot fool us. */
	s->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	if (s->pidfd < 0)
		return errno == ESRCH || errno == EINVAL ? -ESRCH : -errno;
	r = proc_start_ticks(p->pid, &ticks);
	if (r < 0)
		goto fail;
	/* The requester found the process by name or cgroup a moment ago; if
	 * the PID now names a newer process, that one was not asked for. */
	if (p->pid_start_ticks && p->pid_start_ticks != ticks) {
		r = -ESTALE;
		goto fail;
	}
	if (p->max_threads && count_threads(p->pid) > (long)p->max_threads) {
		r = -E2BIG;
		goto fail;
	}
	/* After pidfd_open(): the process checked is the one pinned. */
	r = p->admin ? 0 : authz__may_trace(p->pid, p->uid, p->gid);
	if (r < 0)
		goto fail;
	snprintf(path, sizeof(path), "/proc/%d/comm", p->pid);
	if (read_small_file(path, s->comm, sizeof(s->comm)) > 0)
		s->comm[strcspn(s->comm, "\n")] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/exe", p->pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';

	r = session__proc_add(s, p->pid, &s->main);
	if (r < 0)
		goto fail;

	struct slot_config cfg = {
	    .copy_stack_bytes = p->unwind == UNWIND_MODE_FP ? 0 : p->stack_bytes,
	    .fp_stack = p->unwind == UNWIND_MODE_FP || p->unwind == UNWIND_MODE_AUTO,
	    /* auto, tables: walked in BPF; a sample whose walk stops early carries
	     * DWARF's copy (and, with auto, the frame-pointer walk) */
	    .cfi_walk = s->walks_tables,
	    .follow_children = p->follow_children,
	    /* without a sampler (the unit tests), the session follows the records it is fed */
	    .vm_fault_period = (s->events & EVENT_RSS) &&
				       (!env->sampler || sampler__vm_supported(env->sampler))
				   ? SESSION_VM_FAULT_PERIOD
				   : 0,
	};
	const char *python_status = "off";
	struct python_interp interp = {0};

	s->vm_fault_period = cfg.vm_fault_period;

	if (p->python) {
		r = python__find(p->pid, s->main->as, &interp);
		if (r == -ESRCH)
			goto fail;
		python_status = r < 0 ? "not_found" : !interp.offsets ? "unsupported" : "ok";
		if (r == 0 && interp.offsets) {
			s->python = python_reader__new(&interp);
			if (!s->python) {
				r = -ENOMEM;
				goto fail;
			}
			cfg.python = interp.offsets->bpf;
			cfg.python.runtime_addr = interp.runtime_addr;
		}
	}
	/* Counters from the start, so that the first window is counted whole. */
	if ((s->events & EVENT_COUNTERS) && env->counters) {
		r = session__counters_scan(s, env, s->main);
		if (r < 0)
			goto fail;
	}
	/* Without a sampler (tests, replays) the caller feeds the records itself. */
	if (env->sampler)
		r = sampler__start(env->sampler, slot, p->pid, p->freq_hz, &cfg, &s->event);
	else
		s->event = "cpu-clock", r = 0;
	if (r < 0)
		goto fail;
	/* The tables load on the sampler's thread; the first samples fall back
	 * meanwhile. Without them auto goes on as frame pointers + DWARF (each
	 * walk then stops at no_process); tables, asked for by name, fails. */
	if (cfg.cfi_walk && env->sampler) {
		r = sampler__tables_add(env->sampler, p->pid);
		if (r < 0 && p->unwind == UNWIND_MODE_TABLES)
			goto fail_sampling;
		s->main->tables_asked = r >= 0;
		r = 0;
	}
	if (p->sampled_event && env->sampler) {
		uint64_t config, period;
		uint32_t type;

		sampled_event_lookup(p->sampled_event, &type, &config, &period);
		r = sampler__start_extra(env->sampler, slot, type, config, period);
		if (r < 0 && r != -EOPNOTSUPP)
			goto fail_sampling;
		/* Unsupported (no PMU): the session runs without it, and says so. */
		extra_status = r == 0 ? "ok" : "unsupported";
	}
	s->started_mono_ns = now_ns(CLOCK_MONOTONIC);
	s->memory_next_ns = s->started_mono_ns;
	s->started_real_ns = now_ns(CLOCK_REALTIME);
	threads_scan(s);

	struct store_session row = {
	    .pid = p->pid,
	    .pid_start_ticks = ticks,
	    .label = p->label,
	    .comm = s->comm,
	    .exe = n > 0 ? exe : NULL,
	    .uid = p->uid,
	    .event = s->event,
	    .events = p->events,
	    .freq_hz = p->freq_hz,
	    .unwind = unwind_mode_name(p->unwind),
	    .stack_bytes = cfg.copy_stack_bytes,
	    .follow_children = p->follow_children,
	    .sampled_event = p->sampled_event,
	    .sampled_event_status = extra_status,
	    .duration_ns = p->duration_ns,
	    .started_at_ns = s->started_real_ns,
	    .offcpu_period_ns = (s->events & EVENT_OFFCPU) ? offcpu__period_ns(p->freq_hz) : 0,
	};
	r = store__begin(env->store);
	if (r < 0)
		goto fail_sampling;
	r = store__session_insert(env->store, &row, &s->id);
	gpu_acc__set_session(s->gpu, s->id, s->started_real_ns, s->started_mono_ns);
	if (r == 0)
		r = session__store_mappings(s, s->main, env->store);
	if (r == 0)
		r = session__store_counter_support(s, env);
	if (r == 0)
		r = store__session_python(env->store, s->id, python_status,
					  interp.version[0] ? interp.version : NULL);
	if (r == 0)
		r = store__commit(env->store);
	if (r < 0) {
		store__rollback(env->store);
		goto fail_sampling;
	}
	*ret = TAKE_PTR(s);
	return 0;

fail_sampling:
	if (env->sampler)
		sampler__stop(env->sampler, slot);
	if (env->sampler && s->main->tables_asked)
		sampler__tables_remove(env->sampler, p->pid);
	/* Samples may already be in the ring buffer: the caller's dispatch drops
	 * them because the slot is free again. */
fail:
	session__free(TAKE_PTR(s));
	return r;
}

static bool pending_eq(const void *entry, const void *key)
{
	const struct pending_sample *a = entry, *b = key;

	return a->window == b->window && a->tid == b->tid && a->stack == b->stack &&
	       a->event == b->event;
}

static bool thread_eq(const void *entry, const void *key)
{
	return ((const struct thread_acc *)entry)->tid == ((const struct thread_acc *)key)->tid;
}

static bool window_eq(const void *entry, const void *key)
{
	return ((const struct window_acc *)entry)->window ==
	       ((const struct window_acc *)key)->window;
}

static struct window_acc *window_get(struct session *s, uint64_t window)
{
	const struct window_acc key = {.window = window};
	uint64_t h = hash64(HASH64_INIT, &window, sizeof(window));

	return hashmap_find_or_add_copy(&s->windows, h, window_eq, &key, sizeof(key));
}

/*
 * Note thread @tid (name @comm, 16 bytes) as seen at @time_ns, with @samples
 * more samples. Returns its entry, or NULL when it could not be made (out
 * of memory: the thread is not listed).
 */
static struct thread_acc *thread_seen(struct session *s, int pid, int tid, const char *comm,
				      uint64_t time_ns, uint64_t samples)
{
	const struct thread_acc key = {.pid = pid, .tid = tid};
	uint64_t h = hash64(HASH64_INIT, &tid, sizeof(tid));
	struct thread_acc *th =
	    hashmap_find_or_add_copy(&s->threads, h, thread_eq, &key, sizeof(key));

	if (!th)
		return NULL;
	memcpy(th->name, comm, sizeof(th->name));
	th->name[sizeof(th->name) - 1] = '\0';
	if (time_ns > th->last_seen_ns)
		th->last_seen_ns = time_ns;
	th->samples += samples;
	return th;
}

/*
 * Notes every thread of the target process as seen now, with its name from
 * /proc/PID/task/TID/comm: a thread blocked for the whole session (an idle
 * pool thread) has neither samples nor off-CPU records, and the threads
 * report should still count it. Only the target, and only while its pidfd
 * says it runs: a child's PID, or the target's once it exited, may already
 * name another process. Threads gone meanwhile are skipped.
 */
static void threads_scan(struct session *s)
{
	struct pollfd exited = {.fd = s->pidfd, .events = POLLIN};
	uint64_t now = now_ns(CLOCK_MONOTONIC);
	_cleanup_(closedirp) DIR *d = NULL;
	char path[64], comm[16];
	struct dirent *de;

	/* pidfd_open(2): readable once the process has exited. */
	if (s->pidfd < 0 || poll(&exited, 1, 0) != 0)
		return;
	snprintf(path, sizeof(path), "/proc/%d/task", s->pid);
	d = opendir(path);
	while (d && (de = readdir(d))) {
		int tid = atoi(de->d_name);

		if (tid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", s->pid, tid);
		if (read_small_file(path, comm, sizeof(comm)) <= 0)
			continue;
		comm[strcspn(comm, "\n")] = '\0';
		thread_seen(s, s->pid, tid, comm, now, 0);
	}
}

static bool tid_eq(const void *entry, const void *key)
{
	return entry == key;
}

/*
 * Is @tid one of the session's max_threads? The first max_threads seen are;
 * a thread that exits makes room (session__on_thread_exit()), so the limit
 * bounds the threads alive at once, not those a long session ever saw (a
 * DataLoader starts threads every epoch).
 */
static bool tid_admitted(struct session *s, int tid)
{
	void *key = (void *)(uintptr_t)((unsigned)tid + 1);
	uint64_t h = hash64(HASH64_INIT, &tid, sizeof(tid));

	if (hashmap__find(&s->tids, h, tid_eq, key))
		return true;
	if (s->tids.len >= s->max_threads)
		return false;
	return hashmap__insert(&s->tids, h, key) == 0;
}

/* Off-CPU intervals since the last flush, per window, thread, stack and state. */
struct offcpu_acc {
	uint64_t window;
	int pid, tid;
	struct raw_stack *stack;
	const char *state; /* static string */
	double count;	   /* intervals: an estimate where they were sampled (weights) */
	uint64_t total_ns;
};

static bool offcpu_eq(const void *entry, const void *key)
{
	const struct offcpu_acc *a = entry, *b = key;

	return a->window == b->window && a->tid == b->tid && a->stack == b->stack &&
	       a->state == b->state;
}

void session__on_offcpu(struct session *s, pid_t pid, pid_t tid, const char *comm, uint64_t time_ns,
			const char *state, uint64_t total_ns, double weight, const uint64_t *ips,
			unsigned klen, unsigned ulen)
{
	uint64_t t = time_ns > s->started_mono_ns ? time_ns - s->started_mono_ns : 0;
	struct offcpu_acc key = {.window = t / PROFD_WINDOW_NS,
				 .pid = pid,
				 .tid = tid,
				 .state = state},
			  *acc;
	uint64_t h;

	key.stack = session__stack_intern(s, pid, ips, klen, ulen, 0, NULL);
	if (!key.stack) {
		s->offcpu_lost++;
		return;
	}
	h = hash64(HASH64_INIT, &key.window, sizeof(key.window));
	h = hash64(h, &key.tid, sizeof(key.tid));
	h = hash64(h, &key.stack, sizeof(key.stack));
	h = hash64(h, &key.state, sizeof(key.state));
	acc = hashmap_find_or_add_copy(&s->offcpu, h, offcpu_eq, &key, sizeof(key));
	if (!acc) {
		s->offcpu_lost++;
		return;
	}
	acc->count += weight;
	acc->total_ns += (uint64_t)llround((double)total_ns * weight);
	/* A thread that only waits has no CPU samples: list it all the same. */
	thread_seen(s, pid, tid, comm, time_ns, 0);
}

void session__count_offcpu_lost(struct session *s, uint64_t n)
{
	s->offcpu_lost += n;
}

void session__on_thread_exit(struct session *s, const struct sample_event *e)
{
	struct thread_acc *th = thread_seen(s, (int)e->pid, (int)e->tid, e->comm, e->time_ns, 0);
	int tid = (int)e->tid;

	if (th)
		th->exited_ns = e->time_ns;
	hashmap__remove(&s->tids, hash64(HASH64_INIT, &tid, sizeof(tid)), tid_eq,
			(void *)(uintptr_t)((unsigned)tid + 1));
}

/* Count one record as BPF took its user stack: @walked whole, else stopped at @stop. */
static void count_table_walk(struct store_table_walk *w, bool walked, uint32_t stop)
{
	if (walked)
		w->walked++;
	else
		w->fallbacks[stop < CFI_STOP_NR ? stop : CFI_STOP_BAD_FRAME]++;
}

void session__count_table_walk(struct session *s, const struct sample_event *e)
{
	if (e->event == PROFILE_EVENT_VM || !(e->flags & SAMPLE_CFI_TRIED))
		return;
	count_table_walk(&s->table_walk, e->flags & SAMPLE_CFI_WALKED, e->cfi_stop);
}

void session__count_offcpu_walk(struct session *s, const struct offcpu_event *e)
{
	if (s->walks_tables)
		count_table_walk(&s->offcpu_table_walk, e->flags & OFFCPU_CFI_WALKED, e->cfi_stop);
}

void session__count_dropped(struct session *s, const struct sample_event *e)
{
	uint64_t t = e->time_ns > s->started_mono_ns ? e->time_ns - s->started_mono_ns : 0;
	struct window_acc *w = window_get(s, t / PROFD_WINDOW_NS);

	if (w)
		w->counts.lost_samples++;
	s->unwind_dropped++;
}

void session__on_sample(struct session *s, const struct sample_event *e)
{
	uint64_t t = e->time_ns > s->started_mono_ns ? e->time_ns - s->started_mono_ns : 0;
	struct pending_sample key, *ps;
	struct window_acc *w;
	int tid = (int)e->tid;
	bool limited = false;
	uint64_t h;

	key.window = t / PROFD_WINDOW_NS;
	key.tid = tid;
	key.event = e->event ? 1 : 0;
	key.count = 0;
	w = window_get(s, key.window);
	if (!w)
		return;
	if (!tid_admitted(s, tid)) {
		s->limit_dropped++;
		return;
	}
	key.stack = session__sample_stack(s, e, &limited);
	if (!key.stack && limited) {
		s->limit_dropped++;
		return;
	}
	if (!key.stack) {
		w->counts.lost_samples++; /* out of memory: lost, and counted */
		return;
	}

	h = hash64(HASH64_INIT, &key.window, sizeof(key.window));
	h = hash64(h, &key.tid, sizeof(key.tid));
	h = hash64(h, &key.stack, sizeof(key.stack));
	h = hash64(h, &key.event, sizeof(key.event));
	ps = hashmap__find(&s->pending, h, pending_eq, &key);
	if (!ps && s->pending.len >= s->max_stacks) {
		/* Rows waiting for a flush that keeps failing (a full disk): bounded too. */
		s->limit_dropped++;
		return;
	}
	if (!ps)
		ps = hashmap_add_copy(&s->pending, h, &key, sizeof(key));
	if (!ps) {
		w->counts.lost_samples++;
		return;
	}
	ps->count++;
	/* The second event's samples are its own: they count in no CPU figure. */
	if (key.event)
		return;

	w->counts.samples++;
	s->samples++;
	if (e->flags & (SAMPLE_USER_TRUNCATED | SAMPLE_KERNEL_TRUNCATED))
		w->counts.truncated_stacks++;
	if (e->flags & SAMPLE_USER_MISSING)
		w->counts.missing_user_stacks++;

	thread_seen(s, (int)e->pid, tid, e->comm, e->time_ns, 1);
}

int session__flush(struct session *s, const struct session_env *env)
{
	struct pending_sample *ps;
	struct window_acc *w, *last = NULL;
	struct thread_acc *th;
	struct store_counts total = {0};
	bool refreshed = false;
	uint64_t lost;
	int r;

	if (s->procs_added) {
		struct proc *proc;

		hashmap__for_each(&s->procs, i, proc)
		{
			r = session__store_mappings(s, proc, env->store);
			if (r < 0)
				return r;
		}
	}

	hashmap__for_each(&s->windows, i, w)
	{
		w->cut_flushing = 0;
	}
	hashmap__for_each(&s->pending, i, ps)
	{
		r = session__resolve_stack(s, env, ps->stack, &refreshed);
		if (r < 0)
			return r;
		if (ps->stack->cut_not_code && !ps->event &&
		    !(ps->stack->flags & (SAMPLE_USER_TRUNCATED | SAMPLE_KERNEL_TRUNCATED))) {
			w = window_get(s, ps->window);
			if (!w)
				return -ENOMEM;
			w->cut_flushing += ps->count;
		}
		r = store__sample_add(env->store, s->id,
				      s->started_real_ns + ps->window * PROFD_WINDOW_NS, ps->tid,
				      ps->stack->stack_id, ps->count, ps->event);
		if (r < 0)
			return r;
	}

	{
		struct offcpu_acc *acc;

		hashmap__for_each(&s->offcpu, i, acc)
		{
			r = session__resolve_stack(s, env, acc->stack, &refreshed);
			if (r < 0)
				return r;
			r = store__offcpu_add(env->store, s->id,
					      s->started_real_ns + acc->window * PROFD_WINDOW_NS,
					      acc->pid, acc->tid, acc->stack->stack_id, acc->state,
					      (uint64_t)llround(acc->count), acc->total_ns);
			if (r < 0)
				return r;
		}
		if (s->offcpu_lost) {
			r = store__session_add_offcpu_lost(env->store, s->id, s->offcpu_lost);
			if (r < 0)
				return r;
		}
		s->offcpu_lost_flushing = s->offcpu_lost;
	}
	{
		struct counter_row *row;

		hashmap__for_each(&s->counter_rows, i, row)
		{
			for (int k = 0; k < COUNTER_KIND_MAX; k++) {
				const char *st = session__counter_status_db(row->v.v[k].status);

				if (!st)
					continue;
				r = store__counter_add(
				    env->store, s->id,
				    s->started_real_ns + row->window * PROFD_WINDOW_NS, row->tid,
				    counter_kind__name(k), st, row->v.v[k].delta);
				if (r < 0)
					return r;
			}
		}
	}

	/* Ring-buffer drops are known only as a running total: charge the growth
	 * since the last committed flush to the newest window (a copy of its
	 * counts, so that a retried flush does not charge it twice). */
	lost = env->sampler ? sampler__lost(env->sampler, s->slot) : s->lost_seen;
	hashmap__for_each(&s->windows, i, w)
	{
		if (!last || w->window > last->window)
			last = w;
	}
	if (lost > s->lost_seen && !last) {
		last =
		    window_get(s, (now_ns(CLOCK_MONOTONIC) - s->started_mono_ns) / PROFD_WINDOW_NS);
		if (!last)
			return -ENOMEM;
	}
	hashmap__for_each(&s->windows, i, w)
	{
		struct store_counts c = w->counts;

		c.truncated_stacks += w->cut_flushing;
		if (w == last && lost > s->lost_seen)
			c.lost_samples += lost - s->lost_seen;
		r = store__window_add(env->store, s->id,
				      s->started_real_ns + w->window * PROFD_WINDOW_NS, &c);
		if (r < 0)
			return r;
		total.samples += c.samples;
		total.lost_samples += c.lost_samples;
		total.truncated_stacks += c.truncated_stacks;
		total.missing_user_stacks += c.missing_user_stacks;
	}
	total.unsymbolized_frames = s->unsymbolized_pending;
	total.unwind_dropped = s->unwind_dropped;
	total.frames = s->frames_pending;
	total.limit_dropped = s->limit_dropped;
	s->unwind_dropped_flushing = s->unwind_dropped;
	s->limit_dropped_flushing = s->limit_dropped;
	r = store__session_add_counts(env->store, s->id, &total);
	if (r < 0)
		return r;
	if (s->walks_tables) {
		r = store__session_table_walk(env->store, s->id, false, &s->table_walk);
		if (r == 0 && (s->events & EVENT_OFFCPU))
			r = store__session_table_walk(env->store, s->id, true,
						      &s->offcpu_table_walk);
		if (r < 0)
			return r;
	}
	if (s->python_samples || s->python_unmerged) {
		r = store__session_add_python(env->store, s->id, s->python_samples,
					      s->python_unmerged);
		if (r < 0)
			return r;
	}
	s->python_samples_flushing = s->python_samples;
	s->python_unmerged_flushing = s->python_unmerged;
	hashmap__for_each(&s->threads, i, th)
	{
		uint64_t seen = s->started_real_ns + (th->last_seen_ns - s->started_mono_ns);
		uint64_t exited =
		    th->exited_ns ? s->started_real_ns + (th->exited_ns - s->started_mono_ns) : 0;

		r = store__thread_upsert(env->store, s->id, th->pid, th->tid, th->name, seen,
					 th->samples, exited);
		if (r < 0)
			return r;
	}

	r = session__flush_memory(s, env, &refreshed);
	if (r < 0)
		return r;
	if (s->gpu) {
		r = gpu_acc__flush(s->gpu, env->store, env, &refreshed);
		if (r < 0)
			return r;
	}
	s->lost_flushing = lost;
	return 0;
}

void session__flush_done(struct session *s)
{
	s->lost_seen = s->lost_flushing;
	s->procs_added = false;
	s->offcpu_lost -= s->offcpu_lost_flushing;
	if (s->gpu)
		gpu_acc__flush_done(s->gpu);
	hashmap_clear_free(&s->offcpu);
	hashmap_clear_free(&s->counter_rows);
	s->unsymbolized_pending = 0;
	s->frames_pending = 0;
	s->unwind_dropped -= s->unwind_dropped_flushing;
	s->limit_dropped -= s->limit_dropped_flushing;
	s->python_samples -= s->python_samples_flushing;
	s->python_unmerged -= s->python_unmerged_flushing;
	hashmap_clear_free(&s->pending);
	hashmap_clear_free(&s->threads);
	hashmap_clear_free(&s->windows);
	session__flush_memory_done(s);
	s->flushes++;
	session__stacks_evict(s);
}

void session__flush_failed(struct session *s)
{
	/* Rows written in the rolled-back transaction do not exist: forget their ids. */
	session__forget_row_ids(s);
	hashmap_clear_free(&s->mappings_stored);
	s->unsymbolized_pending = 0;
	s->frames_pending = 0;
	session__flush_memory_failed(s);
}

void session__stop(struct session *s, const struct session_env *env)
{
	if (env->sampler)
		sampler__stop(env->sampler, s->slot);
	if (s->pidfd >= 0) {
		threads_scan(s); /* the threads started since, idle or not */
		close(s->pidfd);
		s->pidfd = -1;
	}
}

bool session__expired(const struct session *s, uint64_t mono_ns)
{
	return s->duration_ns && mono_ns - s->started_mono_ns >= s->duration_ns;
}

void session__free(struct session *s)
{
	if (!s)
		return;
	if (s->pidfd >= 0)
		close(s->pidfd);
	hashmap_free_all(&s->mappings_stored);
	hashmap_free_all(&s->stacks);
	hashmap_free_all(&s->frames);
	session__stack_memo_free(s);
	hashmap_free_all(&s->pending);
	hashmap_free_all(&s->threads);
	hashmap_free_all(&s->windows);
	hashmap_free_all(&s->offcpu);
	hashmap_free_all(&s->counter_rows);
	session__free_memory(s);
	hashmap__free(&s->tids); /* values are not pointers */
	gpu_acc__free(s->gpu);
	{
		struct counters_entry *ce;

		hashmap__for_each(&s->counters, i, ce) thread_counters__free(ce->tc);
		hashmap_free_all(&s->counters);
	}
	{
		struct proc *proc;

		hashmap__for_each(&s->procs, i, proc) session__proc_free(proc);
		hashmap__free(&s->procs);
	}
	python_reader__free(s->python);
	free(s);
}

int64_t session__id(const struct session *s)
{
	return s->id;
}

pid_t session__pid(const struct session *s)
{
	return s->pid;
}

int session__pidfd(const struct session *s)
{
	return s->pidfd;
}

const char *session__comm(const struct session *s)
{
	return s->comm;
}

const char *session__event(const struct session *s)
{
	return s->event;
}

enum unwind_mode session__unwind(const struct session *s)
{
	return s->unwind;
}

bool session__walks_tables(const struct session *s)
{
	return s->walks_tables;
}

unsigned session__events(const struct session *s)
{
	return s->events;
}

bool session__follows_children(const struct session *s)
{
	return s->follow_children;
}

uint64_t session__samples(const struct session *s)
{
	return s->samples;
}

uint64_t session__started_mono_ns(const struct session *s)
{
	return s->started_mono_ns;
}

uint64_t session__malloc_sample_bytes(const struct session *s)
{
	return s->malloc_sample_bytes;
}

struct gpu_acc *session__gpu(struct session *s)
{
	return s->gpu;
}

struct proc *session__main_proc(struct session *s)
{
	return s->main;
}

struct proc *session__next_proc(struct session *s, size_t *iter)
{
	while (*iter < s->procs.cap) {
		struct proc *proc = s->procs.vals[(*iter)++];

		if (proc)
			return proc;
	}
	return NULL;
}
