/* call.c - profctl's requests to profd and the printing of their answers, shared by every command.
 */
#include <errno.h>
#include <fcntl.h>
#include <ctype.h>
#include <langinfo.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "output.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"

/* log_oom() - report running out of memory; returns -ENOMEM. */
int log_oom(void)
{
	return log_error_errno(-ENOMEM, "out of memory");
}

/*
 * events_next() - the next name of comma-separated @list at *@pos, blanks
 * around it trimmed; *@ret_len its length. Returns false at the end.
 */
bool events_next(const char *list, size_t *pos, const char **ret, size_t *ret_len)
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
volatile sig_atomic_t interrupted;

/*
 * call_error() - log, once, why call_quiet() failed with @r; returns @r.
 * @detail: conn__call()'s explanation, or NULL.
 */
int call_error(int r, const char *detail)
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
int call_quiet(struct conn *c, json_t *request, json_t **ret, char **ret_detail)
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
int call(struct conn *c, json_t *request, json_t **ret)
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

json_t *request_new(const char *cmd)
{
	return json_pack("{s:i, s:s}", "v", PROFD_PROTOCOL_VERSION, "cmd", cmd);
}

json_t *request_session(const char *cmd, long long session)
{
	return json_pack("{s:i, s:s, s:I}", "v", PROFD_PROTOCOL_VERSION, "cmd", cmd, "session",
			 (json_int_t)session);
}

int print_json(const json_t *reply)
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

int render_begin(struct render *out)
{
	*out = (struct render){};
	out->f = open_memstream(&out->text, &out->size);
	if (!out->f)
		return log_oom();
	return 0;
}

/* render_end() - @r is the output__*() result; prints the text if it is 0, logs otherwise. */
int render_end(struct render *out, int r)
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
const json_t *session_of(const json_t *reply)
{
	const json_t *s = json_object_get(reply, "session");

	return json_is_object(s) ? s : reply;
}

void on_sigint(int sig)
{
	interrupted = 1;
}

/* sleep_ns() - sleep @ns, returning early when SIGINT arrives. */
void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / NSEC_PER_SEC),
			      .tv_nsec = (long)(ns % NSEC_PER_SEC)};

	while (!interrupted && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * call_for_text() - call() @request (consumed), the reply in *@ret (caller
 * unrefs) either way. With --json it prints the reply and returns 0: the
 * command is done. Returns 1 when the caller is to print the reply as text,
 * or call()'s or print_json()'s error (logged).
 */
int call_for_text(struct conn *c, const struct args *a, json_t *request, json_t **ret)
{
	int r;

	r = call(c, request, ret);
	if (r < 0)
		return r;
	if (a->json)
		return print_json(*ret);
	return 1;
}

/*
 * The reply to @request printed: as JSON with --json, else by @fn (with
 * @member of the reply, or all of it) or by @draw (with --ascii or the
 * locale's choice of characters). One of @fn and @draw is NULL.
 */
static int call_and_print(struct conn *c, const struct args *a, json_t *request, render_fn fn,
			  const char *member, int (*draw)(FILE *f, const json_t *reply, bool ascii))
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	struct render out;
	int r;

	r = call_for_text(c, a, request, &reply);
	if (r <= 0)
		return r;
	if ((r = render_begin(&out)) < 0)
		return r;
	if (draw)
		return render_end(&out, draw(out.f, reply, want_ascii(a)));
	return render_end(&out, fn(out.f, member ? json_object_get(reply, member) : reply));
}

/* call_and_render() - the reply to @request: JSON with --json, else @fn's text. */
int call_and_render(struct conn *c, const struct args *a, json_t *request, render_fn fn,
		    const char *member)
{
	return call_and_print(c, a, request, fn, member, NULL);
}

/*
 * request_set() - @request with member @key set to @value; consumes both
 * (either may be NULL after a failed allocation). Returns @request, or NULL
 * with @request freed when it cannot be set, so that a chain of these ends
 * in call()'s -ENOMEM. Does not log.
 */
json_t *request_set(json_t *request, const char *key, json_t *value)
{
	if (!request) {
		json_decref(value);
		return NULL;
	}
	/* jansson takes @value even when it fails. */
	if (json_object_set_new(request, key, value) < 0) {
		json_decref(request);
		return NULL;
	}
	return request;
}

/*
 * request_range() - @request with "from_s"/"to_s" from --from/--to and
 * "python_frames" from --python-frames; consumes @request.
 */
json_t *request_range(json_t *request, const struct args *a)
{
	if (a->python_frames)
		request = request_set(request, "python_frames", json_string(a->python_frames));
	if (a->has_from)
		request = request_set(request, "from_s", json_real(a->from_s));
	if (a->has_to)
		request = request_set(request, "to_s", json_real(a->to_s));
	return request;
}

/* request_report() - a "top"/"hotpaths" request; "limit" only if given, else profd's default. */
json_t *request_report(const char *cmd, const struct args *a)
{
	json_t *request = request_session(cmd, a->id);

	if (a->limit > 0)
		request = request_set(request, "limit", json_integer((json_int_t)a->limit));
	if (a->event)
		request = request_set(request, "event", json_string(a->event));
	return request_range(request, a);
}

/* Box-drawing and block characters only where the locale says the terminal takes UTF-8. */
bool want_ascii(const struct args *a)
{
	setlocale(LC_CTYPE, "");
	return a->ascii || strcmp(nl_langinfo(CODESET), "UTF-8") != 0;
}

/* call_and_draw() - call_and_render() for the reports drawn with box or block characters (or
 * ASCII). */
int call_and_draw(struct conn *c, const struct args *a, json_t *request,
		  int (*fn)(FILE *f, const json_t *reply, bool ascii))
{
	return call_and_print(c, a, request, NULL, NULL, fn);
}
