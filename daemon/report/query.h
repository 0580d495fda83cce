/*
 * query.h - the reports over the store (daemon/report/): session listings,
 * hottest functions, hottest call stacks, threads, off-CPU stacks and the
 * raw profile, as the JSON objects docs/protocol.md defines.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * A time range of a session, in nanoseconds from its start: the samples of
 * the 1-second windows that overlap [from_ns, to_ns). to_ns INT64_MAX: to
 * the end. A NULL range is the whole session.
 */
struct query_range {
	int64_t from_ns;
	int64_t to_ns;
};

/*
 * Each function reads from @db (an open connection on a database at the
 * current schema) and returns 0 with *@ret a new JSON object (the response
 * fields, without "v"/"ok"; caller owns it), -ENOENT if @session_id does not
 * exist, -EIO on an SQLite error, -ENOMEM. They do not log and do not write.
 */
int query__session(sqlite3 *db, int64_t session_id, json_t **ret); /* the SESSION object */
int query__sessions(sqlite3 *db, json_t **ret);			   /* {"sessions":[...]} */
/* Flags of the reports that show call stacks (top, hotpaths, profile, analyze). */
enum {
	PROFILE_PER_WINDOW = 1 << 0, /* profile: rows per window, not summed over them */
	PROFILE_PACKED = 1 << 1,     /* profile: rows as one "samples_packed" string */
	QUERY_PYTHON_ALL = 1 << 2,   /* every frame; else the Python view (python_frames.c) */
	PROFILE_BY_STACK = 1 << 3,   /* profile, summed: one row per stack, over every thread */
};
/*
 * top and hotpaths read the CPU samples with @event NULL, else the samples
 * of the session's second sampled event named @event: -ENODATA if the
 * session did not sample it, -EOPNOTSUPP if the machine could not. @flags:
 * QUERY_PYTHON_ALL or 0.
 */
int query__top(sqlite3 *db, int64_t session_id, int limit, const char *event,
	       const struct query_range *range, unsigned flags, json_t **ret);
int query__hotpaths(sqlite3 *db, int64_t session_id, int limit, const char *event,
		    const struct query_range *range, unsigned flags, json_t **ret);

/* What the threads report adds on request. */
struct threads_opts {
	bool group_by_name; /* group threads whose names differ only in digits ("worker-1",
			       "worker-2") */
	double window_s;    /* > 0: imbalance per window of this many seconds */
	bool all;	    /* list every thread, not only the busy ones and a summary row */
};
/* Documented in threads.c; @opts may be NULL. */
int query__threads(sqlite3 *db, int64_t session_id, const struct threads_opts *opts, json_t **ret);
/* Documented in offcpu.c. */
int query__offcpu(sqlite3 *db, int64_t session_id, int limit, json_t **ret);
/*
 * The raw profile (frames, stacks, samples per window and thread, threads,
 * mappings, period) for exporters; @event and @range as for top.
 */
int query__profile(sqlite3 *db, int64_t session_id, const char *event,
		   const struct query_range *range, unsigned flags, json_t **ret);
