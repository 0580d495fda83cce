/*
 * memory.c - the memory report of a session: its RSS series with start,
 * end, peak and growth rate, split by mapping kind; the call stacks that
 * grew the address space; its sampled allocations as live bytes and growth
 * per call stack, with leak suspects; and a diagnosis of the growth
 * (leak, allocator retention, unexplained or flat) with its evidence.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collect/memory.h"
#include "report/memory.h"
#include "report/python_frames.h"
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

/*
 * memory_report__early_blocks_live() - whether a call stack's sampled blocks
 * of the first half of the session look leaked: at least half of the
 * @early ones are still live at the end (@early_live). A leak frees
 * nothing; a churning working set whose sampled live bytes climb over a few
 * windows by chance has freed its early blocks long before the end (CI saw
 * such a climb pass every test of memory_report__is_leak_suspect() in a
 * 6-window session of alloc-pattern churn, from ~2 live samples). Fewer than
 * 2 early samples are no evidence either way: true.
 */
bool memory_report__early_blocks_live(uint64_t early, uint64_t early_live)
{
	return early < 2 || 2 * early_live >= early;
}

static json_t *bytes_json(double b)
{
	return json_integer((json_int_t)llround(b));
}

/*
 * "by_mapping" of @o: [{kind, start_bytes, end_bytes, growth_bytes_per_s}]
 * for each mapping kind, from the readings that have the split (smaps), of
 * process @pid (0: the sum over the session's processes at each reading
 * time); [] if no reading has it.
 */
static int by_mapping_json(sqlite3 *db, int64_t session_id, int64_t start_ns, int pid, json_t *o)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ double *x = NULL, *y = NULL;
	size_t n = 0, cap = 0, cap_y = 0;
	json_t *arr = json_array();
	int rc;

	if (!arr || json_object_set_new(o, "by_mapping", arr) < 0)
		return -ENOMEM;
	if (report__prepare_id_arg(
		db,
		"SELECT time_ns, sum(map_heap_bytes), sum(map_anon_bytes), "
		"sum(map_stack_bytes), sum(map_shmem_bytes), sum(map_file_bytes), "
		"sum(map_other_bytes) FROM memory_samples WHERE session_id = ?1 "
		"AND (?2 = 0 OR pid = ?2) AND map_heap_bytes IS NOT NULL "
		"GROUP BY time_ns ORDER BY time_ns",
		session_id, pid, &st) < 0)
		return -EIO;
	/* x: time; y: MEMORY_MAP_NR_KINDS values per reading. */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (grow_array((void **)&x, &cap, n, sizeof(*x)) < 0 ||
		    grow_array((void **)&y, &cap_y, n, MEMORY_MAP_NR_KINDS * sizeof(*y)) < 0)
			return -ENOMEM;
		x[n] = (double)(sqlite3_column_int64(st, 0) - start_ns) / 1e9;
		for (int k = 0; k < MEMORY_MAP_NR_KINDS; k++)
			y[n * MEMORY_MAP_NR_KINDS + k] = (double)sqlite3_column_int64(st, 1 + k);
		n++;
	}
	if (rc != SQLITE_DONE)
		return -EIO;
	for (int k = 0; n && k < MEMORY_MAP_NR_KINDS; k++) {
		_cleanup_free_ double *yk = malloc(n * sizeof(*yk));
		json_t *row;

		if (!yk)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			yk[i] = y[i * MEMORY_MAP_NR_KINDS + k];
		row = json_pack("{s:s, s:o, s:o, s:o}", "kind", memory__map_kind_name(k),
				"start_bytes", bytes_json(yk[0]), "end_bytes", bytes_json(yk[n - 1]),
				"growth_bytes_per_s",
				n >= 2 ? bytes_json(memory_report__slope(x, yk, n)) : json_null());
		if (!row || json_array_append_new(arr, row) < 0)
			return -ENOMEM;
	}
	return 0;
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
	if (report__prepare_id(db,
			       /* Pss only where every process of the reading has it. */
			       "SELECT time_ns, sum(rss_bytes), "
			       "CASE WHEN count(pss_bytes) = count(*) THEN sum(pss_bytes) END, "
			       "sum(anon_bytes), "
			       "sum(file_bytes), sum(shmem_bytes), sum(swap_bytes), count(*) "
			       "FROM memory_samples WHERE session_id = ?1 GROUP BY time_ns "
			       "ORDER BY time_ns",
			       session_id, &st) < 0)
		goto fail_io;
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
				report__col_int(st, 2), "anon_bytes",
				(json_int_t)sqlite3_column_int64(st, 3), "file_bytes",
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
	sqlite3_finalize(TAKE_PTR(st));
	if (report__prepare_id(db,
			       "SELECT pid, time_ns, rss_bytes FROM memory_samples "
			       "WHERE session_id = ?1 ORDER BY pid, time_ns",
			       session_id, &st) < 0)
		goto fail_io;
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
	rc = by_mapping_json(db, session_id, start_ns, 0, o);
	if (rc < 0) {
		json_decref(o);
		return rc;
	}
	for (size_t i = 0; i < json_array_size(procs); i++) {
		json_t *po = json_array_get(procs, i);

		rc = by_mapping_json(db, session_id, start_ns,
				     (int)json_integer_value(json_object_get(po, "pid")), po);
		if (rc < 0) {
			json_decref(o);
			return rc;
		}
	}
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
	uint64_t early, early_live; /* tracked samples of the first half; of them, live at the end */
	double allocated_bytes;
	double live[MEMORY_MAX_WINDOWS + 1]; /* live bytes at each window boundary */
	double slope;			     /* bytes per second */
	bool suspect;
	bool usdt; /* sampled by the process (otel_memory:alloc, jemalloc:prof): the leaf frame is
		    * its sampler */
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

		if (i == 0 && a->usdt)
			continue; /* where the probe fired: the process's sampler, not its caller */
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
	uint64_t untracked = 0, truncated = 0;
	json_t *top_live, *top_growth, *suspects;
	int rc;

	if (windows < MEMORY_MIN_WINDOWS)
		windows = MEMORY_MIN_WINDOWS;
	if (windows > MEMORY_MAX_WINDOWS)
		windows = MEMORY_MAX_WINDOWS;
	if (report__prepare_id(db,
			       "SELECT a.stack_id, a.weight_bytes, a.alloc_ns, a.free_ns, a.untracked, "
			       "a.func IN ('otel_memory:alloc', 'jemalloc:prof'), "
			       "coalesce(s.truncated, 0) "
			       "FROM allocations a LEFT JOIN stacks s ON s.id = a.stack_id "
			       "WHERE a.session_id = ?1 ORDER BY a.stack_id",
			       session_id, &st) < 0)
		return -EIO;
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
		a->usdt = sqlite3_column_int(st, 5);
		a->samples++;
		truncated += sqlite3_column_int(st, 6) != 0;
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
		if (alloc < start_ns + (end_ns - start_ns) / 2) {
			a->early++;
			a->early_live += freed > end_ns;
		}
	}
	if (rc != SQLITE_DONE)
		return -EIO;
	for (unsigned k = 0; k <= windows; k++)
		x[k] = dur_s * k / windows;
	for (size_t i = 0; i < nstacks; i++) {
		struct alloc_stack *a = &stacks[i];
		const double *live = &a->live[MEMORY_MAX_WINDOWS - windows];

		a->slope = memory_report__slope(x, live, windows + 1);
		a->suspect = memory_report__is_leak_suspect(live, windows, a->live_samples, 3) &&
			     memory_report__early_blocks_live(a->early, a->early_live) &&
			     a->slope > 0;
		total_live += a->live[MEMORY_MAX_WINDOWS];
	}
	if (sqlite3_prepare_v2(db, REPORT_STACK_FRAMES_SQL, -1, &fr, NULL) != SQLITE_OK)
		return -EIO;
	{
		double live_start = 0;

		for (size_t i = 0; i < nstacks; i++)
			live_start += stacks[i].live[MEMORY_MAX_WINDOWS - windows];
		if (json_object_set_new(o, "live_start_bytes", bytes_json(live_start)) < 0)
			return -ENOMEM;
	}
	if (json_object_set_new(o, "live_bytes", bytes_json(total_live)) < 0 ||
	    json_object_set_new(o, "untracked", json_integer((json_int_t)untracked)) < 0 ||
	    json_object_set_new(o, "truncated_stacks", json_integer((json_int_t)truncated)) < 0 ||
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

/* Library frames that only carry an allocation to the kernel: not the code to name. */
static bool is_runtime_module(const char *module)
{
	static const char *const prefixes[] = { "libc.so", "libc-", "ld-linux", "libstdc++" };
	const char *base = module ? strrchr(module, '/') : NULL;

	base = base ? base + 1 : module;
	for (size_t i = 0; base && i < ARRAY_SIZE(prefixes); i++)
		if (strncmp(base, prefixes[i], strlen(prefixes[i])) == 0)
			return true;
	return false;
}

/*
 * The frames of @stack_id in the Python view (CPython's own frames left
 * out), and in *@ret_function the code that made the change: the first
 * frame outside libc, the loader, libstdc++ and the interpreter.
 */
static json_t *growth_frames(sqlite3_stmt *fr, int64_t stack_id, const char **ret_function)
{
	json_t *all = report__stack_frames(fr, stack_id), *kept = json_array(), *f;
	size_t i;

	*ret_function = NULL;
	if (!all || !kept) {
		json_decref(all);
		json_decref(kept);
		return NULL;
	}
	json_array_foreach(all, i, f)
	{
		const char *fn = json_string_value(json_object_get(f, "function"));
		const char *module = json_string_value(json_object_get(f, "module"));

		if (python_frames__role(json_string_value(json_object_get(f, "kind")), module, NULL,
					fn, json_string_value(json_object_get(f, "file"))) ==
		    FRAME_INTERPRETER)
			continue;
		if (!*ret_function && fn && !is_runtime_module(module) && !is_allocator_function(fn))
			*ret_function = json_string_value(json_object_get(f, "function"));
		json_array_append(kept, f);
	}
	/* The name lives in @all's objects, which @kept holds references to. */
	json_decref(all);
	return kept;
}

/* What the growth events add up to, for the diagnosis (bytes). */
struct growth_totals {
	bool followed;
	int64_t brk, anon_mapped, shmem_mapped, file_mapped, touched;
	const char *top_function; /* of the stack that grew the address space most */
};

/*
 * The "growth" part: the address-space changes (vm_changes) summed by
 * change, and the stacks that grew the address space most (net bytes) and
 * that touched most new pages (sampled faults). null if the session did
 * not follow them.
 */
static int growth_json(sqlite3 *db, int64_t session_id, int limit, json_t *o,
		       struct growth_totals *t)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL, *fr = NULL;
	json_t *g, *by_change, *stacks, *touch;
	int rc;

	if (report__prepare_id(db,
			       "SELECT vm_events, vm_unsent, vm_fault_period FROM sessions "
			       "WHERE id = ?1 AND vm_fault_period IS NOT NULL",
			       session_id, &st) < 0)
		return -EIO;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return rc == SQLITE_DONE ? json_object_set_new(o, "growth", json_null()) : -EIO;
	t->followed = true;
	g = json_pack("{s:I, s:I, s:I, s:{}, s:[], s:[]}", "events",
		      (json_int_t)sqlite3_column_int64(st, 0), "events_without_stack",
		      (json_int_t)sqlite3_column_int64(st, 1), "fault_sample_pages",
		      (json_int_t)sqlite3_column_int64(st, 2), "by_change", "top_growth",
		      "top_touch");
	if (!g || json_object_set_new(o, "growth", g) < 0)
		return -ENOMEM;
	by_change = json_object_get(g, "by_change");
	stacks = json_object_get(g, "top_growth");
	touch = json_object_get(g, "top_touch");
	sqlite3_finalize(TAKE_PTR(st));
	if (report__prepare_id(db,
			       "SELECT change, mapping, sum(events), sum(bytes) FROM vm_changes "
			       "WHERE session_id = ?1 GROUP BY change, mapping",
			       session_id, &st) < 0)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *change = (const char *)sqlite3_column_text(st, 0);
		const char *mapping = (const char *)sqlite3_column_text(st, 1);
		int64_t bytes = sqlite3_column_int64(st, 3);
		char key[64];

		snprintf(key, sizeof(key), "%s %s", change, mapping);
		if (json_object_set_new(by_change, key,
					json_pack("{s:I, s:I}", "events",
						  (json_int_t)sqlite3_column_int64(st, 2), "bytes",
						  (json_int_t)bytes)) < 0)
			return -ENOMEM;
		if (strcmp(change, "brk") == 0)
			t->brk += bytes;
		else if (strcmp(change, "fault") == 0)
			t->touched += bytes;
		else if (strcmp(mapping, "anon") == 0)
			t->anon_mapped += bytes;
		else if (strcmp(mapping, "shmem") == 0)
			t->shmem_mapped += bytes;
		else
			t->file_mapped += bytes;
	}
	if (rc != SQLITE_DONE)
		return -EIO;
	if (sqlite3_prepare_v2(db, REPORT_STACK_FRAMES_SQL, -1, &fr, NULL) != SQLITE_OK)
		return -EIO;
	/* Per stack: net bytes added (every change but faults), and first touches. */
	for (int pass = 0; pass < 2; pass++) {
		sqlite3_finalize(TAKE_PTR(st));
		if (report__prepare_id_arg(
			db,
			pass == 0 ? "SELECT stack_id, pid, sum(bytes) AS b, sum(events), "
				    "group_concat(DISTINCT mapping) FROM vm_changes "
				    "WHERE session_id = ?1 AND change <> 'fault' "
				    "GROUP BY stack_id, pid HAVING b > 0 ORDER BY b DESC LIMIT ?2"
				  : "SELECT stack_id, pid, sum(bytes) AS b, sum(events), 'touch' "
				    "FROM vm_changes WHERE session_id = ?1 AND change = 'fault' "
				    "GROUP BY stack_id, pid ORDER BY b DESC LIMIT ?2",
			session_id, limit, &st) < 0)
			return -EIO;
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			const char *fn;
			json_t *frames = growth_frames(fr, sqlite3_column_int64(st, 0), &fn), *row;

			if (!frames)
				return -ENOMEM;
			row = json_pack("{s:s?, s:i, s:I, s:I, s:s?, s:o}", "function", fn, "pid",
					sqlite3_column_int(st, 1), "bytes",
					(json_int_t)sqlite3_column_int64(st, 2), "events",
					(json_int_t)sqlite3_column_int64(st, 3), "mappings",
					(const char *)sqlite3_column_text(st, 4), "frames", frames);
			if (!row || json_array_append_new(pass == 0 ? stacks : touch, row) < 0)
				return -ENOMEM;
		}
		if (rc != SQLITE_DONE)
			return -EIO;
	}
	t->top_function = json_string_value(
	    json_object_get(json_array_get(stacks, 0), "function"));
	return 0;
}

static double mib(double bytes)
{
	return bytes / (1024.0 * 1024.0);
}

/* The start and end bytes of mapping kind @kind in the session's by_mapping; false if none. */
static bool kind_growth(json_t *rss, const char *kind, double *ret)
{
	json_t *row;
	size_t i;

	json_array_foreach(json_object_get(rss, "by_mapping"), i, row)
	{
		if (strcmp(json_string_value(json_object_get(row, "kind")), kind) == 0) {
			*ret = (double)json_integer_value(json_object_get(row, "end_bytes")) -
			       (double)json_integer_value(json_object_get(row, "start_bytes"));
			return true;
		}
	}
	return false;
}

/* Suggestions, one per verdict. */
static const char *const retention_advice =
    "glibc keeps freed memory its heap cannot give back: call malloc_trim(0) after large "
    "frees, or run with MALLOC_MMAP_THRESHOLD_=65536 (large blocks mmapped and unmapped "
    "when freed) and MALLOC_TRIM_THRESHOLD_=0, MALLOC_ARENA_MAX=2 with many threads, or "
    "preload jemalloc or tcmalloc";

/*
 * The "diagnosis" of @o: {verdict, growth_bytes, kind, evidence: [...],
 * suggestion}. Growth is RSS at the last reading minus the first; below
 * max(4 MiB, 5% of the first) it is flat. Otherwise the kind of mapping
 * that grew most decides with what is known: live bytes of the sampled
 * allocations (a leak if they grew by half the growth or more, allocator
 * retention below a quarter), or else the anonymous mappings the growth
 * events show made and never unmapped (glibc unmaps a large block when it is
 * freed, CPython an empty arena: they are live memory).
 */
static int diagnosis_json(json_t *o, const struct growth_totals *t)
{
	static const char *const kinds[] = { "heap", "anon", "stack", "shmem", "file", "other" };
	json_t *rss = json_object_get(o, "rss"), *allocs = json_object_get(o, "allocations");
	json_t *evidence = json_array(), *d;
	const char *verdict, *kind = NULL, *suggestion = NULL;
	double start, end, grown, threshold, best = 0, heap_anon = 0, g;
	char line[512];

	if (!evidence)
		return -ENOMEM;
	if (!rss || json_integer_value(json_object_get(rss, "readings")) < 2) {
		json_decref(evidence);
		return json_object_set_new(o, "diagnosis", json_null());
	}
	start = (double)json_integer_value(json_object_get(rss, "start_bytes"));
	end = (double)json_integer_value(json_object_get(rss, "end_bytes"));
	grown = end - start;
	threshold = fmax(4.0 * 1024 * 1024, start / 20);
	snprintf(line, sizeof(line), "RSS %.1f -> %.1f MiB (%+.1f MiB) over %.0f s", mib(start),
		 mib(end), mib(grown),
		 json_real_value(json_object_get(rss, "last_reading_s")));
	json_array_append_new(evidence, json_string(line));
	for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
		if (!kind_growth(rss, kinds[k], &g))
			continue;
		if (g > best) {
			best = g;
			kind = kinds[k];
		}
		if (k <= 1)
			heap_anon += g;
	}
	if (kind) {
		snprintf(line, sizeof(line), "most of it in %s mappings: %+.1f MiB", kind, mib(best));
		json_array_append_new(evidence, json_string(line));
	} else {
		heap_anon = grown;
	}
	if (grown < threshold) {
		verdict = "flat";
	} else if (kind && strcmp(kind, "heap") != 0 && strcmp(kind, "anon") != 0) {
		verdict = "growth-unexplained";
		suggestion = strcmp(kind, "shmem") == 0
				 ? "shared memory (/dev/shm, memfd) the process maps: tensors shared "
				   "between processes (DataLoader workers) stay as long as a process "
				   "maps them; see which process grows in rss.processes and the "
				   "stacks of its mmap calls in growth.top_growth"
				 : "not the allocator's memory: see growth.top_growth for the code "
				   "that maps it";
	} else if (allocs && json_is_null(json_object_get(allocs, "stopped_at_s")) &&
		   json_object_get(allocs, "live_start_bytes")) {
		double live = (double)json_integer_value(json_object_get(allocs, "live_bytes")) -
			      (double)json_integer_value(
				  json_object_get(allocs, "live_start_bytes"));

		snprintf(line, sizeof(line),
			 "live bytes of the sampled allocations %+.1f MiB over the same time",
			 mib(live));
		json_array_append_new(evidence, json_string(line));
		if (live >= heap_anon / 2) {
			verdict = "leak";
			suggestion = "memory allocated and never freed: the stacks of "
				     "allocations.leak_suspects and top_live hold it";
		} else if (live < heap_anon / 4) {
			verdict = "allocator-retention";
			suggestion = retention_advice;
		} else {
			verdict = "growth-unexplained";
			suggestion = "part live blocks, part memory the allocator keeps: see "
				     "allocations.top_live, then try the allocator settings of "
				     "allocator retention";
		}
	} else if (t->followed && kind && strcmp(kind, "anon") == 0 &&
		   (double)t->anon_mapped >= best / 2) {
		verdict = "leak";
		snprintf(line, sizeof(line),
			 "anonymous mappings made during the session and not unmapped: %+.1f MiB "
			 "(allocators unmap large blocks and empty arenas when they are freed)",
			 mib((double)t->anon_mapped));
		json_array_append_new(evidence, json_string(line));
		suggestion = "memory allocated and kept: growth.top_growth names the code; attach "
			     "with --events cpu,rss,malloc for the allocating stacks of smaller "
			     "blocks";
	} else {
		verdict = "growth-unexplained";
		if (t->followed && t->brk > 0) {
			snprintf(line, sizeof(line), "the brk heap grew %+.1f MiB", mib((double)t->brk));
			json_array_append_new(evidence, json_string(line));
		}
		suggestion = "without allocation samples profd cannot tell live blocks from freed "
			     "memory the allocator keeps: attach again with --events cpu,rss,malloc, "
			     "or run with MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0 (if "
			     "the growth stops, it was allocator retention)";
	}
	if (t->top_function && strcmp(verdict, "flat") != 0) {
		snprintf(line, sizeof(line), "the address space grew most from %s",
			 t->top_function);
		json_array_append_new(evidence, json_string(line));
	}
	d = json_pack("{s:s, s:o, s:s?, s:o, s:s?}", "verdict", verdict, "growth_bytes",
		      bytes_json(grown), "kind", kind, "evidence", evidence, "suggestion",
		      suggestion);
	if (!d || json_object_set_new(o, "diagnosis", d) < 0)
		return -ENOMEM;
	return 0;
}

int query__memory(sqlite3 *db, int64_t session_id, int limit, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t start_ns, end_ns, interval_ns;
	struct growth_totals growth = { 0 };
	double dur_s;
	json_t *o = NULL, *rss = NULL, *allocs;
	int r;

	if (report__prepare_id_arg(
		db,
		"SELECT started_at_ns, COALESCE(ended_at_ns, ?2), memory_interval_ns, "
		"malloc_sample_bytes, malloc_calls, free_calls, malloc_bytes, "
		"malloc_sampled, malloc_lost, malloc_probes, state, "
		"malloc_max_hits_per_s, malloc_stopped_ns "
		"FROM sessions WHERE id = ?1",
		session_id, (int64_t)now_ns(CLOCK_REALTIME), &st) < 0)
		return -EIO;
	r = report__step_row(st);
	if (r < 0)
		return r;
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
	r = growth_json(db, session_id, limit, o, &growth);
	if (r < 0)
		goto fail;
	if (sqlite3_column_type(st, 3) == SQLITE_NULL) {
		if (json_object_set_new(o, "allocations", json_null()) < 0) {
			r = -ENOMEM;
			goto fail;
		}
		goto diagnose;
	}
	{
		int64_t calls = sqlite3_column_int64(st, 4), bytes = sqlite3_column_int64(st, 6);
		bool stopped = sqlite3_column_type(st, 12) != SQLITE_NULL;
		/* Rates over the time the probes were attached. */
		double traced_s =
		    stopped ? (double)(sqlite3_column_int64(st, 12) - start_ns) / 1e9 : dur_s;

		const char *probes = (const char *)sqlite3_column_text(st, 9);
		/* malloc_probes__attach() names the USDT probes or jemalloc's heap profiles so
		 * when it used them: the process sampled its allocations itself. */
		bool by_process = probes && (strncmp(probes, "otel_memory USDT", 16) == 0 ||
					     strncmp(probes, "jemalloc heap profiles", 22) == 0);

		if (traced_s <= 0)
			traced_s = dur_s;
		allocs = json_pack(
		    "{s:I, s:s, s:s?, s:o, s:o, s:o, s:o, s:o, s:f, s:f, s:o, s:o}", "sample_bytes",
		    (json_int_t)sqlite3_column_int64(st, 3), "sampler", by_process ? "process" : "profd",
		    "probes", probes, "calls", report__col_int(st, 4),
		    "free_calls", report__col_int(st, 5), "bytes", report__col_int(st, 6),
		    "sampled", report__col_int(st, 7), "lost", report__col_int(st, 8),
		    "calls_per_s", round((double)calls / traced_s * 10) / 10, "bytes_per_s",
		    round((double)bytes / traced_s), "max_hits_per_s", report__col_int(st, 11),
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
diagnose:
	r = diagnosis_json(o, &growth);
	if (r < 0)
		goto fail;
	*ret = o;
	return 0;
fail:
	json_decref(o);
	return r;
}
