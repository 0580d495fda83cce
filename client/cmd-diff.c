/* cmd-diff.c - diff: which functions' shares changed most between two sessions. */
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

int run_diff(struct conn *c, const struct args *a)
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

		r = call(c, request_set(request, "limit", json_integer(LIMIT_MAX)), top[k]);
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
				log_error(
				    "malformed response from profd: a function without a name");
				return -EBADMSG;
			}
			for (size_t j = 0; j < n && !d; j++)
				if (strcmp(rows[j].function, name) == 0 &&
				    strcmp(rows[j].module, module) == 0)
					d = &rows[j];
			if (!d) {
				if (grow_array((void **)&rows, &cap, n, sizeof(*rows)) < 0)
					return log_oom();
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
			if (json_object_set(out, key,
					    json_object_get(*top[k], keys[i]) ?: json_null()) < 0)
				return log_oom();
		}
	}
	list = json_object_get(out, "functions");
	for (size_t i = 0; i < n; i++) {
		const struct diff_row *d = &rows[i];

		if (json_array_append_new(
			list,
			json_pack("{s:s, s:s, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I}", "function",
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
