/* query.c - read-side analyses of the store as JSON: sessions, top, hot paths, threads. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sqlite3.h>

#include "protocol.h"
#include "report/query.h"
#include "service/request.h"
#include "util.h"
#include "store/sqlite_util.h"

/* jansson.h (>= 2.9) brings json_decrefp() itself. */
#define _cleanup_json_ _cleanup_(json_decrefp)

static int sqlite_errno(int rc)
{
	return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

static int stmt_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret)
{
	int rc;

	*ret = NULL;
	rc = sqlite3_prepare_v2(db, sql, -1, ret, NULL);
	return rc == SQLITE_OK ? 0 : sqlite_errno(rc);
}

static int stmt_bind_int64(sqlite3_stmt *st, int i, int64_t v)
{
	int rc = sqlite3_bind_int64(st, i, v);

	return rc == SQLITE_OK ? 0 : sqlite_errno(rc);
}

/* sqlite3_step(): 1 for a row, 0 when done, -EIO/-ENOMEM on error. */
static int stmt_step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return sqlite_errno(rc);
}

/*
 * stmt_row() - prepare @sql, bind @id to ?1 and step to the first row: 0
 * with *@ret on it, -ENOENT if there is none, -EIO/-ENOMEM on error.
 */
static int stmt_row(sqlite3 *db, const char *sql, int64_t id, sqlite3_stmt **ret)
{
	int r = stmt_prepare(db, sql, ret);

	if (r >= 0)
		r = stmt_bind_int64(*ret, 1, id);
	if (r >= 0)
		r = stmt_step(*ret);
	return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

/* Grows *@p (of *@cap elements of @size bytes) to hold at least @need. Returns 0 or -ENOMEM. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t n = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = reallocarray(*p, n, size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/*
 * A query reads with several statements; a savepoint makes them one read
 * transaction, so that totals and per-function counts come from the same
 * snapshot even while the daemon flushes a window (WAL). Outside a
 * transaction SAVEPOINT is a BEGIN DEFERRED; inside one it nests. Nothing is
 * written either way.
 */
static int snapshot_begin(sqlite3 *db)
{
	int rc = sqlite3_exec(db, "SAVEPOINT profd_query", NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sqlite_errno(rc);
}

static void snapshot_endp(sqlite3 **db)
{
	if (*db)
		sqlite3_exec(*db, "RELEASE profd_query", NULL, NULL, NULL);
}

/*
 * A JSON string of @len bytes at @s. Names come from binaries and /proc and
 * need not be UTF-8, which json_stringn() refuses: then bytes >= 0x80 are
 * replaced by '?'. NULL only on out-of-memory.
 */
static json_t *json_text(const char *s, size_t len)
{
	_cleanup_free_ char *copy = NULL;
	json_t *j;

	j = json_stringn(s, len);
	if (j)
		return j;
	copy = malloc(len + 1);
	if (!copy)
		return NULL;
	for (size_t i = 0; i < len; i++)
		copy[i] = (unsigned char)s[i] >= 0x80 ? '?' : s[i];
	copy[len] = '\0';
	return json_stringn(copy, len);
}

/* Column @i as a JSON string, or null when SQL NULL. NULL only on out-of-memory. */
static json_t *json_col_text(sqlite3_stmt *st, int i)
{
	const char *s;

	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	s = (const char *)sqlite3_column_text(st, i);
	if (!s)
		return NULL; /* not NULL in SQL, so out of memory */
	return json_text(s, (size_t)sqlite3_column_bytes(st, i));
}

/* Column @i as a JSON integer, or null when SQL NULL. */
static json_t *json_col_int(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_integer(sqlite3_column_int64(st, i));
}

/* @ns (since the epoch) as "YYYY-MM-DDTHH:MM:SSZ", rounded down to the second. */
static json_t *json_iso8601(int64_t ns)
{
	time_t sec = (time_t)(ns / (int64_t)NSEC_PER_SEC);
	char buf[64];
	struct tm tm;

	if (ns % (int64_t)NSEC_PER_SEC < 0)
		sec--;
	if (!gmtime_r(&sec, &tm) || strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		return json_null();
	return json_string(buf);
}

/* Seconds for @ns nanoseconds: an integer when whole (10, not 10.0), else a real. */
static json_t *json_seconds(int64_t ns)
{
	if (ns % (int64_t)NSEC_PER_SEC == 0)
		return json_integer(ns / (int64_t)NSEC_PER_SEC);
	return json_real((double)ns / (double)NSEC_PER_SEC);
}

/* @part as a percentage of @whole, one decimal; 0 when @whole is 0. */
static double pct1(int64_t part, int64_t whole)
{
	if (whole <= 0)
		return 0.0;
	return round((double)part * 1000.0 / (double)whole) / 10.0;
}

static double round2(double x)
{
	return round(x * 100.0) / 100.0;
}

/* Splits the comma-separated @s into a JSON array of its non-empty items, spaces trimmed. */
static json_t *json_split_events(const char *s)
{
	_cleanup_json_ json_t *a = json_array();
	int fail = 0;

	if (!a)
		return NULL;
	while (s && *s) {
		const char *end = strchrnul(s, ',');
		const char *b = s, *e = end;

		while (b < e && *b == ' ')
			b++;
		while (e > b && e[-1] == ' ')
			e--;
		if (e > b)
			fail |= json_array_append_new(a, json_text(b, (size_t)(e - b)));
		s = *end ? end + 1 : end;
	}
	return fail ? NULL : TAKE_PTR(a);
}

/* @part as a percentage of @whole, one decimal; null when @whole is 0. */
static json_t *json_pct(int64_t part, int64_t whole)
{
	if (whole <= 0)
		return json_null();
	return json_real(round(1000.0 * (double)part / (double)whole) / 10.0);
}

/* The four python columns of schema 0012, as json_python() reads them. */
#define PYTHON_COLUMNS "s.python, s.python_version, s.python_samples, s.python_unmerged"

/*
 * The "python" object of a session or report (docs/protocol.md) from the
 * PYTHON_COLUMNS starting at column @col; null for a session from before
 * schema 0012.
 */
static json_t *json_python(sqlite3_stmt *st, int col)
{
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:o}", "status", json_col_text(st, col), "version",
			 json_col_text(st, col + 1), "samples", json_col_int(st, col + 2),
			 "unmerged", json_col_int(st, col + 3));
}

#define SESSION_SELECT                                                                             \
	"SELECT s.id, s.pid, s.comm, s.exe, s.uid, s.state, s.end_reason, s.event, s.events,"      \
	" s.freq_hz, s.unwind, s.duration_ns, s.started_at_ns, s.ended_at_ns, s.samples,"          \
	" s.lost_samples, s.truncated_stacks, s.missing_user_stacks, s.unsymbolized_frames,"       \
	" (SELECT count(*) FROM threads t WHERE t.session_id = s.id),"                             \
	" s.stack_bytes, s.unwind_dropped, s.frames, s.follow_children,"                           \
	" s.sampled_event, s.sampled_event_status, s.label, s.pid_start_ticks,"                    \
	" s.limit_dropped_samples, " PYTHON_COLUMNS                                                \
	" FROM sessions s"

enum {
	SC_ID,
	SC_PID,
	SC_COMM,
	SC_EXE,
	SC_UID,
	SC_STATE,
	SC_END_REASON,
	SC_EVENT,
	SC_EVENTS,
	SC_FREQ_HZ,
	SC_UNWIND,
	SC_DURATION_NS,
	SC_STARTED_AT_NS,
	SC_ENDED_AT_NS,
	SC_SAMPLES,
	SC_LOST_SAMPLES,
	SC_TRUNCATED_STACKS,
	SC_MISSING_USER_STACKS,
	SC_UNSYMBOLIZED_FRAMES,
	SC_THREADS,
	SC_STACK_BYTES,
	SC_UNWIND_DROPPED,
	SC_FRAMES,
	SC_FOLLOW_CHILDREN,
	SC_SAMPLED_EVENT,
	SC_SAMPLED_EVENT_STATUS,
	SC_LABEL,
	SC_PID_START_TICKS,
	SC_LIMIT_DROPPED_SAMPLES,
	SC_PYTHON,
};

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
	fail |= json_object_set_new(o, "id", json_col_int(st, SC_ID));
	fail |= json_object_set_new(o, "pid", json_col_int(st, SC_PID));
	fail |= json_object_set_new(o, "comm", json_col_text(st, SC_COMM));
	fail |= json_object_set_new(o, "exe", json_col_text(st, SC_EXE));
	fail |= json_object_set_new(o, "uid", json_col_int(st, SC_UID));
	fail |= json_object_set_new(o, "state", json_col_text(st, SC_STATE));
	fail |= json_object_set_new(o, "end_reason", json_col_text(st, SC_END_REASON));
	fail |= json_object_set_new(o, "event", json_col_text(st, SC_EVENT));
	fail |= json_object_set_new(
	    o, "events", json_split_events((const char *)sqlite3_column_text(st, SC_EVENTS)));
	fail |= json_object_set_new(o, "freq_hz", json_col_int(st, SC_FREQ_HZ));
	fail |= json_object_set_new(o, "unwind", json_col_text(st, SC_UNWIND));
	fail |= json_object_set_new(o, "duration_s",
				    sqlite3_column_type(st, SC_DURATION_NS) == SQLITE_NULL
					? json_null()
					: json_seconds(sqlite3_column_int64(st, SC_DURATION_NS)));
	fail |= json_object_set_new(o, "started_at", json_iso8601(started));
	fail |= json_object_set_new(o, "started_at_ns", json_integer(started));
	fail |= json_object_set_new(o, "ended_at",
				    ended ? json_iso8601(sqlite3_column_int64(st, SC_ENDED_AT_NS))
					  : json_null());
	fail |= json_object_set_new(o, "ended_at_ns", json_col_int(st, SC_ENDED_AT_NS));
	/* Milliseconds are plenty, and keep the printed number short. */
	fail |= json_object_set_new(o, "elapsed_s",
				    json_real(round((double)MAX(elapsed_ns, 0) / 1e6) / 1e3));
	fail |= json_object_set_new(o, "samples", json_col_int(st, SC_SAMPLES));
	fail |= json_object_set_new(o, "lost_samples", json_col_int(st, SC_LOST_SAMPLES));
	fail |= json_object_set_new(o, "truncated_stacks", json_col_int(st, SC_TRUNCATED_STACKS));
	fail |=
	    json_object_set_new(o, "missing_user_stacks", json_col_int(st, SC_MISSING_USER_STACKS));
	fail |=
	    json_object_set_new(o, "unsymbolized_frames", json_col_int(st, SC_UNSYMBOLIZED_FRAMES));
	fail |= json_object_set_new(o, "threads", json_col_int(st, SC_THREADS));
	fail |= json_object_set_new(o, "stack_bytes", json_col_int(st, SC_STACK_BYTES));
	fail |= json_object_set_new(o, "unwind_dropped", json_col_int(st, SC_UNWIND_DROPPED));
	fail |= json_object_set_new(o, "frames", json_col_int(st, SC_FRAMES));
	fail |= json_object_set_new(o, "children",
				    json_boolean(sqlite3_column_int(st, SC_FOLLOW_CHILDREN)));
	fail |= json_object_set_new(o, "sampled_event", json_col_text(st, SC_SAMPLED_EVENT));
	fail |= json_object_set_new(o, "sampled_event_status",
				    json_col_text(st, SC_SAMPLED_EVENT_STATUS));
	fail |= json_object_set_new(o, "label", json_col_text(st, SC_LABEL));
	fail |= json_object_set_new(o, "pid_start_ticks", json_col_int(st, SC_PID_START_TICKS));
	fail |= json_object_set_new(o, "limit_dropped_samples",
				    json_col_int(st, SC_LIMIT_DROPPED_SAMPLES));
	fail |= json_object_set_new(o, "python", json_python(st, SC_PYTHON));
	fail |= json_object_set_new(o, "unsymbolized_pct",
				    json_pct(sqlite3_column_int64(st, SC_UNSYMBOLIZED_FRAMES),
					     sqlite3_column_int64(st, SC_FRAMES)));
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
 * elapsed_s runs to now (CLOCK_REALTIME) while the session has no ended_at.
 * Returns 0, -ENOENT for an unknown session, -EIO on an SQLite error,
 * -ENOMEM. Allocates; does not log; blocks only on SQLite's file I/O.
 */
int query__session(sqlite3 *db, int64_t session_id, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	r = stmt_row(db, SESSION_SELECT " WHERE s.id = ?1", session_id, &st);
	if (r < 0)
		return r;
	return session_from_row(st, (int64_t)now_ns(CLOCK_REALTIME), ret);
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
	r = stmt_prepare(db, SESSION_SELECT " ORDER BY s.id DESC", &st);
	if (r < 0)
		return r;
	while ((r = stmt_step(st)) > 0) {
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


/*
 * The windows a time range selects, as bounds on samples.window_ns: a window
 * [w, w + PROFD_WINDOW_NS) is in if it overlaps the range (times from the
 * session's start).
 */
struct window_bounds {
	int64_t lo, hi;		/* window_ns BETWEEN lo AND hi */
	const struct query_range *range; /* NULL: the whole session */
};

static int64_t add_sat(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* Fills @wb for @range (NULL: everything). -ENOENT for an unknown session. */
static int window_bounds__get(sqlite3 *db, int64_t session_id, const struct query_range *range,
			      struct window_bounds *wb)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t start;
	int r;

	*wb = (struct window_bounds){ .lo = INT64_MIN, .hi = INT64_MAX, .range = range };
	if (!range)
		return 0;
	r = stmt_row(db, "SELECT started_at_ns FROM sessions WHERE id = ?1", session_id, &st);
	if (r < 0)
		return r;
	start = sqlite3_column_int64(st, 0);
	wb->lo = add_sat(add_sat(start, range->from_ns), -(int64_t)PROFD_WINDOW_NS + 1);
	wb->hi = add_sat(add_sat(start, range->to_ns), -1);
	return 0;
}

/* Binds lo and hi to parameters @i and @i + 1. */
static int window_bounds__bind(const struct window_bounds *wb, sqlite3_stmt *st, int i)
{
	int r = stmt_bind_int64(st, i, wb->lo);

	return r < 0 ? r : stmt_bind_int64(st, i + 1, wb->hi);
}

/* Adds "from_s"/"to_s" to @o when a range was asked for. Returns 0 or -1 (out of memory). */
static int window_bounds__json(const struct window_bounds *wb, json_t *o)
{
	int fail = 0;

	if (!wb->range)
		return 0;
	fail |= json_object_set_new(o, "from_s", json_real((double)wb->range->from_ns / 1e9));
	fail |= json_object_set_new(o, "to_s", wb->range->to_ns == INT64_MAX
						   ? json_null()
						   : json_real((double)wb->range->to_ns / 1e9));
	return fail;
}

/*
 * A new object with the fields top and hotpaths share: session, event,
 * total_samples (sum of samples.count, so that percentages add up) and the
 * loss counters of the sessions row. *@ret_total gets total_samples.
 */
/*
 * The samples table of @event: "samples" for the CPU event (NULL), else
 * "event_samples" after checking the session sampled @event: -ENODATA if it
 * did not ask for it, -EOPNOTSUPP if the machine could not sample it.
 */
static int samples_table(sqlite3 *db, int64_t session_id, const char *event, const char **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	const char *name, *status;
	int r;

	*ret = "samples";
	if (!event)
		return 0;
	r = stmt_prepare(db, "SELECT sampled_event, sampled_event_status FROM sessions WHERE id = ?1",
			 &st);
	if (r < 0)
		return r;
	r = stmt_bind_int64(st, 1, session_id);
	if (r < 0)
		return r;
	r = stmt_step(st);
	if (r < 0)
		return r;
	if (r == 0)
		return -ENOENT;
	name = (const char *)sqlite3_column_text(st, 0);
	status = (const char *)sqlite3_column_text(st, 1);
	if (!name || strcmp(name, event) != 0)
		return -ENODATA;
	if (!status || strcmp(status, "ok") != 0)
		return -EOPNOTSUPP;
	*ret = "event_samples";
	return 0;
}

static int report_head(sqlite3 *db, int64_t session_id, const char *table,
		       const struct window_bounds *wb, json_t **ret, int64_t *ret_total)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	_cleanup_free_ char *sql = NULL;
	int fail = 0, r;

	/* @table is one of two constant names (samples_table()), never user input. */
	if (asprintf(&sql,
		     "SELECT s.event, s.lost_samples, s.truncated_stacks, s.missing_user_stacks,"
		     " s.unsymbolized_frames,"
		     " (SELECT coalesce(sum(count), 0) FROM %s WHERE session_id = s.id"
		     "  AND window_ns BETWEEN ?2 AND ?3),"
		     " (SELECT coalesce(sum(sa.count), 0) FROM %s sa JOIN stacks st"
		     "  ON st.id = sa.stack_id WHERE sa.session_id = s.id AND st.reached_root"
		     "  AND sa.window_ns BETWEEN ?2 AND ?3),"
		     " s.frames, s.unwind, s.sampled_event, " PYTHON_COLUMNS
		     " FROM sessions s WHERE s.id = ?1",
		     table, table) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = stmt_prepare(db, sql, &st);
	if (r < 0)
		return r;
	r = stmt_bind_int64(st, 1, session_id);
	if (r >= 0)
		r = window_bounds__bind(wb, st, 2);
	if (r < 0)
		return r;
	r = stmt_step(st);
	if (r < 0)
		return r;
	if (r == 0)
		return -ENOENT;

	o = json_object();
	if (!o)
		return -ENOMEM;
	fail |= json_object_set_new(o, "session", json_integer(session_id));
	/* The event these samples are of: the CPU event, or the second sampled event. */
	fail |= json_object_set_new(o, "event", json_col_text(st, strcmp(table, "samples") ? 9 : 0));
	fail |= json_object_set_new(o, "total_samples", json_col_int(st, 5));
	fail |= json_object_set_new(o, "lost_samples", json_col_int(st, 1));
	fail |= json_object_set_new(o, "truncated_stacks", json_col_int(st, 2));
	fail |= json_object_set_new(o, "missing_user_stacks", json_col_int(st, 3));
	fail |= json_object_set_new(o, "unsymbolized_frames", json_col_int(st, 4));
	fail |= json_object_set_new(o, "label", json_col_text(st, SC_LABEL));
	fail |= json_object_set_new(o, "pid_start_ticks", json_col_int(st, SC_PID_START_TICKS));
	fail |= json_object_set_new(o, "limit_dropped_samples",
				    json_col_int(st, SC_LIMIT_DROPPED_SAMPLES));
	fail |= json_object_set_new(o, "unsymbolized_pct",
				    json_pct(sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 7)));
	fail |= json_object_set_new(o, "unwind", json_col_text(st, 8));
	fail |= json_object_set_new(o, "root_samples", json_col_int(st, 6));
	fail |= json_object_set_new(o, "python", json_python(st, 10));
	fail |= json_object_set_new(o, "root_pct",
				    json_pct(sqlite3_column_int64(st, 6), sqlite3_column_int64(st, 5)));
	fail |= window_bounds__json(wb, o);
	if (fail)
		return -ENOMEM;
	*ret_total = sqlite3_column_int64(st, 5);
	*ret = TAKE_PTR(o);
	return 0;
}

/*
 * The call stacks of one session, with their frames grouped into functions:
 * what top and hotpaths are computed from.
 *
 * Why in C and not in SQL: grouping the (stack, frame) rows of a session in
 * SQL needs a sort of every frame of every stack - 2.7 s for 1e5 stacks of
 * depth 30 (3e6 rows) with SQLite 3.40 even in the best form, and the
 * planner joins materialized CTEs by nested scans (minutes). Reading each
 * stack's frame_ids blob (the same frames as its stack_frames rows, in one
 * value) takes 0.2 s for that session, and the rest here is a hash lookup per
 * frame and sorts of the distinct frames and stacks: 0.5 s for top in all.
 * SQL still sums the samples per stack and looks frames up by primary key.
 */
struct qframe {
	int64_t id;
	int64_t rel_addr;
	int64_t line;
	char *function; /* NULL if unsymbolized */
	char *module;
	char *file; /* NULL without line info, and always for unsymbolized frames */
	char *name; /* function, or "<module basename>+0x<rel_addr>" */
	bool kernel;
	bool inlined; /* frames.inline_depth > 0: a call the compiler inlined (schema 0003) */
	bool has_line;
	int64_t self; /* samples with this frame as leaf */
	size_t group;
};

/* A function: frames with the same (function, module), or one unsymbolized address. */
struct qgroup {
	size_t rep;    /* frame reported (name, file, line): the one with most self samples */
	int64_t self;  /* samples whose leaf is in the group */
	int64_t total; /* samples whose stack holds the group at least once */
	size_t stamp;  /* 1 + index of the last stack counted in total */
};

struct qstack {
	int64_t id;
	int64_t n;  /* samples of the session with this stack */
	size_t off; /* its frames, leaf first: profile.fidx[off .. off + len) */
	size_t len;
};

struct profile {
	struct qframe *frames;
	size_t n_frames, cap_frames;
	struct qgroup *groups;
	size_t n_groups;
	struct qstack *stacks;
	size_t n_stacks, cap_stacks;
	int64_t *fidx; /* frame ids as read, then indexes into frames */
	size_t n_fidx, cap_fidx;
	/* frame id -> 1 + index into frames, open addressing; 0 = empty slot */
	int64_t *ht_ids;
	size_t *ht_idx;
	size_t ht_cap;
};

static void profile__free(struct profile *p)
{
	for (size_t i = 0; i < p->n_frames; i++) {
		free(p->frames[i].function);
		free(p->frames[i].module);
		free(p->frames[i].file);
		free(p->frames[i].name);
	}
	free(p->frames);
	free(p->groups);
	free(p->stacks);
	free(p->fidx);
	free(p->ht_ids);
	free(p->ht_idx);
	*p = (struct profile){};
}

static size_t ht_slot(const struct profile *p, int64_t id)
{
	uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ULL;

	return (size_t)(h >> 32) & (p->ht_cap - 1);
}

static int ht_grow(struct profile *p)
{
	size_t cap = p->ht_cap ? p->ht_cap * 2 : 1024;
	_cleanup_free_ int64_t *ids = calloc(cap, sizeof(*ids));
	_cleanup_free_ size_t *idx = calloc(cap, sizeof(*idx));
	int64_t *old_ids = p->ht_ids;
	size_t *old_idx = p->ht_idx, old_cap = p->ht_cap;

	if (!ids || !idx)
		return -ENOMEM;
	p->ht_ids = TAKE_PTR(ids);
	p->ht_idx = TAKE_PTR(idx);
	p->ht_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		size_t s;

		if (!old_idx[i])
			continue;
		for (s = ht_slot(p, old_ids[i]); p->ht_idx[s]; s = (s + 1) & (cap - 1))
			;
		p->ht_ids[s] = old_ids[i];
		p->ht_idx[s] = old_idx[i];
	}
	free(old_ids);
	free(old_idx);
	return 0;
}

/* Index into p->frames of frame @id, adding an empty entry if new. Returns >= 0 or -ENOMEM. */
static int64_t profile__frame_index(struct profile *p, int64_t id)
{
	size_t s;
	int r;

	/* At most half full, so the probe always ends at a free slot. */
	if (p->ht_cap / 2 <= p->n_frames) {
		r = ht_grow(p);
		if (r < 0)
			return r;
	}
	for (s = ht_slot(p, id); p->ht_idx[s]; s = (s + 1) & (p->ht_cap - 1))
		if (p->ht_ids[s] == id)
			return (int64_t)p->ht_idx[s] - 1;
	r = grow((void **)&p->frames, &p->cap_frames, p->n_frames + 1, sizeof(*p->frames));
	if (r < 0)
		return r;
	p->frames[p->n_frames] = (struct qframe){.id = id};
	p->ht_ids[s] = id;
	p->ht_idx[s] = ++p->n_frames;
	return (int64_t)p->n_frames - 1;
}

/* strdup() of column @i, NULL for SQL NULL. Returns 0 or -ENOMEM. */
static int col_strdup(sqlite3_stmt *st, int i, char **ret)
{
	const char *s;

	*ret = NULL;
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return 0;
	s = (const char *)sqlite3_column_text(st, i);
	if (!s)
		return -ENOMEM;
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/* Fills @f (its id set) from the frames table; -EIO if the row is missing. */
static int qframe_load(sqlite3_stmt *st, struct qframe *f)
{
	const char *base;
	int r;

	sqlite3_reset(st);
	r = stmt_bind_int64(st, 1, f->id);
	if (r < 0)
		return r;
	r = stmt_step(st);
	if (r < 0)
		return r;
	if (r == 0)
		return -EIO; /* stack_frames/frame_ids name a frame that does not exist */
	f->kernel = sqlite3_column_bytes(st, 0) == 6 &&
		    memcmp(sqlite3_column_text(st, 0), "kernel", 6) == 0;
	f->rel_addr = sqlite3_column_int64(st, 2);
	f->inlined = sqlite3_column_int64(st, 6) > 0;
	r = col_strdup(st, 1, &f->module);
	if (r >= 0)
		r = col_strdup(st, 3, &f->function);
	if (r < 0)
		return r;
	if (!f->module) {
		f->module = strdup(""); /* NOT NULL in the schema; be safe anyway */
		if (!f->module)
			return -ENOMEM;
	}
	if (f->function) {
		r = col_strdup(st, 4, &f->file);
		if (r < 0)
			return r;
		f->has_line = sqlite3_column_type(st, 5) != SQLITE_NULL;
		f->line = sqlite3_column_int64(st, 5);
		f->name = strdup(f->function);
		return f->name ? 0 : -ENOMEM;
	}
	base = strrchr(f->module, '/');
	base = base ? base + 1 : f->module;
	/* Kernel addresses are stored as int64 and print as the unsigned address. */
	if (asprintf(&f->name, "%s+0x%" PRIx64, base, (uint64_t)f->rel_addr) < 0) {
		f->name = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Grouping order: symbolized frames by (function, module), unsymbolized by (module, rel_addr). */
static int qframe_cmp_group(const void *a, const void *b, void *arg)
{
	const struct qframe *frames = arg;
	const struct qframe *x = &frames[*(const size_t *)a], *y = &frames[*(const size_t *)b];
	int c;

	if (!x->function != !y->function)
		return x->function ? -1 : 1;
	if (x->function) {
		c = strcmp(x->function, y->function);
		if (c)
			return c;
	}
	c = strcmp(x->module, y->module);
	if (c || x->function)
		return c;
	return (x->rel_addr > y->rel_addr) - (x->rel_addr < y->rel_addr);
}

/* Whether frame @a should be a group's representative rather than @b. */
static bool qframe_better_rep(const struct qframe *a, const struct qframe *b)
{
	if (a->self != b->self)
		return a->self > b->self;
	if (!a->file != !b->file)
		return a->file != NULL;
	return a->id < b->id;
}

/*
 * Loads the stacks of @session_id that have samples, their frames, and the
 * functions (groups) with self and total samples. -EIO on an SQLite error or
 * an inconsistent store (a sample of a missing stack, a frame_ids blob whose
 * length is not a multiple of 8, a missing frame).
 */
static int profile__load(struct profile *p, sqlite3 *db, int64_t session_id, const char *table,
			 const struct window_bounds *wb)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ size_t *order = NULL;
	_cleanup_free_ char *sql = NULL;
	int r;

	/* The samples primary key starts with session_id; each stack once, with its sum. */
	if (asprintf(&sql,
		     "SELECT st.stack_id, st.n, s.frame_ids IS NULL, s.frame_ids"
		     " FROM (SELECT stack_id, sum(count) AS n FROM %s"
		     "       WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3"
		     "       GROUP BY stack_id) st"
		     " LEFT JOIN stacks s ON s.id = st.stack_id",
		     table) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = stmt_prepare(db, sql, &st);
	if (r < 0)
		return r;
	r = stmt_bind_int64(st, 1, session_id);
	if (r >= 0)
		r = window_bounds__bind(wb, st, 2);
	if (r < 0)
		return r;
	while ((r = stmt_step(st)) > 0) {
		const unsigned char *blob;
		size_t len, depth;
		struct qstack *s;

		if (sqlite3_column_int(st, 2))
			return -EIO;
		blob = sqlite3_column_blob(st, 3);
		len = (size_t)sqlite3_column_bytes(st, 3);
		if (len % 8 != 0 || (len > 0 && !blob))
			return len % 8 ? -EIO : -ENOMEM;
		depth = len / 8;
		r = grow((void **)&p->stacks, &p->cap_stacks, p->n_stacks + 1, sizeof(*p->stacks));
		if (r < 0)
			return r;
		r = grow((void **)&p->fidx, &p->cap_fidx, p->n_fidx + depth, sizeof(*p->fidx));
		if (r < 0)
			return r;
		s = &p->stacks[p->n_stacks++];
		*s = (struct qstack){
		    .id = sqlite3_column_int64(st, 0),
		    .n = sqlite3_column_int64(st, 1),
		    .off = p->n_fidx,
		    .len = depth,
		};
		for (size_t i = 0; i < depth; i++) {
			uint64_t v = 0;

			/* Little-endian int64s, whatever the host's byte order. */
			for (int b = 7; b >= 0; b--)
				v = (v << 8) | blob[i * 8 + (size_t)b];
			p->fidx[p->n_fidx++] = (int64_t)v;
		}
	}
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));

	/* Frame ids to frame indexes, and each frame's self samples. */
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct qstack *s = &p->stacks[i];

		for (size_t j = 0; j < s->len; j++) {
			int64_t k = profile__frame_index(p, p->fidx[s->off + j]);

			if (k < 0)
				return (int)k;
			p->fidx[s->off + j] = k;
		}
		if (s->len > 0)
			p->frames[p->fidx[s->off]].self += s->n;
	}

	r = stmt_prepare(
	    db, "SELECT kind, module, rel_addr, function, file, line, inline_depth FROM frames WHERE id = ?1",
	    &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < p->n_frames; i++) {
		r = qframe_load(st, &p->frames[i]);
		if (r < 0)
			return r;
	}

	/* Groups: sort frame indexes by the grouping key; runs of equal keys are one group. */
	if (p->n_frames == 0)
		return 0;
	order = reallocarray(NULL, p->n_frames, sizeof(*order));
	p->groups = reallocarray(NULL, p->n_frames, sizeof(*p->groups));
	if (!order || !p->groups)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_frames; i++)
		order[i] = i;
	qsort_r(order, p->n_frames, sizeof(*order), qframe_cmp_group, p->frames);
	for (size_t i = 0; i < p->n_frames; i++) {
		struct qframe *f = &p->frames[order[i]];
		struct qgroup *g;

		if (i == 0 || qframe_cmp_group(&order[i - 1], &order[i], p->frames) != 0)
			p->groups[p->n_groups++] = (struct qgroup){.rep = order[i]};
		g = &p->groups[p->n_groups - 1];
		f->group = p->n_groups - 1;
		g->self += f->self;
		if (qframe_better_rep(f, &p->frames[g->rep]))
			g->rep = order[i];
	}

	/* Totals: each stack counts once per group it holds, however often (recursion). */
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct qstack *s = &p->stacks[i];

		for (size_t j = 0; j < s->len; j++) {
			struct qgroup *g = &p->groups[p->frames[p->fidx[s->off + j]].group];

			if (g->stamp != i + 1) {
				g->stamp = i + 1;
				g->total += s->n;
			}
		}
	}
	return 0;
}

/* A frame as JSON: function (display name), module, file, line, and kind if @with_kind. */
static json_t *qframe_json(const struct qframe *f, bool with_kind)
{
	_cleanup_json_ json_t *o = json_object();
	int fail = 0;

	if (!o)
		return NULL;
	fail |= json_object_set_new(o, "function", json_text(f->name, strlen(f->name)));
	fail |= json_object_set_new(o, "module", json_text(f->module, strlen(f->module)));
	fail |= json_object_set_new(o, "file",
				    f->file ? json_text(f->file, strlen(f->file)) : json_null());
	fail |= json_object_set_new(o, "line", f->has_line ? json_integer(f->line) : json_null());
	if (with_kind) {
		fail |= json_object_set_new(o, "kind", json_string(f->kernel ? "kernel" : "user"));
		fail |= json_object_set_new(o, "inlined", json_boolean(f->inlined));
	}
	return fail ? NULL : TAKE_PTR(o);
}

/* Top order: self desc, total desc, then name, module and address for a stable result. */
static int qgroup_cmp_top(const void *a, const void *b, void *arg)
{
	const struct qframe *frames = arg;
	const struct qgroup *x = a, *y = b;
	const struct qframe *fx = &frames[x->rep], *fy = &frames[y->rep];
	int c;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	c = strcmp(fx->name, fy->name);
	if (c)
		return c;
	c = strcmp(fx->module, fy->module);
	if (c)
		return c;
	return (fx->rel_addr > fy->rel_addr) - (fx->rel_addr < fy->rel_addr);
}

/*
 * report_load() - what top and hotpaths both start with: the report head of
 * @event's samples (report_head()) with an empty array @list in it
 * (*@ret_arr, owned by *@ret_o), and the session's stacks loaded into @p.
 * Returns 0, or the -errno of samples_table(), report_head() or
 * profile__load(); *@ret_o is then set only if the head was built.
 */
static int report_load(sqlite3 *db, int64_t session_id, const char *event,
		       const struct query_range *range, const char *list, json_t **ret_o,
		       json_t **ret_arr, int64_t *ret_total, struct profile *p)
{
	struct window_bounds wb;
	const char *table;
	int r;

	r = window_bounds__get(db, session_id, range, &wb);
	if (r < 0)
		return r;
	r = samples_table(db, session_id, event, &table);
	if (r < 0)
		return r;
	r = report_head(db, session_id, table, &wb, ret_o, ret_total);
	if (r < 0)
		return r;
	if (json_object_set_new(*ret_o, list, json_array()) < 0)
		return -ENOMEM;
	*ret_arr = json_object_get(*ret_o, list);
	return profile__load(p, db, session_id, table, &wb);
}

/*
 * query__top() - the hottest functions of @session_id by self samples, as
 * the "top" response of docs/protocol.md.
 * @limit: number of functions, >= 1 (the protocol allows 1..10000).
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * A function is (function, module); each unsymbolized address is its own
 * entry named "<module basename>+0x<hex>", with file and line null. Self
 * samples: samples whose leaf frame is in the function; total: samples whose
 * stack holds it at least once (recursion counts once). Ties in self samples
 * go by total samples, then name. file/line are those of the function's
 * address with the most self samples. Percentages are of total_samples (the
 * sum of the session's samples rows), one decimal.
 * Returns 0, -ENOENT for an unknown session, -EINVAL if @limit < 1, -EIO on
 * an SQLite error or an inconsistent store, -ENOMEM. Allocates memory linear
 * in the frames of all the session's stacks (about 0.5 s and 60 MB for 1e5
 * stacks of depth 30); does not log.
 */
int query__top(sqlite3 *db, int64_t session_id, int limit, const char *event,
	       const struct query_range *range, json_t **ret)
{
	_cleanup_(snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_(profile__free) struct profile p = {};
	_cleanup_json_ json_t *o = NULL;
	json_t *arr;
	int64_t total;
	int r;

	if (limit < 1)
		return -EINVAL;
	r = snapshot_begin(db);
	if (r < 0)
		return r;
	snap = db;
	r = report_load(db, session_id, event, range, "functions", &o, &arr, &total, &p);
	if (r < 0)
		return r;
	if (p.n_groups > 0)
		qsort_r(p.groups, p.n_groups, sizeof(*p.groups), qgroup_cmp_top, p.frames);
	for (size_t i = 0; i < p.n_groups && i < (size_t)limit; i++) {
		const struct qgroup *g = &p.groups[i];
		json_t *f = qframe_json(&p.frames[g->rep], false);
		int fail = 0;

		if (json_array_append_new(arr, f) < 0)
			return -ENOMEM;
		fail |= json_object_set_new(f, "self_samples", json_integer(g->self));
		fail |= json_object_set_new(f, "total_samples", json_integer(g->total));
		fail |= json_object_set_new(f, "self_pct", json_real(pct1(g->self, total)));
		fail |= json_object_set_new(f, "total_pct", json_real(pct1(g->total, total)));
		if (fail)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(o);
	return 0;
}

/* A run of stacks with the same sequence of groups. */
struct path {
	uint64_t hash;	 /* of the group sequence */
	size_t stack;	 /* first stack of the run, whose sequence is compared */
	int64_t samples; /* sum over the merged stacks */
	size_t best;	 /* heaviest merged stack: its frames are reported */
};

static uint64_t hash_mix(uint64_t h, uint64_t v)
{
	/* splitmix64's finalizer over the running hash. */
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

/* Orders paths so that equal group sequences are adjacent. @arg: the profile. */
static int path_cmp_seq(const void *a, const void *b, void *arg)
{
	const struct profile *p = arg;
	const struct path *x = a, *y = b;
	const struct qstack *sx = &p->stacks[x->stack], *sy = &p->stacks[y->stack];

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (sx->len != sy->len)
		return sx->len < sy->len ? -1 : 1;
	for (size_t i = 0; i < sx->len; i++) {
		size_t gx = p->frames[p->fidx[sx->off + i]].group;
		size_t gy = p->frames[p->fidx[sy->off + i]].group;

		if (gx != gy)
			return gx < gy ? -1 : 1;
	}
	return 0;
}

/* Hottest first; ties by the lowest stack id of the reported stack, so output is stable. */
static int path_cmp_samples(const void *a, const void *b, void *arg)
{
	const struct profile *p = arg;
	const struct path *x = a, *y = b;
	int64_t ix = p->stacks[x->best].id, iy = p->stacks[y->best].id;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return (ix > iy) - (ix < iy);
}

/*
 * query__hotpaths() - the hottest call stacks of @session_id, as the
 * "hotpaths" response of docs/protocol.md.
 * @limit: number of paths, >= 1 (the protocol allows 1..10000).
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Stacks whose frames map to the same sequence of functions (as top groups
 * them: function and module, or one unsymbolized address) are one path; its
 * frames, leaf first, are those of its heaviest stack (so file/line are that
 * stack's call sites). A stack with no frames at all is an empty path. Ties
 * go to the lowest stack id. Besides the protocol's fields, "event" is
 * included as in top. Returns 0, -ENOENT for an unknown session, -EINVAL if
 * @limit < 1, -EIO on an SQLite error or an inconsistent store, -ENOMEM.
 * Allocates memory linear in the frames of all the session's stacks; does
 * not log.
 */
int query__hotpaths(sqlite3 *db, int64_t session_id, int limit, const char *event,
		    const struct query_range *range, json_t **ret)
{
	_cleanup_(snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_(profile__free) struct profile p = {};
	_cleanup_json_ json_t *o = NULL;
	_cleanup_free_ struct path *paths = NULL;
	size_t n_paths = 0;
	json_t *arr;
	int64_t total;
	int r;

	if (limit < 1)
		return -EINVAL;
	r = snapshot_begin(db);
	if (r < 0)
		return r;
	snap = db;
	r = report_load(db, session_id, event, range, "paths", &o, &arr, &total, &p);
	if (r < 0)
		return r;
	if (p.n_stacks > 0) {
		paths = reallocarray(NULL, p.n_stacks, sizeof(*paths));
		if (!paths)
			return -ENOMEM;
	}
	for (size_t i = 0; i < p.n_stacks; i++) {
		const struct qstack *s = &p.stacks[i];
		uint64_t h = 0;

		for (size_t j = 0; j < s->len; j++)
			h = hash_mix(h, p.frames[p.fidx[s->off + j]].group);
		paths[i] = (struct path){.hash = h, .stack = i, .samples = s->n, .best = i};
	}

	/* Merge equal sequences: sort them together, then fold each run into its first. */
	if (p.n_stacks > 0)
		qsort_r(paths, p.n_stacks, sizeof(*paths), path_cmp_seq, &p);
	for (size_t i = 0; i < p.n_stacks; i++) {
		struct path *into = n_paths > 0 ? &paths[n_paths - 1] : NULL;
		const struct qstack *s = &p.stacks[paths[i].stack], *b;

		if (!into || path_cmp_seq(into, &paths[i], &p) != 0) {
			paths[n_paths++] = paths[i];
			continue;
		}
		into->samples += s->n;
		b = &p.stacks[into->best];
		if (s->n > b->n || (s->n == b->n && s->id < b->id))
			into->best = paths[i].stack;
	}
	if (n_paths > 0)
		qsort_r(paths, n_paths, sizeof(*paths), path_cmp_samples, &p);

	for (size_t i = 0; i < n_paths && i < (size_t)limit; i++) {
		const struct qstack *s = &p.stacks[paths[i].best];
		json_t *path = json_object(), *frames = json_array();
		int fail = 0;

		if (json_array_append_new(arr, path) < 0) {
			json_decref(frames);
			return -ENOMEM;
		}
		fail |= json_object_set_new(path, "samples", json_integer(paths[i].samples));
		fail |= json_object_set_new(path, "pct", json_real(pct1(paths[i].samples, total)));
		fail |= json_object_set_new(path, "frames", frames);
		if (fail)
			return -ENOMEM;
		for (size_t j = 0; j < s->len; j++)
			if (json_array_append_new(
				frames, qframe_json(&p.frames[p.fidx[s->off + j]], true)) < 0)
				return -ENOMEM;
	}
	*ret = TAKE_PTR(o);
	return 0;
}

struct thread_row {
	int64_t tid;
	int64_t samples;
};

/*
 * query__threads() - samples per thread of @session_id and how evenly they
 * are spread, as the "threads" response of docs/protocol.md.
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Samples come from the samples table (so they add up to top's
 * total_samples). Threads of the threads table without samples are listed
 * with 0; a tid with samples but no threads row is listed with name null.
 * Sorted by samples descending, then tid. The imbalance figures cover the
 * threads with samples: mean_samples (1 decimal), max_over_mean and cv
 * (population standard deviation / mean; 2 decimals); they and the
 * straggler (busiest thread, lowest tid on a tie) are null with no samples.
 * Returns 0, -ENOENT for an unknown session, -EIO on an SQLite error,
 * -ENOMEM. Allocates; does not log.
 */
int query__threads(sqlite3 *db, int64_t session_id, json_t **ret)
{
	_cleanup_(snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL, *imb = NULL, *straggler_name = NULL;
	_cleanup_free_ struct thread_row *rows = NULL;
	size_t n_rows = 0, cap_rows = 0, busy = 0;
	json_t *arr;
	int64_t total = 0, max_n = 0, straggler_tid = 0;
	double mean, var = 0.0;
	int fail = 0, r;

	r = snapshot_begin(db);
	if (r < 0)
		return r;
	snap = db;
	r = stmt_prepare(db, "SELECT 1 FROM sessions WHERE id = ?1", &st);
	if (r < 0)
		return r;
	r = stmt_bind_int64(st, 1, session_id);
	if (r < 0)
		return r;
	r = stmt_step(st);
	if (r < 0)
		return r;
	if (r == 0)
		return -ENOENT;
	sqlite3_finalize(TAKE_PTR(st));

	r = stmt_prepare(db,
			 "WITH s(tid, n) AS ("
			 "  SELECT tid, sum(count) FROM samples WHERE session_id = ?1 GROUP BY tid)"
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
	r = stmt_bind_int64(st, 1, session_id);
	if (r < 0)
		return r;

	o = json_object();
	imb = json_object();
	if (!o || !imb)
		return -ENOMEM;
	fail |= json_object_set_new(o, "session", json_integer(session_id));
	fail |= json_object_set_new(o, "total_samples", json_integer(0)); /* set below */
	fail |= json_object_set_new(o, "threads", json_array());
	if (fail)
		return -ENOMEM;
	arr = json_object_get(o, "threads");

	/* Rows go to JSON as they come; share_pct needs the total, so it is filled after. */
	while ((r = stmt_step(st)) > 0) {
		int64_t n = sqlite3_column_int64(st, 2);
		json_t *t = json_object();

		if (json_array_append_new(arr, t) < 0)
			return -ENOMEM;
		fail |= json_object_set_new(t, "tid", json_col_int(st, 0));
		fail |= json_object_set_new(t, "name", json_col_text(st, 1));
		fail |= json_object_set_new(t, "pid", json_col_int(st, 3));
		fail |= json_object_set_new(t, "exited_at_ns", json_col_int(st, 4));
		fail |= json_object_set_new(t, "samples", json_integer(n));
		if (fail)
			return -ENOMEM;
		r = grow((void **)&rows, &cap_rows, n_rows + 1, sizeof(*rows));
		if (r < 0)
			return r;
		rows[n_rows++] =
		    (struct thread_row){.tid = sqlite3_column_int64(st, 0), .samples = n};
		total += n;
		if (n > 0)
			busy++;
		/* Sorted by samples, then tid: the first row is the straggler. */
		if (n_rows == 1 && n > 0) {
			max_n = n;
			straggler_tid = rows[0].tid;
			straggler_name = json_col_text(st, 1);
			if (!straggler_name)
				return -ENOMEM;
		}
	}
	if (r < 0)
		return r;

	for (size_t i = 0; i < n_rows; i++)
		fail |= json_object_set_new(json_array_get(arr, i), "share_pct",
					    json_real(pct1(rows[i].samples, total)));
	fail |= json_object_set_new(o, "total_samples", json_integer(total));

	fail |= json_object_set_new(imb, "threads", json_integer((json_int_t)busy));
	if (busy == 0) {
		fail |= json_object_set_new(imb, "mean_samples", json_null());
		fail |= json_object_set_new(imb, "max_samples", json_null());
		fail |= json_object_set_new(imb, "max_over_mean", json_null());
		fail |= json_object_set_new(imb, "cv", json_null());
		fail |= json_object_set_new(imb, "straggler_tid", json_null());
		fail |= json_object_set_new(imb, "straggler_name", json_null());
	} else {
		mean = (double)total / (double)busy;
		for (size_t i = 0; i < n_rows; i++)
			if (rows[i].samples > 0)
				var += ((double)rows[i].samples - mean) *
				       ((double)rows[i].samples - mean);
		var /= (double)busy;
		fail |=
		    json_object_set_new(imb, "mean_samples", json_real(round(mean * 10.0) / 10.0));
		fail |= json_object_set_new(imb, "max_samples", json_integer(max_n));
		fail |= json_object_set_new(imb, "max_over_mean",
					    json_real(round2((double)max_n / mean)));
		fail |= json_object_set_new(imb, "cv", json_real(round2(sqrt(var) / mean)));
		fail |= json_object_set_new(imb, "straggler_tid", json_integer(straggler_tid));
		fail |= json_object_set_new(imb, "straggler_name", TAKE_PTR(straggler_name));
	}
	fail |= json_object_set_new(o, "imbalance", TAKE_PTR(imb));
	if (fail)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}

/* Sorted distinct int64s, for id -> index lookups by binary search. */
struct idset {
	int64_t *v;
	size_t n, cap;
};

static int idset__add(struct idset *s, int64_t id)
{
	int r = grow((void **)&s->v, &s->cap, s->n + 1, sizeof(*s->v));

	if (r < 0)
		return r;
	s->v[s->n++] = id;
	return 0;
}

static int int64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void idset__seal(struct idset *s)
{
	size_t k = 0;

	if (s->n == 0)
		return;
	qsort(s->v, s->n, sizeof(*s->v), int64_cmp);
	for (size_t i = 0; i < s->n; i++)
		if (k == 0 || s->v[k - 1] != s->v[i])
			s->v[k++] = s->v[i];
	s->n = k;
}

/* Index of @id in the sealed @s; -1 if absent. */
static ssize_t idset__index(const struct idset *s, int64_t id)
{
	const int64_t *p = s->n ? bsearch(&id, s->v, s->n, sizeof(*s->v), int64_cmp) : NULL;

	return p ? p - s->v : -1;
}

static void idset__free(struct idset *s)
{
	free(s->v);
	*s = (struct idset){};
}

/* Decodes a stacks.frame_ids blob (little-endian int64s) into @ids. -EIO if malformed. */
static int frame_ids_decode(const unsigned char *blob, size_t len, struct idset *ids)
{
	if (len % 8 != 0 || (len > 0 && !blob))
		return -EIO;
	for (size_t i = 0; i < len / 8; i++) {
		uint64_t v = 0;
		int r;

		for (int b = 7; b >= 0; b--)
			v = (v << 8) | blob[i * 8 + (size_t)b];
		r = idset__add(ids, (int64_t)v);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Steps @st (one parameter, ?1) to the row of @id: 0, -EIO if there is none, -errno. */
static int stmt_lookup(sqlite3_stmt *st, int64_t id)
{
	int r;

	sqlite3_reset(st);
	r = stmt_bind_int64(st, 1, id);
	if (r >= 0)
		r = stmt_step(st);
	return r < 0 ? r : r == 0 ? -EIO : 0;
}

/* Runs @sql (?1 = @session_id) and appends one object per row to @arr, keyed by @keys. */
static int rows_json(sqlite3 *db, const char *sql, int64_t session_id, const char *const *keys,
		     json_t *arr)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	r = stmt_prepare(db, sql, &st);
	if (r < 0)
		return r;
	r = stmt_bind_int64(st, 1, session_id);
	if (r < 0)
		return r;
	while ((r = stmt_step(st)) > 0) {
		json_t *o = json_object();

		if (json_array_append_new(arr, o) < 0)
			return -ENOMEM;
		for (int i = 0; keys[i]; i++) {
			json_t *v = sqlite3_column_type(st, i) == SQLITE_TEXT ? json_col_text(st, i)
									      : json_col_int(st, i);

			if (json_object_set_new(o, keys[i], v) < 0)
				return -ENOMEM;
		}
	}
	return r;
}

/*
 * query__profile() - the raw profile of @session_id for exporters: the
 * "profile" response of docs/protocol.md. Its frames (each once, with
 * module, build ID, ELF address, inline flag, function, file, line), its
 * call stacks as lists of frame indexes (leaf first), and the samples as
 * [stack index, tid, window start in ns from the session start, count]
 * rows, with the threads, the mappings, the sample period and the report
 * head of top (loss counters, total_samples). @per_window false sums each
 * stack's samples per thread over the windows (the window is then the
 * first one it was seen in).
 * @event: NULL for the CPU samples, else the second sampled event's name.
 * @range: NULL for the whole session, else the windows it overlaps.
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Returns 0, -ENOENT for an unknown session, -ENODATA/-EOPNOTSUPP as
 * query__top() for @event, -EIO on an SQLite error or an inconsistent store,
 * -ENOMEM. Allocates memory linear in the session's rows; does not log.
 */
int query__profile(sqlite3 *db, int64_t session_id, const char *event,
		   const struct query_range *range, bool per_window, json_t **ret)
{
	static const char *const thread_keys[] = { "tid", "pid", "name", NULL };
	static const char *const mapping_keys[] = { "pid",	   "start", "end", "file_offset",
						    "path", "build_id", NULL };
	_cleanup_(snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	_cleanup_(idset__free) struct idset stack_ids = {}, frame_ids = {};
	_cleanup_free_ char *sql = NULL;
	struct window_bounds wb;
	json_t *samples, *stacks, *frames, *arr;
	const char *table;
	int64_t total, start = 0;
	uint64_t period = 0;
	int fail = 0, r;

	r = snapshot_begin(db);
	if (r < 0)
		return r;
	snap = db;
	r = window_bounds__get(db, session_id, range, &wb);
	if (r >= 0)
		r = samples_table(db, session_id, event, &table);
	if (r >= 0)
		r = report_head(db, session_id, table, &wb, &o, &total);
	if (r < 0)
		return r;

	/* The period of one sample: ns of CPU time for cpu-clock, events for the others. */
	r = stmt_row(db, "SELECT started_at_ns, freq_hz FROM sessions WHERE id = ?1", session_id,
		     &st);
	if (r < 0)
		return r;
	start = sqlite3_column_int64(st, 0);
	if (!event && sqlite3_column_int64(st, 1) > 0)
		period = NSEC_PER_SEC / (uint64_t)sqlite3_column_int64(st, 1);
	else if (event)
		sampled_event_lookup(event, NULL, NULL, &period);
	fail |= json_object_set_new(o, "period", json_integer((json_int_t)period));
	fail |= json_object_set_new(o, "period_unit",
				    json_string(event ? "events" : "nanoseconds"));
	fail |= json_object_set_new(o, "started_at_ns", json_integer(start));
	fail |= json_object_set_new(o, "samples", samples = json_array());
	fail |= json_object_set_new(o, "stacks", stacks = json_array());
	fail |= json_object_set_new(o, "frames", frames = json_array());
	fail |= json_object_set_new(o, "threads", json_array());
	fail |= json_object_set_new(o, "mappings", json_array());
	if (fail)
		return -ENOMEM;
	sqlite3_finalize(TAKE_PTR(st));

	/* @table is one of two constant names (samples_table()), never user input. */
	if (asprintf(&sql,
		     per_window ? "SELECT stack_id, tid, window_ns - ?4, count FROM %s"
				  " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3"
				  " ORDER BY window_ns, tid, stack_id"
				/* Summed over the windows: far fewer rows for a long session. */
				: "SELECT stack_id, tid, min(window_ns) - ?4, sum(count) FROM %s"
				  " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3"
				  " GROUP BY tid, stack_id ORDER BY 3, tid, stack_id",
		     table) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = stmt_prepare(db, sql, &st);
	if (r >= 0)
		r = stmt_bind_int64(st, 1, session_id);
	if (r >= 0)
		r = window_bounds__bind(&wb, st, 2);
	if (r >= 0)
		r = stmt_bind_int64(st, 4, start);
	if (r < 0)
		return r;
	/* Rows first with the stack id in place of its index, rewritten below. */
	while ((r = stmt_step(st)) > 0) {
		json_t *row = json_pack("[I,I,I,I]", (json_int_t)sqlite3_column_int64(st, 0),
					(json_int_t)sqlite3_column_int64(st, 1),
					(json_int_t)sqlite3_column_int64(st, 2),
					(json_int_t)sqlite3_column_int64(st, 3));

		if (json_array_append_new(samples, row) < 0)
			return -ENOMEM;
		r = idset__add(&stack_ids, sqlite3_column_int64(st, 0));
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));
	idset__seal(&stack_ids);
	{
		size_t i;
		json_t *row;

		json_array_foreach(samples, i, row)
		{
			ssize_t k = idset__index(&stack_ids,
						 json_integer_value(json_array_get(row, 0)));

			if (json_array_set_new(row, 0, json_integer(k)) < 0)
				return -ENOMEM;
		}
	}

	/* Each stack's frame ids, kept in "stacks" until the frames are numbered. */
	r = stmt_prepare(db, "SELECT frame_ids FROM stacks WHERE id = ?1", &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < stack_ids.n; i++) {
		_cleanup_(idset__free) struct idset ids = {};
		json_t *list = json_array();

		if (json_array_append_new(stacks, list) < 0)
			return -ENOMEM;
		r = stmt_lookup(st, stack_ids.v[i]); /* -EIO: a sample of a missing stack */
		if (r < 0)
			return r;
		r = frame_ids_decode(sqlite3_column_blob(st, 0),
				     (size_t)sqlite3_column_bytes(st, 0), &ids);
		if (r < 0)
			return r;
		for (size_t j = 0; j < ids.n; j++) {
			if (json_array_append_new(list, json_integer(ids.v[j])) < 0)
				return -ENOMEM;
			r = idset__add(&frame_ids, ids.v[j]);
			if (r < 0)
				return r;
		}
	}
	sqlite3_finalize(TAKE_PTR(st));
	idset__seal(&frame_ids);
	{
		size_t i, j;
		json_t *list, *id;

		json_array_foreach(stacks, i, list)
		{
			json_array_foreach(list, j, id)
			{
				ssize_t k = idset__index(&frame_ids, json_integer_value(id));

				if (json_integer_set(id, k) < 0)
					return -EIO;
			}
		}
	}

	r = stmt_prepare(db,
			 "SELECT kind, module, build_id, rel_addr, inline_depth, function, file,"
			 " line FROM frames WHERE id = ?1",
			 &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < frame_ids.n; i++) {
		json_t *f = json_object();
		char addr[32];

		if (json_array_append_new(frames, f) < 0)
			return -ENOMEM;
		r = stmt_lookup(st, frame_ids.v[i]); /* -EIO: a stack names a missing frame */
		if (r < 0)
			return r;
		/* A hex string: kernel addresses do not fit a signed JSON integer. */
		snprintf(addr, sizeof(addr), "0x%" PRIx64, (uint64_t)sqlite3_column_int64(st, 3));
		fail |= json_object_set_new(f, "function", json_col_text(st, 5));
		fail |= json_object_set_new(f, "module", json_col_text(st, 1));
		fail |= json_object_set_new(f, "build_id", json_col_text(st, 2));
		fail |= json_object_set_new(f, "address", json_string(addr));
		fail |= json_object_set_new(f, "file", json_col_text(st, 6));
		fail |= json_object_set_new(f, "line", json_col_int(st, 7));
		fail |= json_object_set_new(f, "kind", json_col_text(st, 0));
		fail |= json_object_set_new(f, "inlined", json_boolean(sqlite3_column_int64(st, 4) > 0));
		if (fail)
			return -ENOMEM;
	}
	sqlite3_finalize(TAKE_PTR(st));

	arr = json_object_get(o, "threads");
	r = rows_json(db,
		      "SELECT tid, pid, name FROM threads WHERE session_id = ?1 ORDER BY tid",
		      session_id, thread_keys, arr);
	if (r < 0)
		return r;
	arr = json_object_get(o, "mappings");
	r = rows_json(db,
		      "SELECT pid, start_addr, end_addr, file_offset, path, build_id FROM mappings"
		      " WHERE session_id = ?1 ORDER BY pid, start_addr",
		      session_id, mapping_keys, arr);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(o);
	return 0;
}
