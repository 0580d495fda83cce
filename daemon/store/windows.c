/* windows.c - aged 1 s windows merged into coarser ones, so that a day-long session stays small. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
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
	bool by_thread; /* has a tid: merged a few threads per transaction */
} merged_tables[] = {
    {"samples", ", tid, stack_id", "count", "sum(count)", true},
    {"event_samples", ", tid, stack_id", "count", "sum(count)", true},
    {"offcpu", ", pid, tid, stack_id, state", "count, total_ns", "sum(count), sum(total_ns)", true},
    {"thread_counters", ", tid, counter", "value, status",
     "sum(value), CASE WHEN max(status = 'ok') THEN 'ok' ELSE min(status) END", true},
    {"windows", "", "samples, lost_samples, truncated_stacks, missing_user_stacks",
     "sum(samples), sum(lost_samples), sum(truncated_stacks), sum(missing_user_stacks)", false},
};

/*
 * A session with windows to merge, the span [from, to) of window_ns to
 * merge, and the threads [tid_lo, tid_hi] of the step at hand.
 */
struct merge_span {
	int64_t session_id, started_ns, window_ns, from, to, tid_lo, tid_hi;
};

/* @sql prepared into *@ret with @m bound: ?1 session, ?2/?3 span, ?4 start, ?5 window, ?6/?7
 * threads. */
static int prepare_bound(struct store *st, const char *sql, const struct merge_span *m,
			 sqlite3_stmt **ret)
{
	const int64_t v[] = {m->session_id, m->from,   m->to,	 m->started_ns,
			     m->window_ns,  m->tid_lo, m->tid_hi};

	if (sqlite3_prepare_v2(st->db, sql, -1, ret, NULL) != SQLITE_OK)
		return -EIO;
	/* Parameters a statement does not use are ignored. */
	for (size_t i = 0; i < ARRAY_SIZE(v); i++)
		sqlite3_bind_int64(*ret, (int)i + 1, v[i]);
	return 0;
}

static int exec_bound(struct store *st, const char *sql, const struct merge_span *m,
		      uint64_t *ret_changes)
{
	_cleanup_stmt_ sqlite3_stmt *stmt = NULL;
	int r = prepare_bound(st, sql, m, &stmt);

	if (r >= 0)
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
	const char *threads = t->by_thread ? " AND tid BETWEEN ?6 AND ?7" : "";
	int r;

	if (asprintf(&create,
		     "CREATE TEMP TABLE IF NOT EXISTS merged_%s AS SELECT * FROM main.%s WHERE 0",
		     t->name, t->name) < 0 ||
	    asprintf(&sum,
		     "INSERT INTO temp.merged_%s (session_id, window_ns%s, %s) "
		     "SELECT session_id, ?4 + (window_ns - ?4) / ?5 * ?5%s, %s FROM main.%s "
		     "WHERE session_id = ?1 AND window_ns >= ?2 AND window_ns < ?3%s "
		     "GROUP BY 2%s",
		     t->name, t->keys, t->values, t->keys, t->merged, t->name, threads,
		     t->keys) < 0 ||
	    asprintf(&del,
		     "DELETE FROM main.%s WHERE session_id = ?1 AND window_ns >= ?2 AND "
		     "window_ns < ?3%s",
		     t->name, threads) < 0 ||
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

/* One transaction: the rows of table @t of @m's threads [tid_lo, tid_hi] merged. */
static int merge_part(struct store *st, const struct merged_table *t, const struct merge_span *m,
		      struct store_merge *ret)
{
	int r;

	if (store__begin(st) < 0)
		return -EIO;
	/* The rollups' triggers skip the session's rows while it is here. */
	r = exec_bound(st, "INSERT INTO window_merge (session_id) VALUES (?1)", m, NULL);
	if (r >= 0)
		r = merge_table(st, t, m, ret);
	if (r >= 0)
		r = exec_bound(st, "DELETE FROM window_merge WHERE session_id = ?1", m, NULL);
	if (r < 0 || store__commit(st) < 0) {
		store__rollback(st);
		return r < 0 ? r : -EIO;
	}
	return 0;
}

/*
 * The last thread of the next part of table @t in @m's span: threads from
 * m->tid_lo on, in order, until they hold @max_rows rows (at least one
 * thread). 0 with *@ret_tid set, or 1 when no row is left.
 */
static int part_end(struct store *st, const struct merged_table *t, const struct merge_span *m,
		    unsigned max_rows, int64_t *ret_tid)
{
	_cleanup_free_ char *sql = NULL;
	_cleanup_stmt_ sqlite3_stmt *stmt = NULL;
	uint64_t rows = 0;
	int rc, found = 0;

	if (asprintf(&sql,
		     "SELECT tid, count(*) FROM main.%s WHERE session_id = ?1 AND window_ns >= ?2 "
		     "AND window_ns < ?3 AND tid >= ?6 GROUP BY tid ORDER BY tid",
		     t->name) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	if (prepare_bound(st, sql, m, &stmt) < 0)
		return -EIO;
	while (rows < max_rows && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
		*ret_tid = sqlite3_column_int64(stmt, 0);
		rows += (uint64_t)sqlite3_column_int64(stmt, 1);
		found = 1;
	}
	if (rows < max_rows && rc != SQLITE_DONE)
		return -EIO;
	return found ? 0 : 1;
}

/*
 * One step of merging cursor @c's span: the session's mark first, in a
 * transaction of its own (from then on a time range that reaches the span
 * is read whole, so it sums right whether its rows are merged yet or not:
 * report.c), then one transaction per table and part of at most @max_rows
 * rows (a few threads). A crash in between leaves rows of the span unmerged
 * below the mark: right, only not smaller. Clears c->active when done.
 */
static int merge_step(struct store *st, struct store_merge_cursor *c, unsigned max_rows,
		      struct store_merge *ret)
{
	static const char mark[] =
	    "UPDATE sessions SET merged_until_ns = ?3, merged_window_ns = ?5 WHERE id = ?1";
	struct merge_span m = {c->session_id, c->started_ns, c->window_ns, c->from,
			       c->to,	      c->next_tid,   INT64_MAX};
	const struct merged_table *t;
	int r;

	if (!c->marked) {
		if (store__begin(st) < 0)
			return -EIO;
		r = exec_bound(st, mark, &m, NULL);
		if (r < 0 || store__commit(st) < 0) {
			store__rollback(st);
			return r < 0 ? r : -EIO;
		}
		c->marked = true;
		c->table = 0;
		c->next_tid = INT64_MIN;
		return 0;
	}
	if (c->table >= ARRAY_SIZE(merged_tables)) {
		c->active = false;
		return 0;
	}
	t = &merged_tables[c->table];
	if (t->by_thread) {
		r = part_end(st, t, &m, max_rows, &m.tid_hi);
		if (r < 0)
			return r;
		if (r > 0) { /* this table is done */
			c->table++;
			c->next_tid = INT64_MIN;
			return 0;
		}
	}
	r = merge_part(st, t, &m, ret);
	if (r < 0)
		return r;
	if (t->by_thread && m.tid_hi < INT64_MAX) {
		c->next_tid = m.tid_hi + 1;
	} else {
		c->table++;
		c->next_tid = INT64_MIN;
	}
	return 0;
}

/* Every step of @m's span, at once. */
static int merge_span(struct store *st, const struct merge_span *m, unsigned max_rows,
		      struct store_merge *ret)
{
	struct store_merge_cursor c = {
	    .active = true,
	    .session_id = m->session_id,
	    .started_ns = m->started_ns,
	    .window_ns = m->window_ns,
	    .from = m->from,
	    .to = m->to,
	};
	int r = 0;

	while (c.active && r >= 0)
		r = merge_step(st, &c, max_rows, ret);
	return r;
}

/*
 * The spans to merge, oldest first, at most @max_windows merged windows in
 * all, into *@ret_spans (*@ret_n of them, to free); *@ret_more: more
 * windows than that are due.
 */
static int pending_spans(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
			 unsigned max_windows, struct merge_span **ret_spans, size_t *ret_n,
			 bool *ret_more)
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

	*ret_n = 0;
	*ret_more = false;
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
		windows =
		    m.window_ns > 0 ? (sqlite3_column_int64(stmt, 6) - mark) / m.window_ns : 0;
		if (sqlite3_column_type(stmt, 4) != SQLITE_NULL)
			windows =
			    MIN(windows, (sqlite3_column_int64(stmt, 4) - mark + m.window_ns - 1) /
					     m.window_ns);
		if (windows <= 0)
			continue;
		if (windows > budget) {
			windows = budget;
			*ret_more = true;
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
		*ret_more = *ret_more || sqlite3_step(stmt) == SQLITE_ROW;
	*ret_spans = TAKE_PTR(spans);
	*ret_n = n;
	return 0;
}

int store__merge_windows(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
			 unsigned max_windows, struct store_merge *ret)
{
	_cleanup_free_ struct merge_span *spans = NULL;
	size_t n;
	int r;

	*ret = (struct store_merge){0};
	r = pending_spans(st, now_ns, after_ns, window_ns, max_windows, &spans, &n, &ret->more);
	for (size_t i = 0; i < n && r >= 0; i++) {
		r = merge_span(st, &spans[i], UINT_MAX, ret);
		/* A session's spans come out together: count each once. */
		if (r >= 0 && (i == 0 || spans[i].session_id != spans[i - 1].session_id))
			ret->sessions++;
	}
	return r < 0 ? r : 0;
}

int store__merge_step(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
		      unsigned max_rows, struct store_merge_cursor *c, struct store_merge *ret)
{
	_cleanup_free_ struct merge_span *spans = NULL;
	bool more;
	size_t n;
	int r;

	*ret = (struct store_merge){0};
	if (!c->active) {
		r = pending_spans(st, now_ns, after_ns, window_ns, 1, &spans, &n, &more);
		if (r < 0 || n == 0)
			return r < 0 ? r : 0;
		*c = (struct store_merge_cursor){
		    .active = true,
		    .session_id = spans[0].session_id,
		    .started_ns = spans[0].started_ns,
		    .window_ns = spans[0].window_ns,
		    .from = spans[0].from,
		    .to = spans[0].to,
		};
		ret->sessions = 1;
	}
	r = merge_step(st, c, max_rows ? max_rows : 1, ret);
	if (r < 0)
		c->active = false; /* the next call starts over from the database's marks */
	ret->more = true;	   /* until a call finds nothing due */
	return r < 0 ? r : 0;
}
