/* fleet_cursor.c - the fleet sinks' cursors in fleet_cursors (schema 16): one copy of their SQL. */
#include <errno.h>
#include <stdint.h>

#include <sqlite3.h>

#include "store/fleet_cursor.h"
#include "store/sqlite_util.h"
#include "util.h"

/* @sql on the cursor of (@session_id, @sink), prepared into *@ret with ?1 and ?2 bound. */
static int prepare_cursor(sqlite3 *db, const char *sql, int64_t session_id, const char *sink,
			  sqlite3_stmt **ret)
{
	if (sqlite3_prepare_v2(db, sql, -1, ret, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(*ret, 1, session_id);
	sqlite3_bind_text(*ret, 2, sink, -1, SQLITE_STATIC);
	return 0;
}

/* Runs @sql with ?1 @session_id, ?2 @sink, ?3..?6 @a..@d and ?7 @text. */
static int exec_cursor(sqlite3 *db, const char *sql, int64_t session_id, const char *sink,
		       int64_t a, int64_t b, int64_t c, int64_t d, const char *text)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc;

	if (prepare_cursor(db, sql, session_id, sink, &st) < 0)
		return -EIO;
	sqlite3_bind_int64(st, 3, a);
	sqlite3_bind_int64(st, 4, b);
	sqlite3_bind_int64(st, 5, c);
	sqlite3_bind_int64(st, 6, d);
	if (text)
		sqlite3_bind_text(st, 7, text, -1, SQLITE_TRANSIENT);
	rc = sqlite3_step(st);
	if (rc == SQLITE_CONSTRAINT)
		return -ENOENT; /* the session was deleted meanwhile */
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int fleet_cursor__open_db(const char *path, sqlite3 **ret)
{
	sqlite3 *db = NULL;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		int r = db ? -EIO : -ENOMEM;

		sqlite3_close_v2(db);
		return r;
	}
	/* The loop's flushes hold the write lock for a few ms at a time. */
	sqlite3_busy_timeout(db, 5000);
	/* A cursor of a session retention deleted meanwhile is refused, not left behind. */
	if (sqlite3_exec(db, "PRAGMA foreign_keys = ON", NULL, NULL, NULL) != SQLITE_OK) {
		sqlite3_close_v2(db);
		return -EIO;
	}
	*ret = db;
	return 0;
}

int fleet_cursor__begin(sqlite3 *db, const char *sink, int64_t session_id, int64_t start_ns)
{
	return exec_cursor(
	    db,
	    "INSERT OR IGNORE INTO fleet_cursors (session_id, sink, shipped_until_ns) "
	    "VALUES (?1, ?2, ?3)",
	    session_id, sink, start_ns, 0, 0, 0, NULL);
}

int fleet_cursor__load(sqlite3 *db, const char *sink, int64_t session_id, struct fleet_cursor *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc;

	if (prepare_cursor(db,
			   "SELECT shipped_until_ns, coalesce(pending_until_ns, 0), chunks, rows, "
			   "failures, done FROM fleet_cursors WHERE session_id = ?1 AND sink = ?2",
			   session_id, sink, &st) < 0)
		return -EIO;
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return -EIO;
	*ret = (struct fleet_cursor){
	    .shipped_until_ns = sqlite3_column_int64(st, 0),
	    .pending_until_ns = sqlite3_column_int64(st, 1),
	    .chunks = sqlite3_column_int64(st, 2),
	    .rows = sqlite3_column_int64(st, 3),
	    .failures = sqlite3_column_int64(st, 4),
	    .done = sqlite3_column_int(st, 5) != 0,
	};
	return 0;
}

int fleet_cursor__set_pending(sqlite3 *db, const char *sink, int64_t session_id, int64_t until_ns)
{
	return exec_cursor(db,
			   "UPDATE fleet_cursors SET pending_until_ns = ?3 "
			   "WHERE session_id = ?1 AND sink = ?2",
			   session_id, sink, until_ns, 0, 0, 0, NULL);
}

int fleet_cursor__advance(sqlite3 *db, const char *sink, int64_t session_id, int64_t until_ns,
			  int64_t chunks, int64_t rows, bool done)
{
	return exec_cursor(db,
			   "UPDATE fleet_cursors SET shipped_until_ns = ?3, chunks = chunks + ?4, "
			   "rows = rows + ?5, last_error = NULL, last_attempt_ns = ?6, done = ?7, "
			   "pending_until_ns = NULL WHERE session_id = ?1 AND sink = ?2",
			   session_id, sink, until_ns, chunks, rows,
			   (int64_t)now_ns(CLOCK_REALTIME), done ? "1" : "0");
}

int fleet_cursor__failed(sqlite3 *db, const char *sink, int64_t session_id, const char *error)
{
	return exec_cursor(
	    db,
	    "INSERT INTO fleet_cursors (session_id, sink, shipped_until_ns, failures, "
	    "last_error, last_attempt_ns) SELECT s.id, ?2, s.started_at_ns, 1, ?7, ?3 "
	    "FROM sessions s LEFT JOIN fleet_cursors c ON c.session_id = s.id AND c.sink = ?2 "
	    "WHERE (?1 = 0 OR s.id = ?1) AND coalesce(c.done, 0) = 0 "
	    "ON CONFLICT DO UPDATE SET failures = failures + 1, "
	    "last_error = excluded.last_error, last_attempt_ns = excluded.last_attempt_ns",
	    session_id, sink, (int64_t)now_ns(CLOCK_REALTIME), 0, 0, 0, error);
}

int fleet_cursor__adopt_stored(sqlite3 *db, const char *sink)
{
	return exec_cursor(db,
			   "INSERT INTO fleet_cursors (session_id, sink, shipped_until_ns, done) "
			   "SELECT id, ?2, started_at_ns, 1 FROM sessions WHERE NOT EXISTS "
			   "(SELECT 1 FROM fleet_cursors WHERE sink = ?2)",
			   0, sink, 0, 0, 0, 0, NULL);
}
