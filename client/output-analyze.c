/* output-analyze.c - the diff and analyze reports. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/* A row of output__diff()'s table: one of the diff's "functions". */
static int diff_row(struct table *t, const json_t *fn)
{
	static const char *const keys[] = {"self_pct_a",  "self_pct_b",	 "self_delta_pct",
					   "total_pct_a", "total_pct_b", "total_delta_pct"};
	double v[6];
	const char *name, *module;
	int r;

	for (int k = 0; k < 6; k++)
		if ((r = get_num(fn, keys[k], &v[k])) < 0)
			return r;
	if ((r = get_str(fn, "function", &name)) < 0 ||
	    (r = get_opt_str(fn, "module", &module)) < 0)
		return r;
	if (table__cellf(t, "%.2f", v[0]) < 0 || table__cellf(t, "%.2f", v[1]) < 0 ||
	    table__cellf(t, "%+.2f", v[2]) < 0 || table__cellf(t, "%.2f", v[3]) < 0 ||
	    table__cellf(t, "%.2f", v[4]) < 0 || table__cellf(t, "%+.2f", v[5]) < 0 ||
	    table__cellf(t, "%s", name) < 0 || table__cellf(t, "%s", module_name(module)) < 0)
		return -ENOMEM;
	return 0;
}

/* The diff of two sessions (built by profctl from two "top" responses). */
int output__diff(FILE *f, const json_t *diff)
{
	static const struct table_column columns[] = {
	    {"SELF A%", TABLE_RIGHT, 0},  {"SELF B%", TABLE_RIGHT, 0},	{"DELTA", TABLE_RIGHT, 0},
	    {"TOTAL A%", TABLE_RIGHT, 0}, {"TOTAL B%", TABLE_RIGHT, 0}, {"DELTA", TABLE_RIGHT, 0},
	    {"FUNCTION", TABLE_LEFT, 60}, {"MODULE", TABLE_LEFT, 24},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	long long a, b, ta, tb;
	const json_t *functions;
	int r;

	if ((r = get_int(diff, "session_a", &a)) < 0 || (r = get_int(diff, "session_b", &b)) < 0 ||
	    (r = get_int(diff, "total_samples_a", &ta)) < 0 ||
	    (r = get_int(diff, "total_samples_b", &tb)) < 0 ||
	    (r = get_array(diff, "functions", &functions)) < 0 ||
	    (r = table_of_rows(functions, columns, ARRAY_SIZE(columns), diff_row, &t)) < 0)
		return r;
	fprintf(f, "A = session %lld (%lld samples), B = session %lld (%lld samples)\n", a, ta, b,
		tb);
	fprintf(f,
		"lost samples: A %lld, B %lld; truncated stacks: A %lld, B %lld; unsymbolized "
		"frames: A %lld, B %lld\n",
		(long long)json_integer_value(json_object_get(diff, "lost_samples_a")),
		(long long)json_integer_value(json_object_get(diff, "lost_samples_b")),
		(long long)json_integer_value(json_object_get(diff, "truncated_stacks_a")),
		(long long)json_integer_value(json_object_get(diff, "truncated_stacks_b")),
		(long long)json_integer_value(json_object_get(diff, "unsymbolized_frames_a")),
		(long long)json_integer_value(json_object_get(diff, "unsymbolized_frames_b")));
	fprintf(
	    f, "Shares of each session's samples, in %%; DELTA = B - A, largest change first.\n\n");
	table__print(t, f);
	return 0;
}

/* The "analyze" response: findings, most severe first, then what was checked. */
int output__analyze(FILE *f, const json_t *reply)
{
	const json_t *findings, *checks, *v;
	long long session;
	size_t i;
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_array(reply, "findings", &findings)) < 0 ||
	    (r = get_array(reply, "checks", &checks)) < 0)
		return r;
	fprintf(f, "session %lld: %zu finding%s\n", session, json_array_size(findings),
		json_array_size(findings) == 1 ? "" : "s");
	json_array_foreach(findings, i, v)
	{
		const char *severity, *title, *suggestion, *key;
		const json_t *evidence, *e;
		bool first = true;

		if ((r = get_str(v, "severity", &severity)) < 0 ||
		    (r = get_str(v, "title", &title)) < 0 ||
		    (r = get_str(v, "suggestion", &suggestion)) < 0)
			return r;
		fprintf(f, "\n[%s] %s\n  evidence:", severity, title);
		evidence = json_object_get(v, "evidence");
		json_object_foreach((json_t *)evidence, key, e)
		{
			fprintf(f, "%s %s=", first ? "" : ",", key);
			scalar_text(f, e);
			first = false;
		}
		fprintf(f, "\n  suggestion: %s\n", suggestion);
	}
	fprintf(f, "\nchecks without a finding:\n");
	json_array_foreach(checks, i, v)
	{
		const char *rule, *status, *detail;

		if ((r = get_str(v, "rule", &rule)) < 0 ||
		    (r = get_str(v, "status", &status)) < 0 ||
		    (r = get_str(v, "detail", &detail)) < 0)
			return r;
		fprintf(f, "  %-22s %-8s %s\n", rule, status, detail);
	}
	return 0;
}
