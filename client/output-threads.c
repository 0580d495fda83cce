/* output-threads.c - the threads and offcpu reports: per-thread table, stragglers, blocking stacks.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/* output__threads() - samples per thread and the imbalance line; @session (may be NULL) adds the
 * counters. */
/* A number, or "-" for null/absent, into a table cell. */
static int cell_num(struct table *t, const json_t *v, const char *fmt)
{
	if (json_is_number(v))
		return table__cellf(t, fmt, json_number_value(v));
	return table__cellf(t, "-");
}

/*
 * A derived figure's cell: its value; else "unsupported" when an input
 * counter is unsupported on this machine (never 0), else "-".
 */
static int cell_derived(struct table *t, const json_t *v, const json_t *counters, const char *in1,
			const char *in2, const char *fmt)
{
	const char *s1 =
	    json_string_value(json_object_get(json_object_get(counters, in1), "status"));
	const char *s2 =
	    json_string_value(json_object_get(json_object_get(counters, in2), "status"));

	if (json_is_number(v))
		return table__cellf(t, fmt, json_number_value(v));
	if ((s1 && strcmp(s1, "ok") != 0) || (s2 && strcmp(s2, "ok") != 0))
		return table__cellf(t, "%s", s1 && strcmp(s1, "ok") != 0 ? s1 : s2);
	return table__cellf(t, "-");
}

/* A counter's cell: its value, or its status when it has none ("unsupported" is never 0). */
static int cell_counter(struct table *t, const json_t *counters, const char *name)
{
	const json_t *c = json_object_get(counters, name);
	const json_t *v = json_object_get(c, "value");

	if (json_is_integer(v))
		return table__cellf(t, "%lld", (long long)json_integer_value(v));
	if (json_string_value(json_object_get(c, "status")))
		return table__cellf(t, "%s", json_string_value(json_object_get(c, "status")));
	return table__cellf(t, "-");
}

/* A group's spread of samples, "MIN-MAX", or "-" from a daemon that does not send it. */
static int cell_spread(struct table *t, const json_t *group)
{
	const json_t *min = json_object_get(group, "min_samples");
	const json_t *max = json_object_get(group, "max_samples");

	if (!json_is_integer(min) || !json_is_integer(max))
		return table__cellf(t, "-");
	return table__cellf(t, "%lld-%lld", (long long)json_integer_value(min),
			    (long long)json_integer_value(max));
}

static void print_stragglers(FILE *f, const json_t *imbalance)
{
	const json_t *list = json_object_get(imbalance, "stragglers"), *x;
	size_t i;

	if (json_array_size(list) == 0)
		return;
	fprintf(f, "stragglers (over 1.2x the mean):");
	json_array_foreach(list, i, x)
	{
		const char *name = json_string_value(json_object_get(x, "name"));

		fprintf(f, "%s %s (TID %lld, %lld samples)", i ? "," : "", name ? name : "?",
			(long long)json_integer_value(json_object_get(x, "tid")),
			(long long)json_integer_value(json_object_get(x, "samples")));
	}
	fputc('\n', f);
}

/* The imbalance cells of a group or a window: MAX/MEAN, CV, STRAGGLER. */
static int cell_imbalance(struct table *t, const json_t *x)
{
	const json_t *imb = json_object_get(x, "imbalance");
	const char *sn = json_string_value(json_object_get(imb, "straggler_name"));

	if (cell_num(t, json_object_get(imb, "max_over_mean"), "%.2f") < 0 ||
	    cell_num(t, json_object_get(imb, "cv"), "%.2f") < 0)
		return -ENOMEM;
	return table__cellf(t, "%s", sn ? sn : "-");
}

/* A row of the table by thread name (threads --group-by name). */
static int group_row(struct table *t, const json_t *x)
{
	if (table__cellf(t, "%s", json_string_value(json_object_get(x, "group"))) < 0 ||
	    cell_num(t, json_object_get(x, "threads"), "%.0f") < 0 ||
	    cell_num(t, json_object_get(x, "samples"), "%.0f") < 0 ||
	    cell_num(t, json_object_get(x, "share_pct"), "%.1f") < 0 || cell_spread(t, x) < 0)
		return -ENOMEM;
	return cell_imbalance(t, x);
}

/* A row of the table of imbalance per window (threads --window). */
static int window_row(struct table *t, const json_t *x)
{
	if (cell_num(t, json_object_get(x, "start_s"), "%.1f") < 0 ||
	    cell_num(t, json_object_get(x, "end_s"), "%.1f") < 0 ||
	    cell_num(t, json_object_get(x, "samples"), "%.0f") < 0)
		return -ENOMEM;
	return cell_imbalance(t, x);
}

/* A row of the table of time and counters per thread (threads of newer daemons). */
static int time_row(struct table *t, const json_t *x)
{
	const json_t *off = json_object_get(x, "off_cpu_s");
	const json_t *c = json_object_get(x, "counters");
	const json_t *d = json_object_get(x, "derived");
	const char *name = json_string_value(json_object_get(x, "name"));

	if (table__cellf(t, "%lld", (long long)json_integer_value(json_object_get(x, "tid"))) < 0 ||
	    table__cellf(t, "%s", name ? name : "?") < 0 ||
	    cell_num(t, json_object_get(x, "on_cpu_s"), "%.3f") < 0 ||
	    cell_num(t, json_object_get(off, "sleeping"), "%.3f") < 0 ||
	    cell_num(t, json_object_get(off, "io"), "%.3f") < 0 ||
	    cell_num(t, json_object_get(off, "runnable"), "%.3f") < 0 ||
	    cell_counter(t, c, "voluntary-context-switches") < 0 ||
	    cell_counter(t, c, "involuntary-context-switches") < 0 ||
	    cell_counter(t, c, "page-faults") < 0 ||
	    cell_derived(t, json_object_get(d, "ipc"), c, "instructions", "cycles", "%.2f") < 0 ||
	    cell_derived(t, json_object_get(d, "cache_miss_pct"), c, "cache-misses",
			 "cache-references", "%.1f") < 0)
		return -ENOMEM;
	return 0;
}

/*
 * print_rows() - @title, then @rows as a table of @columns (@n_columns), a
 * row each from @add_row; nothing if @rows is not an array. Returns 0, or
 * -ENOMEM with nothing printed.
 */
static int print_rows(FILE *f, const char *title, const json_t *rows,
		      const struct table_column *columns, size_t n_columns,
		      int (*add_row)(struct table *t, const json_t *row))
{
	_cleanup_(table__freep) struct table *t = NULL;

	if (!json_is_array(rows))
		return 0;
	if (table_of_rows(rows, columns, n_columns, add_row, &t) < 0)
		return -ENOMEM;
	fputs(title, f);
	table__print(t, f);
	return 0;
}

/*
 * threads_details() - what newer daemons add to "threads": stragglers, time
 * on and off the CPU and counters per thread, groups, windows. Each part only
 * when present in @reply.
 */
static int threads_details(FILE *f, const json_t *reply)
{
	static const struct table_column time_columns[] = {
	    {"TID", TABLE_RIGHT, 0},	 {"NAME", TABLE_LEFT, 0},      {"ON-CPU s", TABLE_RIGHT, 0},
	    {"SLEEP s", TABLE_RIGHT, 0}, {"IO s", TABLE_RIGHT, 0},     {"RUNQ s", TABLE_RIGHT, 0},
	    {"VOL-CS", TABLE_RIGHT, 0},	 {"INVOL-CS", TABLE_RIGHT, 0}, {"FAULTS", TABLE_RIGHT, 0},
	    {"IPC", TABLE_RIGHT, 0},	 {"MISS%", TABLE_RIGHT, 0},
	};
	static const struct table_column group_columns[] = {
	    {"GROUP", TABLE_LEFT, 0},	  {"THREADS", TABLE_RIGHT, 0},	{"SAMPLES", TABLE_RIGHT, 0},
	    {"SHARE%", TABLE_RIGHT, 0},	  {"MIN-MAX", TABLE_RIGHT, 0},	{"MAX/MEAN", TABLE_RIGHT, 0},
	    {"CV", TABLE_RIGHT, 0},	  {"STRAGGLER", TABLE_LEFT, 0},
	};
	static const struct table_column window_columns[] = {
	    {"FROM s", TABLE_RIGHT, 0},	  {"TO s", TABLE_RIGHT, 0}, {"SAMPLES", TABLE_RIGHT, 0},
	    {"MAX/MEAN", TABLE_RIGHT, 0}, {"CV", TABLE_RIGHT, 0},   {"STRAGGLER", TABLE_LEFT, 0},
	};
	const json_t *threads = json_object_get(reply, "threads");
	const json_t *others = json_object_get(reply, "other_threads");
	const json_t *groups = json_object_get(reply, "groups");
	const json_t *windows = json_object_get(reply, "windows");
	int r;

	print_stragglers(f, json_object_get(reply, "imbalance"));
	if (json_object_get(json_array_get(threads, 0), "on_cpu_s")) {
		_cleanup_(table__freep) struct table *t = NULL;
		const char *source =
		    json_string_value(json_object_get(json_array_get(threads, 0), "on_cpu_source"));

		r = table_of_rows(threads, time_columns, ARRAY_SIZE(time_columns), time_row, &t);
		if (r < 0)
			return r;
		if (json_is_object(others)) {
			const json_t *off = json_object_get(others, "off_cpu_s");

			if (table__cellf(t, "%s", "") < 0 ||
			    table__cellf(t, "%lld other threads",
					 (long long)json_integer_value(
					     json_object_get(others, "threads"))) < 0 ||
			    cell_num(t, json_object_get(others, "on_cpu_s"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "sleeping"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "io"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "runnable"), "%.3f") < 0)
				return -ENOMEM;
			for (int k = 0; k < 5; k++)
				if (table__cellf(t, "-") < 0)
					return -ENOMEM;
		}
		fprintf(f, "\ntime and counters per thread (on-CPU from %s; - = not measured):\n",
			source ? source : "?");
		table__print(t, f);
	}
	if ((r = print_rows(
		 f,
		 "\nby thread name (digits as *; MIN-MAX: samples of the pool's least and "
		 "busiest thread):\n",
		 groups, group_columns, ARRAY_SIZE(group_columns), group_row)) < 0)
		return r;
	return print_rows(f, "\nimbalance per window:\n", windows, window_columns,
			  ARRAY_SIZE(window_columns), window_row);
}

/* A row of output__threads()'s table: one of the reply's "threads". */
static int thread_row(struct table *t, const json_t *th)
{
	long long tid, samples;
	const char *name;
	double share_pct;
	int r;

	if ((r = check_object(th, "threads[]")) < 0 || (r = get_int(th, "tid", &tid)) < 0 ||
	    (r = get_opt_str(th, "name", &name)) < 0 ||
	    (r = get_int(th, "samples", &samples)) < 0 ||
	    (r = get_num(th, "share_pct", &share_pct)) < 0)
		return r;
	if (table__cellf(t, "%lld", tid) < 0 || table__cellf(t, "%s", name ? name : "?") < 0 ||
	    table__cellf(t, "%lld", samples) < 0 || table__cellf(t, "%.1f", share_pct) < 0)
		return -ENOMEM;
	return 0;
}

int output__threads(FILE *f, const json_t *reply, const json_t *session)
{
	static const struct table_column columns[] = {
	    {"TID", TABLE_RIGHT, 0},
	    {"NAME", TABLE_LEFT, 0},
	    {"SAMPLES", TABLE_RIGHT, 0},
	    {"SHARE%", TABLE_RIGHT, 0},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	const json_t *threads, *imbalance, *others = json_object_get(reply, "other_threads");
	long long id, total;
	int r;

	if ((r = get_int(reply, "session", &id)) < 0 ||
	    (r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "threads", &threads)) < 0)
		return r;
	imbalance = json_object_get(reply, "imbalance");
	if ((r = check_object(imbalance, "imbalance")) < 0 ||
	    (r = table_of_rows(threads, columns, ARRAY_SIZE(columns), thread_row, &t)) < 0)
		return r;

	if (json_is_object(others) &&
	    (table__cellf(t, "%s", "") < 0 ||
	     table__cellf(t, "%lld other threads",
			  (long long)json_integer_value(json_object_get(others, "threads"))) < 0 ||
	     cell_num(t, json_object_get(others, "samples"), "%.0f") < 0 ||
	     cell_num(t, json_object_get(others, "share_pct"), "%.1f") < 0))
		return -ENOMEM;

	/* "threads_total": every thread, listed or summed into "other_threads". */
	fprintf(f, "session %lld: %lld samples in %lld threads\n", id, total,
		json_is_integer(json_object_get(reply, "threads_total"))
		    ? (long long)json_integer_value(json_object_get(reply, "threads_total"))
		    : (long long)json_array_size(threads));
	if (session && (r = print_counters(f, session)) < 0)
		return r;
	fputc('\n', f);
	if (json_array_size(threads) == 0) {
		fprintf(f, "no samples\n");
		return 0;
	}
	table__print(t, f);

	{
		double max_over_mean, cv, mean;
		bool has_ratio, has_cv, has_mean;
		long long straggler_tid;
		bool has_straggler;
		const char *straggler_name;

		if ((r = get_opt_num(imbalance, "max_over_mean", &max_over_mean, &has_ratio)) < 0 ||
		    (r = get_opt_num(imbalance, "cv", &cv, &has_cv)) < 0 ||
		    (r = get_opt_num(imbalance, "mean_samples", &mean, &has_mean)) < 0 ||
		    (r = get_opt_int(imbalance, "straggler_tid", &straggler_tid, &has_straggler)) <
			0 ||
		    (r = get_opt_str(imbalance, "straggler_name", &straggler_name)) < 0)
			return r;
		fputc('\n', f);
		if (!has_ratio || !has_cv) {
			fprintf(f, "imbalance: none to measure (no samples)\n");
			return 0;
		}
		fprintf(f, "imbalance: max/mean %.2f (1.00 = even)", max_over_mean);
		if (has_mean)
			fprintf(f, ", mean %.1f samples", mean);
		fprintf(f, ", CV %.2f", cv);
		if (has_straggler)
			fprintf(f, ", straggler TID %lld (%s)", straggler_tid,
				straggler_name ? straggler_name : "?");
		fputc('\n', f);
	}
	if (json_is_object(others))
		fprintf(f,
			"(%lld other threads: under 1%% of the samples and of the off-CPU time in "
			"I/O and run-queue waits; --all lists them)\n",
			(long long)json_integer_value(json_object_get(others, "threads")));
	return threads_details(f, reply);
}

/*
 * output__offcpu() - the blocking stacks of an "offcpu" response, longest
 * first: state, time, share, then the frames from the blocking call down.
 */
/* The frames of a stack, leaf first, one a line after @indent: function [module] file:line. */
void print_frames(FILE *f, const json_t *frames, const char *indent)
{
	const json_t *fr;
	size_t k;

	json_array_foreach(frames, k, fr)
	{
		const char *fn = json_string_value(json_object_get(fr, "function"));
		const char *module = json_string_value(json_object_get(fr, "module"));
		const char *file = json_string_value(json_object_get(fr, "file"));
		const json_t *line = json_object_get(fr, "line");

		module = module ? module_name(module) : "?";
		fprintf(f, module[0] == '[' ? "%s%s%s %s" : "%s%s%s [%s]", indent, fn ? fn : "?",
			json_is_true(json_object_get(fr, "inlined")) ? " (inlined)" : "", module);
		if (file && json_is_integer(line))
			fprintf(f, " %s:%lld", file_name(file),
				(long long)json_integer_value(line));
		fputc('\n', f);
	}
}

int output__offcpu(FILE *f, const json_t *reply)
{
	const json_t *stacks = json_object_get(reply, "stacks"),
		     *by = json_object_get(reply, "by_state");
	const json_t *x, *v;
	const char *state;
	json_int_t period_ns;
	size_t i;

	if (!json_is_array(stacks) || !json_is_number(json_object_get(reply, "total_off_cpu_s")))
		return -EBADMSG;
	fprintf(f, "session %lld: %.3f s off-CPU",
		(long long)json_integer_value(json_object_get(reply, "session")),
		json_number_value(json_object_get(reply, "total_off_cpu_s")));
	json_object_foreach((json_t *)by, state, v)
	    fprintf(f, ", %s %.3f s", state, json_number_value(v));
	fprintf(f, "\nlost off-CPU intervals: %lld\n",
		(long long)json_integer_value(json_object_get(reply, "offcpu_lost")));
	period_ns = json_integer_value(json_object_get(reply, "offcpu_period_ns"));
	if (period_ns > 0)
		fprintf(f,
			"sampled: intervals under %.3f ms kept in proportion to their length, "
			"so times and counts are estimates\n",
			(double)period_ns / 1e6);
	json_array_foreach(stacks, i, x)
	{
		const json_t *frames = json_object_get(x, "frames");

		fprintf(f, "\n%.3f s  %5.1f%%  %s, %lld intervals, %lld thread%s\n",
			json_number_value(json_object_get(x, "total_s")),
			json_number_value(json_object_get(x, "pct")),
			json_string_value(json_object_get(x, "state")),
			(long long)json_integer_value(json_object_get(x, "count")),
			(long long)json_integer_value(json_object_get(x, "threads")),
			json_integer_value(json_object_get(x, "threads")) == 1 ? "" : "s");
		print_frames(f, frames, "    ");
	}
	if (json_array_size(stacks) == 0)
		fprintf(f, "\nno off-CPU time recorded (was the session attached with the offcpu "
			   "event?)\n");
	return 0;
}
