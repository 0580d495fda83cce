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
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "conn.h"
#include "log.h"
#include "output.h"
#include "protocol.h"
#include "util.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

/* How often attach --wait asks profd about the session. */
#define WAIT_POLL_NS (500 * NSEC_PER_MSEC)

/* Range of --limit, as profd accepts it (docs/protocol.md). */
#define LIMIT_MAX 10000

enum operand { OPERAND_NONE, OPERAND_PID, OPERAND_SESSION, OPERAND_TOPIC };

enum {
	OPT_ASCII = 0x100,
	OPT_UNWIND,
	OPT_STACK_BYTES,
	OPT_DEBUGINFOD,
	OPT_CHILDREN,
	OPT_GROUP_BY,
	OPT_WINDOW,
	OPT_EVENT,
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
	bool debuginfod;		  /* resymbolize --debuginfod */
	bool children;			  /* attach --children */
	const char *uprobes;		  /* attach --uprobe LIB:SYMBOL[,LIB:SYMBOL] */
	long long uprobe_max_rate;	  /* attach --uprobe-max-rate; -1: profd's default */
	bool group_by_name;		  /* threads --group-by name */
	const char *event;		  /* top/hotpaths --event NAME; NULL: CPU samples */
	double window_s;		  /* threads --window SECONDS; 0: none */
	long long limit;		  /* 0: profd's default */
	const struct command *help_topic; /* "help COMMAND" */
};

struct command {
	const char *name;
	enum operand operand;
	const char *synopsis;  /* after "profctl NAME" */
	const char *summary;   /* one line, for the command list */
	const char *details;   /* the command's help: what it does and its options */
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
	if (json_object_set_new(request, "freq_hz",
				json_integer(a->freq_hz ? a->freq_hz : PROFD_DEFAULT_FREQ_HZ)) < 0)
		return NULL;
	if (a->unwind && json_object_set_new(request, "unwind", json_string(a->unwind)) < 0)
		return NULL;
	if (a->children && json_object_set_new(request, "children", json_true()) < 0)
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
	/* Without --events, profd's default set (cpu,offcpu). */
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
	return request;
}

static int run_top(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("top", a), output__top, NULL);
}

static int run_hotpaths(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	struct render out;
	bool ascii = a->ascii;
	int r;

	r = call(c, request_report("hotpaths", a), &reply);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(reply);

	/* Box-drawing characters only where the locale says the terminal takes UTF-8. */
	setlocale(LC_CTYPE, "");
	if (strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
		ascii = true;
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, output__hotpaths(out.f, reply, ascii));
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

static const struct option top_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {"event", required_argument, NULL, OPT_EVENT},
    {},
};

static const struct option hotpaths_options[] = {
    {"limit", required_argument, NULL, 'n'},
    {"ascii", no_argument, NULL, OPT_ASCII},
    {"event", required_argument, NULL, OPT_EVENT},
    {},
};

static const struct command commands[] = {
    {
	.name = "attach",
	.operand = OPERAND_PID,
	.synopsis = "PID [--duration SECONDS] [--freq HZ] [--events LIST] [--unwind MODE]\n"
		    "        [--children] [--uprobe LIB:SYMBOL[,...]] [--wait]",
	.summary = "start sampling a process; prints the new session's ID",
	.details = "Start a session that samples process PID (all its threads) and stores\n"
		   "the call stacks; prints the session ID the other commands take.\n"
		   "\n"
		   "Options:\n"
		   "  -d, --duration SECONDS  stop after SECONDS (a number > 0: 10, 0.5);\n"
		   "                          default: run until 'profctl detach' or the\n"
		   "                          process exits\n"
		   "  -f, --freq HZ           samples per second of CPU time, 1..10000\n"
		   "                          (default 99)\n"
		   "  -e, --events LIST       comma-separated: cpu (CPU samples with call\n"
		   "                          stacks), offcpu (time blocked, per blocking\n"
		   "                          stack and state), counters (per-thread perf\n"
		   "                          counters; opt-in: they perturb the CPU\n"
		   "                          sampling, see profctl(1)), cuda (uprobes on\n"
		   "                          the CUDA runtime and driver: kernel launches,\n"
		   "                          GPU memory, copies, waits; see profctl gpu),\n"
		   "                          nvtx (NVTX ranges; see profctl ranges);\n"
		   "                          default: cpu,offcpu\n"
		   "      --unwind MODE       how user call stacks are unwound:\n"
		   "                          fp     frame pointers only (cheapest; stacks stop\n"
		   "                                 at code built without them)\n"
		   "                          dwarf  CFI (.eh_frame/.debug_frame) on a copy of\n"
		   "                                 the user stack, as perf --call-graph dwarf\n"
		   "                          auto   both; per sample DWARF, unless the frame-\n"
		   "                                 pointer walk got further (default)\n"
		   "      --children          also sample the processes PID forks after the\n"
		   "                          attach (data-loader workers), in this session\n"
		   "      --uprobe LIB:SYMBOL[,LIB:SYMBOL]\n"
		   "                          count calls and time each call of SYMBOL in\n"
		   "                          the mapped file LIB (a path, a file name, or\n"
		   "                          its start: libc, libc.so.6, myprog); up to 16;\n"
		   "                          see profctl gpu\n"
		   "      --uprobe-max-rate N detach the cuda, nvtx and --uprobe probes if\n"
		   "                          the process makes more than N probed calls a\n"
		   "                          second (each costs it microseconds); 0: never;\n"
		   "                          default 20000\n"
		   "      --stack-bytes N     user stack copied per sample for dwarf/auto,\n"
		   "                          512..32768 (default 16384)\n"
		   "  -w, --wait              wait for the session to end, with progress on\n"
		   "                          stderr if it is a terminal, then print the\n"
		   "                          session summary; Ctrl-C detaches the session\n"
		   "                          and exits with status 130; with --json,\n"
		   "                          prints the attach response with the ended\n"
		   "                          session under \"final\"\n"
		   "\n"
		   "Examples:\n"
		   "  profctl attach 1234\n"
		   "  profctl attach 1234 --duration 10 --wait\n"
		   "  profctl attach \"$(pidof myserver)\" --freq 999 --duration 30\n"
		   "  profctl attach 1234 --events cpu,cuda,nvtx\n"
		   "  profctl attach 1234 --uprobe libc:malloc,myprog:step\n",
	.shortopts = "d:f:e:w",
	.longopts = attach_options,
	.run = run_attach,
    },
    {
	.name = "detach",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "stop a running session",
	.details = "Stop session SESSION and print its summary (a session that has already\n"
		   "ended is printed unchanged).\n"
		   "\n"
		   "Example:\n"
		   "  profctl detach 7\n",
	.shortopts = "",
	.run = run_detach,
    },
    {
	.name = "sessions",
	.operand = OPERAND_NONE,
	.synopsis = "",
	.summary = "list all sessions, newest first",
	.details = "List all sessions, newest first: ID, PID, command name, state, why it\n"
		   "ended, sampling event, start (local time), run time, samples stored and\n"
		   "samples lost.\n"
		   "\n"
		   "Example:\n"
		   "  profctl sessions\n",
	.shortopts = "",
	.run = run_sessions,
    },
    {
	.name = "session",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "show one session's settings and counters",
	.details = "Show session SESSION as 'key: value' lines: target, state, event and\n"
		   "frequency, times, samples, and the lost-sample, truncated-stack,\n"
		   "missing-user-stack and unsymbolized-frame counters.\n"
		   "\n"
		   "Example:\n"
		   "  profctl session 7\n",
	.shortopts = "",
	.run = run_session,
    },
    {
	.name = "top",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N] [--event NAME]",
	.summary = "hottest functions, by samples in the function itself",
	.details = "Print the hottest functions of session SESSION, by self samples (the\n"
		   "function was running), with total samples (the function was on the\n"
		   "stack), module and source line.\n"
		   "\n"
		   "Options:\n"
		   "  -n, --limit N  print at most N functions, 1..10000 (default 20)\n"
		   "      --event NAME  the samples of the session's second sampled event\n"
		   "                 (attach --events cpu,NAME: page-faults, cache-misses,\n"
		   "                 ...) instead of the CPU samples\n"
		   "\n"
		   "Examples:\n"
		   "  profctl top 7\n"
		   "  profctl top 7 --limit 5 --json\n",
	.shortopts = "n:",
	.longopts = top_options,
	.run = run_top,
    },
    {
	.name = "hotpaths",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N] [--ascii] [--event NAME]",
	.summary = "hottest call paths, merged into a call tree",
	.details = "Print the hottest call stacks of session SESSION merged into one call\n"
		   "tree, outermost caller first. Each line shows the samples whose stack\n"
		   "passed through that call chain and their share of all samples. A\n"
		   "callee that holds all of its caller's samples is printed straight\n"
		   "below it, at the same indentation; indentation grows only where\n"
		   "paths diverge (drawn with tree branches).\n"
		   "\n"
		   "Options:\n"
		   "  -n, --limit N  merge the N hottest stacks, 1..10000 (default 10)\n"
		   "      --ascii    draw the tree with |- and `- (the default where the\n"
		   "                 locale is not UTF-8)\n"
		   "\n"
		   "Examples:\n"
		   "  profctl hotpaths 7\n"
		   "  profctl hotpaths 7 --limit 50 --ascii\n",
	.shortopts = "n:",
	.longopts = hotpaths_options,
	.run = run_hotpaths,
    },
    {
	.name = "threads",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--group-by name] [--window SECONDS]",
	.summary = "samples per thread and load imbalance",
	.details = "Print the samples of each thread of session SESSION and its share,\n"
		   "busiest first, and how uneven the load is: the busiest thread over the\n"
		   "mean (1.00 = even), the coefficient of variation, and the stragglers\n"
		   "(threads over 1.2x the mean). Then each thread's time on the CPU, off\n"
		   "it by state (sleeping, waiting for I/O, runnable but not running),\n"
		   "context switches, page faults and, where the CPU has a PMU, IPC and\n"
		   "cache-miss rate (\"unsupported\" where it has none).\n"
		   "\n"
		   "Options:\n"
		   "      --group-by name     also per group of threads whose names differ\n"
		   "                          only in digits (worker-1, worker-2: worker-*)\n"
		   "      --window SECONDS    also the imbalance per window of SECONDS, to\n"
		   "                          see it appear and disappear\n"
		   "\n"
		   "Examples:\n"
		   "  profctl threads 7\n"
		   "  profctl threads 7 --group-by name --window 5\n",
	.shortopts = "",
	.longopts = threads_options,
	.run = run_threads,
    },
    {
	.name = "offcpu",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N]",
	.summary = "where threads wait: the top blocking stacks by off-CPU time",
	.details = "Print the call stacks in which the threads of session SESSION spent\n"
		   "the most time off the CPU, and in which state: sleeping (futex waits,\n"
		   "sleeps, poll), io (uninterruptible: disk I/O), runnable (ready but\n"
		   "waiting for a CPU). Needs the offcpu event (on by default). Blocks\n"
		   "shorter than 10 us are not recorded.\n"
		   "\n"
		   "Options:\n"
		   "  -n, --limit N           stacks to print, 1..10000 (default 10)\n"
		   "\n"
		   "Example:\n"
		   "  profctl offcpu 7 --limit 5\n",
	.shortopts = "n:",
	.longopts = limit_options,
	.run = run_offcpu,
    },
    {
	.name = "gpu",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--limit N]",
	.summary = "kernel launches, CUDA API times, copies, GPU memory growth",
	.details = "Print what the CUDA probes of session SESSION saw (attach --events\n"
		   "cpu,cuda): kernels by launches with grid and block dimensions and the\n"
		   "launching call stack; calls, errors and total/avg/min/max time per CUDA\n"
		   "API function; bytes copied by direction; time threads waited in\n"
		   "synchronization calls, per stack; GPU memory: live bytes now, at peak\n"
		   "and over time, and per allocating stack (frees are matched to their\n"
		   "allocation by pointer; failed allocations count as asked, not live);\n"
		   "and the calls and latency of each --uprobe. Probes that failed, and\n"
		   "NVTX v3 calls inlined where they cannot be probed, are listed first;\n"
		   "--json also lists every probe attached or missing.\n"
		   "\n"
		   "Options:\n"
		   "  -n, --limit N           rows per list, 1..10000 (default 10)\n"
		   "\n"
		   "Examples:\n"
		   "  profctl gpu 7\n"
		   "  profctl gpu 7 --json | jq '.kernels[] | {name, launches}'\n",
	.shortopts = "n:",
	.longopts = limit_options,
	.run = run_gpu,
    },
    {
	.name = "ranges",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION",
	.summary = "NVTX ranges as a tree: calls, total/avg/min/max time, % of session",
	.details = "Print the NVTX ranges of session SESSION (attach --events cpu,nvtx):\n"
		   "push/pop ranges as a tree, each nested range under its parent, with\n"
		   "calls, total, average, minimum and maximum time, and the share of the\n"
		   "session's wall time (summed over threads, so it can pass 100%); then\n"
		   "start/end ranges and marks. Ranges closed before they were seen opened\n"
		   "(opened before the attach) are counted, not timed.\n"
		   "\n"
		   "Examples:\n"
		   "  profctl ranges 7\n"
		   "  profctl ranges 7 --json\n",
	.shortopts = "",
	.run = run_ranges,
    },
    {
	.name = "resymbolize",
	.operand = OPERAND_SESSION,
	.synopsis = "SESSION [--debuginfod]",
	.summary = "name frames left unsymbolized, from debug info found since",
	.details = "Look up again every frame of session SESSION that has no function\n"
		   "name, by the build ID and address stored with it, and store what is\n"
		   "found: after installing a -dbg/-dbgsym package, or putting debug files\n"
		   "under a directory in profd's PROFD_DEBUG_PATH.\n"
		   "\n"
		   "Options:\n"
		   "      --debuginfod        also fetch debug info with libdebuginfod, from\n"
		   "                          the servers in profd's DEBUGINFOD_URLS; profd\n"
		   "                          answers nothing else until the downloads end\n"
		   "\n"
		   "Example:\n"
		   "  profctl resymbolize 7 && profctl top 7\n",
	.shortopts = "",
	.longopts = resymbolize_options,
	.run = run_resymbolize,
    },
    {
	.name = "ping",
	.operand = OPERAND_NONE,
	.synopsis = "",
	.summary = "check that profd answers; prints its version",
	.details = "Check that profd answers on its socket; prints its version.\n"
		   "\n"
		   "Example:\n"
		   "  profctl --socket /tmp/profd.sock ping\n",
	.shortopts = "",
	.run = run_ping,
    },
    {
	/* No .run: main() prints the help. */
	.name = "help",
	.operand = OPERAND_TOPIC,
	.synopsis = "[COMMAND]",
	.summary = "show this help, or a command's",
	.details = "Show the list of commands, or the options of COMMAND.\n"
		   "\n"
		   "Example:\n"
		   "  profctl help attach\n",
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
			 : commands[i].operand == OPERAND_SESSION ? "SESSION"
			 : commands[i].operand == OPERAND_TOPIC	  ? "[COMMAND]"
								  : "");
		fprintf(f, "  %-18s %s\n", head, commands[i].summary);
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
		"  profctl help attach\n"
		"\n"
		"Exit status: 0 success, 1 error (from profd, or profd unreachable),\n"
		"2 usage error, 130 attach --wait interrupted.\n"
		"See profctl(1) and profd(8).\n",
		common_options_help);
}

static void help_command(FILE *f, const struct command *cmd)
{
	fprintf(f, "Usage: profctl %s %s\n\n%s\n%s", cmd->name, cmd->synopsis, cmd->details,
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
	if (*have_operand || a->command->operand == OPERAND_NONE) {
		log_error("unexpected argument '%s' (see 'profctl %s --help')", operand,
			  a->command->name);
		return -EINVAL;
	}
	*have_operand = true;
	switch (a->command->operand) {
	case OPERAND_PID:
		return parse_integer(operand, "PID", 1, INT_MAX, &a->id);
	case OPERAND_SESSION:
		return parse_integer(operand, "SESSION", 1, LLONG_MAX, &a->id);
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
	struct option options[16];
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

	if (!have_operand &&
	    (a->command->operand == OPERAND_PID || a->command->operand == OPERAND_SESSION)) {
		log_error("missing %s (see 'profctl %s --help')",
			  a->command->operand == OPERAND_PID ? "PID" : "SESSION", a->command->name);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	_cleanup_(conn__freep) struct conn *conn = NULL;
	_cleanup_free_ char **argv_copy = NULL;
	struct args a = { .uprobe_max_rate = -1 };
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
