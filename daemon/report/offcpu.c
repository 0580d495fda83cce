/* offcpu.c - the offcpu report: where threads wait, by blocking stack and off-CPU time. */
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

/*
 * query__offcpu() - the blocking stacks of @session_id by off-CPU time:
 * {"session","total_off_cpu_s","offcpu_lost","offcpu_period_ns",
 *  "by_state":{state: s}, "stacks":[{"state","total_s","pct","count","threads",
 *  "frames":[{function,module,file,line,kind,inlined}]}]} with frames leaf
 * first, @limit stacks (1..10000). pct is of total_off_cpu_s. With an
 * offcpu_period_ns (schema 21), times and counts are estimates: intervals
 * shorter than it were sampled (schema/0021). Returns 0, -ENOENT for an unknown
 * session, -EIO, -ENOMEM. Reads only; does not log.
 */
int query__offcpu(sqlite3 *db, int64_t session_id, int limit, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL, *fr = NULL;
	json_t *o, *stacks, *by_state;
	int64_t total_ns = 0;
	int rc, r;

	r = report__row(db, "SELECT offcpu_lost, offcpu_period_ns FROM sessions WHERE id = ?1",
			session_id, &st);
	if (r < 0)
		return r;
	o = json_pack("{s:I, s:I, s:o, s:f, s:{}, s:[]}", "session", (json_int_t)session_id,
		      "offcpu_lost", (json_int_t)sqlite3_column_int64(st, 0), "offcpu_period_ns",
		      report__col_int(st, 1), "total_off_cpu_s", 0.0, "by_state", "stacks");
	if (!o)
		return -ENOMEM;
	by_state = json_object_get(o, "by_state");
	stacks = json_object_get(o, "stacks");
	sqlite3_finalize(TAKE_PTR(st));

	r = report__prepare_id(
	    db, "SELECT state, sum(total_ns) FROM offcpu_totals WHERE session_id = ?1 GROUP BY state",
	    session_id, &st);
	if (r < 0)
		goto fail;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		total_ns += sqlite3_column_int64(st, 1);
		json_object_set_new(
		    by_state, (const char *)sqlite3_column_text(st, 0),
		    json_real(round((double)sqlite3_column_int64(st, 1) / 1e6) / 1e3));
	}
	if (rc != SQLITE_DONE) {
		r = -EIO;
		goto fail;
	}
	json_object_set_new(o, "total_off_cpu_s", json_real(round((double)total_ns / 1e6) / 1e3));
	sqlite3_finalize(TAKE_PTR(st));

	r = report__prepare_id_arg(
	    db,
	    "SELECT stack_id, state, sum(total_ns) AS ns, sum(count), count(DISTINCT tid) "
	    "FROM offcpu_totals WHERE session_id = ?1 GROUP BY stack_id, state "
	    "ORDER BY ns DESC, stack_id LIMIT ?2",
	    session_id, limit, &st);
	if (r < 0)
		goto fail;
	if (sqlite3_prepare_v2(db, REPORT_STACK_FRAMES_SQL, -1, &fr, NULL) != SQLITE_OK) {
		r = -EIO;
		goto fail;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t ns = sqlite3_column_int64(st, 2);
		json_t *frames = report__stack_frames(fr, sqlite3_column_int64(st, 0)), *x;

		x = frames ? json_pack("{s:s, s:f, s:f, s:I, s:I, s:o}", "state",
				       (const char *)sqlite3_column_text(st, 1), "total_s",
				       round((double)ns / 1e6) / 1e3, "pct",
				       total_ns > 0
					   ? round(1000.0 * (double)ns / (double)total_ns) / 10.0
					   : 0.0,
				       "count", (json_int_t)sqlite3_column_int64(st, 3), "threads",
				       (json_int_t)sqlite3_column_int64(st, 4), "frames", frames)
			   : NULL;
		if (!x || json_array_append_new(stacks, x) < 0) {
			r = -ENOMEM;
			goto fail;
		}
	}
	if (rc != SQLITE_DONE) {
		r = -EIO;
		goto fail;
	}
	*ret = o;
	return 0;
fail:
	json_decref(o);
	return r;
}
