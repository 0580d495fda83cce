/* cmd-attach.c - attach, detach and snapshot: start and stop sessions, and wait for them with
 * progress. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "output.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"
#include "procfs.h"
#include "targets.h"

/* The --wait progress line on a terminal's stderr: drawn with \r, erased with blanks. */
struct progress {
	bool enabled;
	size_t shown; /* characters on the line now */
};

static void progress__show(struct progress *p, const json_t *session)
{
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	FILE *f;

	if (!p->enabled)
		return;
	f = open_memstream(&text, &size);
	if (!f)
		return;
	if (output__progress(f, session) < 0) {
		fclose(f);
		return;
	}
	if (fclose(f) != 0)
		return;
	fprintf(stderr, "\r%s%*s", text, p->shown > size ? (int)(p->shown - size) : 0, "");
	p->shown = MAX(p->shown, size);
	fflush(stderr);
}

static void progress__clear(struct progress *p)
{
	if (!p->enabled || p->shown == 0)
		return;
	fprintf(stderr, "\r%*s\r", (int)p->shown, "");
	fflush(stderr);
	p->shown = 0;
}

/*
 * wait_session() - poll session @id every WAIT_POLL_NS until it has ended,
 * showing progress; once SIGINT has been caught, detach it instead. Returns 0
 * with *@ret_final the ended SESSION (caller owns it), -EINTR with it after an
 * interruption, or -errno (logged).
 */
static int wait_session(struct conn *c, long long id, json_t **ret_final)
{
	struct progress progress = {.enabled = isatty(STDERR_FILENO)};
	json_t *final = NULL;
	int r = 0;

	while (!final) {
		_cleanup_free_ char *detail = NULL;
		json_t *reply = NULL;
		const json_t *s;
		const char *state;

		sleep_ns(WAIT_POLL_NS);
		if (interrupted)
			break;
		r = call_quiet(c, request_session("session", id), &reply, &detail);
		if (r < 0) {
			/* Erase the progress line first, so the error stands on its own line. */
			progress__clear(&progress);
			call_error(r, detail);
			break;
		}
		s = json_object_get(reply, "session");
		state = json_string_value(json_object_get(s, "state"));
		if (!json_is_object(s) || !state) {
			json_decref(reply);
			progress__clear(&progress);
			log_error("malformed response from profd: no session state");
			r = -EBADMSG;
			break;
		}
		if (strcmp(state, "ended") == 0)
			final = json_incref((json_t *)s);
		else
			progress__show(&progress, s);
		json_decref(reply);
	}
	progress__clear(&progress);
	if (r < 0)
		return r;

	if (interrupted && !final) {
		json_t *reply = NULL;

		log_info("interrupted: detaching session %lld", id);
		r = call(c, request_session("detach", id), &reply);
		if (r < 0)
			return r;
		final = json_incref((json_t *)session_of(reply));
		json_decref(reply);
	}
	*ret_final = final;
	return interrupted ? -EINTR : 0;
}

/* attach_request() - the "attach" request for the command line @a; NULL when out of memory. */
static json_t *attach_request(const struct args *a)
{
	_cleanup_(json_decrefp) json_t *request = NULL;
	json_t *events;
	const char *name;
	size_t pos = 0, len;

	request = json_pack("{s:i, s:s, s:I}", "v", PROFD_PROTOCOL_VERSION, "cmd", "attach", "pid",
			    (json_int_t)a->id);
	if (!request)
		return NULL;
	if (a->has_duration)
		request = request_set(request, "duration_s",
				      a->duration_s == floor(a->duration_s) && a->duration_s < 1e15
					  ? json_integer((json_int_t)a->duration_s)
					  : json_real(a->duration_s));
	/* Without --freq, profd's default_freq_hz (profd.conf). */
	if (a->freq_hz)
		request = request_set(request, "freq_hz", json_integer(a->freq_hz));
	if (a->unwind)
		request = request_set(request, "unwind", json_string(a->unwind));
	if (a->children)
		request = request_set(request, "children", json_true());
	if (a->python)
		request = request_set(request, "python", json_string(a->python));
	if (a->uprobes)
		request = request_set(request, "uprobes", json_string(a->uprobes));
	if (a->uprobe_max_rate >= 0)
		request = request_set(request, "uprobe_max_calls_per_s",
				      json_integer((json_int_t)a->uprobe_max_rate));
	if (a->stack_bytes)
		request = request_set(request, "stack_bytes", json_integer(a->stack_bytes));
	if (a->pid_start_ticks)
		request = request_set(request, "pid_start_ticks",
				      json_integer((json_int_t)a->pid_start_ticks));
	if (a->label)
		request = request_set(request, "label", json_string(a->label));
	if (a->memory_interval_s > 0)
		request =
		    request_set(request, "memory_interval_s", json_real(a->memory_interval_s));
	if (a->malloc_max_rate >= 0)
		request = request_set(request, "malloc_max_hits_per_s",
				      json_integer((json_int_t)a->malloc_max_rate));
	if (a->malloc_sample_bytes > 0)
		request = request_set(request, "malloc_sample_bytes",
				      json_integer((json_int_t)a->malloc_sample_bytes));
	/* Without --events, profd's default set: cpu,offcpu,rss, or cpu,rss where it traces no
	 * off-CPU time (profd --offcpu no). */
	if (!a->events)
		return TAKE_PTR(request);
	events = json_array();
	/* The request holds @events once set; it is filled in place. */
	request = request_set(request, "events", events);
	if (!request)
		return NULL;
	while (events_next(a->events, &pos, &name, &len))
		if (json_array_append_new(events, json_stringn(name, len)) < 0)
			return NULL;
	return TAKE_PTR(request);
}

/* attach() - the attach command, with SIGINT caught when --wait is given. */
static int attach(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	json_t *final = NULL;
	struct render out;
	const json_t *id;
	int r, wait_r;

	r = call(c, attach_request(a), &reply);
	if (r < 0)
		return r;

	if (!a->wait) {
		if (a->json)
			return print_json(reply);
		if ((r = render_begin(&out)) < 0)
			return r;
		return render_end(&out, output__attach(out.f, reply));
	}

	id = json_object_get(reply, "session");
	if (!json_is_integer(id)) {
		log_error("malformed response from profd: no session id");
		return -EBADMSG;
	}
	if (!a->json) {
		if ((r = render_begin(&out)) < 0)
			return r;
		r = render_end(&out, output__attach(out.f, reply));
		if (r < 0)
			return r;
		/* Show the attach line now, not after the wait. */
		fflush(stdout);
	}

	wait_r = wait_session(c, json_integer_value(id), &final);
	if (wait_r < 0 && wait_r != -EINTR)
		return wait_r;

	if (a->json) {
		/* The attach response with the ended session under "final". */
		if (json_object_set_new(reply, "final", final) < 0)
			return log_oom();
		r = print_json(reply);
	} else {
		if ((r = render_begin(&out)) >= 0) {
			fputc('\n', out.f);
			r = render_end(&out, output__session(out.f, final));
		}
		json_decref(final);
	}
	return r < 0 ? r : wait_r;
}

/*
 * run_attach() - "attach"; with --wait, SIGINT is caught from before the
 * request goes out, so that a Ctrl-C at any point detaches the session
 * rather than leaving it running. Returns -EINTR after a Ctrl-C.
 */
int run_attach(struct conn *c, const struct args *a)
{
	/*
	 * No SA_RESTART, so that SIGINT cuts the sleep between polls short;
	 * SA_RESETHAND, so that a second Ctrl-C (say, while profd is slow to
	 * answer the detach) kills profctl the usual way.
	 */
	struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND};
	struct sigaction old;
	int r;

	if (!a->wait)
		return attach(c, a);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);
	r = attach(c, a);
	sigaction(SIGINT, &old, NULL);
	return r;
}

int run_detach(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	const json_t *s;
	const char *reason;
	struct render out;
	int r;

	r = call_for_text(c, a, request_session("detach", a->id), &reply);
	if (r <= 0)
		return r;

	s = session_of(reply);
	reason = json_string_value(json_object_get(s, "end_reason"));
	r = render_begin(&out);
	if (r < 0)
		return r;
	if (reason && strcmp(reason, "detached") != 0)
		fprintf(out.f, "session %lld: had already ended (%s)\n\n", a->id, reason);
	else
		fprintf(out.f, "session %lld: detached\n\n", a->id);
	return render_end(&out, output__session(out.f, s));
}

/* The processes "snapshot" names: the PID operand, --comm NAME or --cgroup PATH. Logs. */
static int snapshot_targets(const struct args *a, struct target **ret, size_t *ret_n)
{
	int r;

	if (a->has_pid) {
		struct target *t = calloc(1, sizeof(*t));

		if (!t)
			return log_oom();
		t->pid = (pid_t)a->id;
		/* Not checked here: profd says clearly if the PID does not exist. */
		(void)proc_start_ticks(t->pid, &t->start_ticks);
		*ret = t;
		*ret_n = 1;
		return 0;
	}
	if (a->comm) {
		r = targets__by_comm(a->comm, ret, ret_n);
		if (r < 0)
			return log_error_errno(r, "cannot list processes in /proc: %m");
		/* On a shared machine others run processes of the same name: a user
		 * who may profile only their own (profd(8), AUTHORIZATION) means those. */
		if (!targets__may_profile_all())
			targets__keep_uid(*ret, ret_n, getuid());
		if (*ret_n == 0) {
			free(*ret);
			log_error("no process named '%s'%s", a->comm,
				  targets__may_profile_all() ? "" : " of yours");
			return -ESRCH;
		}
		return 0;
	}
	r = targets__by_cgroup(a->cgroup, ret, ret_n);
	if (r == -ENOENT)
		return log_error("no cgroup '%s' (a cgroup v2 directory under /sys/fs/cgroup)",
				 a->cgroup);
	if (r < 0)
		return log_error_errno(r, "cannot read cgroup '%s': %m", a->cgroup);
	if (*ret_n == 0) {
		free(*ret);
		log_error("no process in cgroup '%s'", a->cgroup);
		return -ESRCH;
	}
	return 0;
}

/*
 * run_snapshot() - attach to every target for --duration, wait for all the
 * sessions to end, print their IDs (one per line; with --json, the ended
 * sessions). A target that cannot be attached is reported and the others
 * still taken; the exit status is then 1. Ctrl-C detaches what runs.
 */
int run_snapshot(struct conn *c, const struct args *a)
{
	struct sigaction sa = {.sa_handler = on_sigint, .sa_flags = SA_RESETHAND};
	_cleanup_(json_decrefp) json_t *finals = NULL;
	_cleanup_free_ struct target *targets = NULL;
	_cleanup_free_ long long *ids = NULL;
	size_t n = 0, started = 0, running;
	struct sigaction old;
	int r, failed = 0;

	r = snapshot_targets(a, &targets, &n);
	if (r < 0)
		return r;
	ids = calloc(n, sizeof(*ids));
	finals = json_array();
	if (!ids || !finals)
		return log_oom();
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);

	for (size_t i = 0; i < n && !interrupted; i++) {
		_cleanup_(json_decrefp) json_t *reply = NULL;
		_cleanup_free_ char *detail = NULL;
		struct args one = *a;

		one.id = targets[i].pid;
		one.pid_start_ticks = targets[i].start_ticks;
		r = call_quiet(c, attach_request(&one), &reply, &detail);
		if (r < 0) {
			/* One target refused (not ours, gone): say so, take the others. */
			log_error("PID %d: %s", targets[i].pid, detail ? detail : strerror(-r));
			failed++;
			if (r != -EREMOTEIO)
				break; /* profd itself is unreachable */
			continue;
		}
		ids[i] = json_integer_value(json_object_get(reply, "session"));
		started++;
	}

	/* Wait until every session has ended (its duration, or its process's exit). */
	for (running = started; running > 0 && !interrupted;) {
		sleep_ns(WAIT_POLL_NS);
		running = 0;
		for (size_t i = 0; i < n && !interrupted; i++) {
			json_t *reply = NULL;
			const json_t *s;

			if (!ids[i])
				continue;
			r = call(c, request_session("session", ids[i]), &reply);
			if (r < 0) {
				sigaction(SIGINT, &old, NULL);
				return r;
			}
			s = json_object_get(reply, "session");
			if (strcmp(json_string_value(json_object_get(s, "state")) ?: "", "ended") ==
			    0) {
				json_array_append(finals, (json_t *)s);
				ids[i] = 0;
				if (!a->json)
					printf("%lld\n", (long long)json_integer_value(
							     json_object_get(s, "id")));
			} else {
				running++;
			}
			json_decref(reply);
		}
	}
	if (interrupted) {
		for (size_t i = 0; i < n; i++) {
			json_t *reply = NULL;

			if (!ids[i])
				continue;
			log_info("interrupted: detaching session %lld", ids[i]);
			if (call(c, request_session("detach", ids[i]), &reply) == 0) {
				json_array_append(finals, (json_t *)session_of(reply));
				if (!a->json)
					printf("%lld\n", ids[i]);
			}
			json_decref(reply);
		}
	}
	sigaction(SIGINT, &old, NULL);
	if (a->json) {
		_cleanup_(json_decrefp) json_t *out = json_pack("{s:O}", "sessions", finals);

		if (!out)
			return log_oom();
		r = print_json(out);
		if (r < 0)
			return r;
	}
	if (interrupted)
		return -EINTR;
	return failed ? -EIO : 0;
}
