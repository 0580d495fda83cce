/*
 * report.c - what the reports share: statement helpers that map SQLite
 * errors to -errno, the read snapshot, JSON of columns, times and shares,
 * a session's time range in windows, and the head every report starts with.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>
#include <sqlite3.h>

#include "hashmap.h"
#include "protocol.h"
#include "report/query.h"
#include "report/report.h"
#include "service/request.h"
#include "store/sqlite_util.h"
#include "util.h"

int report__errno(int rc)
{
	return (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

int report__prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret)
{
	int rc;

	*ret = NULL;
	rc = sqlite3_prepare_v2(db, sql, -1, ret, NULL);
	return rc == SQLITE_OK ? 0 : report__errno(rc);
}

int report__bind_int64(sqlite3_stmt *st, int i, int64_t v)
{
	int rc = sqlite3_bind_int64(st, i, v);

	return rc == SQLITE_OK ? 0 : report__errno(rc);
}

/* sqlite3_step(): 1 for a row, 0 when done, -EIO/-ENOMEM on error. */
int report__step(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return report__errno(rc);
}

/*
 * report__step_row() - step @st to its first row: 0 on it, -ENOENT if there
 * is none, -EIO/-ENOMEM on error.
 */
int report__step_row(sqlite3_stmt *st)
{
	int r = report__step(st);

	return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

/*
 * report__row() - prepare @sql, bind @id to ?1 and step to the first row: 0
 * with *@ret on it, -ENOENT if there is none, -EIO/-ENOMEM on error.
 */
int report__row(sqlite3 *db, const char *sql, int64_t id, sqlite3_stmt **ret)
{
	int r = report__prepare(db, sql, ret);

	if (r >= 0)
		r = report__bind_int64(*ret, 1, id);
	return r < 0 ? r : report__step_row(*ret);
}

/*
 * report__lookup() - run @st again, a statement prepared with one
 * parameter, for @id (?1) and step to its row: 0 on it, -EIO if there is
 * none (the row of an id another row refers to must exist), -ENOMEM.
 */
int report__lookup(sqlite3_stmt *st, int64_t id)
{
	int r;

	sqlite3_reset(st);
	r = report__bind_int64(st, 1, id);
	if (r >= 0)
		r = report__step_row(st);
	return r == -ENOENT ? -EIO : r;
}

/*
 * A query reads with several statements; a savepoint makes them one read
 * transaction, so that totals and per-function counts come from the same
 * snapshot even while the daemon flushes a window (WAL). Outside a
 * transaction SAVEPOINT is a BEGIN DEFERRED; inside one it nests. Nothing is
 * written either way.
 *
 * report__snapshot_begin() - begin it on @db and set *@ret_snap to @db, for
 * the caller to end with report__snapshot_endp(@ret_snap) (a cleanup
 * attribute), also on its own failures. Returns 0, -EIO or -ENOMEM;
 * *@ret_snap is left as it is on failure.
 */
int report__snapshot_begin(sqlite3 *db, sqlite3 **ret_snap)
{
	int rc = sqlite3_exec(db, "SAVEPOINT profd_query", NULL, NULL, NULL);

	if (rc != SQLITE_OK)
		return report__errno(rc);
	*ret_snap = db;
	return 0;
}

void report__snapshot_endp(sqlite3 **db)
{
	if (*db)
		sqlite3_exec(*db, "RELEASE profd_query", NULL, NULL, NULL);
}

/*
 * A JSON string of @len bytes at @s. Names come from binaries and /proc and
 * need not be UTF-8, which json_stringn() refuses: then bytes >= 0x80 are
 * replaced by '?'. NULL only on out-of-memory.
 */
json_t *report__json_text(const char *s, size_t len)
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
json_t *report__col_text(sqlite3_stmt *st, int i)
{
	const char *s;

	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	s = (const char *)sqlite3_column_text(st, i);
	if (!s)
		return NULL; /* not NULL in SQL, so out of memory */
	return report__json_text(s, (size_t)sqlite3_column_bytes(st, i));
}

/* Column @i as a JSON integer, or null when SQL NULL. */
json_t *report__col_int(sqlite3_stmt *st, int i)
{
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return json_null();
	return json_integer(sqlite3_column_int64(st, i));
}

/* @ns (since the epoch) as "YYYY-MM-DDTHH:MM:SSZ", rounded down to the second. */
json_t *report__iso8601(int64_t ns)
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
json_t *report__seconds(int64_t ns)
{
	if (ns % (int64_t)NSEC_PER_SEC == 0)
		return json_integer(ns / (int64_t)NSEC_PER_SEC);
	return json_real((double)ns / (double)NSEC_PER_SEC);
}

/* @part as a percentage of @whole, one decimal; 0 when @whole is 0. */
double report__pct1(int64_t part, int64_t whole)
{
	if (whole <= 0)
		return 0.0;
	return round((double)part * 1000.0 / (double)whole) / 10.0;
}

double report__round2(double x)
{
	return round(x * 100.0) / 100.0;
}

/* Splits the comma-separated @s into a JSON array of its non-empty items, spaces trimmed. */
json_t *report__split_events(const char *s)
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
			fail |= json_array_append_new(a, report__json_text(b, (size_t)(e - b)));
		s = *end ? end + 1 : end;
	}
	return fail ? NULL : TAKE_PTR(a);
}

/* @part as a percentage of @whole, one decimal; null when @whole is 0. */
json_t *report__json_pct(int64_t part, int64_t whole)
{
	if (whole <= 0)
		return json_null();
	return json_real(round(1000.0 * (double)part / (double)whole) / 10.0);
}

/*
 * The "python" object of a session or report (docs/protocol.md) from the
 * PYTHON_COLUMNS starting at column @col; null for a session from before
 * schema 0012.
 */
json_t *report__python(sqlite3_stmt *st, int col)
{
	if (sqlite3_column_type(st, col) == SQLITE_NULL)
		return json_null();
	return json_pack("{s:o, s:o, s:o, s:o}", "status", report__col_text(st, col), "version",
			 report__col_text(st, col + 1), "samples", report__col_int(st, col + 2),
			 "unmerged", report__col_int(st, col + 3));
}

/*
 * Sets "python_frames" of the report @o: "all" with QUERY_PYTHON_ALL in
 * @flags, else "clean" (the Python view, python_frames.c). 0 or -ENOMEM.
 */
int report__python_frames(json_t *o, unsigned flags)
{
	const char *view = flags & QUERY_PYTHON_ALL ? "all" : "clean";

	return json_object_set_new(o, "python_frames", json_string(view)) < 0 ? -ENOMEM : 0;
}

static int64_t add_sat(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* @t (ns from the session's start, >= 0) rounded down, or up, to a multiple of @w. */
static int64_t round_to(int64_t t, int64_t w, bool up)
{
	int64_t down = t / w * w;

	return up && down < t ? add_sat(down, w) : down;
}

/*
 * Fills @wb for @range (NULL: everything): the windows that overlap the
 * range, each counted whole. Where the range reaches windows merged into
 * coarser ones (sessions.merged_until_ns), its ends are widened to the
 * merged windows that hold them; covered_*_ns say what was read. 1 s
 * windows are not assumed to start on the session's start (older profds
 * began them on whole seconds). -ENOENT for an unknown session.
 */
int window_bounds__get(sqlite3 *db, int64_t session_id, const struct query_range *range,
		       struct window_bounds *wb)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t start, merged, from, to;
	int r;

	*wb = (struct window_bounds){.lo = INT64_MIN, .hi = INT64_MAX, .range = range};
	if (!range)
		return 0;
	r = report__row(db,
			"SELECT started_at_ns, coalesce(merged_until_ns - started_at_ns, 0), "
			"       coalesce(merged_window_ns, 0) FROM sessions WHERE id = ?1",
			session_id, &st);
	if (r < 0)
		return r;
	start = sqlite3_column_int64(st, 0);
	merged = sqlite3_column_int64(st, 1);
	from = range->from_ns;
	to = range->to_ns;
	wb->resolution_ns = (int64_t)PROFD_WINDOW_NS;
	if (from < merged && sqlite3_column_int64(st, 2) > 0) {
		/* Merged windows start at started_at_ns + k * merged_window_ns. */
		wb->resolution_ns = sqlite3_column_int64(st, 2);
		from = round_to(MAX(from, 0), wb->resolution_ns, false);
		if (to < merged)
			to = round_to(to, wb->resolution_ns, true);
		wb->lo = add_sat(start, from);
	} else {
		/* 1 s windows: those that end after the range's start. */
		wb->lo = add_sat(add_sat(start, from), -(int64_t)PROFD_WINDOW_NS + 1);
	}
	wb->hi = add_sat(add_sat(start, to), -1);
	wb->covered_from_ns = from;
	wb->covered_to_ns = to;
	return 0;
}

/* Binds lo and hi to parameters @i and @i + 1. */
int window_bounds__bind(const struct window_bounds *wb, sqlite3_stmt *st, int i)
{
	int r = report__bind_int64(st, i, wb->lo);

	return r < 0 ? r : report__bind_int64(st, i + 1, wb->hi);
}

/*
 * report__prepare_range() - *@ret prepared from @sql, with @session_id
 * bound to ?1 and the window bounds of @wb to ?2 and ?3. Returns 0, -EIO or
 * -ENOMEM; *@ret is set (to finalize) even on a failed bind.
 */
int report__prepare_range(sqlite3 *db, const char *sql, int64_t session_id,
			  const struct window_bounds *wb, sqlite3_stmt **ret)
{
	int r = report__prepare(db, sql, ret);

	if (r >= 0)
		r = report__bind_int64(*ret, 1, session_id);
	if (r >= 0)
		r = window_bounds__bind(wb, *ret, 2);
	return r < 0 ? r : 0;
}

/*
 * Adds "from_s"/"to_s" (as asked) to @o when a range was asked for, and
 * what was read: "covered_from_s"/"covered_to_s" (the asked ends, widened
 * to whole merged windows where the range reaches them; null: to the end)
 * and "resolution_s" (the longest window read: 1, or the merged window
 * length). Returns 0 or -1 (out of memory).
 */
int window_bounds__json(const struct window_bounds *wb, json_t *o)
{
	const struct query_range *range = wb->range;
	int fail = 0;

	if (!range)
		return 0;
	fail |= json_object_set_new(o, "from_s", json_real((double)range->from_ns / 1e9));
	fail |= json_object_set_new(o, "to_s",
				    range->to_ns == INT64_MAX
					? json_null()
					: json_real((double)range->to_ns / 1e9));
	fail |= json_object_set_new(o, "covered_from_s",
				    json_real((double)wb->covered_from_ns / 1e9));
	fail |= json_object_set_new(o, "covered_to_s",
				    wb->covered_to_ns == INT64_MAX
					? json_null()
					: json_real((double)wb->covered_to_ns / 1e9));
	fail |= json_object_set_new(o, "resolution_s", json_real((double)wb->resolution_ns / 1e9));
	return fail;
}

/*
 * The samples table of @event: "samples" for the CPU event (NULL), else
 * "event_samples" after checking the session sampled @event: -ENODATA if it
 * did not ask for it, -EOPNOTSUPP if the machine could not sample it.
 */
int report__samples_table(sqlite3 *db, int64_t session_id, const char *event, const char **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	const char *name, *status;
	int r;

	*ret = "samples";
	if (!event)
		return 0;
	r = report__row(db,
			"SELECT sampled_event, sampled_event_status FROM sessions WHERE id = ?1",
			session_id, &st);
	if (r < 0)
		return r;
	name = (const char *)sqlite3_column_text(st, 0);
	status = (const char *)sqlite3_column_text(st, 1);
	if (!name || strcmp(name, event) != 0)
		return -ENODATA;
	if (!status || strcmp(status, "ok") != 0)
		return -EOPNOTSUPP;
	*ret = "event_samples";
	return 0;
}

/*
 * report__rows() - where to sum @table's samples (report__samples_table())
 * over @wb: over a whole session, its rollup (schema/0013: one row per
 * thread and stack, window_ns the first window); over a time range, the
 * windows themselves.
 */
const char *report__rows(const char *table, const struct window_bounds *wb)
{
	if (wb->range)
		return table;
	return strcmp(table, "samples") == 0 ? "sample_totals" : "event_sample_totals";
}

/*
 * report__head() - a new object (*@ret) with the fields every stack report
 * starts with: session, event, total_samples (@sums->total: the sum of the
 * counts of @table's rows over @wb, report__rows(), so that percentages add
 * up), root_samples (@sums->root: those of stacks that reached the root),
 * the loss counters of the sessions row, and from_s/to_s for a range.
 * *@ret_total gets total_samples. Returns 0, -ENOENT for an unknown
 * session, -EIO, -ENOMEM; *@ret untouched on failure.
 */
int report__head(sqlite3 *db, int64_t session_id, const char *table, const struct window_bounds *wb,
		 const struct report_sums *sums, json_t **ret, int64_t *ret_total)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	int fail = 0, r;

	/*
	 * The two sums are the caller's (@sums): it reads every row anyway, and
	 * two more scans of a 10-hour session's 320,000 rollup rows (one of
	 * them joined to stacks) were half of top's time.
	 */
	r = report__prepare(db,
			    "SELECT s.event, s.lost_samples, s.truncated_stacks,"
			    " s.missing_user_stacks, s.unsymbolized_frames, ?2, ?3,"
			    " s.frames, s.unwind, s.sampled_event, s.label, s.pid_start_ticks,"
			    " s.limit_dropped_samples, " PYTHON_COLUMNS
			    " FROM sessions s WHERE s.id = ?1",
			    &st);
	if (r >= 0)
		r = report__bind_int64(st, 1, session_id);
	if (r >= 0)
		r = report__bind_int64(st, 2, sums->total);
	if (r >= 0)
		r = report__bind_int64(st, 3, sums->root);
	if (r >= 0)
		r = report__step_row(st);
	if (r < 0)
		return r;

	o = json_object();
	if (!o)
		return -ENOMEM;
	fail |= json_object_set_new(o, "session", json_integer(session_id));
	/* The event these samples are of: the CPU event, or the second sampled event. */
	fail |=
	    json_object_set_new(o, "event", report__col_text(st, strcmp(table, "samples") ? 9 : 0));
	fail |= json_object_set_new(o, "total_samples", report__col_int(st, 5));
	fail |= json_object_set_new(o, "lost_samples", report__col_int(st, 1));
	fail |= json_object_set_new(o, "truncated_stacks", report__col_int(st, 2));
	fail |= json_object_set_new(o, "missing_user_stacks", report__col_int(st, 3));
	fail |= json_object_set_new(o, "unsymbolized_frames", report__col_int(st, 4));
	/* Columns of this statement, not of SESSION_COLUMNS (SC_*). */
	fail |= json_object_set_new(o, "label", report__col_text(st, 10));
	fail |= json_object_set_new(o, "pid_start_ticks", report__col_int(st, 11));
	fail |= json_object_set_new(o, "limit_dropped_samples", report__col_int(st, 12));
	fail |= json_object_set_new(
	    o, "unsymbolized_pct",
	    report__json_pct(sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 7)));
	fail |= json_object_set_new(o, "unwind", report__col_text(st, 8));
	fail |= json_object_set_new(o, "root_samples", report__col_int(st, 6));
	fail |= json_object_set_new(o, "python", report__python(st, 13));
	fail |= json_object_set_new(
	    o, "root_pct",
	    report__json_pct(sqlite3_column_int64(st, 6), sqlite3_column_int64(st, 5)));
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

/*
 * report__unsymbolized_name() - the name of an unsymbolized frame, as top
 * and hotpaths print it: @module's base name + the offset @rel_addr
 * ("libfoo.so+0x1a2f"), into @buf (@size bytes). Returns @buf.
 */
const char *report__unsymbolized_name(char *buf, size_t size, const char *module, int64_t rel_addr)
{
	const char *base = module ? strrchr(module, '/') : NULL;

	snprintf(buf, size, "%s+0x%llx",
		 base	  ? base + 1
		 : module ? module
			  : "?",
		 (unsigned long long)rel_addr);
	return buf;
}

/*
 * report__index_add() - the index of @id in @index (id_index__add()), with
 * room made for it in the array *@v that the caller keeps beside @index:
 * @n elements of @size bytes in use, *@cap allocated (grow_array()). If
 * *@ret_added, @id is new and its index is @n: the caller fills that
 * element and counts it. Returns >= 0, or -ENOMEM (nothing added; *@v may
 * have grown).
 */
long report__index_add(struct id_index *index, int64_t id, void **v, size_t *cap, size_t n,
		       size_t size, bool *ret_added)
{
	int r = grow_array(v, cap, n, size);

	if (r < 0)
		return r;
	return id_index__add(index, id, ret_added);
}

/*
 * report__prepare_id() - *@ret prepared from @sql with @id bound to ?1.
 * Returns 0 or -EIO.
 */
int report__prepare_id(sqlite3 *db, const char *sql, int64_t id, sqlite3_stmt **ret)
{
	if (sqlite3_prepare_v2(db, sql, -1, ret, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(*ret, 1, id);
	return 0;
}

/*
 * report__prepare_id_arg() - *@ret prepared from @sql with @id bound to ?1
 * and @arg to ?2. Returns 0 or -EIO.
 */
int report__prepare_id_arg(sqlite3 *db, const char *sql, int64_t id, int64_t arg,
			   sqlite3_stmt **ret)
{
	int r = report__prepare_id(db, sql, id, ret);

	if (r >= 0)
		sqlite3_bind_int64(*ret, 2, arg);
	return r;
}

/*
 * report__stack_frames() - the frames of @stack_id, leaf first, as JSON
 * objects {function, module, file, line, kind, inlined}; @fr is a statement
 * prepared from REPORT_STACK_FRAMES_SQL (reset and rebound here). The
 * frames of the BPF programs that took the stack, at its top, are left out.
 * NULL on out-of-memory or an SQLite error.
 */
json_t *report__stack_frames(sqlite3_stmt *fr, int64_t stack_id)
{
	json_t *arr = json_array();
	int rc;

	if (!arr)
		return NULL;
	sqlite3_reset(fr);
	sqlite3_bind_int64(fr, 1, stack_id);
	while ((rc = sqlite3_step(fr)) == SQLITE_ROW) {
		const char *fn = (const char *)sqlite3_column_text(fr, 0);

		/* Off-CPU stacks stored by an earlier profd were taken inside the
		 * sched_switch BPF program: its own frames and the tracepoint's
		 * (bpf_prog_*, bpf_trace_run*, __traceiter_*) sit on top of
		 * __schedule. They are not where the thread blocked. */
		if (json_array_size(arr) == 0 && fn &&
		    (strncmp(fn, "bpf_prog_", 9) == 0 || strncmp(fn, "bpf_trace_run", 13) == 0 ||
		     strncmp(fn, "__bpf_trace_", 12) == 0 || strncmp(fn, "__traceiter_", 12) == 0))
			continue;
		const char *module = (const char *)sqlite3_column_text(fr, 1);
		char name[512];
		json_t *o;

		if (!fn)
			fn = report__unsymbolized_name(name, sizeof(name), module,
						       sqlite3_column_int64(fr, 5));
		o = json_pack("{s:s, s:s?, s:s?, s:o, s:s, s:b}", "function", fn, "module", module,
			      "file", (const char *)sqlite3_column_text(fr, 2), "line",
			      sqlite3_column_type(fr, 3) == SQLITE_NULL
				  ? json_null()
				  : json_integer(sqlite3_column_int64(fr, 3)),
			      "kind", (const char *)sqlite3_column_text(fr, 4), "inlined",
			      sqlite3_column_int(fr, 6) > 0);
		if (!o || json_array_append_new(arr, o) < 0) {
			json_decref(arr);
			return NULL;
		}
	}
	if (rc != SQLITE_DONE) {
		json_decref(arr);
		return NULL;
	}
	return arr;
}
