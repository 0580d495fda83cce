/* cmd-report.c - the report commands: sessions, session, top, hotpaths, threads, offcpu, memory,
 * gpu, ranges, analyze, resymbolize. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "output.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"

int run_sessions(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_new("sessions"), output__sessions, NULL);
}

int run_session(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_session("session", a->id), output__session, "session");
}

int run_top(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("top", a), output__top, NULL);
}

int run_hotpaths(struct conn *c, const struct args *a)
{
	return call_and_draw(c, a, request_report("hotpaths", a), output__hotpaths);
}

int run_memory(struct conn *c, const struct args *a)
{
	return call_and_draw(c, a, request_report("memory", a), output__memory);
}

int run_threads(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	_cleanup_(json_decrefp) json_t *session = NULL;
	json_t *request = request_session("threads", a->id);
	struct render out;
	int r;

	if (a->group_by)
		request = request_set(request, "group_by", json_string("name"));
	if (a->window_s > 0)
		request = request_set(request, "window_s", json_real(a->window_s));
	if (a->all)
		request = request_set(request, "all", json_true());
	r = call_for_text(c, a, request, &reply);
	if (r <= 0)
		return r;

	/* "threads" has no sample counters; the session has, and every report shows them. */
	r = call(c, request_session("session", a->id), &session);
	if (r < 0)
		return r;
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, output__threads(out.f, reply, json_object_get(session, "session")));
}

int run_offcpu(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("offcpu", a), output__offcpu, NULL);
}

int run_gpu(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_report("gpu", a), output__gpu, NULL);
}

int run_ranges(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_session("ranges", a->id), output__ranges, NULL);
}

int run_resymbolize(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	json_t *request = request_session("resymbolize", a->id);
	long long checked, named, left;
	int r;

	if (a->debuginfod)
		request = request_set(request, "debuginfod", json_true());
	r = call_for_text(c, a, request, &reply);
	if (r <= 0)
		return r;
	checked = json_integer_value(json_object_get(reply, "frames_checked"));
	named = json_integer_value(json_object_get(reply, "frames_named"));
	left = json_integer_value(json_object_get(reply, "unsymbolized_frames"));
	printf("session %lld: %lld unsymbolized frames looked up again, %lld named, %lld left\n",
	       a->id, checked, named, left);
	return 0;
}

int run_analyze(struct conn *c, const struct args *a)
{
	return call_and_render(c, a, request_range(request_session("analyze", a->id), a),
			       output__analyze, NULL);
}
