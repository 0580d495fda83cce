/*
 * profctl.c - the command-line client of profd: start and stop sampling
 * sessions, list them, and print their reports (hottest functions, hot call
 * paths as a tree, per-thread samples).
 */
#include <assert.h>
#include <ctype.h>
#include <getopt.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "conn.h"
#include "export.h"
#include "log.h"
#include "output.h"
#include "protocol.h"
#include "procfs.h"
#include "targets.h"
#include "profctl-help.h"
#include "util.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

/* How often attach --wait asks profd about the session. */
#define WAIT_POLL_NS (500 * NSEC_PER_MSEC)

/* Range of --limit, as profd accepts it (docs/protocol.md). */
#define LIMIT_MAX 10000

/* OPERAND_TARGET: a PID, or none with --comm or --cgroup (snapshot). */
enum operand {
	OPERAND_NONE,
	OPERAND_PID,
	OPERAND_SESSION,
	OPERAND_TOPIC,
	OPERAND_TWO_SESSIONS, /* diff A B */
	OPERAND_SQL,	      /* sql "SELECT ..." */
	OPERAND_TARGET,
};

enum {
	OPT_ASCII = 0x100,
	OPT_UNWIND,
	OPT_STACK_BYTES,
	OPT_DEBUGINFOD,
	OPT_CHILDREN,
	OPT_GROUP_BY,
	OPT_WINDOW,
	OPT_EVENT,
	OPT_MEMORY_INTERVAL,
	OPT_MALLOC_SAMPLE_BYTES,
	OPT_MALLOC_MAX_RATE,
	OPT_FROM,
	OPT_TO,
	OPT_THREAD,
	OPT_INVERTED,
	OPT_FORMAT,
	OPT_CSV,
	OPT_MAX_ROWS,
	OPT_COMM,
	OPT_CGROUP,
	OPT_LABEL,
	OPT_PYTHON,
	OPT_UPROBE,
	OPT_UPROBE_MAX_RATE,
};

/* The parsed command line. */
struct args {
	const struct command *command;
	const char *socket_path;
	bool json;
	bool ascii;
	bool wait;
	long long id; /* the PID or SESSION operand */
	bool has_duration;
	double duration_s;
	bool duration_integral; /* --duration was written as an integer: send it as one */
	long long freq_hz;
	const char *events;		  /* --events as given; validated */
	const char *unwind;		  /* --unwind: fp, dwarf, auto; NULL: profd's default */
	long long stack_bytes;		  /* --stack-bytes; 0: profd's default */
	double memory_interval_s;	  /* --memory-interval; 0: profd's default */
	long long malloc_sample_bytes;	  /* --malloc-sample-bytes; 0: profd's default */
	long long malloc_max_rate;	  /* --malloc-max-rate; -1: profd's default */
	bool debuginfod;		  /* resymbolize --debuginfod */
	bool children;			  /* attach --children */
	const char *python;		  /* attach --python: auto, off; NULL: profd's default */
	const char *uprobes;		  /* attach --uprobe LIB:SYMBOL[,LIB:SYMBOL] */
	long long uprobe_max_rate;	  /* attach --uprobe-max-rate; -1: profd's default */
	bool group_by_name;		  /* threads --group-by name */
	const char *event;		  /* top/hotpaths --event NAME; NULL: CPU samples */
	double window_s;		  /* threads --window SECONDS; 0: none */
	long long limit;		  /* 0: profd's default */
	long long id2;			  /* diff: the second SESSION */
	const char *sql;		  /* sql: the statement */
	double from_s, to_s;		  /* --from/--to; to_s 0: to the end */
	bool has_from, has_to;
	long long thread;		  /* --thread TID; 0: all */
	bool inverted;			  /* flamegraph --inverted */
	const char *format;		  /* export --format */
	const char *output;		  /* -o FILE; NULL: stdout */
	bool csv;			  /* sql --csv */
	long long max_rows;		  /* sql --max-rows; 0: profd's default */
	bool has_pid;			  /* snapshot: the PID operand was given */
	const char *comm;		  /* snapshot --comm NAME */
	const char *cgroup;		  /* snapshot --cgroup PATH */
	const char *label;		  /* snapshot --label TEXT */
	uint64_t pid_start_ticks;	  /* attach request: the start time of the process meant */
	const struct command *help_topic; /* "help COMMAND" */
};

struct command {
	const char *name;
	enum operand operand;
	const char *synopsis;  /* after "profctl NAME" */
	const char *summary;   /* one line, for the command list */
	const char *shortopts; /* the command's own options (the common ones are added) */
	const struct option *longopts;
	int (*run)(struct conn *c, const struct args *a);
};

/* log_oom() - report running out of memory; returns -ENOMEM. */
static int log_oom(void)
{
	return log_error_errno(-ENOMEM, "out of memory");
}

/*
 * events_next() - the next name of comma-separated @list at *@pos, blanks
 * around it trimmed; *@ret_len its length. Returns false at the end.
 */
static bool events_next(const char *list, size_t *pos, const char **ret, size_t *ret_len)
{
	const char *p = list + *pos, *start, *end;

	if (*pos > strlen(list))
		return false;
	end = strchrnul(p, ',');
	*pos = (size_t)(end - list) + 1;
	start = p;
	while (start < end && isspace((unsigned char)*start))
		start++;
	while (end > start && isspace((unsigned char)end[-1]))
		end--;
	*ret = start;
	*ret_len = (size_t)(end - start);
	return true;
}

/* Set by SIGINT while attach --wait waits. */
static volatile sig_atomic_t interrupted;

/*
 * call_error() - log, once, why call_quiet() failed with @r; returns @r.
 * @detail: conn__call()'s explanation, or NULL.
 */
static int call_error(int r, const char *detail)
{
	switch (r) {
	case -EREMOTEIO:
	case -EBADMSG:
		if (detail) {
			log_error("%s", detail);
			return r;
		}
		break;
	case -EMSGSIZE:
		log_error("response from profd is longer than %d MiB",
			  PROFCTL_MAX_RESPONSE_BYTES / (1024 * 1024));
		return r;
	case -ECONNRESET:
		log_error("profd closed the connection without answering");
		return r;
	case -E2BIG:
		log_error("request too large for profd (more than %d bytes)",
			  PROFD_MAX_REQUEST_BYTES);
		return r;
	case -ENOMEM:
		return log_oom();
	}
	return log_error_errno(r, "talking to profd: %m");
}

/*
 * call_quiet() - send @request (consumed, may be NULL after a failed
 * allocation) and return the reply in *@ret; does not log: *@ret_detail
 * (caller frees) is for call_error().
 */
static int call_quiet(struct conn *c, json_t *request, json_t **ret, char **ret_detail)
{
	int r;

	*ret_detail = NULL;
	if (!request)
		return -ENOMEM;
	r = conn__call(c, request, ret, ret_detail);
	json_decref(request);
	return r;
}

/* call() - call_quiet() that logs what went wrong. */
static int call(struct conn *c, json_t *request, json_t **ret)
{
	_cleanup_free_ char *detail = NULL;
	int r;

	r = call_quiet(c, request, ret, &detail);
	if (r < 0)
		return call_error(r, detail);
	/* profd answered, but something needs the user's attention (a full disk). */
	if (json_is_string(json_object_get(*ret, "warning")))
		log_warning("profd: %s", json_string_value(json_object_get(*ret, "warning")));
	return 0;
}

static json_t *request_new(const char *cmd)
{
	return json_pack("{s:i, s:s}", "v", PROFD_PROTOCOL_VERSION, "cmd", cmd);
}

static json_t *request_session(const char *cmd, long long session)
{
	return json_pack("{s:i, s:s, s:I}", "v", PROFD_PROTOCOL_VERSION, "cmd", cmd, "session",
			 (json_int_t)session);
}

static int print_json(const json_t *reply)
{
	/*
	 * 15 significant digits (DBL_DIG) print what profd meant, 60.9 rather
	 * than jansson's default 17-digit 60.899999999999999.
	 */
	if (json_dumpf(reply, stdout,
		       JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15)) < 0) {
		log_error("cannot write output");
		return -EIO;
	}
	putchar('\n');
	return 0;
}

/*
 * A human rendering goes to a memory stream first, so that a malformed
 * response leaves no half table on stdout.
 */
struct render {
	FILE *f;
	char *text;
	size_t size;
};

static int render_begin(struct render *out)
{
	*out = (struct render){};
	out->f = open_memstream(&out->text, &out->size);
	if (!out->f)
		return log_oom();
	return 0;
}

/* render_end() - @r is the output__*() result; prints the text if it is 0, logs otherwise. */
static int render_end(struct render *out, int r)
{
	_cleanup_free_ char *text = NULL;

	if (fclose(out->f) != 0 && r >= 0)
		r = -ENOMEM;
	text = TAKE_PTR(out->text);
	if (r == -EBADMSG) {
		log_error("malformed response from profd: %s", output__error());
		return r;
	}
	if (r < 0) {
		log_oom();
		return r;
	}
	fwrite(text, 1, out->size, stdout);
	return 0;
}

/* session_of() - the SESSION object in a reply: "session" if it is one, else the reply itself. */
static const json_t *session_of(const json_t *reply)
{
	const json_t *s = json_object_get(reply, "session");

	return json_is_object(s) ? s : reply;
}

static void on_sigint(int sig)
{
	interrupted = 1;
}

/* sleep_ns() - sleep @ns, returning early when SIGINT arrives. */
static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / NSEC_PER_SEC),
			      .tv_nsec = (long)(ns % NSEC_PER_SEC)};

	while (!interrupted && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

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
	if (a->has_duration &&
	    json_object_set_new(request, "duration_s",
				a->duration_integral ? json_integer((json_int_t)a->duration_s)
						     : json_real(a->duration_s)) < 0)
		return NULL;
	/* Without --freq, profd's default_freq_hz (profd.conf). */
	if (a->freq_hz && json_object_set_new(request, "freq_hz", json_integer(a->freq_hz)) < 0)
		return NULL;
	if (a->unwind && json_object_set_new(request, "unwind", json_string(a->unwind)) < 0)
		return NULL;
	if (a->children && json_object_set_new(request, "children", json_true()) < 0)
		return NULL;
	if (a->python && json_object_set_new(request, "python", json_string(a->python)) < 0)
		return NULL;
	if (a->uprobes && json_object_set_new(request, "uprobes", json_string(a->uprobes)) < 0)
		return NULL;
	if (a->uprobe_max_rate >= 0 &&
	    json_object_set_new(request, "uprobe_max_calls_per_s",
				json_integer((json_int_t)a->uprobe_max_rate)) < 0)
		return NULL;
	if (a->stack_bytes &&
	    json_object_set_new(request, "stack_bytes", json_integer(a->stack_bytes)) < 0)
		return NULL;
	if (a->pid_start_ticks &&
	    json_object_set_new(request, "pid_start_ticks",
				json_integer((json_int_t)a->pid_start_ticks)) < 0)
		return NULL;
	if (a->label && json_object_set_new(request, "label", json_string(a->label)) < 0)
		return NULL;
	if (a->memory_interval_s > 0 &&
	    json_object_set_new(request, "memory_interval_s", json_real(a->memory_interval_s)) < 0)
		return NULL;
	if (a->malloc_max_rate >= 0 &&
	    json_object_set_new(request, "malloc_max_hits_per_s",
				json_integer((json_int_t)a->malloc_max_rate)) < 0)
		return NULL;
	if (a->malloc_sample_bytes > 0 &&
	    json_object_set_new(request, "malloc_sample_bytes",
				json_integer((json_int_t)a->malloc_sample_bytes)) < 0)
		return NULL;
	/* Without --events, profd's default set (cpu,offcpu,rss). */
	if (!a->events)
		return TAKE_PTR(request);
	events = json_array();
	if (json_object_set_new(request, "events", events) < 0)
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
static int run_attach(struct conn *c, const struct args *a)
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

static int run_detach(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	const json_t *s;
	const char *reason;
	struct render out;
	int r;

	r = call(c, request_session("detach", a->id), &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);

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
static int run_snapshot(struct conn *c, const struct args *a)
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
			if (strcmp(json_string_value(json_object_get(s, "state")) ?: "", "ended") == 0) {
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

/* A request answered by one rendering: the reply as JSON with --json, else @fn's text. */
typedef int (*render_fn)(FILE *f, const json_t *o);

static int call_and_render(struct conn *c, const struct args *a, json_t *request, render_fn fn,
			   const char *member)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	struct render out;
	int r;

	r = call(c, request, &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, fn(out.f, member ? json_object_get(reply, member) : reply));
}

static int run_sessions(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_new("sessions"), output__sessions, NULL);
}

static int run_session(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_session("session", a->id), output__session, "session");
}

/* request_range() - @request with "from_s"/"to_s" from --from/--to; consumes @request. */
static json_t *request_range(json_t *request, const struct args *a)
{
	if (request && a->has_from &&
	    json_object_set_new(request, "from_s", json_real(a->from_s)) < 0) {
		json_decref(request);
		return NULL;
	}
	if (request && a->has_to && json_object_set_new(request, "to_s", json_real(a->to_s)) < 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/* request_report() - a "top"/"hotpaths" request; "limit" only if given, else profd's default. */
static json_t *request_report(const char *cmd, const struct args *a)
{
	json_t *request = request_session(cmd, a->id);

	if (request && a->limit > 0 &&
	    json_object_set_new(request, "limit", json_integer((json_int_t)a->limit)) < 0) {
		json_decref(request);
		return NULL;
	}
	if (request && a->event && json_object_set_new(request, "event", json_string(a->event)) < 0) {
		json_decref(request);
		return NULL;
	}
	return request_range(request, a);
}

static int run_top(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("top", a), output__top, NULL);
}

/* Box-drawing and block characters only where the locale says the terminal takes UTF-8. */
static bool want_ascii(const struct args *a)
{
	setlocale(LC_CTYPE, "");
	return a->ascii || strcmp(nl_langinfo(CODESET), "UTF-8") != 0;
}

/* call_and_render() for the reports drawn with box or block characters (or ASCII). */
static int call_and_draw(struct conn *c, const struct args *a, json_t *request,
			 int (*fn)(FILE *f, const json_t *reply, bool ascii))
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	struct render out;
	int r;

	r = call(c, request, &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, fn(out.f, reply, want_ascii(a)));
}

static int run_hotpaths(struct conn *c, const struct args *a)
{
	return call_and_draw(c, a, request_report("hotpaths", a), output__hotpaths);
}

static int run_memory(struct conn *c, const struct args *a)
{
	return call_and_draw(c, a, request_report("memory", a), output__memory);
}

static int run_threads(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	_cleanup_(json_decrefp) json_t *session = NULL;
	struct render out;
	int r;

	{
		json_t *request = request_session("threads", a->id);

		if (request && a->group_by_name &&
		    json_object_set_new(request, "group_by", json_string("name")) < 0)
			request = NULL;
		if (request && a->window_s > 0 &&
		    json_object_set_new(request, "window_s", json_real(a->window_s)) < 0)
			request = NULL;
		r = call(c, request, &reply);
	}
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);

	/* "threads" has no sample counters; the session has, and every report shows them. */
	r = call(c, request_session("session", a->id), &session);
	if (r < 0)
		return r;
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, output__threads(out.f, reply, json_object_get(session, "session")));
}

static int run_offcpu(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("offcpu", a), output__offcpu, NULL);
}

static int run_gpu(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("gpu", a), output__gpu, NULL);
}

static int run_ranges(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_session("ranges", a->id), output__ranges, NULL);
}

static int run_resymbolize(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	json_t *request = request_session("resymbolize", a->id);
	long long checked, named, left;
	int r;

	if (request && a->debuginfod && json_object_set_new(request, "debuginfod", json_true()) < 0)
		request = NULL;
	r = call(c, request, &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);
	checked = json_integer_value(json_object_get(reply, "frames_checked"));
	named = json_integer_value(json_object_get(reply, "frames_named"));
	left = json_integer_value(json_object_get(reply, "unsymbolized_frames"));
	printf("session %lld: %lld unsymbolized frames looked up again, %lld named, %lld left\n",
	       a->id, checked, named, left);
	return 0;
}

/* The export formats: name, and whether the output is binary (not for a terminal). */
static const struct export_format {
	const char *name;
	int (*write)(FILE *f, const struct xprofile *p, int64_t tid);
	bool binary;
} export_formats[] = {
    {"folded", export__folded, false},
    {"pprof", export__pprof, true},
    {"chrome-trace", export__chrome_trace, false},
    {"speedscope", export__speedscope, false},
};

static const struct export_format *export_format_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(export_formats); i++)
		if (strcmp(export_formats[i].name, name) == 0)
			return &export_formats[i];
	return NULL;
}

/*
 * load_profile() - ask profd for session @a->id's raw profile (with
 * --from/--to and --event; per window if @per_window, else summed) and its
 * SESSION object, into @p. Logs; returns
 * 0 or -errno.
 */
static int load_profile(struct conn *c, const struct args *a, bool per_window,
			struct xprofile *p)
{
	_cleanup_(json_decrefp) json_t *reply = NULL, *session = NULL;
	json_t *request = request_range(request_session("profile", a->id), a);
	int r;

	/* Only the Chrome trace places samples in time: the others take them summed. */
	if (request && !per_window &&
	    json_object_set_new(request, "per_window", json_false()) < 0)
		request = NULL;
	if (request && a->event && json_object_set_new(request, "event", json_string(a->event)) < 0)
		request = NULL;
	r = call(c, request, &reply);
	if (r < 0)
		return r;
	r = call(c, request_session("session", a->id), &session);
	if (r < 0)
		return r;
	r = xprofile__load(p, reply, json_object_get(session, "session"));
	if (r == -EBADMSG)
		log_error("malformed \"profile\" response from profd");
	else if (r < 0)
		log_oom();
	return r;
}

/*
 * write_output() - run @write into -o FILE (created 0644, replaced only once
 * complete: written to FILE.tmp, then renamed) or stdout. Logs; returns 0 or -errno.
 */
static int write_output(const struct args *a, bool binary,
			int (*write)(FILE *f, const struct xprofile *p, int64_t tid, bool inv),
			const struct xprofile *p)
{
	_cleanup_free_ char *tmp = NULL;
	FILE *f = stdout;
	int r;

	if (!a->output && binary && isatty(STDOUT_FILENO)) {
		log_error("%s output is binary: write it to a file with -o FILE", a->format);
		return -EINVAL;
	}
	if (a->output) {
		int fd;

		if (asprintf(&tmp, "%s.tmp", a->output) < 0) {
			tmp = NULL;
			return log_oom();
		}
		fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return log_error_errno(-errno, "cannot create %s: %m", tmp);
		f = fdopen(fd, "w");
		if (!f) {
			close(fd);
			unlink(tmp);
			return log_oom();
		}
	}
	r = write(f, p, a->thread, a->inverted);
	if (a->output) {
		if (fclose(f) != 0 && r >= 0)
			r = -errno;
		if (r >= 0 && rename(tmp, a->output) < 0)
			r = -errno;
		if (r < 0)
			unlink(tmp);
	}
	if (r == -ENODATA)
		log_error("no samples%s in session %lld%s", a->thread ? " of that thread" : "",
			  a->id, a->has_from || a->has_to ? " in that time range" : "");
	else if (r == -ENOMEM)
		log_oom();
	else if (r < 0)
		log_error_errno(r, "cannot write %s: %m", a->output ? a->output : "the output");
	return r;
}

static const struct export_format *current_format;

static int write_export(FILE *f, const struct xprofile *p, int64_t tid, bool inverted)
{
	return current_format->write(f, p, tid);
}

static int write_flamegraph(FILE *f, const struct xprofile *p, int64_t tid, bool inverted)
{
	return flamegraph__svg(f, p, tid, inverted);
}

/* --thread TID must name a thread of the session: say so rather than print an empty file. */
static int check_thread(const struct args *a, const struct xprofile *p)
{
	if (!a->thread)
		return 0;
	for (size_t i = 0; i < p->n_samples; i++)
		if (p->samples[i].tid == a->thread)
			return 0;
	log_error("session %lld has no samples of thread %lld%s (see 'profctl threads %lld')",
		  a->id, a->thread, a->has_from || a->has_to ? " in that time range" : "", a->id);
	return -ENOENT;
}

static int run_export(struct conn *c, const struct args *a)
{
	_cleanup_(xprofile__free) struct xprofile p = {};
	int r;

	current_format = export_format_find(a->format);
	r = load_profile(c, a, current_format->write == export__chrome_trace, &p);
	if (r < 0)
		return r;
	r = check_thread(a, &p);
	if (r < 0)
		return r;
	r = write_output(a, current_format->binary, write_export, &p);
	/* On stderr too, since the folded format has no room for them. */
	if (r == 0)
		fprintf(stderr,
			"profctl: %s %s: %lld samples; lost samples %lld, truncated stacks %lld, "
			"unsymbolized frames %lld\n",
			a->output ? "wrote" : "exported", a->output ? a->output : a->format,
			(long long)p.total_samples, (long long)p.lost_samples,
			(long long)p.truncated_stacks, (long long)p.unsymbolized_frames);
	return r;
}

static int run_flamegraph(struct conn *c, const struct args *a)
{
	_cleanup_(xprofile__free) struct xprofile p = {};
	int r;

	r = load_profile(c, a, false, &p);
	if (r < 0)
		return r;
	r = check_thread(a, &p);
	if (r < 0)
		return r;
	r = write_output(a, false, write_flamegraph, &p);
	if (r == 0 && a->output)
		fprintf(stderr, "profctl: wrote %s; open it in a web browser\n", a->output);
	return r;
}

/* A function's samples in the two sessions of a diff. */
struct diff_row {
	const char *function, *module;
	int64_t self[2], total[2];
	double self_pct[2], total_pct[2];
};

static double diff_change(const struct diff_row *d)
{
	return MAX(fabs(d->self_pct[1] - d->self_pct[0]), fabs(d->total_pct[1] - d->total_pct[0]));
}

static int diff_row_cmp(const void *x, const void *y)
{
	const struct diff_row *a = x, *b = y;
	double ca = diff_change(a), cb = diff_change(b);
	int c;

	if (ca != cb)
		return ca > cb ? -1 : 1;
	c = strcmp(a->function, b->function);
	return c ? c : strcmp(a->module, b->module);
}

/* Percentage with two decimals, from the counts (top's are rounded to one). */
static double pct2(int64_t part, int64_t whole)
{
	return whole > 0 ? round(10000.0 * (double)part / (double)whole) / 100.0 : 0.0;
}

static int run_diff(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *top_a = NULL, *top_b = NULL, *out = NULL;
	json_t **top[2] = {&top_a, &top_b};
	_cleanup_free_ struct diff_row *rows = NULL;
	long long ids[2] = {a->id, a->id2};
	size_t n = 0, cap = 0;
	int64_t totals[2];
	json_t *list;
	int r;

	for (int k = 0; k < 2; k++) {
		json_t *request = request_range(request_session("top", ids[k]), a);

		if (request && json_object_set_new(request, "limit", json_integer(LIMIT_MAX)) < 0)
			request = NULL;
		r = call(c, request, top[k]);
		if (r < 0)
			return r;
		totals[k] = json_integer_value(json_object_get(*top[k], "total_samples"));
	}
	for (int k = 0; k < 2; k++) {
		size_t i;
		json_t *fn;

		json_array_foreach(json_object_get(*top[k], "functions"), i, fn)
		{
			const char *name = json_string_value(json_object_get(fn, "function"));
			const char *module = json_string_value(json_object_get(fn, "module")) ?: "";
			struct diff_row *d = NULL;

			if (!name) {
				log_error("malformed response from profd: a function without a name");
				return -EBADMSG;
			}
			for (size_t j = 0; j < n && !d; j++)
				if (strcmp(rows[j].function, name) == 0 &&
				    strcmp(rows[j].module, module) == 0)
					d = &rows[j];
			if (!d) {
				if (n == cap) {
					struct diff_row *nr;

					cap = cap ? 2 * cap : 64;
					nr = reallocarray(rows, cap, sizeof(*rows));
					if (!nr)
						return log_oom();
					rows = nr;
				}
				d = &rows[n++];
				*d = (struct diff_row){.function = name, .module = module};
			}
			d->self[k] = json_integer_value(json_object_get(fn, "self_samples"));
			d->total[k] = json_integer_value(json_object_get(fn, "total_samples"));
			d->self_pct[k] = pct2(d->self[k], totals[k]);
			d->total_pct[k] = pct2(d->total[k], totals[k]);
		}
	}
	if (n)
		qsort(rows, n, sizeof(*rows), diff_row_cmp);
	if (a->limit && (size_t)a->limit < n)
		n = (size_t)a->limit;

	out = json_pack("{s:I, s:I, s:I, s:I, s:[]}", "session_a", (json_int_t)a->id, "session_b",
			(json_int_t)a->id2, "total_samples_a", (json_int_t)totals[0],
			"total_samples_b", (json_int_t)totals[1], "functions");
	if (!out)
		return log_oom();
	for (int k = 0; k < 2; k++) {
		static const char *const keys[] = {"lost_samples", "truncated_stacks",
						   "unsymbolized_frames"};

		for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
			char key[64];

			snprintf(key, sizeof(key), "%s_%c", keys[i], 'a' + k);
			if (json_object_set(out, key, json_object_get(*top[k], keys[i]) ?: json_null()) < 0)
				return log_oom();
		}
	}
	list = json_object_get(out, "functions");
	for (size_t i = 0; i < n; i++) {
		const struct diff_row *d = &rows[i];

		if (json_array_append_new(
			list, json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I}", "function",
					d->function, "module", d->module, "self_pct_a", d->self_pct[0],
					"self_pct_b", d->self_pct[1], "self_delta_pct",
					round(100.0 * (d->self_pct[1] - d->self_pct[0])) / 100.0,
					"total_pct_a", d->total_pct[0], "total_pct_b", d->total_pct[1],
					"total_delta_pct",
					round(100.0 * (d->total_pct[1] - d->total_pct[0])) / 100.0,
					"self_samples_a", (json_int_t)d->self[0], "self_samples_b",
					(json_int_t)d->self[1])) < 0)
			return log_oom();
	}
	if (a->json)
		return print_json(out);
	{
		struct render o;

		if ((r = render_begin(&o)) < 0)
			return r;
		return render_end(&o, output__diff(o.f, out));
	}
}

static int run_analyze(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_session("analyze", a->id), output__analyze, NULL);
}

static int run_sql(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	json_t *request = json_pack("{s:i, s:s, s:s}", "v", PROFD_PROTOCOL_VERSION, "cmd", "sql",
				    "query", a->sql);
	struct render out;
	int r;

	if (request && a->max_rows &&
	    json_object_set_new(request, "max_rows", json_integer(a->max_rows)) < 0)
		request = NULL;
	r = call(c, request, &reply);
	if (r < 0)
		return r;
	if (json_is_true(json_object_get(reply, "truncated")))
		log_warning("result truncated after %lld rows (at most %s): narrow the query or "
			    "raise --max-rows",
			    (long long)json_integer_value(json_object_get(reply, "row_count")),
			    strcmp(json_string_value(json_object_get(reply, "truncated_by")) ?: "", "rows") == 0
				? "--max-rows rows"
				: "16 MiB");
	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, a->csv ? output__sql_csv(out.f, reply) : output__sql(out.f, reply));
}

static int run_ping(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	const char *version;
	json_t *protocol;
	int r;

	r = call(c, request_new("ping"), &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);
	version = json_string_value(json_object_get(reply, "version"));
	protocol = json_object_get(reply, "protocol");
	if (!version || !json_is_integer(protocol)) {
		log_error("malformed response from profd: no version or protocol");
		return -EBADMSG;
	}
	printf("profd %s (protocol %lld) at %s\n", version, (long long)json_integer_value(protocol),
	       a->socket_path);
	return 0;
}

static const struct option attach_options[] = {
    {"duration", required_argument, NULL, 'd'},
    {"freq", required_argument, NULL, 'f'},
    {"events", required_argument, NULL, 'e'},
    {"wait", no_argument, NULL, 'w'},
    {"unwind", required_argument, NULL, OPT_UNWIND},
    {"stack-bytes", required_argument, NULL, OPT_STACK_BYTES},
    {"children", no_argument, NULL, OPT_CHILDREN},
    {"memory-interval", required_argument, NULL, OPT_MEMORY_INTERVAL},
    {"malloc-sample-bytes", required_argument, NULL, OPT_MALLOC_SAMPLE_BYTES},
    {"malloc-max-rate", required_argument, NULL, OPT_MALLOC_MAX_RATE},
    {"python", required_argument, NULL, OPT_PYTHON},
    {"uprobe", required_argument, NULL, OPT_UPROBE},
    {"uprobe-max-rate", required_argument, NULL, OPT_UPROBE_MAX_RATE},
    {},
};

static const struct option memory_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {"ascii", no_argument, NULL, OPT_ASCII},
    {},
};

static const struct option snapshot_options[] = {
    {"duration", required_argument, NULL, 'd'},
    {"comm", required_argument, NULL, OPT_COMM},
    {"cgroup", required_argument, NULL, OPT_CGROUP},
    {"label", required_argument, NULL, OPT_LABEL},
    {"freq", required_argument, NULL, 'f'},
    {"events", required_argument, NULL, 'e'},
    {"unwind", required_argument, NULL, OPT_UNWIND},
    {"stack-bytes", required_argument, NULL, OPT_STACK_BYTES},
    {"children", no_argument, NULL, OPT_CHILDREN},
    {"python", required_argument, NULL, OPT_PYTHON},
    {"uprobe", required_argument, NULL, OPT_UPROBE},
    {"uprobe-max-rate", required_argument, NULL, OPT_UPROBE_MAX_RATE},
    {},
};

static const struct option threads_options[] = {
    {"group-by", required_argument, NULL, OPT_GROUP_BY},
    {"window", required_argument, NULL, OPT_WINDOW},
    {},
};

static const struct option resymbolize_options[] = {
    {"debuginfod", no_argument, NULL, OPT_DEBUGINFOD},
    {},
};

static const struct option limit_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {},
};

/* --from and --to, in every command that reads a time range. */
#define RANGE_OPTIONS                                                                              \
	{"from", required_argument, NULL, OPT_FROM}, {"to", required_argument, NULL, OPT_TO}

static const struct option top_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {"event", required_argument, NULL, OPT_EVENT},
    RANGE_OPTIONS,
    {},
};

static const struct option hotpaths_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {"ascii", no_argument, NULL, OPT_ASCII},
    {"event", required_argument, NULL, OPT_EVENT},
    RANGE_OPTIONS,
    {},
};

static const struct option export_options[] = {
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, 'o'},
    RANGE_OPTIONS,
    {"thread", required_argument, NULL, OPT_THREAD},
    {"event", required_argument, NULL, OPT_EVENT},
    {},
};

static const struct option flamegraph_options[] = {
    {"output", required_argument, NULL, 'o'},
    RANGE_OPTIONS,
    {"thread", required_argument, NULL, OPT_THREAD},
    {"inverted", no_argument, NULL, OPT_INVERTED},
    {"event", required_argument, NULL, OPT_EVENT},
    {},
};

static const struct option diff_options[] = {
    {"limit", required_argument, NULL, 'n'},
    RANGE_OPTIONS,
    {},
};

static const struct option sql_options[] = {
    {"csv", no_argument, NULL, OPT_CSV},
    {"max-rows", required_argument, NULL, OPT_MAX_ROWS},
    {},
};

static const struct command commands[] = {
    {
	.name = "attach",
	.operand = OPERAND_PID,
	.synopsis = "PID [--duration SECONDS] [--freq HZ] [--events LIST] [--unwind MODE]\n"
		    "        [--children] [--python auto|off] [--uprobe LIB:SYMBOL[,...]] [--wait]",
	.summary = "start sampling a process; prints the new session's ID",
	.shortopts = "d:f:e:w",
	.longopts = attach_options,
	.run = run_attach,
    },
    {
	.name = "snapshot",
	.operand = OPERAND_TARGET,
	.synopsis = "(PID | --comm NAME | --cgroup PATH) --duration SECONDS\n"
		    "        [--label TEXT] [--freq HZ] [--events LIST] [--unwind MODE]",
	.summary = "profile for a while and print the session ID(s); for cron",
	.shortopts = "d:f:e:",
	.longopts = snapshot_options,
	.run = run_snapshot,
    },
    {
	.name = "detach",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "stop a running session",
	.shortopts = "",
	.run = run_detach,
    },
    {
	.name = "sessions",
	.operand = OPERAND_NONE,
	.synopsis = "",
	.summary = "list all sessions, newest first",
	.shortopts = "",
	.run = run_sessions,
    },
    {
	.name = "session",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "show one session's settings and counters",
	.shortopts = "",
	.run = run_session,
    },
    {
	.name = "top",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N] [--event NAME] [--from SECONDS] [--to SECONDS]",
	.summary = "hottest functions, by samples in the function itself",
	.shortopts = "n:",
	.longopts = top_options,
	.run = run_top,
    },
    {
	.name = "hotpaths",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N] [--ascii] [--event NAME] [--from S] [--to S]",
	.summary = "hottest call paths, merged into a call tree",
	.shortopts = "n:",
	.longopts = hotpaths_options,
	.run = run_hotpaths,
    },
    {
	.name = "threads",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--group-by name] [--window SECONDS]",
	.summary = "samples per thread and load imbalance",
	.shortopts = "",
	.longopts = threads_options,
	.run = run_threads,
    },
    {
	.name = "offcpu",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N]",
	.summary = "where threads wait: the top blocking stacks by off-CPU time",
	.shortopts = "n:",
	.longopts = limit_options,
	.run = run_offcpu,
    },
    {
	.name = "memory",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N] [--ascii]",
	.summary = "memory growth: RSS over time, live bytes per stack, leak suspects",
	.shortopts = "n:",
	.longopts = memory_options,
	.run = run_memory,
    },
    {
	.name = "export",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION --format FORMAT [-o FILE] [--from S] [--to S] [--thread TID]",
	.summary = "the profile for other tools: pprof, folded, chrome-trace",
	.shortopts = "o:",
	.longopts = export_options,
	.run = run_export,
    },
    {
	.name = "flamegraph",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [-o FILE.svg] [--thread TID] [--inverted] [--from S] [--to S]",
	.summary = "an SVG flame graph of the call stacks, for a web browser",
	.shortopts = "o:",
	.longopts = flamegraph_options,
	.run = run_flamegraph,
    },
    {
	.name = "diff",
	.operand = OPERAND_TWO_SESSIONS,
	.synopsis = "SESSION_A SESSION_B [--limit N] [--from S] [--to S]",
	.summary = "compare two sessions: which functions' shares changed most",
	.shortopts = "n:",
	.longopts = diff_options,
	.run = run_diff,
    },
    {
	.name = "analyze",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "findings: bottlenecks with evidence and a suggestion",
	.shortopts = "",
	.run = run_analyze,
    },
    {
	.name = "sql",
	.operand = OPERAND_SQL,
	.synopsis = "\"SELECT ...\" [--csv] [--max-rows N]",
	.summary = "run a read-only SQL query over the stored profiles",
	.shortopts = "",
	.longopts = sql_options,
	.run = run_sql,
    },
    {
	.name = "gpu",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N]",
	.summary = "kernel launches, CUDA API times, copies, GPU memory growth",
	.shortopts = "n:",
	.longopts = limit_options,
	.run = run_gpu,
    },
    {
	.name = "ranges",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "NVTX ranges as a tree: calls, total/avg/min/max time, % of session",
	.shortopts = "",
	.run = run_ranges,
    },
    {
	.name = "resymbolize",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--debuginfod]",
	.summary = "name frames left unsymbolized, from debug info found since",
	.shortopts = "",
	.longopts = resymbolize_options,
	.run = run_resymbolize,
    },
    {
	.name = "ping",
	.operand = OPERAND_NONE,
	.synopsis = "",
	.summary = "check that profd answers; prints its version",
	.shortopts = "",
	.run = run_ping,
    },
    {
	/* No .run: main() prints the help. */
	.name = "help",
	.operand = OPERAND_TOPIC,
	.synopsis = "[COMMAND]",
	.summary = "show this help, or a command's",
	.shortopts = "",
    },
};
static const size_t n_commands = ARRAY_SIZE(commands);

static const char common_options_help[] =
    "Common options (before or after the command):\n"
    "  -s, --socket PATH  profd's socket (default: $PROFD_SOCKET if set, else\n"
    "                     " PROFD_DEFAULT_SOCKET ")\n"
    "  -j, --json         print profd's response as one JSON document instead\n"
    "  -h, --help         show help and exit\n";

static void help_global(FILE *f)
{
	fprintf(f, "Usage: profctl [--socket PATH] [--json] COMMAND [ARGS]\n"
		   "\n"
		   "Control profd, the sampling profiler daemon, and print its reports.\n"
		   "\n"
		   "Commands:\n");
	for (size_t i = 0; i < n_commands; i++) {
		char head[64];

		snprintf(head, sizeof(head), "%s %s", commands[i].name,
			 commands[i].operand == OPERAND_PID	  ? "PID"
			 : commands[i].operand == OPERAND_TARGET  ? "TARGET"
			 : commands[i].operand == OPERAND_SESSION ? "SESSION"
			 : commands[i].operand == OPERAND_TOPIC	  ? "[COMMAND]"
			 : commands[i].operand == OPERAND_TWO_SESSIONS ? "A B"
			 : commands[i].operand == OPERAND_SQL	  ? "QUERY"
								  : "");
		fprintf(f, "  %-19s %s\n", head, commands[i].summary);
	}
	fprintf(f,
		"\n"
		"%s"
		"  -V, --version      show profctl's version and exit\n"
		"\n"
		"Examples:\n"
		"  profctl attach 1234 --duration 10 --wait\n"
		"  profctl sessions\n"
		"  profctl top 7 --limit 10\n"
		"  profctl hotpaths 7\n"
		"  profctl top 7 --json\n"
		"  profctl flamegraph 7 -o cpu.svg\n"
		"  profctl export 7 --format pprof -o cpu.pb.gz\n"
		"  profctl sql \"SELECT * FROM hot_functions WHERE session_id = 7\"\n"
		"  profctl help attach\n"
		"\n"
		"Exit status: 0 success, 1 error (from profd, or profd unreachable),\n"
		"2 usage error, 130 attach --wait interrupted.\n"
		"See profctl(1) and profd(8).\n",
		common_options_help);
}

/*
 * help_command() - a command's usage line, then its description and its
 * options, which come from profctl(1)'s COMMANDS section (profctl-help.h,
 * made at build time by client/man2help.py): one text for both.
 */
static void help_command(FILE *f, const struct command *cmd)
{
	const char *text = "See profctl(1).\n";

	for (size_t i = 0; i < ARRAY_SIZE(command_helps); i++)
		if (strcmp(command_helps[i].name, cmd->name) == 0)
			text = command_helps[i].text;
	fprintf(f, "Usage: profctl %s %s\n\n%s\n%s", cmd->name, cmd->synopsis, text,
		common_options_help);
}

static const struct command *command_find(const char *name)
{
	for (size_t i = 0; i < n_commands; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/*
 * parse_integer() - @s as a decimal integer in @min..@max, for the option or
 * operand @what. Logs a one-line error and returns -EINVAL otherwise.
 */
static int parse_integer(const char *s, const char *what, long long min, long long max,
			 long long *ret)
{
	char *end;
	long long v;

	if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1]))) {
		log_error("invalid %s '%s': not an integer", what, s);
		return -EINVAL;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0') {
		log_error("invalid %s '%s': not an integer", what, s);
		return -EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		if (errno == ERANGE)
			log_error("invalid %s '%s': out of range", what, s);
		else if (max == LLONG_MAX)
			log_error("invalid %s '%s': must be at least %lld", what, s, min);
		else
			log_error("invalid %s '%s': must be %lld..%lld", what, s, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

/*
 * parse_seconds() - @s as a plain decimal number of seconds > 0 ("10",
 * "0.5"); no signs, exponents, hex, inf or nan. Logs and returns -EINVAL
 * otherwise; *@ret_integral tells whether @s had no fraction.
 */
static int parse_seconds(const char *s, double *ret, bool *ret_integral)
{
	size_t digits = 0, dots = 0;
	char *end;
	double v;

	for (const char *p = s; *p; p++) {
		if (isdigit((unsigned char)*p))
			digits++;
		else if (*p == '.')
			dots++;
		else
			digits = 0, dots = 2; /* anything else: reject below */
		if (dots > 1)
			break;
	}
	if (digits == 0 || dots > 1) {
		log_error("invalid --duration '%s': not a number of seconds", s);
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || errno == ERANGE || !(v > 0)) {
		log_error("invalid --duration '%s': must be more than 0 seconds", s);
		return -EINVAL;
	}
	*ret = v;
	*ret_integral = dots == 0;
	return 0;
}

/* parse_offset() - --from/--to: seconds from the session's start, >= 0 ("0", "2.5"). */
static int parse_offset(const char *s, const char *what, double *ret)
{
	char *end;

	errno = 0;
	if (!isdigit((unsigned char)s[0])) {
		log_error("invalid %s '%s': seconds from the session's start, >= 0", what, s);
		return -EINVAL;
	}
	*ret = strtod(s, &end);
	if (*end != '\0' || errno == ERANGE || *ret > 366 * 86400.0) {
		log_error("invalid %s '%s': seconds from the session's start, >= 0", what, s);
		return -EINVAL;
	}
	return 0;
}

static int parse_events(const char *list)
{
	const char *name;
	size_t pos = 0, len;

	while (events_next(list, &pos, &name, &len))
		if (len == 0) {
			log_error("invalid --events '%s': empty event name", list);
			return -EINVAL;
		}
	return 0;
}

/*
 * parse_operand() - the command's one operand: a PID, a SESSION or a help
 * topic. *@have_operand says whether one was seen already. Logs and returns
 * -EINVAL when @operand is invalid or one too many.
 */
static int parse_operand(const char *operand, struct args *a, bool *have_operand)
{
	if (a->command->operand == OPERAND_TWO_SESSIONS && *have_operand && !a->id2)
		return parse_integer(operand, "SESSION_B", 1, LLONG_MAX, &a->id2);
	if (*have_operand || a->command->operand == OPERAND_NONE) {
		log_error("unexpected argument '%s' (see 'profctl %s --help')", operand,
			  a->command->name);
		return -EINVAL;
	}
	*have_operand = true;
	switch (a->command->operand) {
	case OPERAND_PID:
		return parse_integer(operand, "PID", 1, INT_MAX, &a->id);
	case OPERAND_TARGET:
		a->has_pid = true;
		return parse_integer(operand, "PID", 1, INT_MAX, &a->id);
	case OPERAND_SESSION:
		return parse_integer(operand, "SESSION", 1, LLONG_MAX, &a->id);
	case OPERAND_TWO_SESSIONS:
		return parse_integer(operand, "SESSION_A", 1, LLONG_MAX, &a->id);
	case OPERAND_SQL:
		a->sql = operand;
		return 0;
	default:
		a->help_topic = command_find(operand);
		if (!a->help_topic) {
			log_error("unknown command '%s' (see 'profctl --help')", operand);
			return -EINVAL;
		}
		return 0;
	}
}

/*
 * parse_command_line() - fill @a from @argv. Returns 0 to run a command, 1
 * when help or the version was printed (exit 0), -EINVAL on a usage error
 * (already reported, on stderr). getopt_long() reports unknown options itself.
 */
static int parse_command_line(int argc, char **argv, struct args *a)
{
	static const struct option global_options[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {},
	};
	static const struct option common_options[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	};
	_cleanup_free_ char **sub_argv = NULL;
	_cleanup_free_ char *sub_name = NULL;
	struct option options[32]; /* the common options and the command's */
	char shortopts[32];
	bool have_operand = false;
	size_t n = 0;
	int sub_argc, c;

	/* Global options end at the command name ('+'). */
	optind = 0;
	while ((c = getopt_long(argc, argv, "+s:jhV", global_options, NULL)) != -1) {
		switch (c) {
		case 's':
			a->socket_path = optarg;
			break;
		case 'j':
			a->json = true;
			break;
		case 'h':
			help_global(stdout);
			return 1;
		case 'V':
			printf("profctl %s (protocol %d)\n", PROFD_VERSION, PROFD_PROTOCOL_VERSION);
			return 1;
		default:
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		log_error("no command given (see 'profctl --help')");
		return -EINVAL;
	}
	a->command = command_find(argv[optind]);
	if (!a->command) {
		log_error("unknown command '%s' (see 'profctl --help')", argv[optind]);
		return -EINVAL;
	}

	/*
	 * The command's own argv, named "profctl CMD" so that getopt_long()'s
	 * messages say which command it was parsing.
	 */
	if (asprintf(&sub_name, "profctl %s", a->command->name) < 0) {
		sub_name = NULL; /* undefined after a failure */
		return log_oom();
	}
	sub_argc = argc - optind;
	sub_argv = calloc((size_t)sub_argc + 1, sizeof(*sub_argv));
	if (!sub_argv)
		return log_oom();
	sub_argv[0] = sub_name;
	for (int i = 1; i < sub_argc; i++)
		sub_argv[i] = argv[optind + i];

	for (size_t i = 0; i < ARRAY_SIZE(common_options); i++)
		options[n++] = common_options[i];
	for (const struct option *o = a->command->longopts; o && o->name; o++) {
		assert(n + 1 < ARRAY_SIZE(options));
		options[n++] = *o;
	}
	options[n] = (struct option){};
	/* '-': operands come back in order as option 1, whatever POSIXLY_CORRECT says. */
	snprintf(shortopts, sizeof(shortopts), "-s:jh%s", a->command->shortopts);

	optind = 0;
	while ((c = getopt_long(sub_argc, sub_argv, shortopts, options, NULL)) != -1) {
		switch (c) {
		case 's':
			a->socket_path = optarg;
			break;
		case 'j':
			a->json = true;
			break;
		case 'h':
			help_command(stdout, a->command);
			return 1;
		case 'd':
			if (parse_seconds(optarg, &a->duration_s, &a->duration_integral) < 0)
				return -EINVAL;
			a->has_duration = true;
			break;
		case 'f':
			if (parse_integer(optarg, "--freq", 1, PROFD_MAX_FREQ_HZ, &a->freq_hz) < 0)
				return -EINVAL;
			break;
		case 'e':
			if (parse_events(optarg) < 0)
				return -EINVAL;
			a->events = optarg;
			break;
		case 'w':
			a->wait = true;
			break;
		case OPT_UNWIND:
			if (strcmp(optarg, "fp") != 0 && strcmp(optarg, "dwarf") != 0 &&
			    strcmp(optarg, "auto") != 0) {
				log_error("invalid --unwind '%s': fp, dwarf or auto", optarg);
				return -EINVAL;
			}
			a->unwind = optarg;
			break;
		case OPT_DEBUGINFOD:
			a->debuginfod = true;
			break;
		case OPT_CHILDREN:
			a->children = true;
			break;
		case OPT_PYTHON:
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "off") != 0) {
				log_error("invalid --python '%s': auto or off", optarg);
				return -EINVAL;
			}
			a->python = optarg;
			break;
		case OPT_UPROBE_MAX_RATE:
			if (parse_integer(optarg, "--uprobe-max-rate", 0, 1000000000,
					  &a->uprobe_max_rate) < 0)
				return -EINVAL;
			break;
		case OPT_UPROBE:
			if (!strchr(optarg, ':')) {
				log_error("invalid --uprobe '%s': expected LIB:SYMBOL[,LIB:SYMBOL]",
					  optarg);
				return -EINVAL;
			}
			a->uprobes = optarg;
			break;
		case OPT_EVENT:
			a->event = optarg;
			break;
		case OPT_GROUP_BY:
			if (strcmp(optarg, "name") != 0) {
				log_error("invalid --group-by '%s': only 'name' is known", optarg);
				return -EINVAL;
			}
			a->group_by_name = true;
			break;
		case OPT_WINDOW: {
			bool integral;

			if (parse_seconds(optarg, &a->window_s, &integral) < 0)
				return -EINVAL;
			break;
		}
		case OPT_MEMORY_INTERVAL: {
			bool integral;

			if (parse_seconds(optarg, &a->memory_interval_s, &integral) < 0)
				return -EINVAL;
			if (a->memory_interval_s < 0.1 || a->memory_interval_s > 3600) {
				log_error("invalid --memory-interval '%s': 0.1..3600 seconds", optarg);
				return -EINVAL;
			}
			break;
		}
		case OPT_MALLOC_SAMPLE_BYTES:
			if (parse_integer(optarg, "--malloc-sample-bytes", 1, 1LL << 40,
					  &a->malloc_sample_bytes) < 0)
				return -EINVAL;
			break;
		case OPT_MALLOC_MAX_RATE:
			if (parse_integer(optarg, "--malloc-max-rate", 0, 1000000000,
					  &a->malloc_max_rate) < 0)
				return -EINVAL;
			break;
		case OPT_STACK_BYTES:
			if (parse_integer(optarg, "--stack-bytes", 512, 32768, &a->stack_bytes) < 0)
				return -EINVAL;
			break;
		case 'n':
			if (parse_integer(optarg, "--limit", 1, LIMIT_MAX, &a->limit) < 0)
				return -EINVAL;
			break;
		case OPT_ASCII:
			a->ascii = true;
			break;
		case OPT_FROM:
		case OPT_TO:
			if (parse_offset(optarg, c == OPT_FROM ? "--from" : "--to",
					 c == OPT_FROM ? &a->from_s : &a->to_s) < 0)
				return -EINVAL;
			*(c == OPT_FROM ? &a->has_from : &a->has_to) = true;
			break;
		case OPT_THREAD:
			if (parse_integer(optarg, "--thread", 1, INT_MAX, &a->thread) < 0)
				return -EINVAL;
			break;
		case OPT_INVERTED:
			a->inverted = true;
			break;
		case OPT_FORMAT:
			if (!export_format_find(optarg)) {
				log_error("invalid --format '%s': folded, pprof, chrome-trace or "
					  "speedscope",
					  optarg);
				return -EINVAL;
			}
			a->format = optarg;
			break;
		case 'o':
			a->output = optarg;
			break;
		case OPT_CSV:
			a->csv = true;
			break;
		case OPT_MAX_ROWS:
			if (parse_integer(optarg, "--max-rows", 1, 1000000, &a->max_rows) < 0)
				return -EINVAL;
			break;
		case OPT_COMM:
			if (!*optarg) {
				log_error("invalid --comm '': empty name");
				return -EINVAL;
			}
			a->comm = optarg;
			break;
		case OPT_CGROUP:
			if (!*optarg) {
				log_error("invalid --cgroup '': empty path");
				return -EINVAL;
			}
			a->cgroup = optarg;
			break;
		case OPT_LABEL:
			if (strlen(optarg) > 256) {
				log_error("invalid --label: longer than 256 bytes");
				return -EINVAL;
			}
			a->label = optarg;
			break;
		case 1:
			if (parse_operand(optarg, a, &have_operand) < 0)
				return -EINVAL;
			break;
		default:
			/* getopt_long() printed what was wrong. */
			return -EINVAL;
		}
	}

	/* What follows "--" is all operands. */
	for (; optind < sub_argc; optind++)
		if (parse_operand(sub_argv[optind], a, &have_operand) < 0)
			return -EINVAL;

	if (a->command->operand == OPERAND_TARGET) {
		if (have_operand + !!a->comm + !!a->cgroup != 1) {
			log_error("give one of PID, --comm NAME or --cgroup PATH (see 'profctl %s "
				  "--help')",
				  a->command->name);
			return -EINVAL;
		}
		if (!a->has_duration) {
			log_error("missing --duration SECONDS (see 'profctl %s --help')",
				  a->command->name);
			return -EINVAL;
		}
	}
	if (!have_operand && a->command->operand != OPERAND_NONE &&
	    a->command->operand != OPERAND_TOPIC && a->command->operand != OPERAND_TARGET) {
		log_error("missing %s (see 'profctl %s --help')",
			  a->command->operand == OPERAND_PID	? "PID"
			  : a->command->operand == OPERAND_SQL ? "SQL statement"
							       : "SESSION",
			  a->command->name);
		return -EINVAL;
	}
	if (a->command->operand == OPERAND_TWO_SESSIONS && !a->id2) {
		log_error("missing SESSION_B: diff compares two sessions (see 'profctl diff --help')");
		return -EINVAL;
	}
	if (a->command->run == run_export && !a->format) {
		log_error("missing --format: folded, pprof, chrome-trace or speedscope (see 'profctl "
			  "export --help')");
		return -EINVAL;
	}
	if (a->has_from && a->has_to && a->from_s >= a->to_s) {
		log_error("--from %g must be less than --to %g", a->from_s, a->to_s);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	_cleanup_(conn__freep) struct conn *conn = NULL;
	_cleanup_free_ char **argv_copy = NULL;
	struct args a = { .malloc_max_rate = -1, .uprobe_max_rate = -1 };
	const char *env;
	int r;

	log_set_program("profctl");

	env = getenv("PROFD_SOCKET");
	a.socket_path = env && *env ? env : PROFD_DEFAULT_SOCKET;

	/* getopt_long() names the program after argv[0]; say "profctl" whatever the path. */
	argv_copy = calloc((size_t)argc + 1, sizeof(*argv_copy));
	if (!argv_copy) {
		log_oom();
		return EXIT_FAILURE;
	}
	argv_copy[0] = (char *)"profctl";
	for (int i = 1; i < argc; i++)
		argv_copy[i] = argv[i];

	r = parse_command_line(argc, argv_copy, &a);
	if (r == -ENOMEM)
		return EXIT_FAILURE;
	if (r < 0)
		return EXIT_USAGE;
	if (r > 0)
		return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;

	if (!a.command->run) {
		/* profctl help [COMMAND] */
		if (a.help_topic)
			help_command(stdout, a.help_topic);
		else
			help_global(stdout);
		return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	r = conn__open(a.socket_path, &conn);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		log_error_errno(
		    r, "cannot connect to profd at %s: %m (is profd running? see profd(8))",
		    a.socket_path);
		return EXIT_FAILURE;
	}
	if (r < 0) {
		log_error_errno(r, "cannot connect to profd at %s: %m", a.socket_path);
		return EXIT_FAILURE;
	}

	r = a.command->run(conn, &a);
	if (fflush(stdout) != 0) {
		log_error_errno(-errno, "cannot write output: %m");
		return EXIT_FAILURE;
	}
	if (r == -EINTR)
		return EXIT_INTERRUPTED;
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
