/*
 * fleet_cursor.h - a fleet sink's cursor of a session: its row of fleet_cursors
 * (schema 16), the one copy of the SQL both sinks (ClickHouse, Pyroscope)
 * move their cursors with.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <sqlite3.h>

/* A session's cursor of one sink, as fleet_cursor__load() reads it. */
struct fleet_cursor {
	int64_t shipped_until_ns; /* window time (CLOCK_REALTIME ns): the sink has every window
				     before */
	int64_t pending_until_ns; /* the end of the chunk being sent; 0: none */
	int64_t chunks, rows, failures;
	bool done; /* an ended session the sink has whole */
};

/*
 * fleet_cursor__open_db() - a sink's own read-write connection to profd's
 * database at @path (the store made its schema), into *@ret: waits up to
 * 5 s for the loop's write lock, foreign keys on (so that the calls below
 * refuse a cursor of a session retention deleted: -ENOENT). Returns 0,
 * -EIO (cannot be opened) or -ENOMEM. Does not log.
 */
int fleet_cursor__open_db(const char *path, sqlite3 **ret);

/*
 * fleet_cursor__begin() - give session @session_id a cursor of @sink
 * ("clickhouse" or "pyroscope") at @start_ns, nothing shipped, unless it has
 * one. Returns 0, -ENOENT if the session is gone (retention deleted it;
 * with foreign keys on), -EIO (sqlite3_errmsg(@db) says why). Does not log.
 */
int fleet_cursor__begin(sqlite3 *db, const char *sink, int64_t session_id, int64_t start_ns);

/*
 * fleet_cursor__load() - session @session_id's cursor of @sink into *@ret.
 * Returns 0, -ENOENT if it has none (*@ret unchanged), -EIO. Does not log.
 */
int fleet_cursor__load(sqlite3 *db, const char *sink, int64_t session_id, struct fleet_cursor *ret);

/*
 * fleet_cursor__set_pending() - the chunk of @session_id that ends at
 * @until_ns (INT64_MAX: the session's end) is about to be sent, so that a
 * retry sends the same one. Returns 0 or -EIO. Does not log.
 */
int fleet_cursor__set_pending(sqlite3 *db, const char *sink, int64_t session_id, int64_t until_ns);

/*
 * fleet_cursor__advance() - the sink answered for session @session_id's
 * chunk up to @until_ns: the cursor moves there, counts @chunks more
 * chunks (0 for a span with nothing to send) and @rows more rows, clears
 * the last error and the pending chunk, stamps the attempt now
 * (CLOCK_REALTIME), and is done if @done. Returns 0 or -EIO. Does not log.
 */
int fleet_cursor__advance(sqlite3 *db, const char *sink, int64_t session_id, int64_t until_ns,
			  int64_t chunks, int64_t rows, bool done);

/*
 * fleet_cursor__failed() - an attempt at session @session_id failed with
 * @error (a line for profctl session): failures + 1, last_error, the
 * attempt's time (now). @session_id 0: every session @sink does not have
 * whole, a cursor at its start made for those without one (a round that
 * failed before any session: ClickHouse ships every session). Returns 0,
 * -ENOENT (the session is gone) or -EIO. Does not log.
 */
int fleet_cursor__failed(sqlite3 *db, const char *sink, int64_t session_id, const char *error);

/*
 * fleet_cursor__adopt_stored() - if @sink has no cursor at all in @db (its
 * first start on this database), give every session stored until now a
 * cursor marked done, nothing shipped: the sink starts with what comes
 * next rather than the database's whole history. Returns 0 or -EIO. Does
 * not log.
 */
int fleet_cursor__adopt_stored(sqlite3 *db, const char *sink);
