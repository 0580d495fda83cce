/*
 * memory.c - the memory report of a session: its RSS series with
 * start, end, peak and growth rate, and its sampled allocations as live
 * bytes and growth per call stack, with leak suspects.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report/memory.h"
#include "report/report.h"
#include "util.h"
#include "store/sqlite_util.h"

/* Live bytes per stack are evaluated at MEMORY_MAX_WINDOWS + 1 boundaries at most. */

#define MEMORY_MAX_WINDOWS 10
#define MEMORY_MIN_WINDOWS 2

/*
 * memory_report__slope() - the least-squares slope of @y over @x (@n points), in
 * y units per x unit; 0 with fewer than two distinct x.
 */
double memory_report__slope(const double *x, const double *y, size_t n)
{
	double mx = 0, my = 0, sxx = 0, sxy = 0;

	if (n < 2)
		return 0;
	for (size_t i = 0; i < n; i++) {
		mx += x[i];
		my += y[i];
	}
	mx /= (double)n;
	my /= (double)n;
	for (size_t i = 0; i < n; i++) {
		sxx += (x[i] - mx) * (x[i] - mx);
		sxy += (x[i] - mx) * (y[i] - my);
	}
	return sxx > 0 ? sxy / sxx : 0;
}

/*
 * memory_report__is_leak_suspect() - whether live bytes sampled at @n + 1 window
 * boundaries (@live[0] at the start) keep growing: they end above 0, rise
 * in at least half the windows (2 at least), fall in at most a fifth, end
 * at least twice as high as after the first window, a straight rise
 * explains most of their variance (R^2 >= 0.7), and at least
 * @min_live_samples sampled blocks are live at the end (fewer is too little
 * evidence at the sampling rate). The last three tell a leak from churn in
 * a steady state: from the attach its sampled live bytes climb to their
 * level within the first window, then wander up and down, and a few
 * windows in a row of rises happen by chance (seen in a 6-window session).
 */
bool memory_report__is_leak_suspect(const double *live, unsigned n, uint64_t live_samples,
			     uint64_t min_live_samples)
{
	double x[64], mean = 0, ss_tot = 0, ss_res = 0, slope, mx = n / 2.0;
	unsigned up = 0, down = 0;

	if (n < 1 || n >= ARRAY_SIZE(x) || live[n] <= 0 || live_samples < min_live_samples ||
	    live[n] < 2 * live[1])
		return false;
	for (unsigned k = 1; k <= n; k++) {
		if (live[k] > live[k - 1])
			up++;
		else if (live[k] < live[k - 1])
			down++;
	}
	if (!(up >= (n + 1) / 2 && up >= 2 && down <= n / 5))
		return false;
	for (unsigned k = 0; k <= n; k++) {
		x[k] = k;
		mean += live[k];
	}
	mean /= n + 1;
	slope = memory_report__slope(x, live, n + 1);
	for (unsigned k = 0; k <= n; k++) {
		double fit = mean + slope * (k - mx);

		ss_tot += (live[k] - mean) * (live[k] - mean);
		ss_res += (live[k] - fit) * (live[k] - fit);
	}
	return ss_tot > 0 && 1 - ss_res / ss_tot >= 0.7;
}

static json_t *bytes_json(double b)
{
	return json_integer((json_int_t)llround(b));
}

/* The RSS part: {"interval_s", "readings", "start_bytes", ..., "series", "processes"}. */
static int rss_json(sqlite3 *db, int64_t session_id, int64_t start_ns, int64_t interval_ns,
		    json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ double *x = NULL, *y = NULL;
	size_t n = 0, cap = 0, cap_y = 0; /* x and y grow together: cap == cap_y */
	double peak = 0, first = 0, last = 0, last_s = 0;
	json_t *o, *series, *procs;
	int rc;

	o = json_pack("{s:f, s:[], s:[]}", "interval_s", (double)interval_ns / 1e9, "series",
		      "processes");
	if (!o)
		return -ENOMEM;
	series = json_object_get(o, "series");
	procs = json_object_get(o, "processes");
	if (sqlite3_prepare_v2(db,
			       "SELECT time_ns, sum(rss_bytes), sum(pss_bytes), sum(anon_bytes), "
			       "sum(file_bytes), sum(shmem_bytes), sum(swap_bytes), count(*) "
			       "FROM memory_samples WHERE session_id = ?1 GROUP BY time_ns "
			       "ORDER BY time_ns",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail_io;
	sqlite3_bind_int64(st, 1, session_id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		double t = (double)(sqlite3_column_int64(st, 0) - start_ns) / 1e9;
		double rss = (double)sqlite3_column_int64(st, 1);
		json_t *row;

		if (grow_array((void **)&x, &cap, n, sizeof(*x)) < 0 ||
		    grow_array((void **)&y, &cap_y, n, sizeof(*y)) < 0)
			goto fail_oom;
		x[n] = t;
		y[n] = rss;
		if (n == 0)
			first = rss;
		last = rss;
		last_s = t;
		peak = rss > peak ? rss : peak;
		n++;
		row = json_pack("{s:f, s:I, s:o, s:I, s:I, s:I, s:I, s:i}", "t_s",
				round(t * 1000) / 1000, "rss_bytes", (json_int_t)rss, "pss_bytes",
				sqlite3_column_type(st, 2) == SQLITE_NULL
				    ? json_null()
				    : json_integer(sqlite3_column_int64(st, 2)),
				"anon_bytes", (json_int_t)sqlite3_column_int64(st, 3), "file_bytes",
				(json_int_t)sqlite3_column_int64(st, 4), "shmem_bytes",
				(json_int_t)sqlite3_column_int64(st, 5), "swap_bytes",
				(json_int_t)sqlite3_column_int64(st, 6), "processes",
				sqlite3_column_int(st, 7));
		if (!row || json_array_append_new(series, row) < 0)
			goto fail_oom;
	}
	if (rc != SQLITE_DONE)
		goto fail_io;
	if (json_object_set_new(o, "readings", json_integer((json_int_t)n)) < 0 ||
	    json_object_set_new(o, "start_bytes", n ? bytes_json(first) : json_null()) < 0 ||
	    json_object_set_new(o, "end_bytes", n ? bytes_json(last) : json_null()) < 0 ||
	    json_object_set_new(o, "peak_bytes", n ? bytes_json(peak) : json_null()) < 0 ||
	    json_object_set_new(o, "growth_bytes_per_s",
				n >= 2 ? bytes_json(memory_report__slope(x, y, n)) : json_null()) < 0 ||
	    json_object_set_new(o, "last_reading_s",
				n ? json_real(round(last_s * 1000) / 1000) : json_null()) < 0)
		goto fail_oom;

	/* Per process: the same figures, from its own readings. */
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(db,
			       "SELECT pid, time_ns, rss_bytes FROM memory_samples "
			       "WHERE session_id = ?1 ORDER BY pid, time_ns",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail_io;
	sqlite3_bind_int64(st, 1, session_id);
	rc = sqlite3_step(st);
	while (rc == SQLITE_ROW) {
		int pid = sqlite3_column_int(st, 0);
		size_t m = 0;
		double pfirst = 0, plast = 0, ppeak = 0, t0 = 0, t1 = 0;
		json_t *po;

		for (; rc == SQLITE_ROW && sqlite3_column_int(st, 0) == pid;
		     rc = sqlite3_step(st)) {
			double t = (double)(sqlite3_column_int64(st, 1) - start_ns) / 1e9;
			double rss = (double)sqlite3_column_int64(st, 2);

			if (m <
			    cap) { /* cap >= the number of time points >= this process's readings */
				x[m] = t;
				y[m] = rss;
			}
			if (m == 0) {
				pfirst = rss;
				t0 = t;
			}
			plast = rss;
			t1 = t;
			ppeak = rss > ppeak ? rss : ppeak;
			m++;
		}
		po = json_pack(
		    "{s:i, s:I, s:o, s:o, s:o, s:o, s:f, s:f}", "pid", pid, "readings",
		    (json_int_t)m, "start_bytes", bytes_json(pfirst), "end_bytes",
		    bytes_json(plast), "peak_bytes", bytes_json(ppeak), "growth_bytes_per_s",
		    m >= 2 && m <= cap ? bytes_json(memory_report__slope(x, y, m)) : json_null(),
		    "first_s", round(t0 * 1000) / 1000, "last_s", round(t1 * 1000) / 1000);
		if (!po || json_array_append_new(procs, po) < 0)
			goto fail_oom;
	}
	if (rc != SQLITE_DONE)
		goto fail_io;
	*ret = o;
	return 0;
fail_oom:
	json_decref(o);
	return -ENOMEM;
fail_io:
	json_decref(o);
	return -EIO;
}

/* One call stack's sampled allocations. */
struct alloc_stack {
	int64_t stack_id;
	uint64_t samples, live_samples;
	double allocated_bytes;
	double live[MEMORY_MAX_WINDOWS + 1]; /* live bytes at each window boundary */
	double slope;			     /* bytes per second */
	bool suspect;
};

static int cmp_live(const void *a, const void *b)
{
	const struct alloc_stack *x = a, *y = b;

	return (x->live[MEMORY_MAX_WINDOWS] < y->live[MEMORY_MAX_WINDOWS]) -
	       (x->live[MEMORY_MAX_WINDOWS] > y->live[MEMORY_MAX_WINDOWS]);
}

/* Allocator functions, skipped to name a stack by the code that called them. */
static bool is_allocator_function(const char *fn)
{
	static const char *const names[] = {
	    "malloc",	"calloc",	"realloc",	 "posix_memalign", "aligned_alloc",
	    "memalign", "mmap",		"__libc_malloc", "__libc_calloc",  "__libc_realloc",
	    "__mmap",	"operator new", "operator new[]"};

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcmp(fn, names[i]) == 0 ||
		    (strncmp(fn, names[i], strlen(names[i])) == 0 && fn[strlen(names[i])] == '('))
			return true;
	return false;
}

/* The JSON of @a: {"function", "live_bytes", ..., "frames"}; NULL on error. */
static json_t *alloc_stack_json(const struct alloc_stack *a, unsigned windows, sqlite3_stmt *fr)
{
	json_t *frames = report__stack_frames(fr, a->stack_id), *series, *f;
	const char *caller = NULL;
	size_t i;

	if (!frames)
		return NULL;
	json_array_foreach(frames, i, f)
	{
		const char *fn = json_string_value(json_object_get(f, "function"));

		if (fn && !is_allocator_function(fn)) {
			caller = fn;
			break;
		}
	}
	series = json_array();
	for (unsigned k = 0; series && k <= windows; k++)
		json_array_append_new(series,
				      bytes_json(a->live[MEMORY_MAX_WINDOWS - windows + k]));
	return json_pack("{s:s?, s:o, s:I, s:o, s:I, s:o, s:b, s:o*, s:o}", "function", caller,
			 "live_bytes", bytes_json(a->live[MEMORY_MAX_WINDOWS]), "live_samples",
			 (json_int_t)a->live_samples, "allocated_bytes",
			 bytes_json(a->allocated_bytes), "samples", (json_int_t)a->samples,
			 "growth_bytes_per_s", bytes_json(a->slope), "leak_suspect", a->suspect,
			 "live_series", series, "frames", frames);
}

/*
 * The allocations part. The boundaries are at start + k * duration / n,
 * k = 0..n, n = the duration in seconds within [2, 10]; the live series of
 * each stack is stored right-aligned in live[] (live[MAX - n .. MAX]).
 */
static int allocations_json(sqlite3 *db, int64_t session_id, int64_t start_ns, int64_t end_ns,
			    int limit, json_t *o)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL, *fr = NULL;
	_cleanup_free_ struct alloc_stack *stacks = NULL;
	size_t nstacks = 0, cap = 0;
	double dur_s = (double)(end_ns - start_ns) / 1e9, x[MEMORY_MAX_WINDOWS + 1], total_live = 0;
	unsigned windows = (unsigned)llround(dur_s);
	uint64_t untracked = 0;
	json_t *top_live, *top_growth, *suspects;
	int rc;

	if (windows < MEMORY_MIN_WINDOWS)
		windows = MEMORY_MIN_WINDOWS;
	if (windows > MEMORY_MAX_WINDOWS)
		windows = MEMORY_MAX_WINDOWS;
	if (sqlite3_prepare_v2(db,
			       "SELECT stack_id, weight_bytes, alloc_ns, free_ns, untracked "
			       "FROM allocations WHERE session_id = ?1 ORDER BY stack_id",
			       -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(st, 1, session_id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0), alloc = sqlite3_column_int64(st, 2);
		double w = sqlite3_column_double(st, 1);
		bool live_at_end = sqlite3_column_type(st, 3) == SQLITE_NULL;
		int64_t freed = live_at_end ? INT64_MAX : sqlite3_column_int64(st, 3);
		struct alloc_stack *a;

		if (nstacks == 0 || stacks[nstacks - 1].stack_id != id) {
			if (grow_array((void **)&stacks, &cap, nstacks, sizeof(*stacks)) < 0)
				return -ENOMEM;
			memset(&stacks[nstacks], 0, sizeof(stacks[nstacks]));
			stacks[nstacks++].stack_id = id;
		}
		a = &stacks[nstacks - 1];
		a->samples++;
		a->allocated_bytes += w;
		if (sqlite3_column_int(st, 4)) {
			untracked++;
			continue; /* its free cannot be seen: never counted live */
		}
		for (unsigned k = 0; k <= windows; k++) {
			int64_t b = start_ns + (int64_t)((double)(end_ns - start_ns) * k / windows);

			if (alloc <= b && freed > b)
				a->live[MEMORY_MAX_WINDOWS - windows + k] += w;
		}
		if (freed > end_ns)
			a->live_samples++;
	}
	if (rc != SQLITE_DONE)
		return -EIO;
	for (unsigned k = 0; k <= windows; k++)
		x[k] = dur_s * k / windows;
	for (size_t i = 0; i < nstacks; i++) {
		struct alloc_stack *a = &stacks[i];
		const double *live = &a->live[MEMORY_MAX_WINDOWS - windows];

		a->slope = memory_report__slope(x, live, windows + 1);
		a->suspect =
		    memory_report__is_leak_suspect(live, windows, a->live_samples, 3) && a->slope > 0;
		total_live += a->live[MEMORY_MAX_WINDOWS];
	}
	if (sqlite3_prepare_v2(db, REPORT_STACK_FRAMES_SQL, -1, &fr, NULL) != SQLITE_OK)
		return -EIO;
	if (json_object_set_new(o, "live_bytes", bytes_json(total_live)) < 0 ||
	    json_object_set_new(o, "untracked", json_integer((json_int_t)untracked)) < 0 ||
	    json_object_set_new(o, "stacks", json_integer((json_int_t)nstacks)) < 0 ||
	    json_object_set_new(o, "windows", json_integer(windows)) < 0 ||
	    json_object_set_new(o, "window_s", json_real(round(dur_s / windows * 1000) / 1000)) <
		0 ||
	    json_object_set_new(o, "top_live", top_live = json_array()) < 0 ||
	    json_object_set_new(o, "top_growth", top_growth = json_array()) < 0 ||
	    json_object_set_new(o, "leak_suspects", suspects = json_array()) < 0)
		return -ENOMEM;
	/* Leak suspects and growth first: they are ordered by slope, live bytes after. */
	{
		_cleanup_free_ size_t *order = malloc((nstacks ? nstacks : 1) * sizeof(*order));
		size_t n = 0;

		if (!order)
			return -ENOMEM;
		for (size_t i = 0; i < nstacks; i++)
			if (stacks[i].slope > 0)
				order[n++] = i;
		/* insertion sort by slope, descending: few stacks grow */
		for (size_t i = 1; i < n; i++)
			for (size_t j = i;
			     j > 0 && stacks[order[j]].slope > stacks[order[j - 1]].slope; j--) {
				size_t t = order[j];

				order[j] = order[j - 1];
				order[j - 1] = t;
			}
		for (size_t i = 0; i < n && (int)i < limit; i++) {
			json_t *j = alloc_stack_json(&stacks[order[i]], windows, fr);

			if (!j || json_array_append_new(top_growth, j) < 0)
				return -ENOMEM;
		}
		for (size_t i = 0; i < n; i++) {
			json_t *j;

			if (!stacks[order[i]].suspect || (int)json_array_size(suspects) >= limit)
				continue;
			j = alloc_stack_json(&stacks[order[i]], windows, fr);
			if (!j || json_array_append_new(suspects, j) < 0)
				return -ENOMEM;
		}
	}
	qsort(stacks, nstacks, sizeof(*stacks), cmp_live);
	for (size_t i = 0; i < nstacks && (int)i < limit && stacks[i].live[MEMORY_MAX_WINDOWS] > 0;
	     i++) {
		json_t *j = alloc_stack_json(&stacks[i], windows, fr);

		if (!j || json_array_append_new(top_live, j) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* A column as a JSON integer, or null. */
static json_t *col_int_or_null(sqlite3_stmt *st, int i)
{
	return sqlite3_column_type(st, i) == SQLITE_NULL
		   ? json_null()
		   : json_integer(sqlite3_column_int64(st, i));
}

int query__memory(sqlite3 *db, int64_t session_id, int limit, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t start_ns, end_ns, interval_ns;
	double dur_s;
	json_t *o = NULL, *rss = NULL, *allocs;
	int r;

	if (sqlite3_prepare_v2(
		db,
		"SELECT started_at_ns, COALESCE(ended_at_ns, ?2), memory_interval_ns, "
		"malloc_sample_bytes, malloc_calls, free_calls, malloc_bytes, "
		"malloc_sampled, malloc_lost, malloc_probes, state, "
		"malloc_max_hits_per_s, malloc_stopped_ns "
		"FROM sessions WHERE id = ?1",
		-1, &st, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(st, 1, session_id);
	sqlite3_bind_int64(st, 2, (int64_t)now_ns(CLOCK_REALTIME));
	r = sqlite3_step(st);
	if (r == SQLITE_DONE)
		return -ENOENT;
	if (r != SQLITE_ROW)
		return -EIO;
	start_ns = sqlite3_column_int64(st, 0);
	end_ns = sqlite3_column_int64(st, 1);
	if (end_ns <= start_ns)
		end_ns = start_ns + 1;
	dur_s = (double)(end_ns - start_ns) / 1e9;
	interval_ns = sqlite3_column_int64(st, 2);
	o = json_pack("{s:I, s:s, s:f}", "session", (json_int_t)session_id, "state",
		      (const char *)sqlite3_column_text(st, 10), "duration_s",
		      round(dur_s * 1000) / 1000);
	if (!o)
		return -ENOMEM;
	if (interval_ns > 0) {
		r = rss_json(db, session_id, start_ns, interval_ns, &rss);
		if (r < 0)
			goto fail;
	}
	if (json_object_set_new(o, "rss", rss ? rss : json_null()) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	if (sqlite3_column_type(st, 3) == SQLITE_NULL) {
		if (json_object_set_new(o, "allocations", json_null()) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		*ret = o;
		return 0;
	}
	{
		int64_t calls = sqlite3_column_int64(st, 4), bytes = sqlite3_column_int64(st, 6);
		bool stopped = sqlite3_column_type(st, 12) != SQLITE_NULL;
		/* Rates over the time the probes were attached. */
		double traced_s =
		    stopped ? (double)(sqlite3_column_int64(st, 12) - start_ns) / 1e9 : dur_s;

		if (traced_s <= 0)
			traced_s = dur_s;
		allocs = json_pack(
		    "{s:I, s:s?, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:o, s:o}", "sample_bytes",
		    (json_int_t)sqlite3_column_int64(st, 3), "probes",
		    (const char *)sqlite3_column_text(st, 9), "calls", col_int_or_null(st, 4),
		    "free_calls", col_int_or_null(st, 5), "bytes", col_int_or_null(st, 6),
		    "sampled", col_int_or_null(st, 7), "lost", col_int_or_null(st, 8),
		    "calls_per_s", round((double)calls / traced_s * 10) / 10, "bytes_per_s",
		    round((double)bytes / traced_s), "max_hits_per_s", col_int_or_null(st, 11),
		    "stopped_at_s",
		    stopped ? json_real(round(traced_s * 1000) / 1000) : json_null());
	}
	if (!allocs || json_object_set_new(o, "allocations", allocs) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	r = allocations_json(db, session_id, start_ns, end_ns, limit, allocs);
	if (r < 0)
		goto fail;
	*ret = o;
	return 0;
fail:
	json_decref(o);
	return r;
}
