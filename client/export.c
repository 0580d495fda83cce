/*
 * export.c - a loaded profile (common/xprofile.h) written as folded stacks,
 * Chrome trace event JSON and speedscope JSON for the tools that read
 * those; pprof is common/pprof.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "util.h"

/* A folded line: the stack's names root first, ';'-joined. */
struct folded {
	char *line;
	int64_t count;
};

static int folded_cmp(const void *a, const void *b)
{
	return strcmp(((const struct folded *)a)->line, ((const struct folded *)b)->line);
}

/* Writes @name with the separators of the folded format (';', newline) made '_'. */
static void put_folded_name(FILE *f, const char *name)
{
	for (const char *c = name; *c; c++)
		fputc(*c == ';' || *c == '\n' ? '_' : *c, f);
}

/*
 * export__folded() - one line per distinct call stack, "root;...;leaf COUNT",
 * sorted, as FlameGraph's flamegraph.pl and inferno read: the counts add up
 * to the samples of @tid (0: of all threads). An empty stack is "[no frames]".
 * Returns 0 or -ENOMEM.
 */
int export__folded(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_free_ struct folded *lines = calloc(p->n_stacks ?: 1, sizeof(*lines));
	_cleanup_free_ int64_t *counts = calloc(p->n_stacks ?: 1, sizeof(*counts));
	size_t n = 0;
	int r = 0;

	if (!lines || !counts)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			counts[p->samples[i].stack] += p->samples[i].count;
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct xstack *s = &p->stacks[i];
		size_t size = 0;
		FILE *m;

		if (!counts[i])
			continue;
		m = open_memstream(&lines[n].line, &size);
		if (!m) {
			r = -ENOMEM;
			break;
		}
		for (size_t j = s->len; j-- > 0;) {
			put_folded_name(m, p->frames[s->frames[j]].name);
			if (j)
				fputc(';', m);
		}
		if (s->len == 0)
			fputs("[no frames]", m);
		if (fclose(m) != 0) {
			r = -ENOMEM;
			break;
		}
		lines[n++].count = counts[i];
	}
	if (r == 0 && n > 0)
		qsort(lines, n, sizeof(*lines), folded_cmp);
	for (size_t i = 0; i < n; i++) {
		int64_t c = lines[i].count;

		/* Different stacks can print the same (inlined frames, equal names): merge. */
		while (i + 1 < n && strcmp(lines[i].line, lines[i + 1].line) == 0) {
			free(lines[i].line);
			c += lines[++i].count;
		}
		if (r == 0)
			fprintf(f, "%s %" PRId64 "\n", lines[i].line, c);
		free(lines[i].line);
	}
	return r;
}

/* A stack's names root first, for ordering stacks into a flame chart. */
static int stack_names_cmp(const struct xprofile *p, size_t a, size_t b)
{
	const struct xstack *x = &p->stacks[a], *y = &p->stacks[b];
	size_t i = x->len, j = y->len;

	while (i > 0 && j > 0) {
		int c = strcmp(p->frames[x->frames[--i]].name, p->frames[y->frames[--j]].name);

		if (c)
			return c;
	}
	return (i > 0) - (j > 0);
}

static int chrome_sample_cmp(const void *a, const void *b, void *arg)
{
	const struct xprofile *p = arg;
	const struct xsample *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->window_ns != y->window_ns)
		return x->window_ns < y->window_ns ? -1 : 1;
	return stack_names_cmp(p, x->stack, y->stack);
}

static int append_event(json_t *events, json_t *e)
{
	return e && json_array_append_new(events, e) == 0 ? 0 : -ENOMEM;
}

/*
 * export__chrome_trace() - Chrome's trace event JSON (chrome://tracing,
 * ui.perfetto.dev): a track per thread, named, with the samples of each
 * 1-second window as a flame chart of complete ("X") events. profd stores
 * samples aggregated per window, so within a window the stacks are laid out
 * one after the other, each as long as its samples times the period, the
 * stacks sorted by name so that common callers merge. ts is in
 * microseconds from the session's start. Returns 0, -ENOMEM, -EIO.
 */
int export__chrome_trace(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_free_ struct xsample *s = NULL;
	_cleanup_free_ size_t *open_frames = NULL;
	_cleanup_free_ double *open_ts = NULL;
	json_t *events;
	size_t n = 0, depth = 0, max_depth = 1;
	double cursor = 0;
	int64_t cur_tid = -1, cur_window = -1;

	root = json_pack("{s:[], s:s, s:{s:I, s:s, s:I, s:I, s:I, s:I}}", "traceEvents",
			 "displayTimeUnit", "ms", "otherData", "session", (json_int_t)p->session,
			 "event", p->event, "total_samples", (json_int_t)p->total_samples,
			 "lost_samples", (json_int_t)p->lost_samples, "truncated_stacks",
			 (json_int_t)p->truncated_stacks, "unsymbolized_frames",
			 (json_int_t)p->unsymbolized_frames);
	s = calloc(p->n_samples + 1, sizeof(*s));
	if (!root || !s)
		return -ENOMEM;
	events = json_object_get(root, "traceEvents");
	for (size_t i = 0; i < p->n_stacks; i++)
		max_depth = MAX(max_depth, p->stacks[i].len);
	open_frames = calloc(max_depth + 1, sizeof(*open_frames));
	open_ts = calloc(max_depth + 1, sizeof(*open_ts));
	if (!open_frames || !open_ts)
		return -ENOMEM;

	if (append_event(events, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "process_name",
					   "ph", "M", "pid", (json_int_t)p->pid, "tid",
					   (json_int_t)0, "args", "name", p->comm)) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_threads; i++)
		if ((!tid || p->threads[i].tid == tid) &&
		    append_event(events,
				 json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "thread_name",
					   "ph", "M", "pid", (json_int_t)p->threads[i].pid, "tid",
					   (json_int_t)p->threads[i].tid, "args", "name",
					   p->threads[i].name)) < 0)
			return -ENOMEM;

	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			s[n++] = p->samples[i];
	if (n)
		qsort_r(s, n, sizeof(*s), chrome_sample_cmp, (void *)p);

	/* One pass; frames stay open while consecutive stacks share them. */
	for (size_t i = 0; i <= n; i++) {
		const struct xstack *st = i < n ? &p->stacks[s[i].stack] : NULL;
		size_t common = 0;
		bool same_track = i < n && s[i].tid == cur_tid && s[i].window_ns == cur_window;

		if (same_track)
			while (common < depth && common < st->len &&
			       strcmp(p->frames[open_frames[common]].name,
				      p->frames[st->frames[st->len - 1 - common]].name) == 0)
				common++;
		/* Close the frames the next stack does not share. */
		while (depth > common) {
			const struct xframe *fr = &p->frames[open_frames[--depth]];
			int64_t pid = xprofile__thread_pid(p, cur_tid);

			if (append_event(
				events,
				json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:I, s:{s:s, s:s?}}",
					  "name", fr->name, "cat", fr->kernel ? "kernel" : "user",
					  "ph", "X", "ts", open_ts[depth], "dur",
					  cursor - open_ts[depth], "pid", (json_int_t)pid, "tid",
					  (json_int_t)cur_tid, "args", "module", fr->module, "file",
					  fr->file)) < 0)
				return -ENOMEM;
		}
		if (i == n)
			break;
		if (!same_track) {
			double start_us = (double)s[i].window_ns / 1e3;

			/* A window can hold a little more than 1 s of samples (timer jitter):
			 * the next one then starts after it, so that events stay nested. */
			cursor = s[i].tid == cur_tid ? MAX(start_us, cursor) : start_us;
			cur_tid = s[i].tid;
			cur_window = s[i].window_ns;
		}
		for (; depth < st->len; depth++) {
			open_frames[depth] = st->frames[st->len - 1 - depth];
			open_ts[depth] = cursor;
		}
		/* cpu-clock: the samples' CPU time; another event: 1 us per sample. */
		cursor += strcmp(p->period_unit, "nanoseconds") == 0
			      ? (double)(s[i].count * p->period) / 1e3
			      : (double)s[i].count;
	}
	if (json_dumpf(root, f, JSON_COMPACT) < 0)
		return -EIO;
	fputc('\n', f);
	return 0;
}

/*
 * export__speedscope() - speedscope's file format (speedscope.app): one
 * "sampled" profile per thread, frames shared (one per function), each
 * sample a stack root first weighted by its samples times the period (ns
 * for cpu-clock, events otherwise). Returns 0, -ENOMEM, -EIO.
 */
int export__speedscope(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_free_ bool *have = calloc(p->n_funcs + 1, sizeof(*have));
	json_t *frames, *profiles;
	char name[256];

	snprintf(name, sizeof(name),
		 "profd session %" PRId64 ": %s (PID %" PRId64 "); lost samples %" PRId64
		 ", truncated stacks %" PRId64 ", unsymbolized frames %" PRId64,
		 p->session, p->comm, p->pid, p->lost_samples, p->truncated_stacks,
		 p->unsymbolized_frames);
	root = json_pack("{s:s, s:s, s:s, s:{s:[]}, s:[]}", "$schema",
			 "https://www.speedscope.app/file-format-schema.json", "name", name,
			 "exporter", "profctl " PROFD_VERSION, "shared", "frames", "profiles");
	if (!root || !have)
		return -ENOMEM;
	frames = json_object_get(json_object_get(root, "shared"), "frames");
	profiles = json_object_get(root, "profiles");
	/* frames[func index] = that function, so the indexes are the functions'. */
	for (size_t i = 0; i < p->n_funcs; i++)
		if (json_array_append_new(frames, json_object()) < 0)
			return -ENOMEM;
	for (size_t i = 0; i < p->n_frames; i++) {
		const struct xframe *fr = &p->frames[i];
		json_t *o = json_array_get(frames, fr->func);

		if (have[fr->func])
			continue;
		have[fr->func] = true;
		if (json_object_set_new(o, "name", json_string(fr->name)) < 0 ||
		    (fr->file && json_object_set_new(o, "file", json_string(fr->file)) < 0) ||
		    (fr->line && json_object_set_new(o, "line", json_integer(fr->line)) < 0))
			return -ENOMEM;
	}
	for (size_t t = 0; t < p->n_threads; t++) {
		const struct xthread *th = &p->threads[t];
		json_t *prof, *samples, *weights;
		int64_t total = 0;
		char pname[96];

		if (tid && th->tid != tid)
			continue;
		snprintf(pname, sizeof(pname), "%s (TID %" PRId64 ")", th->name, th->tid);
		prof = json_pack(
		    "{s:s, s:s, s:s, s:i, s:I, s:[], s:[]}", "type", "sampled", "name", pname,
		    "unit", strcmp(p->period_unit, "nanoseconds") == 0 ? "nanoseconds" : "none",
		    "startValue", 0, "endValue", (json_int_t)0, "samples", "weights");
		if (!prof || json_array_append_new(profiles, prof) < 0)
			return -ENOMEM;
		samples = json_object_get(prof, "samples");
		weights = json_object_get(prof, "weights");
		for (size_t i = 0; i < p->n_samples; i++) {
			const struct xsample *sa = &p->samples[i];
			const struct xstack *st = &p->stacks[sa->stack];
			json_t *list = json_array();

			if (sa->tid != th->tid) {
				json_decref(list);
				continue;
			}
			if (json_array_append_new(samples, list) < 0)
				return -ENOMEM;
			for (size_t j = st->len; j-- > 0;)
				if (json_array_append_new(
					list, json_integer(
						  (json_int_t)p->frames[st->frames[j]].func)) < 0)
					return -ENOMEM;
			if (json_array_append_new(weights, json_integer(sa->count * p->period)) < 0)
				return -ENOMEM;
			total += sa->count * p->period;
		}
		/* A thread without samples (the main thread, waiting) is no profile. */
		if (total == 0)
			json_array_remove(profiles, json_array_size(profiles) - 1);
		else if (json_object_set_new(prof, "endValue", json_integer(total)) < 0)
			return -ENOMEM;
	}
	if (json_dumpf(root, f, JSON_COMPACT) < 0)
		return -EIO;
	fputc('\n', f);
	return 0;
}
