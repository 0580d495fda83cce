/*
 * xprofile.c - profd's "profile" response (docs/protocol.md) loaded into
 * arrays of frames, stacks, samples and threads: what the exporters of
 * profctl and the daemon's Pyroscope push read.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "xprofile.h"

static int64_t int_of(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *str_of(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* xprofile__free() - free what xprofile__load() allocated; @p is left empty. Accepts an empty @p.
 */
void xprofile__free(struct xprofile *p)
{
	for (size_t i = 0; i < p->n_frames; i++)
		if (p->frames[i].name != p->frames[i].function)
			free((char *)p->frames[i].name);
	for (size_t i = 0; i < p->n_stacks; i++)
		free(p->stacks[i].frames);
	free(p->frames);
	free(p->stacks);
	free(p->samples);
	free(p->threads);
	json_decref(p->json);
	json_decref(p->session_json);
	*p = (struct xprofile){};
}

/* Orders frame indexes by (name, module), to number the functions. */
static int frame_func_cmp(const void *a, const void *b, void *arg)
{
	const struct xframe *frames = arg;
	const struct xframe *x = &frames[*(const size_t *)a], *y = &frames[*(const size_t *)b];
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->module, y->module);
}

static size_t count_char(const char *s, char c)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

/*
 * The "samples_packed" rows (docs/protocol.md: "STACK,TID,WINDOW,COUNT"
 * separated by ';') into @p->samples (@p->n_samples of them, allocated).
 * -EBADMSG for a malformed row or a stack index out of range.
 */
static int parse_packed(const char *s, struct xprofile *p)
{
	for (size_t i = 0; i < p->n_samples; i++) {
		long long f[4];
		char *end;

		for (int k = 0; k < 4; k++) {
			errno = 0;
			f[k] = strtoll(s, &end, 10);
			if (end == s || errno ||
			    *end != (k < 3		    ? ','
				     : i + 1 < p->n_samples ? ';'
							    : '\0'))
				return -EBADMSG;
			s = end + (*end != '\0');
		}
		if (f[0] < 0 || (size_t)f[0] >= p->n_stacks)
			return -EBADMSG;
		p->samples[i] = (struct xsample){
		    .stack = (size_t)f[0], .tid = f[1], .window_ns = f[2], .count = f[3]};
	}
	return 0;
}

/*
 * xprofile__load() - load profd's "profile" response @profile (a reference
 * is taken) and the SESSION object @session (for pid, comm and elapsed
 * time). Returns 0, -EBADMSG if a field is missing or out of range, -ENOMEM.
 * On failure @p is left empty.
 */
int xprofile__load(struct xprofile *p, json_t *profile, const json_t *session)
{
	_cleanup_free_ size_t *order = NULL;
	const json_t *frames = json_object_get(profile, "frames");
	const json_t *stacks = json_object_get(profile, "stacks");
	const json_t *samples = json_object_get(profile, "samples");
	const char *packed = json_string_value(json_object_get(profile, "samples_packed"));
	const json_t *threads = json_object_get(profile, "threads");
	const json_t *v;
	size_t i;
	int r = -EBADMSG;

	*p = (struct xprofile){.json = json_incref(profile),
			       .session_json = json_incref((json_t *)session)};
	if (!json_is_array(frames) || !json_is_array(stacks) ||
	    !(json_is_array(samples) || packed) || !json_is_array(threads))
		goto fail;
	p->session = int_of(profile, "session");
	p->event = str_of(profile, "event") ?: "?";
	p->period = int_of(profile, "period");
	p->period_unit = str_of(profile, "period_unit") ?: "nanoseconds";
	p->started_at_ns = int_of(profile, "started_at_ns");
	p->total_samples = int_of(profile, "total_samples");
	p->lost_samples = int_of(profile, "lost_samples");
	p->truncated_stacks = int_of(profile, "truncated_stacks");
	p->unsymbolized_frames = int_of(profile, "unsymbolized_frames");
	p->pid = int_of(session, "pid");
	p->comm = str_of(session, "comm") ?: "?";
	p->exe = str_of(session, "exe") ?: "";
	p->elapsed_ns = (int64_t)(json_number_value(json_object_get(session, "elapsed_s")) * 1e9);

	p->n_frames = json_array_size(frames);
	p->frames = calloc(p->n_frames ?: 1, sizeof(*p->frames));
	p->n_stacks = json_array_size(stacks);
	p->stacks = calloc(p->n_stacks ?: 1, sizeof(*p->stacks));
	p->n_samples =
	    packed ? (*packed != '\0') + count_char(packed, ';') : json_array_size(samples);
	p->samples = calloc(p->n_samples ?: 1, sizeof(*p->samples));
	p->n_threads = json_array_size(threads);
	p->threads = calloc(p->n_threads ?: 1, sizeof(*p->threads));
	order = calloc(p->n_frames ?: 1, sizeof(*order));
	if (!p->frames || !p->stacks || !p->samples || !p->threads || !order) {
		r = -ENOMEM;
		goto fail;
	}
	json_array_foreach(frames, i, v)
	{
		struct xframe *f = &p->frames[i];
		const char *addr = str_of(v, "address");

		f->function = str_of(v, "function");
		f->module = str_of(v, "module") ?: "";
		f->build_id = str_of(v, "build_id") ?: "";
		f->file = str_of(v, "file");
		f->line = int_of(v, "line");
		f->address = addr ? strtoull(addr, NULL, 16) : 0;
		f->kernel = str_of(v, "kind") && strcmp(str_of(v, "kind"), "kernel") == 0;
		f->inlined = json_is_true(json_object_get(v, "inlined"));
		if (f->function) {
			f->name = f->function;
		} else {
			const char *base = strrchr(f->module, '/');
			char *name;

			if (asprintf(&name, "%s+0x%" PRIx64, base ? base + 1 : f->module,
				     f->address) < 0) {
				r = -ENOMEM;
				goto fail;
			}
			f->name = name;
		}
		order[i] = i;
	}
	/* Functions: runs of frames with the same (name, module). */
	if (p->n_frames)
		qsort_r(order, p->n_frames, sizeof(*order), frame_func_cmp, p->frames);
	for (i = 0; i < p->n_frames; i++) {
		if (i > 0 && frame_func_cmp(&order[i - 1], &order[i], p->frames) != 0)
			p->n_funcs++;
		p->frames[order[i]].func = p->n_funcs;
	}
	if (p->n_frames)
		p->n_funcs++;

	json_array_foreach(stacks, i, v)
	{
		struct xstack *s = &p->stacks[i];
		size_t j;
		const json_t *idx;

		if (!json_is_array(v))
			goto fail;
		s->len = json_array_size(v);
		s->frames = calloc(s->len ?: 1, sizeof(*s->frames));
		if (!s->frames) {
			r = -ENOMEM;
			goto fail;
		}
		json_array_foreach(v, j, idx)
		{
			json_int_t k = json_integer_value(idx);

			if (!json_is_integer(idx) || k < 0 || (size_t)k >= p->n_frames)
				goto fail;
			s->frames[j] = (size_t)k;
		}
	}
	if (packed && parse_packed(packed, p) < 0)
		goto fail;
	json_array_foreach(samples, i, v)
	{
		json_int_t k = json_integer_value(json_array_get(v, 0));

		if (json_array_size(v) != 4 || k < 0 || (size_t)k >= p->n_stacks)
			goto fail;
		p->samples[i] = (struct xsample){
		    .stack = (size_t)k,
		    .tid = json_integer_value(json_array_get(v, 1)),
		    .window_ns = json_integer_value(json_array_get(v, 2)),
		    .count = json_integer_value(json_array_get(v, 3)),
		};
	}
	json_array_foreach(threads, i, v)
	{
		p->threads[i] = (struct xthread){.tid = int_of(v, "tid"),
						 .pid = int_of(v, "pid") ?: p->pid,
						 .name = str_of(v, "name") ?: "?"};
	}
	return 0;
fail:
	xprofile__free(p);
	return r;
}

/* The name of thread @tid, or "?" if profd has no threads row for it. */
const char *xprofile__thread_name(const struct xprofile *p, int64_t tid)
{
	for (size_t i = 0; i < p->n_threads; i++)
		if (p->threads[i].tid == tid)
			return p->threads[i].name;
	return "?";
}

/* The process of thread @tid, or the session's PID if profd has no threads row for it. */
int64_t xprofile__thread_pid(const struct xprofile *p, int64_t tid)
{
	for (size_t i = 0; i < p->n_threads; i++)
		if (p->threads[i].tid == tid)
			return p->threads[i].pid;
	return p->pid;
}
