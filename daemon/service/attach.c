/*
 * attach.c - the attach command: check who may profile what, take a
 * session slot, start the session and the probe features it asks for, and
 * answer with the session object.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "collect/malloc_probes.h"
#include "collect/offcpu.h"
#include "log.h"
#include "procfs.h"
#include "protocol.h"
#include "report/query.h"
#include "service/authz.h"
#include "service/daemon.h"
#include "store/store.h"

static json_t *not_allowed(pid_t pid)
{
	return json_error_response(
	    -EPERM,
	    "not allowed to profile PID %d: it is not yours (same uid and gid, "
	    "not setuid), and you are not root or in group '%s'",
	    pid, PROFD_ADMIN_GROUP);
}

/*
 * An error response if @pid is a process that cannot be profiled: a kernel
 * thread (no user space, no user stacks) or a zombie (exited; only its
 * entry waits for the parent to reap it). NULL otherwise, or if it is gone
 * (session__new() says so).
 */
static json_t *not_profilable(pid_t pid)
{
	unsigned flags;
	pid_t ppid;
	char state;

	if (proc_state(pid, &state, &ppid, &flags) < 0)
		return NULL;
	if (flags & PROC_PF_KTHREAD)
		return json_error_response(-EINVAL,
					   "PID %d is a kernel thread: it has no user space and "
					   "no user call stacks; profd profiles processes",
					   pid);
	if (state == 'Z' || state == 'X')
		return json_error_response(-ESRCH,
					   "PID %d is a zombie: it has exited and waits for its "
					   "parent (PID %d) to reap it; nothing is left to profile",
					   pid, ppid);
	return NULL;
}

/* A free slot for a new session of @pid, or an error response. */
static json_t *take_slot(struct profd *p, pid_t pid, unsigned *ret_slot)
{
	unsigned slot, running = profd__running(p);

	for (slot = 0; slot < PROFILE_MAX_SLOTS; slot++)
		if (p->slots[slot] && session__pid(p->slots[slot]) == pid)
			return json_error_response(-EBUSY,
						   "PID %d is already profiled by session %lld",
						   pid, (long long)session__id(p->slots[slot]));
	if (running >= p->cfg->max_sessions)
		return json_error_response(-EBUSY,
					   "%u sessions are running, profd's limit "
					   "(max_sessions in profd.conf): detach one first",
					   running);
	for (slot = 0; slot < PROFILE_MAX_SLOTS && p->slots[slot]; slot++)
		;
	if (slot == PROFILE_MAX_SLOTS)
		return json_error_response(-EBUSY, "too many running sessions (%d)",
					   PROFILE_MAX_SLOTS);
	*ret_slot = slot;
	return NULL;
}

/* The answer to a session__new() that failed with @r. */
static json_t *new_session_error(struct profd *p, int r, const struct session_params *params)
{
	switch (r) {
	case -ESRCH:
		return json_error_response(r, "no process with PID %d", params->pid);
	case -ESTALE:
		return json_error_response(r,
					   "PID %d now is another process (its start time is not "
					   "%llu): the process asked for has exited",
					   params->pid,
					   (unsigned long long)params->pid_start_ticks);
	case -EPERM:
	case -EACCES:
		return not_allowed(params->pid);
	case -EBUSY:
		return json_error_response(r, "PID %d is already being profiled", params->pid);
	case -E2BIG:
		return json_error_response(r,
					   "PID %d has more than %u threads, profd's limit per "
					   "session (max_threads_per_session in profd.conf)",
					   params->pid, p->cfg->max_threads);
	case -EOPNOTSUPP:
		return json_error_response(r,
					   "no CPU sampling event can be opened on this machine");
	case -EIO:
		return json_error_response(r, "database error: %s", store__errmsg(p->env.store));
	default:
		return json_error_response(r, "cannot attach to PID %d: %s", params->pid,
					   strerror(-r));
	}
}

/*
 * Start the allocation probes of the session in @slot; @probes (@size
 * bytes) gets what they were attached to. NULL, or the error response
 * (the session is then ended).
 */
static json_t *start_malloc(struct profd *p, unsigned slot, const struct request *req, char *probes,
			    size_t size)
{
	struct session *s = p->slots[slot];
	int64_t id = session__id(s);
	pid_t pid = session__pid(s);
	int r;

	r = malloc_probes__attach(p->malloc_probes, slot, pid, req->malloc_sample_bytes, probes,
				  size);
	if (r >= 0)
		return NULL;
	profd__end_session(p, slot, "error");
	/* A process that exited meanwhile has no mappings left: no allocator either. */
	if (r == -ENOENT || r == -ESRCH) {
		json_t *zombie = not_profilable(pid);
		unsigned flags;
		pid_t ppid;
		char state;

		if (zombie)
			return zombie;
		if (proc_state(pid, &state, &ppid, &flags) == -ESRCH)
			return json_error_response(-ESRCH,
						   "PID %d exited before its allocator was probed "
						   "(session %lld ended)",
						   pid, (long long)id);
	}
	if (r == -ENOENT)
		return json_error_response(-ENOENT,
					   "no allocator found in PID %d (malloc in libc, "
					   "jemalloc, tcmalloc or the executable)",
					   pid);
	return json_error_response(r,
				   "cannot probe the allocator of PID %d: %s (session %lld ended)",
				   pid, strerror(-r), (long long)id);
}

/* attach() - attach__run() once the events asked for are ones this profd can trace. */
static json_t *attach(struct profd *p, const struct ucred *peer, bool admin,
		      const struct request *req)
{
	struct session_params params = {
	    .pid = (pid_t)req->pid,
	    .uid = peer->uid,
	    .gid = peer->gid,
	    .admin = admin,
	    .freq_hz = req->freq_hz ? req->freq_hz : p->cfg->default_freq_hz,
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
	    .max_threads = p->cfg->max_threads,
	    .max_stacks = p->cfg->max_stacks,
	};
	char probes[256] = "";
	struct session *s;
	json_t *fields, *err;
	unsigned slot = 0;
	int r;

	if (params.pid == getpid())
		return json_error_response(-EINVAL, "refusing to profile profd itself");
	if ((req->events & EVENT_MALLOC) && features__load_malloc(p) < 0)
		return json_error_response(-EOPNOTSUPP,
					   "allocation probes are unavailable: their BPF "
					   "program did not load (see profd's log)");
	/* Before saying who profiles it: another user's process is not the requester's business.
	 * session__new() checks again, on the process its pidfd pins. */
	if (!admin && authz__may_trace(params.pid, peer->uid, peer->gid) == -EPERM)
		return not_allowed(params.pid);
	err = not_profilable(params.pid);
	if (!err)
		err = take_slot(p, params.pid, &slot);
	if (err)
		return err;
	r = session__new(&p->env, slot, &params, &s);
	if (r < 0)
		return new_session_error(p, r, &params);
	p->slots[slot] = s;
	features__start(p, slot, req);
	if ((req->events & EVENT_OFFCPU) && p->offcpu) {
		r = offcpu__add_target(p->offcpu, slot, session__pid(s),
				       offcpu__period_ns(params.freq_hz));
		if (r < 0)
			log_warning_errno(r, "Session %lld: off-CPU tracing not started: %m",
					  (long long)session__id(s));
	}
	if (req->events & EVENT_MALLOC) {
		err = start_malloc(p, slot, req, probes, sizeof(probes));
		if (err)
			return err;
	}
	if (session__store_memory_config(s, &p->env, probes[0] ? probes : NULL) < 0)
		log_warning("Session %lld: cannot store its memory settings: %s",
			    (long long)session__id(s), store__errmsg(p->env.store));
	if ((req->events & (EVENT_CUDA | EVENT_NVTX)) || req->uprobes[0])
		features__attach_uprobes(p, slot, req);
	r = profd__watch_exit(p, slot);
	if (r < 0)
		log_warning_errno(r, "Cannot watch PID %d for exit: %m", session__pid(s));
	profd__notify_status(p);
	log_info("session %lld: attached to PID %d (%s), %s at %u Hz, unwind %s",
		 (long long)session__id(s), session__pid(s), session__comm(s), session__event(s),
		 params.freq_hz, unwind_mode_name(session__unwind(s)));

	r = query__session(store__db(p->env.store), session__id(s), &fields);
	if (r < 0)
		return dispatch__result(r, NULL, session__id(s));
	/* The attach response is the session object, with "session" its id (docs/protocol.md). */
	json_object_set_new(fields, "session", json_integer(session__id(s)));
	return dispatch__ok(fields);
}

/*
 * attach__run() - the attach command of @peer (@admin: authz__is_admin()).
 * Returns the response: the session object with "session" its id, or an
 * error object that says why no session runs (EOPNOTSUPP: events offcpu
 * asked of a profd without off-CPU tracing). Without off-CPU tracing (offcpu
 * = no in the configuration, or its BPF program did not load) the default
 * events are cpu and rss: the session's events say what it traces. Logs the
 * new session.
 */
json_t *attach__run(struct profd *p, const struct ucred *peer, bool admin,
		    const struct request *req)
{
	struct request traceable;

	if (!(req->events & EVENT_OFFCPU) || p->offcpu)
		return attach(p, peer, admin, req);
	if (req->events_given)
		return json_error_response(-EOPNOTSUPP, "off-CPU tracing is off in this profd: %s",
					   p->cfg->offcpu ? "its BPF program did not load (see "
							    "profd's log)"
							  : "offcpu = no in its configuration");
	traceable = *req;
	request__set_events(&traceable, req->events & ~EVENT_OFFCPU);
	return attach(p, peer, admin, &traceable);
}
