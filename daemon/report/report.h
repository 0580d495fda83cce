/*
 * report.h - what the reports of daemon/report/ share (report.c): statement
 * helpers (-EIO/-ENOMEM/-ENOENT from SQLite's codes), a read snapshot, JSON
 * of columns, times and shares, and the window range of a time slice.
 * Not for the rest of the daemon: its entry points are in query.h and the
 * other report headers. Each function is documented where it is defined.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "report/query.h"
#include "util.h"

/* jansson.h (>= 2.9) brings json_decrefp() itself. */
#define _cleanup_json_ _cleanup_(json_decrefp)

/* The four python columns of schema 0012, as report__python() reads them. */
#define PYTHON_COLUMNS "s.python, s.python_version, s.python_samples, s.python_unmerged"

/* The columns of a session row, as the session report and every report head read them. */
#define SESSION_SELECT                                                                             \
	"SELECT s.id, s.pid, s.comm, s.exe, s.uid, s.state, s.end_reason, s.event, s.events,"      \
	" s.freq_hz, s.unwind, s.duration_ns, s.started_at_ns, s.ended_at_ns, s.samples,"          \
	" s.lost_samples, s.truncated_stacks, s.missing_user_stacks, s.unsymbolized_frames,"       \
	" (SELECT count(*) FROM threads t WHERE t.session_id = s.id),"                             \
	" s.stack_bytes, s.unwind_dropped, s.frames, s.follow_children,"                           \
	" s.sampled_event, s.sampled_event_status, s.label, s.pid_start_ticks,"                    \
	" s.limit_dropped_samples, " PYTHON_COLUMNS ", s.table_walked, s.table_fallbacks,"         \
	" s.offcpu_table_walked, s.offcpu_table_fallbacks, s.offcpu_period_ns FROM sessions s"

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
	SC_TABLE_WALKED = SC_PYTHON + 4, /* after the four PYTHON_COLUMNS */
	SC_TABLE_FALLBACKS,
	SC_OFFCPU_TABLE_WALKED,
	SC_OFFCPU_TABLE_FALLBACKS,
	SC_OFFCPU_PERIOD_NS,
};

struct window_bounds {
	int64_t lo, hi;			 /* window_ns BETWEEN lo AND hi */
	const struct query_range *range; /* NULL: the whole session */
	/* With a range: the span it reads, [covered_from_ns, covered_to_ns)
	 * from the session's start (covered_to_ns INT64_MAX: open): the asked
	 * ends, widened to whole merged windows where the range reaches windows
	 * merged as they aged (schema 15); and the longest window it reads:
	 * PROFD_WINDOW_NS, or the merged window length. */
	int64_t covered_from_ns, covered_to_ns, resolution_ns;
};

int report__errno(int rc);
int report__prepare(sqlite3 *db, const char *sql, sqlite3_stmt **ret);
int report__bind_int64(sqlite3_stmt *st, int i, int64_t v);
int report__step(sqlite3_stmt *st);
int report__step_row(sqlite3_stmt *st);
int report__row(sqlite3 *db, const char *sql, int64_t id, sqlite3_stmt **ret);
int report__lookup(sqlite3_stmt *st, int64_t id);
int report__snapshot_begin(sqlite3 *db, sqlite3 **ret_snap);
void report__snapshot_endp(sqlite3 **db);
json_t *report__json_text(const char *s, size_t len);
json_t *report__col_text(sqlite3_stmt *st, int i);
json_t *report__col_int(sqlite3_stmt *st, int i);
json_t *report__iso8601(int64_t ns);
json_t *report__seconds(int64_t ns);
double report__pct1(int64_t part, int64_t whole);
double report__round2(double x);
json_t *report__split_events(const char *s);
json_t *report__json_pct(int64_t part, int64_t whole);
json_t *report__python(sqlite3_stmt *st, int col);
int report__python_frames(json_t *o, unsigned flags);
int window_bounds__get(sqlite3 *db, int64_t session_id, const struct query_range *range,
		       struct window_bounds *wb);
int window_bounds__bind(const struct window_bounds *wb, sqlite3_stmt *st, int i);
int report__prepare_range(sqlite3 *db, const char *sql, int64_t session_id,
			  const struct window_bounds *wb, sqlite3_stmt **ret);
int window_bounds__json(const struct window_bounds *wb, json_t *o);
const char *report__unsymbolized_name(char *buf, size_t size, const char *module, int64_t rel_addr);
struct id_index;
long report__index_add(struct id_index *index, int64_t id, void **v, size_t *cap, size_t n,
		       size_t size, bool *ret_added);
int report__prepare_id(sqlite3 *db, const char *sql, int64_t id, sqlite3_stmt **ret);
int report__prepare_id_arg(sqlite3 *db, const char *sql, int64_t id, int64_t arg,
			   sqlite3_stmt **ret);
int report__samples_table(sqlite3 *db, int64_t session_id, const char *event, const char **ret);
const char *report__rows(const char *table, const struct window_bounds *wb);
/* The sums of a report's rows report__head() shows: all samples, and those whose stack reached the root. */
struct report_sums {
	int64_t total;
	int64_t root;
};
int report__head(sqlite3 *db, int64_t session_id, const char *table, const struct window_bounds *wb,
		 const struct report_sums *sums, json_t **ret, int64_t *ret_total);

/* The statement report__stack_frames() steps: ?1 = stacks.id. */
#define REPORT_STACK_FRAMES_SQL                                                                    \
	"SELECT f.function, f.module, f.file, f.line, f.kind, f.rel_addr, f.inline_depth "         \
	"FROM stack_frames sf JOIN frames f ON f.id = sf.frame_id WHERE sf.stack_id = ?1 "         \
	"ORDER BY sf.pos"
json_t *report__stack_frames(sqlite3_stmt *fr, int64_t stack_id);
