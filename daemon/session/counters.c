/*
 * counters.c - a session's per-thread perf counters: opened for each thread
 * as it appears, read once per window, stored with what the machine could
 * count.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "protocol.h"
#include "service/request.h"
#include "session/session.h"
#include "session/session_internal.h"
#include "util.h"

static bool counters_entry_eq(const void *entry, const void *key)
{
	return ((const struct counters_entry *)entry)->tid == *(const int *)key;
}

/* session__counter_status_db() - how the store names @st; NULL for a counter not asked for. */
const char *session__counter_status_db(enum counter_status st)
{
	/* not counted this time: no row */
	if (st != COUNTER_OK && st != COUNTER_UNSUPPORTED && st != COUNTER_DENIED)
		return NULL;
	return counter_status__name(st);
}

/*
 * session__counters_scan() - open counters on every thread of @proc not
 * yet counted. Returns 0 or -ENOMEM; threads gone are skipped. Does not log.
 */
int session__counters_scan(struct session *s, const struct session_env *env, struct proc *proc)
{
	_cleanup_(closedirp) DIR *d = NULL;
	char path[64];
	struct dirent *de;

	snprintf(path, sizeof(path), "/proc/%d/task", proc->pid);
	d = opendir(path);
	if (!d)
		return 0; /* the process is gone */
	while ((de = readdir(d))) {
		int tid = atoi(de->d_name);
		uint64_t h = hash64(HASH64_INIT, &tid, sizeof(tid));
		struct counters_entry *ce;
		int r;

		if (tid <= 0 || hashmap__find(&s->counters, h, counters_entry_eq, &tid))
			continue;
		ce = calloc(1, sizeof(*ce));
		if (!ce)
			return -ENOMEM;
		ce->pid = proc->pid;
		ce->tid = tid;
		r = thread_counters__open(proc->pid, tid, env->counters, &ce->tc);
		if (r < 0 || hashmap__insert(&s->counters, h, ce) < 0) {
			thread_counters__free(ce->tc);
			free(ce);
			if (r == -ENOMEM)
				return r;
			continue; /* the thread exited meanwhile */
		}
	}
	return 0;
}

int session__read_counters(struct session *s, const struct session_env *env)
{
	uint64_t window = (now_ns(CLOCK_MONOTONIC) - s->started_mono_ns) / PROFD_WINDOW_NS;
	struct counters_entry *ce;
	struct proc *proc;
	int r;

	if (!(s->events & EVENT_COUNTERS) || !env->counters)
		return 0;
	hashmap__for_each(&s->procs, i, proc)
	{
		r = session__counters_scan(s, env, proc);
		if (r < 0)
			return r;
	}
	hashmap__for_each(&s->counters, i, ce)
	{
		struct counter_row *row;

		if (!ce->tc)
			continue;
		row = calloc(1, sizeof(*row));
		if (!row)
			return -ENOMEM;
		row->window = window;
		row->tid = ce->tid;
		r = thread_counters__read(ce->tc, &row->v);
		if (r < 0) {
			/* Exited: its fds go now; the entry stays, so the tid is not reopened. */
			free(row);
			thread_counters__free(ce->tc);
			ce->tc = NULL;
			continue;
		}
		r = hashmap__insert(&s->counter_rows, (uint64_t)(uintptr_t)row, row);
		if (r < 0) {
			free(row);
			return r;
		}
	}
	return 0;
}

/*
 * session__store_counter_support() - store what the machine can count for
 * the session, once, at the start. Returns 0 or -EIO.
 */
int session__store_counter_support(struct session *s, const struct session_env *env)
{
	if (!(s->events & EVENT_COUNTERS) || !env->counters)
		return 0;
	for (int k = 0; k < COUNTER_KIND_MAX; k++) {
		const char *st = session__counter_status_db(env->counters->status[k]);
		int r;

		if (!st)
			continue;
		r = store__session_counter(env->store, s->id, counter_kind__name(k), st);
		if (r < 0)
			return r;
	}
	return 0;
}
