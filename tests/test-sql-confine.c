/*
 * test-sql-confine.c - profctl sql's confinement (daemon/report/sql.c) on a
 * real database with two users' sessions: every kind of statement that
 * would change the database or reach outside it is refused with -EPERM or
 * -EINVAL and leaves the file unchanged; a user who is not an admin sees
 * only its own sessions' rows, through the tables and the documented
 * views, and cannot read main.* directly; an admin sees everything; the
 * row and byte limits cut the result and say so. Needs no root.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "check_json.h"
#include "check_store.h"
#include "report/sql.h"
#include "store/store.h"
#include "util.h"

#define UID_A 1001
#define UID_B 1002

static char path[128];

static int run(const char *sql, bool admin, uid_t uid, size_t max_rows, json_t **ret, char *err)
{
	*ret = NULL;
	err[0] = '\0';
	return sql__run(path, sql, admin, uid, max_rows, 16 << 20, 5 * NSEC_PER_SEC, NULL, ret, err,
			512);
}

/* The statement's one integer answer, or -1000 - errno. */
static long long scalar(const char *sql, bool admin, uid_t uid)
{
	char err[512];
	json_t *o;
	long long v;
	int r = run(sql, admin, uid, 100, &o, err);

	if (r < 0) {
		fprintf(stderr, "  %s: %s\n", sql, err);
		return -1000 + r;
	}
	v = (long long)json_integer_value(
	    json_array_get(json_array_get(json_object_get(o, "rows"), 0), 0));
	json_decref(o);
	return v;
}

/* @sql is refused with @want_r, and the error names why. */
static void refused(const char *sql, bool admin, int want_r)
{
	char err[512];
	json_t *o;
	int r = run(sql, admin, admin ? 0 : UID_A, 100, &o, err);

	if (r != want_r) {
		fprintf(stderr, "not refused as expected (%d, want %d): %s\n", r, want_r, sql);
		check_failures++;
	}
	CHECK(err[0] != '\0');
	json_decref(o);
}

/* A session of @uid with @n samples on one stack, and a thread. */
static int64_t add_session(struct store *st, uid_t uid, const char *comm, int64_t n)
{
	struct store_session row = test_session_row(100 + (int)uid, comm, "cpu", 1000000000ULL);
	struct store_counts c = {.samples = (uint64_t)n};
	int64_t sid = 0, fid, stack;

	row.uid = uid;
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(test_frame_id(st, "/bin/app", 0x10 * uid, comm, &fid), 0);
	CHECK_INT_EQ(store__stack_id(st, &fid, 1, false, true, &stack), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 0, row.pid, stack, (uint64_t)n, 0), 0);
	CHECK_INT_EQ(
	    store__thread_upsert(st, sid, row.pid, row.pid, comm, 2000000000ULL, (uint64_t)n, 0),
	    0);
	CHECK_INT_EQ(store__window_add(st, sid, 1000000000ULL, &c), 0);
	CHECK_INT_EQ(store__session_add_counts(st, sid, &c), 0);
	CHECK_INT_EQ(store__session_end(st, sid, "detached", 3000000000ULL), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	return sid;
}

int main(void)
{
	char dir[] = "/tmp/test-sql-confine-XXXXXX", err[512];
	struct store *st;
	struct stat before, after;
	json_t *o;

	test_db_path(dir, path, sizeof(path));
	if (store__open(path, &st) < 0)
		return 99;
	add_session(st, UID_A, "alice_work", 30);
	add_session(st, UID_B, "bob_work", 70);
	store__close(st);
	if (stat(path, &before) < 0)
		return 99;

	/* What each sees, through tables and views. */
	CHECK_INT_EQ(scalar("SELECT count(*) FROM sessions", true, 0), 2);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM sessions", false, UID_A), 1);
	CHECK_INT_EQ(scalar("SELECT sum(count) FROM samples", false, UID_A), 30);
	CHECK_INT_EQ(scalar("SELECT sum(count) FROM samples", false, UID_B), 70);
	CHECK_INT_EQ(scalar("SELECT sum(count) FROM samples", true, 0), 100);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM threads", false, UID_A), 1);
	CHECK_INT_EQ(
	    scalar("SELECT count(*) FROM frames WHERE function = 'bob_work'", false, UID_A), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM frames WHERE function = 'bob_work'", true, 0), 1);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks", false, UID_A), 1);
	/* stack_frames, a view over stacks (schema 20): the user's own stack only. */
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stack_frames", false, UID_A), 1);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stack_frames", true, 0), 2);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stack_frames sf"
			    " JOIN frames f ON f.id = sf.frame_id WHERE f.function = 'alice_work'",
			    false, UID_A),
		     1);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM hot_paths WHERE path = 'bob_work'", false, UID_A),
		     0);
	CHECK_INT_EQ(scalar("SELECT samples FROM hot_paths WHERE path = 'alice_work'", false, UID_A),
		     30);
	CHECK_INT_EQ(
	    scalar("SELECT count(*) FROM hot_functions WHERE function = 'bob_work'", false, UID_A),
	    0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM hot_functions WHERE function = 'alice_work'",
			    false, UID_A),
		     1);
	/* Another user's session, asked for by id: no rows, not an error. */
	CHECK_INT_EQ(scalar("SELECT count(*) FROM samples WHERE session_id = 2", false, UID_A), 0);
	/* Around the filtering views: main.* and subqueries in CTEs. */
	refused("SELECT count(*) FROM main.samples", false, -EPERM);
	refused("SELECT * FROM main.sessions", false, -EPERM);
	CHECK_INT_EQ(
	    scalar("WITH x AS (SELECT * FROM samples) SELECT sum(count) FROM x", false, UID_A), 30);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM main.samples", true, 0), 1 + 1);

	/* Every kind of write or escape, refused for admins and users alike. */
	static const char *const writes[] = {
	    "INSERT INTO sessions (pid) VALUES (1)",
	    "UPDATE sessions SET comm = 'x'",
	    "DELETE FROM samples",
	    "DROP TABLE samples",
	    "DROP VIEW hot_functions",
	    "CREATE TABLE t (x)",
	    "CREATE TEMP TABLE t (x)",
	    "CREATE INDEX i ON samples (count)",
	    "CREATE TRIGGER tr AFTER INSERT ON samples BEGIN SELECT 1; END",
	    "ALTER TABLE samples ADD COLUMN y",
	    "ATTACH DATABASE '/tmp/other.db' AS other",
	    "DETACH DATABASE main",
	    "PRAGMA user_version = 99",
	    "PRAGMA journal_mode = DELETE",
	    "PRAGMA writable_schema = 1",
	    "VACUUM",
	    "REINDEX",
	    "ANALYZE",
	    "BEGIN",
	    "SAVEPOINT s",
	    "SELECT load_extension('/tmp/x.so')",
	    "SELECT writefile('/tmp/x', 'y')",
	    "SELECT readfile('/etc/passwd')",
	    "WITH x AS (SELECT 1) DELETE FROM samples",
	    "REPLACE INTO sessions (id) VALUES (1)",
	};
	for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
		char err_admin[512];
		json_t *x = NULL;
		int r = run(writes[i], false, UID_A, 10, &x, err),
		    ra = run(writes[i], true, 0, 10, &x, err_admin);

		if (r >= 0 || ra >= 0) {
			fprintf(stderr, "allowed (user %d, admin %d): %s\n", r, ra, writes[i]);
			check_failures++;
		}
		json_decref(x);
	}
	/* Two statements in one: the second would otherwise run. */
	refused("SELECT 1; DELETE FROM samples", true, -EINVAL);
	refused("SELECT 1; SELECT 2", false, -EINVAL);
	/* Syntax errors and unknown tables: -EINVAL, with SQLite's words. */
	refused("SELEC 1", false, -EINVAL);
	refused("SELECT * FROM no_such_table", false, -EINVAL);
	/* A PRAGMA that only reads is allowed. */
	CHECK_INT_EQ(scalar("PRAGMA user_version", true, 0) > 0, 1);

	/* Limits: rows, and the answer says it was cut. */
	CHECK_INT_EQ(run("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
			 "WHERE i < 1000) SELECT i FROM n",
			 false, UID_A, 10, &o, err),
		     0);
	CHECK_INT_EQ((long long)json_array_size(json_object_get(o, "rows")), 10);
	CHECK(json_is_true(json_object_get(o, "truncated")));
	CHECK_STR_EQ(json_string_value(json_object_get(o, "truncated_by")), "rows");
	json_decref(o);
	/* Bytes: a result larger than the byte limit stops early. */
	CHECK_INT_EQ(sql__run(path,
			      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
			      "WHERE i < 100000) SELECT printf('%0500d', i) FROM n",
			      false, UID_A, 1000000, 64 * 1024, 5 * NSEC_PER_SEC, NULL, &o, err,
			      sizeof(err)),
		     0);
	CHECK(json_array_size(json_object_get(o, "rows")) < 1000);
	CHECK_STR_EQ(json_string_value(json_object_get(o, "truncated_by")), "bytes");
	json_decref(o);
	/* Time: a statement that runs past its limit is stopped. */
	CHECK_INT_EQ(sql__run(path,
			      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
			      "SELECT count(*) FROM n",
			      true, 0, 10, 1 << 20, 200 * NSEC_PER_MSEC, NULL, &o, err,
			      sizeof(err)),
		     -ETIMEDOUT);
	/* Cancelled (the client hung up): stopped long before its 60 s limit. */
	{
		atomic_bool cancel = true;
		uint64_t t0 = now_ns(CLOCK_MONOTONIC);

		CHECK_INT_EQ(
		    sql__run(path,
			     "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
			     "SELECT count(*) FROM n",
			     true, 0, 10, 1 << 20, 60 * NSEC_PER_SEC, &cancel, &o, err,
			     sizeof(err)),
		    -ETIMEDOUT);
		CHECK(now_ns(CLOCK_MONOTONIC) - t0 < 30 * NSEC_PER_SEC);
	}

	/* Nothing above changed the file. */
	CHECK(stat(path, &after) == 0 && after.st_size == before.st_size &&
	      after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
	      after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM sessions", true, 0), 2);
	CHECK_INT_EQ(scalar("SELECT sum(count) FROM samples", true, 0), 100);

	test_db_remove(dir, path);
	return check_exit("sql-confine");
}
