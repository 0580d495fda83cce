/*
 * retention.c - what keeps the database within its limits: ended sessions
 * deleted by age (once the fleet sinks have them) and by size, the stacks
 * and frames no session uses any more, and the free pages given back.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite_util.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "util.h"

int64_t store__size_bytes(struct store *st)
{
	int64_t pages = store__query_int64(st, "PRAGMA page_count");
	int64_t size = store__query_int64(st, "PRAGMA page_size");

	return pages < 0 || size < 0 ? -EIO : pages * size;
}

/* Bytes in use: the file size less its free pages. */
static int64_t live_bytes(struct store *st)
{
	int64_t pages = store__query_int64(st, "PRAGMA page_count");
	int64_t free_pages = store__query_int64(st, "PRAGMA freelist_count");
	int64_t size = store__query_int64(st, "PRAGMA page_size");

	if (pages < 0 || free_pages < 0 || size < 0)
		return -EIO;
	return (pages - free_pages) * size;
}

int store__enable_incremental_vacuum(struct store *st)
{
	/* 0 none, 1 full, 2 incremental (sqlite.org/pragma.html#pragma_auto_vacuum) */
	int64_t mode = store__query_int64(st, "PRAGMA auto_vacuum");

	if (mode < 0)
		return -EIO;
	if (mode == 2)
		return 0;
	/* On an existing database the mode changes only through a VACUUM. */
	if (store__exec(st, "PRAGMA auto_vacuum = INCREMENTAL") < 0 ||
	    store__exec(st, "VACUUM") < 0)
		return -EIO;
	return 1;
}

/*
 * "SELECT col FROM t1 UNION SELECT col FROM t2 ..." over every column that
 * is a foreign key to @table, found in the schema, so that tables later
 * migrations add are seen too.
 * NULL if none or out of memory (*@ret_err -ENOMEM or -EIO).
 */
static char *references_sql(struct store *st, const char *table, int *ret_err)
{
	sqlite3_stmt *stmt;
	char *sql = NULL;
	size_t size = 0;
	FILE *f;
	int n = 0, rc;

	*ret_err = 0;
	if (sqlite3_prepare_v2(st->db,
			       "SELECT m.name, k.\"from\" FROM sqlite_master m, "
			       "pragma_foreign_key_list(m.name) k WHERE m.type = 'table' AND "
			       "k.\"table\" = ?1 ORDER BY m.name",
			       -1, &stmt, NULL) != SQLITE_OK) {
		*ret_err = -EIO;
		return NULL;
	}
	sqlite3_bind_text(stmt, 1, table, -1, SQLITE_STATIC);
	f = open_memstream(&sql, &size);
	if (!f) {
		sqlite3_finalize(stmt);
		*ret_err = -ENOMEM;
		return NULL;
	}
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		fprintf(f, "%sSELECT \"%s\" FROM \"%s\"", n++ ? " UNION " : "",
			(const char *)sqlite3_column_text(stmt, 1),
			(const char *)sqlite3_column_text(stmt, 0));
	sqlite3_finalize(stmt);
	if (fclose(f) != 0) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	if (rc != SQLITE_DONE || n == 0) {
		*ret_err = rc != SQLITE_DONE ? -EIO : 0;
		free(sql);
		return NULL;
	}
	return sql;
}

/*
 * Delete the stacks no row refers to any more, then the frames no stack
 * uses (the stack_frames view reads the stacks left, schema/0020). Stacks
 * and frames are shared between sessions, so they outlive the session that
 * made them until this runs.
 */
static int delete_unused_stacks_and_frames(struct store *st)
{
	_cleanup_free_ char *stack_refs = NULL, *frame_refs = NULL, *sql = NULL;
	int r;

	stack_refs = references_sql(st, "stacks", &r);
	if (!stack_refs)
		return r;
	/* Tables a later migration adds with a foreign key to frames, if any. */
	frame_refs = references_sql(st, "frames", &r);
	if (!frame_refs && r < 0)
		return r;
	if (asprintf(&sql,
		     "DELETE FROM stacks WHERE id NOT IN (%s);"
		     "DELETE FROM frames WHERE id NOT IN (SELECT frame_id FROM stack_frames%s%s);",
		     stack_refs, frame_refs ? " UNION " : "", frame_refs ? frame_refs : "") < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	return store__exec(st, sql) < 0 ? -EIO : 0;
}

/*
 * One transaction: delete the ended sessions @where (?1 = @arg) and what only
 * they used; *@n_deleted grows by how many.
 */
static int delete_sessions(struct store *st, const char *where, int64_t arg, unsigned *n_deleted)
{
	_cleanup_free_ char *sql = NULL;
	sqlite3_stmt *stmt;
	unsigned n;
	int rc, r;

	if (asprintf(&sql, "DELETE FROM sessions WHERE state = 'ended' AND %s", where) < 0)
		return -ENOMEM;
	if (store__begin(st) < 0)
		return -EIO;
	if (sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL) != SQLITE_OK) {
		store__rollback(st);
		return -EIO;
	}
	sqlite3_bind_int64(stmt, 1, arg);
	rc = sqlite3_step(stmt);
	sqlite3_finalize(stmt);
	if (rc != SQLITE_DONE) {
		store__rollback(st);
		return -EIO;
	}
	n = (unsigned)sqlite3_changes(st->db);
	r = n ? delete_unused_stacks_and_frames(st) : 0;
	if (r < 0 || store__commit(st) < 0) {
		store__rollback(st);
		return r < 0 ? r : -EIO;
	}
	*n_deleted += n;
	return 0;
}

/*
 * The SQL condition "every configured sink has session sessions.id whole",
 * "1" without sinks; malloc'd, NULL for out of memory.
 */
static char *shipped_condition(const struct store *st)
{
	static const struct {
		unsigned bit;
		const char *name;
	} sinks[] = {{STORE_SINK_CLICKHOUSE, "clickhouse"}, {STORE_SINK_PYROSCOPE, "pyroscope"}};
	char *sql = strdup("1");

	for (size_t i = 0; i < ARRAY_SIZE(sinks) && sql; i++) {
		char *more;

		if (!(st->fleet_sinks & sinks[i].bit))
			continue;
		if (asprintf(&more,
			     "%s AND EXISTS (SELECT 1 FROM fleet_cursors c WHERE c.session_id = "
			     "sessions.id AND c.sink = '%s' AND c.done)",
			     sql, sinks[i].name) < 0)
			more = NULL;
		free(sql);
		sql = more;
	}
	return sql;
}

int store__retention(struct store *st, uint64_t now_ns, uint64_t retention_ns,
		     uint64_t max_db_bytes, struct store_retention *ret)
{
	int64_t size = store__size_bytes(st), live;
	_cleanup_free_ char *shipped = shipped_condition(st), *aged = NULL;
	int r;

	*ret = (struct store_retention){.bytes_before = size > 0 ? (uint64_t)size : 0};
	if (!shipped)
		return -ENOMEM;
	/* The age limit waits for the fleet sinks: they are the long-term store. */
	if (retention_ns && now_ns > retention_ns) {
		if (asprintf(&aged, "coalesce(ended_at_ns, started_at_ns) < ?1 AND %s", shipped) <
		    0) {
			aged = NULL;
			return -ENOMEM;
		}
		r = delete_sessions(st, aged, (int64_t)(now_ns - retention_ns),
				    &ret->sessions_deleted);
		if (r < 0)
			return r;
	}
	/* Oldest first, in rounds: each deletes the share of the ended sessions
	 * that the excess is of the live bytes (at least one), since how much a
	 * session frees is only known once its shared stacks are gone too. */
	while (max_db_bytes && (live = live_bytes(st)) > (int64_t)max_db_bytes) {
		int64_t ended =
		    store__query_int64(st, "SELECT count(*) FROM sessions WHERE state = 'ended'");
		int64_t batch;

		if (ended < 0)
			return -EIO;
		if (ended == 0) {
			ret->over_limit = true;
			break;
		}
		batch = (int64_t)((double)ended * (double)(live - (int64_t)max_db_bytes) /
				  (double)live) +
			1;
		/* The size limit protects the disk: it deletes unshipped sessions too, and counts them. */
		if (st->fleet_sinks) {
			_cleanup_stmt_ sqlite3_stmt *q = NULL;
			_cleanup_free_ char *sql = NULL;

			if (asprintf(&sql,
				     "SELECT count(*) FROM (SELECT id FROM sessions WHERE state = "
				     "'ended' ORDER BY coalesce(ended_at_ns, started_at_ns), id LIMIT "
				     "?1) s JOIN sessions ON sessions.id = s.id WHERE NOT (%s)",
				     shipped) < 0) {
				sql = NULL;
				return -ENOMEM;
			}
			if (sqlite3_prepare_v2(st->db, sql, -1, &q, NULL) != SQLITE_OK)
				return -EIO;
			sqlite3_bind_int64(q, 1, batch);
			if (sqlite3_step(q) != SQLITE_ROW)
				return -EIO;
			ret->unshipped_deleted += (unsigned)sqlite3_column_int64(q, 0);
		}
		r = delete_sessions(st,
				    "id IN (SELECT id FROM sessions WHERE state = 'ended' "
				    "ORDER BY coalesce(ended_at_ns, started_at_ns), id LIMIT ?1)",
				    batch, &ret->sessions_deleted);
		if (r < 0)
			return r;
	}
	if (ret->sessions_deleted) {
		/* Give the free pages back (a no-op unless auto_vacuum is incremental). */
		if (store__exec(st, "PRAGMA incremental_vacuum") < 0)
			return -EIO;
		(void)store__exec(st, "PRAGMA wal_checkpoint(TRUNCATE)");
	}
	size = store__size_bytes(st);
	ret->bytes_after = size > 0 ? (uint64_t)size : 0;
	return 0;
}
