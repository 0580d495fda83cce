/* gpu.c - the gpu and ranges reports: SQL over the schema 0009 tables, into JSON. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "report/gpu.h"
#include "report/report.h"
#include "util.h"
#include "store/sqlite_util.h"

/* Nanoseconds as milliseconds with 3 decimals. */
static double ms(int64_t ns)
{
	return round((double)ns / 1e3) / 1e3;
}

/* The function names of stack @stack_id, leaf first (module+offset where unsymbolized). */
static json_t *stack_names(sqlite3 *db, int64_t stack_id)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	json_t *arr = json_array();
	int rc;

	if (!arr ||
	    sqlite3_prepare_v2(db,
			       "SELECT f.function, f.module, f.rel_addr FROM stack_frames sf"
			       " JOIN frames f ON f.id = sf.frame_id WHERE sf.stack_id = ?1"
			       " ORDER BY sf.pos",
			       -1, &st, NULL) != SQLITE_OK) {
		json_decref(arr);
		return NULL;
	}
	sqlite3_bind_int64(st, 1, stack_id);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *fn = (const char *)sqlite3_column_text(st, 0);
		const char *module = (const char *)sqlite3_column_text(st, 1);
		char buf[512];

		if (!fn)
			fn = report__unsymbolized_name(buf, sizeof(buf), module,
						       sqlite3_column_int64(st, 2));
		json_array_append_new(arr, json_string(fn));
	}
	if (rc != SQLITE_DONE) {
		json_decref(arr);
		return NULL;
	}
	return arr;
}

/*
 * Run @sql (?1 = session, ?2 = limit) and append one object per row to the
 * new array *@ret: each column under its name; columns named *_ns also as
 * *_ms (and not themselves); a column named stack_id becomes "stack", the
 * function names. Returns 0, -EIO or -ENOMEM.
 */
static int rows(sqlite3 *db, const char *sql, int64_t session_id, int limit, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	json_t *arr = json_array();
	int rc;

	if (!arr)
		return -ENOMEM;
	if (report__prepare_id(db, sql, session_id, &st) < 0) {
		json_decref(arr);
		return -EIO;
	}
	if (sqlite3_bind_parameter_count(st) >= 2)
		sqlite3_bind_int(st, 2, limit);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *o = json_object();

		if (!o || json_array_append_new(arr, o) < 0) {
			json_decref(arr);
			return -ENOMEM;
		}
		for (int c = 0; c < sqlite3_column_count(st); c++) {
			const char *name = sqlite3_column_name(st, c);
			size_t n = strlen(name);
			json_t *v;

			if (strcmp(name, "stack_id") == 0) {
				v = stack_names(db, sqlite3_column_int64(st, c));
				if (!v) {
					json_decref(arr);
					return -EIO;
				}
				json_object_set_new(o, "stack", v);
				continue;
			}
			switch (sqlite3_column_type(st, c)) {
			case SQLITE_INTEGER:
				if (n > 3 && strcmp(name + n - 3, "_ns") == 0) {
					char key[64];

					snprintf(key, sizeof(key), "%.*s_ms", (int)(n - 3), name);
					v = json_real(ms(sqlite3_column_int64(st, c)));
					json_object_set_new(o, key, v);
					continue;
				}
				v = json_integer(sqlite3_column_int64(st, c));
				break;
			case SQLITE_FLOAT:
				v = json_real(sqlite3_column_double(st, c));
				break;
			case SQLITE_TEXT:
				v = json_string((const char *)sqlite3_column_text(st, c));
				break;
			default:
				v = json_null();
			}
			json_object_set_new(o, name, v);
		}
	}
	if (rc != SQLITE_DONE) {
		json_decref(arr);
		return -EIO;
	}
	*ret = arr;
	return 0;
}

/*
 * The session's header numbers, its start (CLOCK_REALTIME ns) and its
 * length so far (to its end, or now); -ENOENT if there is no such session.
 */
static int session_head(sqlite3 *db, int64_t session_id, json_t **ret, int64_t *ret_start_ns,
			int64_t *ret_span_ns)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	r = report__row(db,
			"SELECT gpu_lost_calls, nvtx_unmatched, gpu_unnamed_launches, events,"
			" coalesce(ended_at_ns, CAST((julianday('now') - 2440587.5) * 86400000 AS"
			" INTEGER) * 1000000) - started_at_ns, started_at_ns, gpu_truncated_stacks,"
			" gpu_missing_stacks FROM sessions WHERE id = ?1",
			session_id, &st);
	if (r < 0)
		return r;
	*ret_span_ns = sqlite3_column_int64(st, 4) > 0 ? sqlite3_column_int64(st, 4) : 0;
	*ret_start_ns = sqlite3_column_int64(st, 5);
	*ret = json_pack("{s:I, s:s, s:I, s:I, s:I, s:f, s:I, s:I}", "session",
			 (json_int_t)session_id, "events", (const char *)sqlite3_column_text(st, 3),
			 "lost_calls", (json_int_t)sqlite3_column_int64(st, 0), "nvtx_unmatched",
			 (json_int_t)sqlite3_column_int64(st, 1), "unnamed_launches",
			 (json_int_t)sqlite3_column_int64(st, 2), "session_s",
			 round((double)*ret_span_ns / 1e6) / 1e3, "truncated_stacks",
			 (json_int_t)sqlite3_column_int64(st, 6), "missing_stacks",
			 (json_int_t)sqlite3_column_int64(st, 7));
	return *ret ? 0 : -ENOMEM;
}

/* Totals, peak and a per-second timeline of live GPU bytes, from the allocation events. */
static int memory_summary(sqlite3 *db, int64_t session_id, int64_t start_ns, int limit,
			  json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	json_t *o, *timeline, *by_stack = NULL;
	int64_t live = 0, peak = 0, sec = -1;
	int64_t allocs = 0, failed = 0, requested = 0, allocated = 0, freed = 0, frees = 0;
	int rc, r;

	if (report__prepare_id(
		db,
		"SELECT time_ns, api, requested_bytes, live_delta_bytes, ok, api NOT LIKE '%Free%'"
		" FROM gpu_mem_events WHERE session_id = ?1 ORDER BY time_ns, rowid",
		session_id, &st) < 0)
		return -EIO;
	timeline = json_array();
	if (!timeline)
		return -ENOMEM;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t t = sqlite3_column_int64(st, 0), delta = sqlite3_column_int64(st, 3);
		bool alloc = sqlite3_column_int(st, 5) != 0;

		if (alloc) {
			allocs++;
			requested += sqlite3_column_int64(st, 2);
			if (!sqlite3_column_int(st, 4))
				failed++;
			if (delta > 0)
				allocated += delta;
		} else {
			frees++;
			if (delta < 0)
				freed -= delta;
		}
		live += delta;
		if (live > peak)
			peak = live;
		/* One point per second that saw a change: the live bytes at its end. */
		if ((t - start_ns) / 1000000000 != sec) {
			sec = (t - start_ns) / 1000000000;
			json_array_append_new(timeline,
					      json_pack("{s:I, s:I}", "t_s", (json_int_t)sec,
							"live_bytes", (json_int_t)live));
		} else {
			json_object_set_new(json_array_get(timeline, json_array_size(timeline) - 1),
					    "live_bytes", json_integer(live));
		}
	}
	if (rc != SQLITE_DONE) {
		json_decref(timeline);
		return -EIO;
	}
	r = rows(db,
		 /* live_bytes: what the stack allocated minus the frees matched to it
		  * (a matched free row carries the allocating stack). */
		 "SELECT api, space, (SELECT sum(f.live_delta_bytes) FROM gpu_mem_events f"
		 " WHERE f.session_id = ?1 AND f.stack_id = a.stack_id) AS live_bytes,"
		 " sum(CASE WHEN live_delta_bytes > 0 THEN live_delta_bytes ELSE 0 END) AS "
		 "allocated_bytes,"
		 " sum(requested_bytes) AS requested_bytes, count(*) AS allocations,"
		 " sum(1 - ok) AS failed, stack_id FROM gpu_mem_events a"
		 " WHERE session_id = ?1 AND api NOT LIKE '%Free%'"
		 " GROUP BY api, space, stack_id ORDER BY live_bytes DESC, requested_bytes DESC "
		 "LIMIT ?2",
		 session_id, limit, &by_stack);
	if (r < 0) {
		json_decref(timeline);
		return r;
	}
	o = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}", "allocations",
		      (json_int_t)allocs, "failed_allocations", (json_int_t)failed,
		      "requested_bytes", (json_int_t)requested, "allocated_bytes",
		      (json_int_t)allocated, "frees", (json_int_t)frees, "freed_bytes",
		      (json_int_t)freed, "live_bytes", (json_int_t)live, "peak_live_bytes",
		      (json_int_t)peak, "by_stack", by_stack, "timeline", timeline);
	if (!o)
		return -ENOMEM;
	*ret = o;
	return 0;
}

static int add_rows(sqlite3 *db, json_t *o, const char *key, const char *sql, int64_t session_id,
		    int limit)
{
	json_t *arr;
	int r = rows(db, sql, session_id, limit, &arr);

	if (r < 0)
		return r;
	return json_object_set_new(o, key, arr) < 0 ? -ENOMEM : 0;
}

/* calls, total, average, minimum and maximum time of rows with calls, total_ns, min_ns, max_ns. */
#define TIMES                                                                                      \
	" sum(calls) AS calls, sum(total_ns) AS total_ns,"                                         \
	" sum(total_ns) / max(sum(calls), 1) AS avg_ns, min(min_ns) AS min_ns, max(max_ns) AS "    \
	"max_ns"

/* The lists of the gpu report: ?1 = session, ?2 = limit. */
static const struct {
	const char *key, *sql;
} gpu_lists[] = {
    /* A symbol attached in a library loaded after the attach is no longer missing. */
    {"probes", "SELECT DISTINCT pid, what, file, status FROM gpu_probes p WHERE session_id = ?1"
	       " AND NOT (status = 'missing' AND EXISTS (SELECT 1 FROM gpu_probes a"
	       " WHERE a.session_id = ?1 AND a.pid = p.pid AND a.what = p.what"
	       " AND a.status = 'attached'))"
	       " ORDER BY status != 'attached', what, pid, file"},
    {"kernels", "SELECT name, sum(launches) AS launches, sum(errors) AS errors, grid, block,"
		" api, min(stack_id) AS stack_id FROM gpu_kernels WHERE session_id = ?1"
		" GROUP BY name, grid, block, api ORDER BY launches DESC, name LIMIT ?2"},
    {"api", "SELECT api, sum(errors) AS errors," TIMES " FROM gpu_api_calls"
	    " WHERE session_id = ?1 GROUP BY api ORDER BY total_ns DESC, api LIMIT ?2"},
    {"copies", "SELECT direction, api, sum(calls) AS calls, sum(bytes) AS bytes,"
	       " sum(errors) AS errors FROM gpu_copies WHERE session_id = ?1"
	       " GROUP BY direction, api ORDER BY bytes DESC, direction LIMIT ?2"},
    {"syncs", "SELECT api, sum(calls) AS calls, sum(total_ns) AS total_ns, stack_id"
	      " FROM gpu_syncs WHERE session_id = ?1 GROUP BY api, stack_id"
	      " ORDER BY total_ns DESC LIMIT ?2"},
    {"uprobes", "SELECT probe," TIMES " FROM uprobe_calls WHERE session_id = ?1"
		" GROUP BY probe ORDER BY total_ns DESC LIMIT ?2"},
};

int query__gpu(sqlite3 *db, int64_t session_id, int limit, json_t **ret)
{
	json_t *o, *mem;
	int64_t start_ns, span_ns;
	int r;

	r = session_head(db, session_id, &o, &start_ns, &span_ns);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(gpu_lists); i++) {
		r = add_rows(db, o, gpu_lists[i].key, gpu_lists[i].sql, session_id, limit);
		if (r < 0)
			goto fail;
	}
	r = memory_summary(db, session_id, start_ns, limit, &mem);
	if (r < 0)
		goto fail;
	json_object_set_new(o, "memory", mem);
	*ret = o;
	return 0;
fail:
	json_decref(o);
	return r;
}

int query__ranges(sqlite3 *db, int64_t session_id, json_t **ret)
{
	json_t *o, *arr, *x;
	int64_t start_ns, span_ns;
	size_t i;
	int r;

	r = session_head(db, session_id, &o, &start_ns, &span_ns);
	if (r < 0)
		return r;
	r = rows(db,
		 "SELECT kind, path, name, depth," TIMES " FROM nvtx_ranges WHERE session_id = ?1"
		 " GROUP BY kind, path ORDER BY kind = 'mark', kind, path",
		 session_id, 0, &arr);
	if (r < 0) {
		json_decref(o);
		return r;
	}
	/* % of the session's wall time each range covered (summed over threads: may pass 100). */
	json_array_foreach(arr, i, x)
	{
		double total_ms = json_real_value(json_object_get(x, "total_ms"));

		json_object_set_new(
		    x, "pct",
		    json_real(span_ns > 0 ? round(1000.0 * total_ms * 1e6 / (double)span_ns) / 10.0
					  : 0.0));
	}
	json_object_set_new(o, "ranges", arr);
	*ret = o;
	return 0;
}
