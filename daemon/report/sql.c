/*
 * sql.c - run one read-only SQL statement from a client (profctl sql) on its
 * own read-only connection, with an authorizer that refuses every write,
 * ATTACH/DETACH, state-changing PRAGMAs and load_extension(), and, for a
 * caller who is not an admin, confines it to its own sessions.
 *
 * How the confinement works: before the client's statement is compiled,
 * a TEMP view is created for every table that has a session_id column
 * (and sessions, stacks, frames), with the table's name and only the rows
 * of the caller's sessions. Unqualified names resolve in temp before main
 * (sqlite.org/lang_naming.html), so "SELECT * FROM samples" reads the
 * filtered view. The documented views (schema/0011-views.sql and later,
 * stack_frames among them) are recreated in temp too, so that they read
 * the filtered views. The authorizer then refuses any read of a main
 * table that does not come through one of those filtering views (its 6th
 * argument, the innermost view responsible for the read), so "main.samples"
 * and tables of unknown shape are refused.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <sqlite3.h>

#include "report/sql.h"
#include "report/report.h"
#include "util.h"
#include "store/sqlite_util.h"

/* Filtering views a non-admin's reads of main tables must come through. */
#define MAX_FILTER_VIEWS 64

struct sql_ctx {
	bool admin;
	bool armed; /* the client's statement is being compiled or run */
	uint64_t deadline_ns;
	const atomic_bool *cancel; /* NULL, or set when the client is gone */
	char *filter_views[MAX_FILTER_VIEWS];
	size_t n_filter_views;
	char reason[256]; /* why the authorizer refused, for the client */
};

static const char *const readonly_pragmas[] = {
    /* These take a table or index name and only read. */
    "table_info", "table_xinfo", "table_list",	     "index_list",
    "index_info", "index_xinfo", "foreign_key_list",
};

/* Pragmas that read a setting when given no value, and change it when given one. */
static const char *const setting_pragmas[] = {
    "user_version",  "schema_version", "application_id", "page_size",
    "page_count",    "freelist_count", "encoding",	 "compile_options",
    "function_list", "pragma_list",    "collation_list", "journal_mode",
};

/* json_each() and json_tree() (sqlite.org/json1.html#jeach): the stack_frames view reads
 * stacks.frame_ids_json with json_each(). */
static const char *const json_tables[] = {"json_each", "json_tree"};

static const char *const refused_functions[] = {
    "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
};

static bool in_list(const char *s, const char *const *list, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		if (strcasecmp(s, list[i]) == 0)
			return true;
	return false;
}

/* Records why (the first reason only: the one the client's statement hit) and denies. */
static int refuse(struct sql_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct sql_ctx *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->reason[0]) {
		va_start(ap, fmt);
		vsnprintf(c->reason, sizeof(c->reason), fmt, ap);
		va_end(ap);
	}
	return SQLITE_DENY;
}

static int authorize(void *arg, int action, const char *a1, const char *a2, const char *db,
		     const char *view)
{
	struct sql_ctx *c = arg;

	if (!c->armed)
		return SQLITE_OK; /* profd's own setup statements */
	switch (action) {
	case SQLITE_SELECT:
	case SQLITE_RECURSIVE:
		return SQLITE_OK;
	case SQLITE_READ:
		if (c->admin || !db || strcmp(db, "main") != 0)
			return SQLITE_OK;
		if (a1 && (strcmp(a1, "sqlite_master") == 0 || strcmp(a1, "sqlite_schema") == 0))
			return SQLITE_OK;
		/* Table-valued functions that read only their arguments. */
		if (a1 && in_list(a1, json_tables, ARRAY_SIZE(json_tables)))
			return SQLITE_OK;
		for (size_t i = 0; view && i < c->n_filter_views; i++)
			if (strcmp(view, c->filter_views[i]) == 0)
				return SQLITE_OK;
		for (size_t i = 0; a1 && i < c->n_filter_views; i++)
			if (strcmp(a1, c->filter_views[i]) == 0)
				return refuse(
				    c,
				    "main.%s: you see your own sessions only, through the "
				    "views of the same names; leave out \"main.\"",
				    a1);
		return refuse(c,
			      "table %s is readable by root only (it does not belong to sessions)",
			      a1 ? a1 : "?");
	case SQLITE_FUNCTION:
		if (in_list(a2, refused_functions, ARRAY_SIZE(refused_functions)))
			return refuse(c, "%s() is not allowed", a2);
		return SQLITE_OK;
	case SQLITE_PRAGMA:
		if (in_list(a1, readonly_pragmas, ARRAY_SIZE(readonly_pragmas)))
			return SQLITE_OK;
		if (!a2 && in_list(a1, setting_pragmas, ARRAY_SIZE(setting_pragmas)))
			return SQLITE_OK;
		return refuse(c, "PRAGMA %s%s is not allowed: profctl sql only reads",
			      a1 ? a1 : "?", a2 ? " with a value" : "");
	case SQLITE_ATTACH:
		return refuse(c, "ATTACH is not allowed");
	case SQLITE_DETACH:
		return refuse(c, "DETACH is not allowed");
	default:
		return refuse(c, "only SELECT statements are allowed: profctl sql cannot change "
				 "the database");
	}
}

static int progress(void *arg)
{
	struct sql_ctx *c = arg;

	return now_ns(CLOCK_MONOTONIC) > c->deadline_ns || (c->cancel && atomic_load(c->cancel));
}

/* Whether main table @table has a column named @col. */
static bool has_column(sqlite3 *db, const char *table, const char *col)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1, 'main') WHERE name = ?2",
			       -1, &st, NULL) != SQLITE_OK)
		return false;
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, col, -1, SQLITE_STATIC);
	return sqlite3_step(st) == SQLITE_ROW;
}

/*
 * CREATE TEMP VIEW "@name" AS the body sqlite3_mprintf(@body_fmt, ...)
 * makes; remembers @name as a filtering view. 0, -E2BIG (too many views),
 * -EIO, -ENOMEM.
 */
static int filter_view(sqlite3 *db, struct sql_ctx *c, const char *name, const char *body_fmt, ...)
{
	char *body, *sql;
	va_list ap;
	int rc;

	if (c->n_filter_views == MAX_FILTER_VIEWS)
		return -E2BIG;
	va_start(ap, body_fmt);
	body = sqlite3_vmprintf(body_fmt, ap);
	va_end(ap);
	if (!body)
		return -ENOMEM;
	/*
	 * "LIMIT -1 OFFSET 0" keeps the view from being flattened into the
	 * client's query (a subquery with an OFFSET is never flattened:
	 * sqlite.org/optoverview.html#flattening). Flattened, a read that
	 * extracts no column ("SELECT count(*) FROM frames") reaches the
	 * authorizer as a read of main.frames outside the view, and would be
	 * refused.
	 */
	sql = sqlite3_mprintf("CREATE TEMP VIEW \"%w\" AS %s LIMIT -1 OFFSET 0", name, body);
	sqlite3_free(body);
	if (!sql)
		return -ENOMEM;
	rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_free(sql);
	if (rc != SQLITE_OK)
		return report__errno(rc);
	c->filter_views[c->n_filter_views] = strdup(name);
	if (!c->filter_views[c->n_filter_views])
		return -ENOMEM;
	c->n_filter_views++;
	return 0;
}

/*
 * The TEMP views that confine a non-admin with uid @uid to its own sessions
 * (see the top of the file). Returns 0, -EIO, -ENOMEM.
 */
static int confine(sqlite3 *db, struct sql_ctx *c, uid_t uid)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ char *stack_union = NULL;
	int r, rc;

	r = filter_view(db, c, "sessions", "SELECT * FROM main.sessions WHERE uid = %lld",
			(long long)uid);
	if (r < 0)
		return r;

	/* Every table with a session_id column: the rows of the caller's sessions. */
	r = report__prepare(db,
			    "SELECT name FROM main.sqlite_schema WHERE type = 'table'"
			    " AND name NOT LIKE 'sqlite%' ORDER BY name",
			    &st);
	if (r < 0)
		return r;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);

		if (!name || !has_column(db, name, "session_id"))
			continue;
		r = filter_view(db, c, name,
				"SELECT * FROM main.\"%w\" WHERE session_id IN"
				" (SELECT id FROM temp.sessions)",
				name);
		if (r < 0)
			return r;
		if (has_column(db, name, "stack_id")) {
			char *u = sqlite3_mprintf("%s%sSELECT stack_id FROM temp.\"%w\"",
						  stack_union ? stack_union : "",
						  stack_union ? " UNION " : "", name);

			if (!u)
				return -ENOMEM;
			free(stack_union);
			stack_union = strdup(u);
			sqlite3_free(u);
			if (!stack_union)
				return -ENOMEM;
		}
	}
	if (rc != SQLITE_DONE)
		return report__errno(rc);
	sqlite3_finalize(TAKE_PTR(st));

	/* The shared tables: only the stacks and frames the caller's samples use. */
	r = filter_view(db, c, "stacks", "SELECT * FROM main.stacks WHERE id IN (%s)",
			stack_union ? stack_union : "SELECT NULL WHERE 0");
	/* stack_frames is a view over stacks (schema/0020): recreated in temp
	 * with the documented views below, it reads the filtered stacks. */
	if (r >= 0)
		r = filter_view(db, c, "frames",
				"SELECT * FROM main.frames WHERE id IN"
				" (SELECT j.value FROM temp.stacks s,"
				" json_each(s.frame_ids_json) j)");
	if (r < 0)
		return r;

	/* The documented views, again in temp, so that they read the filtered tables. */
	r = report__prepare(db,
			    "SELECT sql FROM main.sqlite_schema WHERE type = 'view'"
			    " AND sql LIKE 'CREATE VIEW %'",
			    &st);
	if (r < 0)
		return r;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *sql = (const char *)sqlite3_column_text(st, 0);
		char *temp = sqlite3_mprintf("CREATE TEMP VIEW%s", sql + strlen("CREATE VIEW"));

		if (!temp)
			return -ENOMEM;
		rc = sqlite3_exec(db, temp, NULL, NULL, NULL);
		sqlite3_free(temp);
		if (rc != SQLITE_OK)
			return report__errno(rc);
	}
	return rc == SQLITE_DONE ? 0 : report__errno(rc);
}

/* Column @i of the current row as JSON; @bytes grows by its size. NULL only on OOM. */
static json_t *value_json(sqlite3_stmt *st, int i, size_t *bytes)
{
	switch (sqlite3_column_type(st, i)) {
	case SQLITE_INTEGER:
		*bytes += 20;
		return json_integer(sqlite3_column_int64(st, i));
	case SQLITE_FLOAT:
		*bytes += 24;
		return json_real(sqlite3_column_double(st, i));
	case SQLITE_TEXT: {
		const char *s = (const char *)sqlite3_column_text(st, i);
		size_t n = (size_t)sqlite3_column_bytes(st, i);

		*bytes += n + 2;
		return s ? report__json_text(s, n) : NULL; /* not UTF-8: bytes >= 0x80 as '?' */
	}
	case SQLITE_BLOB: {
		const unsigned char *b = sqlite3_column_blob(st, i);
		size_t n = (size_t)sqlite3_column_bytes(st, i);
		_cleanup_free_ char *hex = malloc(2 * n + 4);

		if (!hex)
			return NULL;
		/* As SQL writes a blob literal: x'0a1b'. */
		strcpy(hex, "x'");
		for (size_t k = 0; k < n; k++)
			snprintf(hex + 2 + 2 * k, 3, "%02x", b[k]);
		strcpy(hex + 2 + 2 * n, "'");
		*bytes += 2 * n + 5;
		return json_string(hex);
	}
	default:
		*bytes += 4;
		return json_null();
	}
}

/*
 * sql__run() - run the one SELECT statement @query on the database at
 * @db_path, read-only, and return its result as the "sql" response of
 * docs/protocol.md: {"columns": [names], "rows": [[values]], "row_count",
 * "truncated": bool, "truncated_by": "rows"|"bytes"|null}.
 * @admin: false confines the statement to the sessions of @uid.
 * @max_rows: at most this many rows (1..1000000); @max_bytes: stop once the
 * rows hold about this many bytes of values. @timeout_ns: the statement is
 * stopped after this much time. @cancel: NULL, or a flag another thread
 * sets to stop the statement at once (its client is gone); then -ETIMEDOUT.
 * @ret: on success a new object, owned by the caller.
 * @errbuf: on -EINVAL, -EPERM, -ETIMEDOUT or -EIO, one sentence for the client.
 *
 * Returns 0, -EINVAL (not one statement, a syntax error, an unknown table),
 * -EPERM (refused by the authorizer: a write, ATTACH, a PRAGMA that changes
 * state, load_extension(), main.* of another's session), -ETIMEDOUT,
 * -EIO (the database cannot be opened or read), -ENOMEM. Opens its own
 * connection and closes it; blocks for at most about @timeout_ns; does not
 * log.
 */
int sql__run(const char *db_path, const char *query, bool admin, uid_t uid, size_t max_rows,
	     size_t max_bytes, uint64_t timeout_ns, const atomic_bool *cancel, json_t **ret,
	     char *errbuf, size_t errlen)
{
	_cleanup_sqlite_ sqlite3 *db = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_(json_decrefp) json_t *o = NULL;
	struct sql_ctx c = {.admin = admin, .cancel = cancel};
	json_t *columns, *rows;
	const char *tail = NULL;
	size_t bytes = 0, n_rows = 0;
	const char *truncated_by = NULL;
	int rc, r = 0, ncol;

	errbuf[0] = '\0';
	rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		snprintf(errbuf, errlen, "cannot open the database: %s",
			 db ? sqlite3_errmsg(db) : "out of memory");
		return report__errno(rc);
	}
	sqlite3_busy_timeout(db, 2000);
	/* No single value (a randomblob(), a group_concat()) beyond the result cap. */
	sqlite3_limit(db, SQLITE_LIMIT_LENGTH, (int)MIN(max_bytes, (size_t)INT32_MAX));
	sqlite3_set_authorizer(db, authorize, &c);
	if (!admin) {
		r = confine(db, &c, uid);
		if (r < 0) {
			snprintf(errbuf, errlen, "cannot set up the per-user views: %s",
				 sqlite3_errmsg(db));
			goto out;
		}
	}

	c.armed = true;
	c.deadline_ns = now_ns(CLOCK_MONOTONIC) + timeout_ns;
	sqlite3_progress_handler(db, 10000, progress, &c);
	rc = sqlite3_prepare_v2(db, query, -1, &st, &tail);
	if (rc != SQLITE_OK) {
		if (c.reason[0]) {
			snprintf(errbuf, errlen, "%s", c.reason);
			r = -EPERM;
		} else {
			snprintf(errbuf, errlen, "%s", sqlite3_errmsg(db));
			r = (rc & 0xff) == SQLITE_NOMEM ? -ENOMEM : -EINVAL;
		}
		goto out;
	}
	if (!st) {
		snprintf(errbuf, errlen, "no SQL statement given");
		r = -EINVAL;
		goto out;
	}
	for (; tail && *tail; tail++)
		if (!strchr(" \t\r\n;", *tail)) {
			snprintf(errbuf, errlen,
				 "one statement at a time, please (found more after "
				 "the first ';')");
			r = -EINVAL;
			goto out;
		}
	if (!sqlite3_stmt_readonly(st)) {
		snprintf(errbuf, errlen,
			 "only SELECT statements are allowed: profctl sql cannot "
			 "change the database");
		r = -EPERM;
		goto out;
	}

	o = json_object();
	columns = json_array();
	rows = json_array();
	if (!o || json_object_set_new(o, "columns", columns) < 0 ||
	    json_object_set_new(o, "rows", rows) < 0) {
		r = -ENOMEM;
		goto out;
	}
	ncol = sqlite3_column_count(st);
	for (int i = 0; i < ncol; i++) {
		const char *name = sqlite3_column_name(st, i);

		if (json_array_append_new(columns, json_string(name ? name : "?")) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *row;

		if (n_rows == max_rows || bytes >= max_bytes) {
			truncated_by = n_rows == max_rows ? "rows" : "bytes";
			break;
		}
		row = json_array();
		if (json_array_append_new(rows, row) < 0) {
			r = -ENOMEM;
			goto out;
		}
		for (int i = 0; i < ncol; i++)
			if (json_array_append_new(row, value_json(st, i, &bytes)) < 0) {
				r = -ENOMEM;
				goto out;
			}
		n_rows++;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		if ((rc & 0xff) == SQLITE_INTERRUPT) {
			snprintf(errbuf, errlen,
				 "query stopped after %.0f s (the limit of profctl sql): "
				 "narrow it with WHERE session_id = ...",
				 (double)timeout_ns / 1e9);
			r = -ETIMEDOUT;
		} else {
			snprintf(errbuf, errlen, "%s", c.reason[0] ? c.reason : sqlite3_errmsg(db));
			r = c.reason[0] ? -EPERM : report__errno(rc);
		}
		goto out;
	}
	if (json_object_set_new(o, "row_count", json_integer((json_int_t)n_rows)) < 0 ||
	    json_object_set_new(o, "truncated", json_boolean(truncated_by != NULL)) < 0 ||
	    json_object_set_new(o, "truncated_by",
				truncated_by ? json_string(truncated_by) : json_null()) < 0) {
		r = -ENOMEM;
		goto out;
	}
	*ret = TAKE_PTR(o);
out:
	for (size_t i = 0; i < c.n_filter_views; i++)
		free(c.filter_views[i]);
	return r;
}
