/*
 * threads.c - the threads report: samples, on-CPU and off-CPU time and
 * counters per thread, the imbalance between threads (stragglers), and the
 * same per group of like-named threads and per time window.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sqlite3.h>

#include "report/query.h"
#include "report/report.h"
#include "store/sqlite_util.h"
#include "util.h"

/* A thread whose load exceeds the mean by more than this is named a straggler. */
#define STRAGGLER_OVER_MEAN 1.2

struct thread_row {
	int64_t tid;
	int64_t samples;
};

/*
 * Samples per thread of @session_id, as the "threads" list of the report:
 * from the samples table (so they add up to top's total_samples); threads
 * of the threads table without samples are listed with 0, a tid with
 * samples but no threads row with name null; sorted by samples descending,
 * then tid. Returns 0, -ENOENT, -EIO, -ENOMEM.
 */
static int thread_rows(sqlite3 *db, int64_t session_id, json_t **ret)
{
	_cleanup_(report__snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	_cleanup_free_ struct thread_row *rows = NULL;
	size_t n_rows = 0, cap_rows = 0;
	json_t *arr;
	int64_t total = 0;
	int fail = 0, r;

	r = report__snapshot_begin(db, &snap);
	if (r < 0)
		return r;
	r = report__row(db, "SELECT 1 FROM sessions WHERE id = ?1", session_id, &st);
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));

	r = report__prepare(
	    db,
	    "WITH s(tid, n) AS ("
	    "  SELECT tid, sum(count) FROM sample_totals WHERE session_id = ?1 GROUP BY tid)"
	    " SELECT t.tid, t.name, coalesce(s.n, 0) AS n, t.pid, t.exited_at_ns"
	    "  FROM threads t LEFT JOIN s ON s.tid = t.tid WHERE t.session_id = ?1"
	    " UNION ALL"
	    " SELECT s.tid, NULL, s.n, NULL, NULL FROM s"
	    "  WHERE NOT EXISTS (SELECT 1 FROM threads t"
	    "                    WHERE t.session_id = ?1 AND t.tid = s.tid)"
	    " ORDER BY n DESC, 1",
	    &st);
	if (r < 0)
		return r;
	r = report__bind_int64(st, 1, session_id);
	if (r < 0)
		return r;

	/* total_samples is set below, once the rows are summed. */
	o = json_pack("{s:I, s:I, s:[]}", "session", (json_int_t)session_id, "total_samples",
		      (json_int_t)0, "threads");
	if (!o)
		return -ENOMEM;
	arr = json_object_get(o, "threads");

	/* Rows go to JSON as they come; share_pct needs the total, so it is filled after. */
	while ((r = report__step(st)) > 0) {
		int64_t n = sqlite3_column_int64(st, 2);
		json_t *t = json_object();

		if (json_array_append_new(arr, t) < 0)
			return -ENOMEM;
		fail |= json_object_set_new(t, "tid", report__col_int(st, 0));
		fail |= json_object_set_new(t, "name", report__col_text(st, 1));
		fail |= json_object_set_new(t, "pid", report__col_int(st, 3));
		fail |= json_object_set_new(t, "exited_at_ns", report__col_int(st, 4));
		fail |= json_object_set_new(t, "samples", json_integer(n));
		if (fail)
			return -ENOMEM;
		r = grow_array_to((void **)&rows, &cap_rows, n_rows + 1, sizeof(*rows));
		if (r < 0)
			return r;
		rows[n_rows++] =
		    (struct thread_row){.tid = sqlite3_column_int64(st, 0), .samples = n};
		total += n;
	}
	if (r < 0)
		return r;

	for (size_t i = 0; i < n_rows; i++)
		fail |= json_object_set_new(json_array_get(arr, i), "share_pct",
					    json_real(report__pct1(rows[i].samples, total)));
	fail |= json_object_set_new(o, "total_samples", json_integer(total));

	if (fail)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

static json_t *imbalance_json(const int64_t *samples, const int64_t *tids, const char *const *names,
			      size_t n)
{
	json_t *o = json_object(), *list = json_array();
	int64_t total = 0, max = 0;
	size_t busy = 0, imax = 0;
	double mean, var = 0;

	if (!o || !list) {
		json_decref(o);
		json_decref(list);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (samples[i] <= 0)
			continue;
		busy++;
		total += samples[i];
		if (samples[i] > max) {
			max = samples[i];
			imax = i;
		}
	}
	json_object_set_new(o, "threads", json_integer((json_int_t)busy));
	if (busy == 0) {
		json_object_set_new(o, "mean_samples", json_null());
		json_object_set_new(o, "max_samples", json_null());
		json_object_set_new(o, "max_over_mean", json_null());
		json_object_set_new(o, "cv", json_null());
		json_object_set_new(o, "straggler_tid", json_null());
		json_object_set_new(o, "straggler_name", json_null());
		json_object_set_new(o, "stragglers", list);
		return o;
	}
	mean = (double)total / (double)busy;
	for (size_t i = 0; i < n; i++)
		if (samples[i] > 0)
			var += ((double)samples[i] - mean) * ((double)samples[i] - mean);
	var /= (double)busy;
	for (size_t i = 0; i < n; i++)
		if (busy > 1 && (double)samples[i] > STRAGGLER_OVER_MEAN * mean)
			json_array_append_new(list, json_pack("{s:I, s:s?, s:I}", "tid",
							      (json_int_t)tids[i], "name", names[i],
							      "samples", (json_int_t)samples[i]));
	json_object_set_new(o, "mean_samples", json_real(round(mean * 10.0) / 10.0));
	json_object_set_new(o, "max_samples", json_integer(max));
	json_object_set_new(o, "max_over_mean", json_real(report__round2((double)max / mean)));
	json_object_set_new(o, "cv", json_real(report__round2(sqrt(var) / mean)));
	json_object_set_new(o, "straggler_tid", json_integer(tids[imax]));
	json_object_set_new(o, "straggler_name",
			    names[imax] ? json_string(names[imax]) : json_null());
	json_object_set_new(o, "stragglers", list);
	return o;
}

/* "worker-12" -> "worker-*": digit runs become one '*'. */
static char *name_pattern(const char *name)
{
	size_t len = strlen(name);
	char *p = malloc(len + 1), *q = p;

	if (!p)
		return NULL;
	for (const char *s = name; *s;) {
		if (isdigit((unsigned char)*s)) {
			*q++ = '*';
			while (isdigit((unsigned char)*s))
				s++;
		} else {
			*q++ = *s++;
		}
	}
	*q = '\0';
	return p;
}

/* The thread object with "tid" @tid in @threads, or NULL. */
static json_t *thread_by_tid(json_t *threads, int64_t tid)
{
	size_t i;
	json_t *t;

	json_array_foreach(threads, i, t)
	{
		if (json_integer_value(json_object_get(t, "tid")) == tid)
			return t;
	}
	return NULL;
}

/*
 * Runs @sql with ?1 = @session_id, whose column 0 is a tid, and calls
 * @add_row for each row of a thread listed in @threads (rows of other tids
 * are skipped) with that thread's object. Returns 0 or -EIO.
 */
static int each_thread_row(sqlite3 *db, int64_t session_id, const char *sql, json_t *threads,
			   void (*add_row)(sqlite3_stmt *st, json_t *thread))
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc, r;

	r = report__prepare_id(db, sql, session_id, &st);
	if (r < 0)
		return r;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *t = thread_by_tid(threads, sqlite3_column_int64(st, 0));

		if (t)
			add_row(st, t);
	}
	return rc == SQLITE_DONE ? 0 : -EIO;
}

/* A row (tid, counter, status, value) of thread_counters into @t's "counters". */
static void add_counter(sqlite3_stmt *st, json_t *t)
{
	const char *counter = (const char *)sqlite3_column_text(st, 1);
	const char *status = (const char *)sqlite3_column_text(st, 2);
	bool ok = status && strcmp(status, "ok") == 0;
	json_t *c;

	if (!counter || !status)
		return;
	c = json_pack("{s:o, s:s}", "value",
		      ok ? json_integer(sqlite3_column_int64(st, 3)) : json_null(), "status",
		      status);
	json_object_set_new(json_object_get(t, "counters"), counter, c);
	if (ok && strcmp(counter, "task-clock") == 0) {
		json_object_set_new(
		    t, "on_cpu_s",
		    json_real(round((double)sqlite3_column_int64(st, 3) / 1e6) / 1000.0));
		json_object_set_new(t, "on_cpu_source", json_string("task-clock"));
	}
}

/* A row (tid, state, total_ns) of offcpu into @t's "off_cpu_s". */
static void add_off_cpu(sqlite3_stmt *st, json_t *t)
{
	const char *state = (const char *)sqlite3_column_text(st, 1);

	if (!state)
		return;
	json_object_set_new(json_object_get(t, "off_cpu_s"), state,
			    json_real(round((double)sqlite3_column_int64(st, 2) / 1e6) / 1000.0));
}

static int add_times(sqlite3 *db, int64_t session_id, json_t *threads, double freq_hz,
		     bool offcpu_on)
{
	size_t i;
	json_t *t;
	int r;

	/* Estimates from samples first; the task-clock counter replaces them below. */
	json_array_foreach(threads, i, t)
	{
		double samples = (double)json_integer_value(json_object_get(t, "samples"));

		json_object_set_new(t, "on_cpu_s",
				    json_real(round(1000.0 * samples / freq_hz) / 1000.0));
		json_object_set_new(t, "on_cpu_source", json_string("samples"));
		json_object_set_new(t, "off_cpu_s",
				    offcpu_on ? json_pack("{s:f, s:f, s:f}", "sleeping", 0.0, "io",
							  0.0, "runnable", 0.0)
					      : json_null());
		json_object_set_new(t, "counters", json_object());
	}

	r = each_thread_row(db, session_id,
			    "SELECT tid, counter, status, value FROM thread_counter_totals "
			    "WHERE session_id = ?1",
			    threads, add_counter);
	if (r < 0 || !offcpu_on)
		return r;
	return each_thread_row(db, session_id,
			       "SELECT tid, state, sum(total_ns) FROM offcpu_totals WHERE session_id = ?1 "
			       "GROUP BY tid, state",
			       threads, add_off_cpu);
}

/* Derived figures from a thread's counters; null where an input is missing or a divisor 0. */
static void add_derived(json_t *threads)
{
	static const struct {
		const char *name, *num, *den;
		double scale;
	} derived[] = {
	    {"ipc", "instructions", "cycles", 1.0},
	    {"cache_miss_pct", "cache-misses", "cache-references", 100.0},
	    /* No "branches" counter to divide by: misses per 1000 instructions, as counters.h. */
	    {"branch_miss_pki", "branch-misses", "instructions", 1000.0},
	};
	size_t i;
	json_t *t;

	json_array_foreach(threads, i, t)
	{
		json_t *c = json_object_get(t, "counters"), *d = json_object();

		for (size_t k = 0; k < ARRAY_SIZE(derived); k++) {
			json_t *num = json_object_get(json_object_get(c, derived[k].num), "value");
			json_t *den = json_object_get(json_object_get(c, derived[k].den), "value");

			if (json_is_integer(num) && json_is_integer(den) &&
			    json_integer_value(den) > 0)
				json_object_set_new(
				    d, derived[k].name,
				    json_real(report__round2(derived[k].scale *
							     (double)json_integer_value(num) /
							     (double)json_integer_value(den))));
			else
				json_object_set_new(d, derived[k].name, json_null());
		}
		json_object_set_new(t, "derived", d);
	}
}

static int add_groups(json_t *o, json_t *threads, int64_t total)
{
	size_t n = json_array_size(threads), i;
	_cleanup_free_ char **patterns = calloc(n + 1, sizeof(char *));
	_cleanup_free_ int64_t *samples = calloc(n + 1, sizeof(int64_t));
	_cleanup_free_ int64_t *tids = calloc(n + 1, sizeof(int64_t));
	_cleanup_free_ const char **names = calloc(n + 1, sizeof(char *));
	_cleanup_free_ bool *done = calloc(n + 1, sizeof(bool));
	json_t *groups = json_array(), *t;
	int r = 0;

	if (!patterns || !samples || !tids || !names || !done || !groups) {
		json_decref(groups);
		return -ENOMEM;
	}
	json_array_foreach(threads, i, t)
	{
		const char *name = json_string_value(json_object_get(t, "name"));

		patterns[i] = name_pattern(name ? name : "?");
		if (!patterns[i]) {
			r = -ENOMEM;
			goto out;
		}
	}
	/* Groups in the order of their busiest thread (threads come sorted by samples). */
	for (i = 0; i < n; i++) {
		int64_t gsamples[n], gtids[n];
		const char *gnames[n];
		size_t m = 0, k;
		json_t *g;

		if (done[i])
			continue;
		for (k = i; k < n; k++) {
			if (done[k] || strcmp(patterns[k], patterns[i]) != 0)
				continue;
			done[k] = true;
			t = json_array_get(threads, k);
			gsamples[m] = json_integer_value(json_object_get(t, "samples"));
			gtids[m] = json_integer_value(json_object_get(t, "tid"));
			gnames[m] = json_string_value(json_object_get(t, "name"));
			m++;
		}
		{
			int64_t sum = 0, min = INT64_MAX, max = 0;

			for (k = 0; k < m; k++) {
				sum += gsamples[k];
				min = MIN(min, gsamples[k]);
				max = MAX(max, gsamples[k]);
			}
			g = json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:o*}", "group", patterns[i],
				      "threads", (json_int_t)m, "samples", (json_int_t)sum,
				      "share_pct",
				      total > 0 ? round(1000.0 * (double)sum / (double)total) / 10.0
						: 0.0,
				      "min_samples", (json_int_t)min, "max_samples", (json_int_t)max,
				      "imbalance", imbalance_json(gsamples, gtids, gnames, m));
		}
		if (!g || json_array_append_new(groups, g) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
out:
	for (i = 0; i < n; i++)
		free(patterns[i]);
	if (r < 0) {
		json_decref(groups);
		return r;
	}
	return json_object_set_new(o, "groups", groups) < 0 ? -ENOMEM : 0;
}

/* Emit window @w (index) of @n threads' @samples into @windows. */
static int window_emit(json_t *windows, int64_t w, double window_s, const int64_t *samples,
		       const int64_t *tids, const char *const *names, size_t n)
{
	json_t *tw = json_array(), *o;
	int64_t sum = 0;

	if (!tw)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		sum += samples[i];
		if (samples[i] > 0 &&
		    json_array_append_new(tw, json_pack("{s:I, s:I}", "tid", (json_int_t)tids[i],
							"samples", (json_int_t)samples[i])) < 0) {
			json_decref(tw);
			return -ENOMEM;
		}
	}
	o = json_pack("{s:f, s:f, s:I, s:o*, s:o}", "start_s", (double)w * window_s, "end_s",
		      (double)(w + 1) * window_s, "samples", (json_int_t)sum, "imbalance",
		      imbalance_json(samples, tids, names, n), "threads", tw);
	return o && json_array_append_new(windows, o) == 0 ? 0 : -ENOMEM;
}

static int add_windows(sqlite3 *db, int64_t session_id, json_t *o, json_t *threads,
		       int64_t started_ns, double window_s)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	size_t n = json_array_size(threads), i;
	_cleanup_free_ int64_t *tids = calloc(n + 1, sizeof(int64_t));
	_cleanup_free_ int64_t *samples = calloc(n + 1, sizeof(int64_t));
	_cleanup_free_ const char **names = calloc(n + 1, sizeof(char *));
	int64_t width_ns = (int64_t)(window_s * 1e9), cur = -1;
	json_t *windows, *t;
	int rc, r = 0;

	if (!tids || !samples || !names)
		return -ENOMEM;
	if (width_ns <= 0)
		return -EINVAL;
	json_array_foreach(threads, i, t)
	{
		tids[i] = json_integer_value(json_object_get(t, "tid"));
		names[i] = json_string_value(json_object_get(t, "name"));
	}
	r = report__prepare_id_arg(
	    db,
	    "SELECT (window_ns - ?2) / ?3 AS w, tid, sum(count) FROM samples "
	    "WHERE session_id = ?1 GROUP BY w, tid ORDER BY w",
	    session_id, started_ns, &st);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 3, width_ns);
	windows = json_array();
	if (!windows)
		return -ENOMEM;
	while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t w = sqlite3_column_int64(st, 0), tid = sqlite3_column_int64(st, 1);

		if (w != cur) {
			if (cur >= 0)
				r = window_emit(windows, cur, window_s, samples, tids, names, n);
			memset(samples, 0, n * sizeof(*samples));
			cur = w;
		}
		for (i = 0; i < n; i++)
			if (tids[i] == tid)
				samples[i] += sqlite3_column_int64(st, 2);
	}
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	if (r == 0 && cur >= 0)
		r = window_emit(windows, cur, window_s, samples, tids, names, n);
	if (r < 0) {
		json_decref(windows);
		return r;
	}
	return json_object_set_new(o, "windows", windows) < 0 ? -ENOMEM : 0;
}

static int threads_extend(sqlite3 *db, int64_t session_id, const struct threads_opts *opts,
			  json_t *o)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	json_t *threads = json_object_get(o, "threads"), *imb;
	int64_t started_ns, merged_ns, total = json_integer_value(json_object_get(o, "total_samples"));
	double freq_hz, window_s;
	bool offcpu_on;
	size_t n = json_array_size(threads), i;
	int r;

	r = report__prepare_id(
	    db,
	    "SELECT freq_hz, started_at_ns, (',' || events || ',') LIKE '%,offcpu,%', "
	    "       CASE WHEN merged_until_ns IS NULL THEN 0 ELSE merged_window_ns END "
	    "FROM sessions WHERE id = ?1",
	    session_id, &st);
	if (r < 0)
		return r;
	if (sqlite3_step(st) != SQLITE_ROW)
		return -EIO;
	freq_hz = MAX(1, sqlite3_column_int(st, 0));
	started_ns = sqlite3_column_int64(st, 1);
	offcpu_on = sqlite3_column_int(st, 2);
	merged_ns = sqlite3_column_int64(st, 3);
	sqlite3_finalize(TAKE_PTR(st));

	r = add_times(db, session_id, threads, freq_hz, offcpu_on);
	if (r < 0)
		return r;
	add_derived(threads);

	/* The imbalance object again, with the stragglers named. */
	{
		_cleanup_free_ int64_t *samples = calloc(n + 1, sizeof(int64_t));
		_cleanup_free_ int64_t *tids = calloc(n + 1, sizeof(int64_t));
		_cleanup_free_ const char **names = calloc(n + 1, sizeof(char *));
		json_t *t;

		if (!samples || !tids || !names)
			return -ENOMEM;
		json_array_foreach(threads, i, t)
		{
			samples[i] = json_integer_value(json_object_get(t, "samples"));
			tids[i] = json_integer_value(json_object_get(t, "tid"));
			names[i] = json_string_value(json_object_get(t, "name"));
		}
		imb = imbalance_json(samples, tids, names, n);
		if (!imb || json_object_set_new(o, "imbalance", imb) < 0)
			return -ENOMEM;
	}
	if (opts && opts->group_by_name) {
		r = add_groups(o, threads, total);
		if (r < 0)
			return r;
	}
	if (opts && opts->window_s > 0) {
		/* Windows merged as they aged cannot be split: whole multiples of them. */
		window_s = opts->window_s;
		if (merged_ns > 0 && window_s * 1e9 < (double)merged_ns)
			window_s = (double)merged_ns / 1e9;
		else if (merged_ns > 0)
			window_s = ceil(window_s * 1e9 / (double)merged_ns) * (double)merged_ns / 1e9;
		r = add_windows(db, session_id, o, threads, started_ns, window_s);
		if (r < 0 || json_object_set_new(o, "window_s", json_real(window_s)) < 0)
			return r < 0 ? r : -ENOMEM;
	}
	return 0;
}

/* A thread is listed when it holds at least this share of samples or of off-CPU time. */
#define THREAD_LISTED_PCT 1.0

/* Seconds of @t's off-CPU time in @state ("sleeping", "io", "runnable"); 0 if not traced. */
static double off_cpu_s(const json_t *t, const char *state)
{
	return json_number_value(json_object_get(json_object_get(t, "off_cpu_s"), state));
}

/*
 * Keeps in "threads" of @o every thread with @all, else only those that
 * hold at least THREAD_LISTED_PCT of the samples, or of all threads'
 * off-CPU time in waits for I/O or for a CPU (io + runnable: time the
 * thread wanted to run; sleeping is how an idle pool thread waits, and does
 * not list it). The others are summed into "other_threads": {threads,
 * samples, share_pct, on_cpu_s, off_cpu_s {sleeping, io, runnable} or
 * null}, null when none is left out; "threads_total" counts them all.
 * 0 or -ENOMEM.
 */
static int threads_keep_busy(json_t *o, bool all)
{
	static const char *const states[] = {"sleeping", "io", "runnable"};
	json_t *threads = json_object_get(o, "threads"), *kept = json_array(), *t;
	int64_t total = json_integer_value(json_object_get(o, "total_samples"));
	int64_t samples = 0;
	double off_total = 0, on_s = 0, off[3] = {0, 0, 0};
	bool traced = false;
	size_t i, n = 0;
	int fail = 0;

	if (!kept)
		return -ENOMEM;
	json_array_foreach(threads, i, t)
	{
		traced |= json_is_object(json_object_get(t, "off_cpu_s"));
		for (size_t k = 0; k < ARRAY_SIZE(states); k++)
			off_total += off_cpu_s(t, states[k]);
	}
	json_array_foreach(threads, i, t)
	{
		int64_t ts = json_integer_value(json_object_get(t, "samples"));
		double waits = off_cpu_s(t, "io") + off_cpu_s(t, "runnable");

		if (all || (total > 0 && 100.0 * (double)ts >= THREAD_LISTED_PCT * (double)total) ||
		    (off_total > 0 && 100.0 * waits >= THREAD_LISTED_PCT * off_total)) {
			if (json_array_append(kept, t) < 0) {
				json_decref(kept);
				return -ENOMEM;
			}
			continue;
		}
		n++;
		samples += ts;
		on_s += json_number_value(json_object_get(t, "on_cpu_s"));
		for (size_t k = 0; k < ARRAY_SIZE(states); k++)
			off[k] += off_cpu_s(t, states[k]);
	}
	fail |= json_object_set_new(o, "threads_total",
				    json_integer((json_int_t)json_array_size(threads)));
	fail |= json_object_set_new(o, "threads", kept);
	if (n == 0)
		return fail || json_object_set_new(o, "other_threads", json_null()) < 0 ? -ENOMEM : 0;
	for (size_t k = 0; k < ARRAY_SIZE(states); k++)
		off[k] = round(off[k] * 1000.0) / 1000.0;
	fail |= json_object_set_new(
	    o, "other_threads",
	    json_pack("{s:I, s:I, s:f, s:f, s:o}", "threads", (json_int_t)n, "samples",
		      (json_int_t)samples, "share_pct", report__pct1(samples, total), "on_cpu_s",
		      round(on_s * 1000.0) / 1000.0, "off_cpu_s",
		      traced ? json_pack("{s:f, s:f, s:f}", "sleeping", off[0], "io", off[1],
					 "runnable", off[2])
			     : json_null()));
	return fail ? -ENOMEM : 0;
}

/*
 * query__threads() - the threads report of @session_id, as the "threads"
 * response of docs/protocol.md: per thread its samples and share_pct,
 * "on_cpu_s" (from the task-clock counter where the session has it, else
 * samples / freq_hz: "on_cpu_source" says which), "off_cpu_s"
 * ({"sleeping","io","runnable"} seconds, null when off-CPU tracing was not
 * on), "counters" ({name: {"value", "status"}}; value null unless status is
 * "ok") and "derived" ({"ipc", "cache_miss_pct", "branch_miss_pki"}, null
 * where an input is missing); "imbalance" over the threads with samples:
 * mean_samples (1 decimal), max_samples, max_over_mean and cv (population
 * standard deviation / mean; 2 decimals), the straggler (busiest thread,
 * lowest tid on a tie) and "stragglers" (over the mean by more than 20%),
 * null figures without samples. With @opts (may be NULL): "groups" of
 * like-named threads (with the spread of samples inside each: min_samples,
 * max_samples) and "windows" of opts->window_s seconds, each with its own
 * imbalance. The imbalance, groups and windows are over every thread; the
 * "threads" list, unless opts->all, only the busy ones (threads_keep_busy():
 * "threads_total" and "other_threads" say what was left out). @ret: a new object, untouched on failure. Returns 0,
 * -ENOENT for an unknown session, -EIO on an SQLite error, -ENOMEM. Reads
 * only; does not log.
 */
int query__threads(sqlite3 *db, int64_t session_id, const struct threads_opts *opts, json_t **ret)
{
	json_t *o = NULL;
	int r = thread_rows(db, session_id, &o);

	if (r < 0)
		return r;
	r = threads_extend(db, session_id, opts, o);
	if (r >= 0)
		r = threads_keep_busy(o, opts && opts->all);
	if (r < 0) {
		json_decref(o);
		return r;
	}
	*ret = o;
	return 0;
}
