/* sessions.c - the session and sessions reports: one SESSION object per stored session. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>
#include <sqlite3.h>

#include "report/query.h"
#include "report/report.h"
#include "store/sqlite_util.h"
#include "util.h"

/*
 * The counts of one kind of record under the table walk: @walked, and the
 * stored JSON object @text of fallbacks by reason (NULL: none yet), as
 * {"walked", @fell_key, "fallbacks", "walked_pct"} (walked_pct null with no
 * record yet). NULL for a stored object that does not parse, or without
 * memory.
 */
static json_t *walk_counts(int64_t walked, const char *text, const char *fell_key)
{
	json_t *fallbacks = text ? json_loads(text, 0, NULL) : json_object(), *v;
	int64_t fell = 0;
	const char *k;

	if (!json_is_object(fallbacks)) {
		json_decref(fallbacks);
		return NULL;
	}
	json_object_foreach(fallbacks, k, v) fell += json_integer_value(v);
	return json_pack("{s:I, s:I, s:o, s:o}", "walked", (json_int_t)walked, fell_key,
			 (json_int_t)fell, "fallbacks", fallbacks, "walked_pct",
			 walked + fell ? json_real(round(1000.0 * (double)walked /
							 (double)(walked + fell)) / 10.0)
				       : json_null());
}

/*
 * The "unwind_tables" object of a session with unwind "tables" or "auto": CPU samples
 * walked in BPF, those that fell back to the stack copy by reason, and the
 * share walked (null with no sample yet); under "offcpu" the same for its
 * off-CPU intervals (null without the offcpu event, or stored by a profd
 * before schema 19). null for the other modes, for an auto session that
 * did not walk, or for a stored object that does not parse.
 */
static json_t *unwind_tables_object(sqlite3_stmt *st)
{
	const char *text = (const char *)sqlite3_column_text(st, SC_TABLE_FALLBACKS);
	const char *unwind = (const char *)sqlite3_column_text(st, SC_UNWIND);
	const char *offcpu = (const char *)sqlite3_column_text(st, SC_OFFCPU_TABLE_FALLBACKS);
	json_t *o, *off;

	if (!unwind || (strcmp(unwind, "tables") != 0 && strcmp(unwind, "auto") != 0))
		return json_null();
	/* auto that did not walk stored nothing: a session shorter than
	 * UNWIND_AUTO_TABLES_MIN_SAMPLES of a profd without the table cache,
	 * or one of a profd before the walk */
	if (strcmp(unwind, "auto") == 0 && !text)
		return json_null();
	o = walk_counts(sqlite3_column_int64(st, SC_TABLE_WALKED), text, "fallback_samples");
	if (!o)
		return json_null();
	off = offcpu ? walk_counts(sqlite3_column_int64(st, SC_OFFCPU_TABLE_WALKED), offcpu,
				   "fallback_intervals")
		     : NULL;
	if (json_object_set_new(o, "offcpu", off ? off : json_null()) < 0) {
		json_decref(o);
		return json_null();
	}
	return o;
}

/* The SESSION object of docs/protocol.md from a row of SESSION_SELECT; @now: CLOCK_REALTIME ns. */
static int session_from_row(sqlite3_stmt *st, int64_t now, json_t **ret)
{
	_cleanup_json_ json_t *o = json_object();
	int64_t started = sqlite3_column_int64(st, SC_STARTED_AT_NS);
	bool ended = sqlite3_column_type(st, SC_ENDED_AT_NS) != SQLITE_NULL;
	int64_t elapsed_ns = (ended ? sqlite3_column_int64(st, SC_ENDED_AT_NS) : now) - started;
	int fail = 0;

	if (!o)
		return -ENOMEM;
	fail |= json_object_set_new(o, "id", report__col_int(st, SC_ID));
	fail |= json_object_set_new(o, "pid", report__col_int(st, SC_PID));
	fail |= json_object_set_new(o, "comm", report__col_text(st, SC_COMM));
	fail |= json_object_set_new(o, "exe", report__col_text(st, SC_EXE));
	fail |= json_object_set_new(o, "uid", report__col_int(st, SC_UID));
	fail |= json_object_set_new(o, "state", report__col_text(st, SC_STATE));
	fail |= json_object_set_new(o, "end_reason", report__col_text(st, SC_END_REASON));
	fail |= json_object_set_new(o, "event", report__col_text(st, SC_EVENT));
	fail |= json_object_set_new(
	    o, "events", report__split_events((const char *)sqlite3_column_text(st, SC_EVENTS)));
	fail |= json_object_set_new(o, "freq_hz", report__col_int(st, SC_FREQ_HZ));
	fail |= json_object_set_new(o, "unwind", report__col_text(st, SC_UNWIND));
	fail |=
	    json_object_set_new(o, "duration_s",
				sqlite3_column_type(st, SC_DURATION_NS) == SQLITE_NULL
				    ? json_null()
				    : report__seconds(sqlite3_column_int64(st, SC_DURATION_NS)));
	fail |= json_object_set_new(o, "started_at", report__iso8601(started));
	fail |= json_object_set_new(o, "started_at_ns", json_integer(started));
	fail |= json_object_set_new(
	    o, "ended_at",
	    ended ? report__iso8601(sqlite3_column_int64(st, SC_ENDED_AT_NS)) : json_null());
	fail |= json_object_set_new(o, "ended_at_ns", report__col_int(st, SC_ENDED_AT_NS));
	/* Milliseconds are plenty, and keep the printed number short. */
	fail |= json_object_set_new(o, "elapsed_s",
				    json_real(round((double)MAX(elapsed_ns, 0) / 1e6) / 1e3));
	fail |= json_object_set_new(o, "samples", report__col_int(st, SC_SAMPLES));
	fail |= json_object_set_new(o, "lost_samples", report__col_int(st, SC_LOST_SAMPLES));
	fail |=
	    json_object_set_new(o, "truncated_stacks", report__col_int(st, SC_TRUNCATED_STACKS));
	fail |= json_object_set_new(o, "missing_user_stacks",
				    report__col_int(st, SC_MISSING_USER_STACKS));
	fail |= json_object_set_new(o, "unsymbolized_frames",
				    report__col_int(st, SC_UNSYMBOLIZED_FRAMES));
	fail |= json_object_set_new(o, "threads", report__col_int(st, SC_THREADS));
	fail |= json_object_set_new(o, "stack_bytes", report__col_int(st, SC_STACK_BYTES));
	fail |= json_object_set_new(o, "unwind_dropped", report__col_int(st, SC_UNWIND_DROPPED));
	fail |= json_object_set_new(o, "frames", report__col_int(st, SC_FRAMES));
	fail |= json_object_set_new(o, "children",
				    json_boolean(sqlite3_column_int(st, SC_FOLLOW_CHILDREN)));
	fail |= json_object_set_new(o, "sampled_event", report__col_text(st, SC_SAMPLED_EVENT));
	fail |= json_object_set_new(o, "sampled_event_status",
				    report__col_text(st, SC_SAMPLED_EVENT_STATUS));
	fail |= json_object_set_new(o, "label", report__col_text(st, SC_LABEL));
	fail |=
	    json_object_set_new(o, "offcpu_period_ns", report__col_int(st, SC_OFFCPU_PERIOD_NS));
	fail |= json_object_set_new(o, "pid_start_ticks", report__col_int(st, SC_PID_START_TICKS));
	fail |= json_object_set_new(o, "limit_dropped_samples",
				    report__col_int(st, SC_LIMIT_DROPPED_SAMPLES));
	fail |= json_object_set_new(o, "python", report__python(st, SC_PYTHON));
	fail |= json_object_set_new(o, "unwind_tables", unwind_tables_object(st));
	fail |=
	    json_object_set_new(o, "unsymbolized_pct",
				report__json_pct(sqlite3_column_int64(st, SC_UNSYMBOLIZED_FRAMES),
						 sqlite3_column_int64(st, SC_FRAMES)));
	if (fail)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

/*
 * The "fleet" object of a session: for each sink ("clickhouse",
 * "pyroscope"), null if it never shipped the session, else how far it got
 * (shipped_until_s: seconds of the session shipped), its chunks, rows,
 * failed attempts, the last one's message (null after a success) and done.
 */
static int fleet_object(sqlite3 *db, int64_t session_id, int64_t started_ns, json_t **ret)
{
	static const char *const sinks[] = {"clickhouse", "pyroscope"};
	_cleanup_json_ json_t *o = json_object();
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r, fail = 0;

	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < ARRAY_SIZE(sinks); i++)
		fail |= json_object_set_new(o, sinks[i], json_null());
	r = report__prepare(db,
			    "SELECT sink, shipped_until_ns, chunks, rows, failures, last_error, done "
			    "FROM fleet_cursors WHERE session_id = ?1",
			    &st);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 1, session_id);
	while ((r = report__step(st)) > 0) {
		json_t *c = json_object();

		if (!c)
			return -ENOMEM;
		fail |= json_object_set_new(
		    c, "shipped_until_s",
		    report__seconds(MAX(sqlite3_column_int64(st, 1) - started_ns, 0)));
		fail |= json_object_set_new(c, "chunks", report__col_int(st, 2));
		fail |= json_object_set_new(c, "rows", report__col_int(st, 3));
		fail |= json_object_set_new(c, "failures", report__col_int(st, 4));
		fail |= json_object_set_new(c, "last_error", report__col_text(st, 5));
		fail |= json_object_set_new(c, "done", json_boolean(sqlite3_column_int(st, 6)));
		fail |= json_object_set_new(o, (const char *)sqlite3_column_text(st, 0), c);
	}
	if (r < 0)
		return r;
	if (fail)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

/*
 * query__session() - the SESSION object of docs/protocol.md for @session_id.
 * @db: open connection at the current schema; only read.
 * @session_id: sessions.id.
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * elapsed_s runs to now (CLOCK_REALTIME) while the session has no ended_at;
 * "fleet" says what the fleet sinks have of it (fleet_cursors, schema 16).
 * Returns 0, -ENOENT for an unknown session, -EIO on an SQLite error,
 * -ENOMEM. Allocates; does not log; blocks only on SQLite's file I/O.
 */
int query__session(sqlite3 *db, int64_t session_id, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	_cleanup_json_ json_t *o = NULL;
	json_t *fleet;

	r = report__row(db, SESSION_SELECT " WHERE s.id = ?1", session_id, &st);
	if (r < 0)
		return r;
	r = session_from_row(st, (int64_t)now_ns(CLOCK_REALTIME), &o);
	if (r < 0)
		return r;
	r = fleet_object(db, session_id, sqlite3_column_int64(st, SC_STARTED_AT_NS), &fleet);
	if (r < 0)
		return r;
	if (json_object_set_new(o, "fleet", fleet) < 0)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

/*
 * query__sessions() - {"sessions":[SESSION, ...]}, newest (highest id) first.
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Returns 0 (also with no sessions: an empty array), -EIO on an SQLite error,
 * -ENOMEM. Allocates; does not log.
 */
int query__sessions(sqlite3 *db, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = json_object();
	int64_t now = (int64_t)now_ns(CLOCK_REALTIME);
	json_t *arr;
	int r;

	if (!o || json_object_set_new(o, "sessions", json_array()) < 0)
		return -ENOMEM;
	arr = json_object_get(o, "sessions");
	r = report__prepare(db, SESSION_SELECT " ORDER BY s.id DESC", &st);
	if (r < 0)
		return r;
	while ((r = report__step(st)) > 0) {
		json_t *s;

		r = session_from_row(st, now, &s);
		if (r < 0)
			return r;
		if (json_array_append_new(arr, s) < 0)
			return -ENOMEM;
	}
	if (r < 0)
		return r;
	*ret = TAKE_PTR(o);
	return 0;
}

