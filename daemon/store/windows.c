/* windows.c - aged 1 s windows merged into coarser ones, so that a day-long session stays small. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "protocol.h"
#include "store/sqlite_util.h"
#include "store/store.h"
#include "store/store_internal.h"

/*
 * The tables with a row per window: the columns besides session_id and
 * window_ns that identify a row (keys), the others (values), and what a
 * merged row holds for them. A thread_counters row is 'ok' with the sum of
 * the values if any of its windows was; its value is NULL otherwise.
 */
static const struct merged_table {
	const char *name;
	const char *keys; /* "" or ", col, ..." */
	const char *values;
	const char *merged;
} merged_tables[] = {
    {"samples", ", tid, stack_id", "count", "sum(count)"},
    {"event_samples", ", tid, stack_id", "count", "sum(count)"},
    {"offcpu", ", pid, tid, stack_id, state", "count, total_ns", "sum(count), sum(total_ns)"},
    {"thread_counters", ", tid, counter", "value, status",
     "sum(value), CASE WHEN max(status = 'ok') THEN 'ok' ELSE min(status) END"},
    {"windows", "", "samples, lost_samples, truncated_stacks, missing_user_stacks",
     "sum(samples), sum(lost_samples), sum(truncated_stacks), sum(missing_user_stacks)"},
};

/* A session with windows to merge, and the span [from, to) of window_ns to merge. */
struct merge_span {
	int64_t session_id, started_ns, window_ns, from, to;
};

static int exec_bound(struct store *st, const char *sql, const struct merge_span *m,
		      uint64_t *ret_changes)
{
	_cleanup_stmt_ sqlite3_stmt *stmt = NULL;
	int r;

	if (sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return -EIO;
	/* Unused parameters are ignored: each statement takes what it needs. */
	sqlite3_bind_int64(stmt, 1, m->session_id);
	sqlite3_bind_int64(stmt, 2, m->from);
	sqlite3_bind_int64(stmt, 3, m->to);
	sqlite3_bind_int64(stmt, 4, m->started_ns);
	sqlite3_bind_int64(stmt, 5, m->window_ns);
	r = store__step_done(stmt);
	if (r >= 0 && ret_changes)
		*ret_changes += (uint64_t)sqlite3_changes64(st->db);
	return r;
}

/*
 * The rows of @t in @m's span, replaced by one row per merged window and
 * key: summed into a temporary table, deleted, put back, with the same
 * sums (the rollups stay as they are).
 */
static int merge_table(struct store *st, const struct merged_table *t, const struct merge_span *m,
		       struct store_merge *ret)
{
	_cleanup_free_ char *create = NULL, *sum = NULL, *del = NULL, *put = NULL, *clear = NULL;
	int r;

	if (asprintf(&create,
		     "CREATE TEMP TABLE IF NOT EXISTS merged_%s AS SELECT * FROM main.%s WHERE 0",
		     t->name, t->name) < 0 ||
	    asprintf(&sum,
		     "INSERT INTO temp.merged_%s (session_id, window_ns%s, %s) "
		     "SELECT session_id, ?4 + (window_ns - ?4) / ?5 * ?5%s, %s FROM main.%s "
		     "WHERE session_id = ?1 AND window_ns >= ?2 AND window_ns < ?3 "
		     "GROUP BY 2%s",
		     t->name, t->keys, t->values, t->keys, t->merged, t->name, t->keys) < 0 ||
	    asprintf(
		&del,
		"DELETE FROM main.%s WHERE session_id = ?1 AND window_ns >= ?2 AND window_ns < ?3",
		t->name) < 0 ||
	    asprintf(&put,
		     "INSERT INTO main.%s (session_id, window_ns%s, %s) "
		     "SELECT session_id, window_ns%s, %s FROM temp.merged_%s",
		     t->name, t->keys, t->values, t->keys, t->values, t->name) < 0 ||
	    asprintf(&clear, "DELETE FROM temp.merged_%s", t->name) < 0)
		return -ENOMEM;
	r = exec_bound(st, create, m, NULL);
	if (r >= 0)
		r = exec_bound(st, sum, m, NULL);
	if (r >= 0)
		r = exec_bound(st, del, m, &ret->rows_before);
	if (r >= 0)
		r = exec_bound(st, put, m, &ret->rows_after);
	if (r >= 0)
		r = exec_bound(st, clear, m, NULL);
	return r;
}

/* One transaction: every table's rows of @m's span merged, and the session's mark moved. */
static int merge_span(struct store *st, const struct merge_span *m, struct store_merge *ret)
{
	static const char mark[] =
	    "UPDATE sessions SET merged_until_ns = ?3, merged_window_ns = ?5 WHERE id = ?1";
	int r;

	if (store__begin(st) < 0)
		return -EIO;
	/* The rollups' triggers skip the session's rows while it is here. */
	r = exec_bound(st, "INSERT INTO window_merge (session_id) VALUES (?1)", m, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(merged_tables) && r >= 0; i++)
		r = merge_table(st, &merged_tables[i], m, ret);
	if (r >= 0)
		r = exec_bound(st, "DELETE FROM window_merge WHERE session_id = ?1", m, NULL);
	if (r >= 0)
		r = exec_bound(st, mark, m, NULL);
	if (r < 0 || store__commit(st) < 0) {
		store__rollback(st);
		return r < 0 ? r : -EIO;
	}
	return 0;
}

int store__merge_windows(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
			 unsigned max_windows, struct store_merge *ret)
{
	/* A session keeps the merged window it started merging with; an ended
	 * one is done once its mark passed its end. */
	/* ?3, ?4: bounded by what was shipped to ClickHouse, pushed to
	 * Pyroscope (their chunks read the windows; a session a sink has whole
	 * is not), the 7th column. */
	static const char pending[] =
	    "SELECT id, started_at_ns, coalesce(merged_until_ns, started_at_ns), "
	    "       coalesce(merged_window_ns, ?2), ended_at_ns, merged_until_ns, bound "
	    "FROM (SELECT *, min(?1, "
	    "       CASE WHEN ?3 THEN coalesce((SELECT CASE WHEN done THEN ?1 "
	    "       ELSE shipped_until_ns END FROM fleet_cursors c WHERE c.session_id = "
	    "       sessions.id AND c.sink = 'clickhouse'), started_at_ns) ELSE ?1 END, "
	    "       CASE WHEN ?4 THEN coalesce((SELECT CASE WHEN done THEN ?1 "
	    "       ELSE shipped_until_ns END FROM fleet_cursors c WHERE c.session_id = "
	    "       sessions.id AND c.sink = 'pyroscope'), started_at_ns) ELSE ?1 END) AS bound "
	    "       FROM sessions) "
	    "WHERE coalesce(merged_until_ns, started_at_ns) + coalesce(merged_window_ns, ?2) <= bound "
	    "  AND (ended_at_ns IS NULL OR coalesce(merged_until_ns, started_at_ns) < ended_at_ns) "
	    "ORDER BY coalesce(merged_until_ns, started_at_ns), id";
	_cleanup_stmt_ sqlite3_stmt *stmt = NULL;
	_cleanup_free_ struct merge_span *spans = NULL;
	size_t n = 0, cap = 0;
	unsigned budget = max_windows;
	int64_t cutoff;
	int rc = SQLITE_DONE, r = 0;

	*ret = (struct store_merge){0};
	if (!after_ns || window_ns < 2 * PROFD_WINDOW_NS || now_ns <= after_ns || !max_windows)
		return 0;
	cutoff = (int64_t)(now_ns - after_ns);
	if (sqlite3_prepare_v2(st->db, pending, -1, &stmt, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(stmt, 1, cutoff);
	sqlite3_bind_int64(stmt, 2, (int64_t)window_ns);
	sqlite3_bind_int(stmt, 3, !!(st->fleet_sinks & STORE_SINK_CLICKHOUSE));
	sqlite3_bind_int(stmt, 4, !!(st->fleet_sinks & STORE_SINK_PYROSCOPE));
	while (budget && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		struct merge_span m = {
		    .session_id = sqlite3_column_int64(stmt, 0),
		    .started_ns = sqlite3_column_int64(stmt, 1),
		    .window_ns = sqlite3_column_int64(stmt, 3),
		};
		int64_t mark = sqlite3_column_int64(stmt, 2), windows;

		/* Whole merged windows that ended before the cutoff, at most the
		 * budget; an ended session's up to the one that holds its end. */
		windows = m.window_ns > 0 ? (sqlite3_column_int64(stmt, 6) - mark) / m.window_ns : 0;
		if (sqlite3_column_type(stmt, 4) != SQLITE_NULL)
			windows =
			    MIN(windows, (sqlite3_column_int64(stmt, 4) - mark + m.window_ns - 1) /
					     m.window_ns);
		if (windows <= 0)
			continue;
		if (windows > budget) {
			windows = budget;
			ret->more = true;
		}
		budget -= (unsigned)windows;
		/* The first merge takes the 1 s window that began before the
		 * session did too (older profds began windows on whole seconds). */
		m.from = sqlite3_column_type(stmt, 5) == SQLITE_NULL
			     ? m.started_ns - (int64_t)PROFD_WINDOW_NS
			     : mark;
		m.to = mark + windows * m.window_ns;
		r = grow_array((void **)&spans, &cap, n, sizeof(*spans));
		if (r < 0)
			return r;
		spans[n++] = m;
	}
	if (budget && rc != SQLITE_DONE)
		return -EIO;
	if (!budget)
		ret->more = ret->more || sqlite3_step(stmt) == SQLITE_ROW;
	sqlite3_finalize(TAKE_PTR(stmt));
	for (size_t i = 0; i < n && r >= 0; i++) {
		r = merge_span(st, &spans[i], ret);
		if (r >= 0)
			ret->sessions++;
	}
	return r < 0 ? r : 0;
}
