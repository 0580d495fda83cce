/* test-store.c - migrations on empty, existing, newer and corrupt databases; write paths. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "check_store.h"
#include "store/store.h"
#include "util.h"

extern const char *const store_migrations[];

static long long query_int(struct store *st, const char *sql)
{
	sqlite3_stmt *stmt;
	long long v = -1;

	if (sqlite3_prepare_v2(store__db(st), sql, -1, &stmt, NULL) != SQLITE_OK)
		return -2;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

/*
 * open_old_db() - a new database at @dir/@name as a profd at schema
 * @version left it: migrations 0 to @version - 1 applied, user_version
 * @version, then @sql (its rows) run. Then opened by the store in *@ret,
 * which must migrate it to the latest schema.
 */
static void open_old_db(const char *dir, const char *name, int version, const char *sql,
			struct store **ret)
{
	char path[160], pragma[64];
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	CHECK_INT_EQ(sqlite3_open(path, &db), SQLITE_OK);
	for (int v = 0; v < version; v++)
		CHECK_INT_EQ(sqlite3_exec(db, store_migrations[v], NULL, NULL, NULL), SQLITE_OK);
	snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", version);
	CHECK_INT_EQ(sqlite3_exec(db, pragma, NULL, NULL, NULL), SQLITE_OK);
	CHECK_INT_EQ(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	CHECK_INT_EQ(store__open(path, ret), 0);
	CHECK_INT_EQ(store__schema_version(*ret), store__latest_version());
}

/* A session row started at @started_ns, ended at @ended_ns (0: still running). */
static int64_t add_session(struct store *st, uint64_t started_ns, uint64_t ended_ns)
{
	struct store_session row = test_session_row(1, "ret", "cpu", started_ns);
	int64_t id = 0;

	CHECK_INT_EQ(store__session_insert(st, &row, &id), 0);
	if (ended_ns)
		CHECK_INT_EQ(store__session_end(st, id, "detached", ended_ns), 0);
	return id;
}

/* A stack of one frame at @addr in /bin/@module, with @count samples in session @sid. */
static int64_t add_stack_samples(struct store *st, int64_t sid, const char *module, uint64_t addr,
				 uint64_t count)
{
	int64_t fid = 0, stack = 0;

	CHECK_INT_EQ(test_frame_id(st, module, addr, NULL, &fid), 0);
	CHECK_INT_EQ(store__stack_id(st, &fid, 1, false, true, &stack), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 1000, 1, stack, count, 0), 0);
	return stack;
}

/*
 * Retention: sessions that ended before the age limit are deleted whole, with
 * the stacks and frames only they used; a running session is never deleted,
 * however old; the size limit deletes the oldest ended sessions first, and
 * the file shrinks (incremental vacuum).
 */
static void test_retention(const char *dir)
{
	const uint64_t day = 86400ULL * 1000000000ULL, now = 100 * day;
	struct store_retention res;
	struct store *st = NULL;
	char path[160], blob[200];
	int64_t old_ended, old_running, recent, shared, only_old;

	snprintf(path, sizeof(path), "%s/retention.db", dir);
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(query_int(st, "PRAGMA auto_vacuum"), 2); /* incremental from the start */
	CHECK_INT_EQ(store__begin(st), 0);
	old_ended = add_session(st, 1 * day, 2 * day);
	old_running = add_session(st, 1 * day, 0);
	recent = add_session(st, 99 * day, 99 * day + 1);
	shared = add_stack_samples(st, old_ended, "/bin/shared", 0x10, 3);
	CHECK_INT_EQ(add_stack_samples(st, recent, "/bin/shared", 0x10, 4), shared);
	only_old = add_stack_samples(st, old_ended, "/bin/old-only", 0x20, 5);
	add_stack_samples(st, old_running, "/bin/running", 0x30, 6);
	CHECK_INT_EQ(store__commit(st), 0);

	/* 30 days: the session that ended on day 2 goes, the one running since day 1 stays. */
	CHECK_INT_EQ(store__retention(st, now, 30 * day, 0, &res), 0);
	CHECK_INT_EQ(res.sessions_deleted, 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sessions"), 2);
	snprintf(blob, sizeof(blob), "SELECT count(*) FROM sessions WHERE id IN (%lld, %lld)",
		 (long long)old_running, (long long)recent);
	CHECK_INT_EQ(query_int(st, blob), 2);
	snprintf(blob, sizeof(blob), "SELECT count(*) FROM stacks WHERE id = %lld",
		 (long long)shared);
	CHECK_INT_EQ(query_int(st, blob), 1); /* still used by the recent session */
	snprintf(blob, sizeof(blob), "SELECT count(*) FROM stacks WHERE id = %lld",
		 (long long)only_old);
	CHECK_INT_EQ(query_int(st, blob), 0);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM frames WHERE module = '/bin/old-only'"),
		     0);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM frames WHERE module = '/bin/running'"), 1);
	CHECK_INT_EQ(
	    query_int(
		st,
		"SELECT count(*) FROM samples WHERE session_id = (SELECT min(id) FROM sessions)"),
	    1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
	/* Nothing more is old enough: a second pass deletes nothing. */
	CHECK_INT_EQ(store__retention(st, now, 30 * day, 0, &res), 0);
	CHECK_INT_EQ(res.sessions_deleted, 0);

	/* Size: 40 ended sessions of ~100 KiB each (distinct stacks), then a limit of
	 * a quarter of that: the oldest go first, the newest and the running one stay. */
	CHECK_INT_EQ(store__begin(st), 0);
	for (int i = 0; i < 40; i++) {
		int64_t sid = add_session(st, (50 + i) * day, (50 + i) * day + 1);

		for (int k = 0; k < 400; k++) {
			char module[64];

			snprintf(module, sizeof(module), "/bin/lib-%d-%d-padding-padding-padding",
				 i, k);
			add_stack_samples(st, sid, module, (uint64_t)k, 1);
		}
	}
	CHECK_INT_EQ(store__commit(st), 0);
	int64_t before = store__size_bytes(st);
	CHECK(before > 2 * 1024 * 1024);
	CHECK_INT_EQ(store__retention(st, now, 0, (uint64_t)before / 4, &res), 0);
	CHECK(res.sessions_deleted >= 25 && res.sessions_deleted <= 36);
	CHECK(!res.over_limit);
	CHECK(res.bytes_after <= (uint64_t)before / 4);
	CHECK_INT_EQ(store__size_bytes(st), (int64_t)res.bytes_after);
	CHECK(res.bytes_after < res.bytes_before / 2);
	snprintf(blob, sizeof(blob), "SELECT count(*) FROM sessions WHERE id = %lld",
		 (long long)old_running);
	CHECK_INT_EQ(query_int(st, blob), 1);
	/* The survivors are the newest ended sessions. */
	CHECK_INT_EQ(query_int(st, "SELECT max(ended_at_ns) FROM sessions"),
		     (long long)(99 * day + 1));
	CHECK(query_int(st, "SELECT min(started_at_ns) FROM sessions WHERE state = 'ended'") >
	      (long long)(60 * day));
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM pragma_foreign_key_check"), 0);

	/* A limit only running sessions exceed: they stay, and it is said. */
	CHECK_INT_EQ(store__retention(st, now, 0, 4096, &res), 0);
	CHECK(res.over_limit);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sessions"), 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sessions WHERE state = 'running'"), 1);
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM samples"), 6);
	store__close(st);

	/* An existing database made without auto_vacuum is converted once. */
	{
		sqlite3 *db;

		snprintf(path, sizeof(path), "%s/novacuum.db", dir);
		CHECK_INT_EQ(sqlite3_open(path, &db), SQLITE_OK);
		CHECK_INT_EQ(sqlite3_exec(db, "CREATE TABLE x (a); INSERT INTO x VALUES (1);", NULL,
					  NULL, NULL),
			     SQLITE_OK);
		sqlite3_close(db);
		CHECK_INT_EQ(store__open(path, &st), 0);
		CHECK_INT_EQ(query_int(st, "PRAGMA auto_vacuum"), 0);
		CHECK_INT_EQ(store__enable_incremental_vacuum(st), 1);
		CHECK_INT_EQ(query_int(st, "PRAGMA auto_vacuum"), 2);
		CHECK_INT_EQ(store__enable_incremental_vacuum(st), 0);
		CHECK_INT_EQ(query_int(st, "SELECT a FROM x"), 1);
		store__close(st);
	}
}

/*
 * Rows of sample_totals (@event 0) or event_sample_totals (1) that differ
 * from the sums of the windows they roll up, plus rollups of no window and
 * windows of no rollup: 0 when the rollup is right.
 */
static long long rollup_mismatches(struct store *st, int event)
{
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM (SELECT session_id, tid, stack_id, sum(count) AS n, "
		 "min(window_ns) AS w FROM %s GROUP BY 1, 2, 3) r FULL OUTER JOIN %s t "
		 "USING (session_id, tid, stack_id) WHERE r.n IS NOT t.count OR r.w IS NOT "
		 "t.window_ns",
		 event ? "event_samples" : "samples",
		 event ? "event_sample_totals" : "sample_totals");
	return query_int(st, sql);
}

/* Samples of @sid in windows 1..@windows s, threads 1..3, stacks @s1 and @s2, each added twice. */
static void add_windows(struct store *st, int64_t sid, int64_t s1, int64_t s2, int windows,
			int event)
{
	for (int w = 1; w <= windows; w++)
		for (int tid = 1; tid <= 3; tid++)
			for (int k = 0; k < 2; k++) {
				CHECK_INT_EQ(store__sample_add(st, sid, (uint64_t)w * NSEC_PER_SEC,
							       tid, s1, (uint64_t)(w + tid), event),
					     0);
				CHECK_INT_EQ(store__sample_add(st, sid, (uint64_t)w * NSEC_PER_SEC,
							       tid, s2, 1, event),
					     0);
			}
}

/*
 * The per-session rollups (schema/0013) equal the sums of the windows: after
 * flushes that insert and add to rows, after a flush that SIGKILL stopped
 * half-way, after a restart, after a session is deleted, and when a
 * database of schema 12 is migrated.
 */
static void test_rollups(const char *dir)
{
	char path[160];
	struct store *st = NULL;
	struct store_retention res;
	int64_t a, b, s1, s2;
	pid_t child;
	int status;

	snprintf(path, sizeof(path), "%s/rollups.db", dir);
	CHECK_INT_EQ(store__open(path, &st), 0);
	a = add_session(st, 1, 0);
	b = add_session(st, 2, 3 * NSEC_PER_SEC);
	s1 = add_stack_samples(st, a, "/bin/r1", 0x10, 5);
	s2 = add_stack_samples(st, b, "/bin/r2", 0x20, 7);
	CHECK_INT_EQ(store__begin(st), 0);
	add_windows(st, a, s1, s2, 5, 0);
	add_windows(st, b, s1, s2, 3, 0);
	add_windows(st, a, s1, s2, 2, 1);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 1), 0);
	/* 2 sessions x 3 threads x 2 stacks (add_stack_samples() wrote to two of them). */
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sample_totals"), 2 * 3 * 2);
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM sample_totals WHERE session_id = 1"),
		     query_int(st, "SELECT sum(count) FROM samples WHERE session_id = 1"));

	/* A flush killed before its commit: neither the windows nor the rollups have it. */
	store__close(st);
	child = fork();
	if (child == 0) {
		struct store *c = NULL;

		if (store__open(path, &c) < 0 || store__begin(c) < 0)
			_exit(1);
		add_windows(c, a, s1, s2, 50, 0);
		raise(SIGKILL);
		_exit(1);
	}
	CHECK(child > 0 && waitpid(child, &status, 0) == child && WIFSIGNALED(status));
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(query_int(st, "SELECT max(window_ns) FROM samples"), 5 * NSEC_PER_SEC);

	/* Reopened and written again; then session b deleted with its rows. */
	add_windows(st, a, s1, s2, 7, 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(store__retention(st, 100 * NSEC_PER_SEC, 10 * NSEC_PER_SEC, 0, &res), 0);
	CHECK_INT_EQ(res.sessions_deleted, 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sample_totals WHERE session_id = 2"), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	store__close(st);

	/* Schema 12 with samples: the migration builds the rollups from them. */
	open_old_db(dir, "v12.db", 12,
		    "INSERT INTO sessions (pid, pid_start_ticks, comm, uid, event, "
		    "events, freq_hz, started_at_ns, state) VALUES "
		    "(9, 1, 'old', 0, 'cpu-clock', 'cpu', 99, 5, 'ended');"
		    "INSERT INTO stacks (frame_ids, depth) VALUES (x'01', 1), (x'02', 1);"
		    "INSERT INTO samples VALUES (1, 1000, 7, 1, 3), (1, 2000, 7, 1, 4),"
		    " (1, 2000, 8, 2, 5), (1, 3000, 7, 2, 6);"
		    "INSERT INTO event_samples VALUES (1, 1000, 7, 1, 2);",
		    &st);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 1), 0);
	CHECK_INT_EQ(
	    query_int(st, "SELECT count FROM sample_totals WHERE tid = 7 AND stack_id = 1"), 7);
	CHECK_INT_EQ(
	    query_int(st, "SELECT window_ns FROM sample_totals WHERE tid = 7 AND stack_id = 1"),
	    1000);
	/* The documented views read the rollups. */
	CHECK_INT_EQ(query_int(st, "SELECT sum(samples) FROM thread_imbalance"), 18);
	store__close(st);
}

/*
 * The off-CPU and counter rollups (schema/0015) against the rows they sum:
 * the number of rows that differ, 0 when they are right.
 */
static long long rollup15_mismatches(struct store *st)
{
	return query_int(st, "SELECT count(*) FROM (SELECT session_id, tid, stack_id, state, "
			     "sum(count) AS n, sum(total_ns) AS ns FROM offcpu GROUP BY 1, 2, 3, 4) r "
			     "FULL OUTER JOIN offcpu_totals t USING (session_id, tid, stack_id, state) "
			     "WHERE r.n IS NOT t.count OR r.ns IS NOT t.total_ns") +
	       query_int(st, "SELECT count(*) FROM (SELECT session_id, tid, counter, status, "
			     "count(*) AS w, sum(value) AS v FROM thread_counters GROUP BY 1, 2, 3, 4) r "
			     "FULL OUTER JOIN thread_counter_totals t "
			     "USING (session_id, tid, counter, status) "
			     "WHERE r.w IS NOT t.windows OR r.v IS NOT t.value");
}

/* A sum over every row of @table (an expression of its columns) in session @sid. */
static long long session_sum(struct store *st, const char *expr, const char *table, int64_t sid)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT %s FROM %s WHERE session_id = %lld", expr, table,
		 (long long)sid);
	return query_int(st, sql);
}

/* How far session @id's windows are merged, in seconds from its start. */
static long long merged_until_s(struct store *st, int64_t id)
{
	char sql[128];

	snprintf(sql, sizeof(sql),
		 "SELECT (merged_until_ns - started_at_ns) / 1000000000 FROM sessions WHERE id = %lld",
		 (long long)id);
	return query_int(st, sql);
}

/* Sink @sink ("clickhouse", "pyroscope") has session @sid up to @until_ns, and whole if @done. */
static void add_cursor(struct store *st, int64_t sid, const char *sink, uint64_t until_ns,
		       bool done)
{
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "INSERT INTO fleet_cursors (session_id, sink, shipped_until_ns, done) "
		 "VALUES (%lld, '%s', %llu, %d)",
		 (long long)sid, sink, (unsigned long long)until_ns, done);
	CHECK_INT_EQ(sqlite3_exec(store__db(st), sql, NULL, NULL, NULL), SQLITE_OK);
}

/*
 * How many sessions a merge at @now_ns moved the mark of, merging windows
 * of 10 s older than 5 s: the one merge the fleet guard checks repeat after
 * each change of a cursor.
 */
static long long fleet_merge(struct store *st, uint64_t now_ns)
{
	struct store_merge merge;

	CHECK_INT_EQ(
	    store__merge_windows(st, now_ns, 5 * NSEC_PER_SEC, 10 * NSEC_PER_SEC, 100, &merge), 0);
	return merge.sessions;
}

/*
 * Windows merged as they age (schema/0015): the rows of a merged window
 * become one per key with the same sums, in every table with windows; the
 * rollups stay equal to the sums of the rows; the mark moves by whole
 * merged windows, never past the cutoff nor past an ended session's end;
 * a merge stopped at its bound goes on where it stopped; an upgraded
 * off-CPU and counter history gets its rollups from the migration.
 */
static void test_merge_windows(const char *dir)
{
	const uint64_t sec = NSEC_PER_SEC, t0 = 1000 * NSEC_PER_SEC + 123456789;
	static const char *const tables[] = {"samples", "offcpu", "thread_counters", "windows"};
	long long before[4], rows_before[4];
	struct store_merge res;
	struct store *st = NULL;
	int64_t a, b, s1, s2;
	char path[160];

	snprintf(path, sizeof(path), "%s/merge.db", dir);
	CHECK_INT_EQ(store__open(path, &st), 0);
	/* a: running since t0; b: ended 25 s after t0. */
	a = add_session(st, t0, 0);
	b = add_session(st, t0, t0 + 25 * sec);
	for (int i = 0; i < 2; i++) {
		int64_t fid = 0;

		CHECK_INT_EQ(test_frame_id(st, "/bin/m", 0x10 * (i + 1), NULL, &fid), 0);
		CHECK_INT_EQ(store__stack_id(st, &fid, 1, false, true, i ? &s2 : &s1), 0);
	}
	CHECK_INT_EQ(store__begin(st), 0);
	/* 40 windows of 1 s from t0 for a, 25 for b: samples, off-CPU, counters, windows. */
	for (int64_t sid = a; sid <= b; sid++)
		for (uint64_t w = 0; w < (sid == a ? 40u : 25u); w++) {
			struct store_counts c = {.samples = 3, .lost_samples = w % 2};
			uint64_t win = t0 + w * sec;

			for (int tid = 1; tid <= 2; tid++) {
				CHECK_INT_EQ(store__sample_add(st, sid, win, tid, s1, 1 + w % 3, 0), 0);
				CHECK_INT_EQ(store__sample_add(st, sid, win, tid, s2, 2, 0), 0);
				CHECK_INT_EQ(store__offcpu_add(st, sid, win, 7, tid, s1, "sleeping", 1,
							       1000 + w),
					     0);
				CHECK_INT_EQ(store__counter_add(st, sid, win, tid, "task-clock", "ok",
								10 + w),
					     0);
				CHECK_INT_EQ(store__counter_add(st, sid, win, tid, "cache-misses",
								"unsupported", 0),
					     0);
			}
			CHECK_INT_EQ(store__window_add(st, sid, win, &c), 0);
		}
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(rollup15_mismatches(st), 0);
	for (size_t i = 0; i < ARRAY_SIZE(tables); i++) {
		before[i] = session_sum(st, strcmp(tables[i], "windows") == 0 ? "sum(lost_samples)"
					    : strcmp(tables[i], "thread_counters") == 0
						? "sum(value)"
						: "sum(count)",
					tables[i], a);
		rows_before[i] = session_sum(st, "count(*)", tables[i], a);
	}

	/* Nothing is old enough yet: the cutoff (now - after) is before a whole 10 s window. */
	CHECK_INT_EQ(store__merge_windows(st, t0 + 15 * sec, 6 * sec, 10 * sec, 100, &res), 0);
	CHECK_INT_EQ(res.sessions, 0);
	CHECK(!res.more);

	/* Cutoff t0 + 32 s: a's windows 0-29 s become 3 of 10 s; a budget of 2 stops after 2. */
	CHECK_INT_EQ(store__merge_windows(st, t0 + 38 * sec, 6 * sec, 10 * sec, 2, &res), 0);
	CHECK_INT_EQ(res.sessions, 1);
	CHECK(res.more);
	CHECK_INT_EQ(merged_until_s(st, 1), 20);
	CHECK_INT_EQ(store__merge_windows(st, t0 + 38 * sec, 6 * sec, 10 * sec, 100, &res), 0);
	CHECK_INT_EQ(res.sessions, 2);
	CHECK(!res.more);
	CHECK_INT_EQ(merged_until_s(st, 1), 30);
	/* b ended at 25 s: merged up to the window that holds its end, and no further. */
	CHECK_INT_EQ(merged_until_s(st, 2), 30);
	CHECK_INT_EQ(store__merge_windows(st, t0 + 100 * sec, 6 * sec, 10 * sec, 100, &res), 0);
	CHECK_INT_EQ(merged_until_s(st, 2), 30);
	CHECK_INT_EQ(merged_until_s(st, 1), 90);

	/* The same sums in fewer rows; merged windows on t0 + k * 10 s. */
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(rollup15_mismatches(st), 0);
	for (size_t i = 0; i < ARRAY_SIZE(tables); i++) {
		CHECK_INT_EQ(session_sum(st, strcmp(tables[i], "windows") == 0 ? "sum(lost_samples)"
					     : strcmp(tables[i], "thread_counters") == 0
						 ? "sum(value)"
						 : "sum(count)",
					 tables[i], a),
			     before[i]);
		CHECK(session_sum(st, "count(*)", tables[i], a) * 9 < rows_before[i]);
	}
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM samples WHERE session_id = 1 AND "
				   "(window_ns - 1000123456789) % 10000000000 <> 0"),
		     0);
	CHECK_INT_EQ(session_sum(st, "count(*)", "windows", a), 4);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM thread_counters WHERE session_id = 1 "
				   "AND status = 'unsupported' AND value IS NOT NULL"),
		     0);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM window_merge"), 0);

	/* A sample written late into a merged window stays a row of its own and counts. */
	CHECK_INT_EQ(store__sample_add(st, a, t0 + 5 * sec, 1, s1, 4, 0), 0);
	CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
	CHECK_INT_EQ(session_sum(st, "sum(count)", "samples", a), before[0] + 4);

	/* Step by step, as the event loop merges: the mark first, then parts of a few threads. */
	{
		int64_t c = add_session(st, t0, 0);
		struct store_merge_cursor cur = {0};
		long long before_c, rows_c;
		unsigned steps = 0;

		CHECK_INT_EQ(store__begin(st), 0);
		for (uint64_t w = 0; w < 30; w++)
			for (int tid = 1; tid <= 4; tid++)
				CHECK_INT_EQ(store__sample_add(st, c, t0 + w * sec, tid, s1, 1 + tid, 0), 0);
		CHECK_INT_EQ(store__commit(st), 0);
		before_c = session_sum(st, "sum(count)", "samples", c);
		rows_c = session_sum(st, "count(*)", "samples", c);
		/* Sessions a and b are merged up to now already: only c is due. */
		CHECK_INT_EQ(store__merge_step(st, t0 + 36 * sec, 6 * sec, 10 * sec, 25, &cur, &res), 0);
		CHECK(cur.active && res.sessions == 1 && res.more);
		/* The mark moved before any row: a range over the span is read whole from now on. */
		CHECK_INT_EQ(merged_until_s(st, 3), 10);
		CHECK_INT_EQ(session_sum(st, "count(*)", "samples", c), rows_c);
		do {
			CHECK_INT_EQ(store__merge_step(st, t0 + 36 * sec, 6 * sec, 10 * sec, 25, &cur,
						       &res),
				     0);
			steps++;
		} while (res.more && steps < 1000);
		/* 3 windows x (2 parts of samples (2 threads = 20 rows each) + 4 empty tables + windows). */
		CHECK(steps > 3 * 3);
		CHECK(!cur.active);
		CHECK_INT_EQ(session_sum(st, "sum(count)", "samples", c), before_c);
		CHECK_INT_EQ(session_sum(st, "count(*)", "samples", c), 3 * 4);
		CHECK_INT_EQ(rollup_mismatches(st, 0), 0);
		CHECK_INT_EQ(merged_until_s(st, 3), 30);
		CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM window_merge"), 0);
	}

	/* after 0 or a window under 2 s: nothing. */
	CHECK_INT_EQ(store__merge_windows(st, t0 + 1000 * sec, 0, 10 * sec, 100, &res), 0);
	CHECK_INT_EQ(res.sessions, 0);
	CHECK_INT_EQ(store__merge_windows(st, t0 + 1000 * sec, sec, sec, 100, &res), 0);
	CHECK_INT_EQ(res.sessions, 0);
	store__close(st);

	/* Schema 14 with off-CPU time and counters: the migration builds their rollups. */
	open_old_db(dir, "v14.db", 14,
		    "INSERT INTO sessions (pid, pid_start_ticks, comm, uid, event, "
		    "events, freq_hz, started_at_ns, state) VALUES "
		    "(9, 1, 'old', 0, 'cpu-clock', 'cpu,offcpu', 99, 5, 'ended');"
		    "INSERT INTO stacks (frame_ids, depth) VALUES (x'01', 1);"
		    "INSERT INTO offcpu VALUES (1, 1000, 9, 7, 1, 'io', 2, 500),"
		    " (1, 2000, 9, 7, 1, 'io', 1, 300), (1, 2000, 9, 8, 1, 'sleeping', 1, 50);"
		    "INSERT INTO thread_counters VALUES (1, 1000, 7, 'task-clock', 10, 'ok'),"
		    " (1, 2000, 7, 'task-clock', 20, 'ok'), (1, 1000, 7, 'cycles', NULL, 'unsupported');",
		    &st);
	CHECK_INT_EQ(rollup15_mismatches(st), 0);
	CHECK_INT_EQ(query_int(st, "SELECT total_ns FROM offcpu_totals WHERE tid = 7"), 800);
	CHECK_INT_EQ(query_int(st, "SELECT value FROM thread_counter_totals WHERE tid = 7 AND "
				   "counter = 'task-clock'"),
		     30);
	store__close(st);
}

/*
 * With ClickHouse (and Pyroscope) as sinks: the age limit keeps an ended
 * session until every sink has it whole, the size limit deletes it anyway
 * and counts it, and windows are merged only below what every sink has.
 */
static void test_fleet_guards(const char *dir)
{
	const uint64_t day = 86400ULL * NSEC_PER_SEC, sec = NSEC_PER_SEC, now = 100 * day;
	struct store_retention res;
	struct store *st = NULL;
	char path[160], sql[256];
	int64_t unshipped, shipped, fid = 0, stack = 0;

	snprintf(path, sizeof(path), "%s/fleet.db", dir);
	CHECK_INT_EQ(store__open(path, &st), 0);
	store__set_fleet_sinks(st, STORE_SINK_CLICKHOUSE);
	unshipped = add_session(st, 1 * day, 2 * day);
	shipped = add_session(st, 1 * day, 2 * day);
	add_cursor(st, shipped, "clickhouse", 2 * day, true);
	CHECK_INT_EQ(store__retention(st, now, 30 * day, 0, &res), 0);
	CHECK_INT_EQ(res.sessions_deleted, 1);
	CHECK_INT_EQ(res.unshipped_deleted, 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sessions WHERE id = %lld",
		 (long long)unshipped);
	CHECK_INT_EQ(query_int(st, sql), 1);
	/* The size limit protects the disk: the unshipped one goes, and is counted. */
	CHECK_INT_EQ(store__retention(st, now, 30 * day, 1, &res), 0);
	CHECK_INT_EQ(res.sessions_deleted, 1);
	CHECK_INT_EQ(res.unshipped_deleted, 1);

	/* A running session with 30 windows of 1 s, shipped up to 12 s: windows of 10 s
	 * older than 5 s are merged up to 10 s only (the shipped bound), not to 20 s. */
	{
		const uint64_t t0 = 5000 * sec;
		int64_t a = add_session(st, t0, 0);

		CHECK_INT_EQ(test_frame_id(st, "/bin/f", 0x10, NULL, &fid), 0);
		CHECK_INT_EQ(store__stack_id(st, &fid, 1, false, true, &stack), 0);
		CHECK_INT_EQ(store__begin(st), 0);
		for (uint64_t w = 0; w < 30; w++)
			CHECK_INT_EQ(store__sample_add(st, a, t0 + w * sec, 1, stack, 1, 0), 0);
		CHECK_INT_EQ(store__commit(st), 0);
		/* No cursor yet: nothing shipped, nothing merged. */
		CHECK_INT_EQ(fleet_merge(st, t0 + 30 * sec), 0);
		add_cursor(st, a, "clickhouse", t0 + 12 * sec, false);
		CHECK_INT_EQ(fleet_merge(st, t0 + 30 * sec), 1);
		CHECK_INT_EQ(merged_until_s(st, a), 10);
		CHECK_INT_EQ(session_sum(st, "sum(count)", "samples", a), 30);

		/* With Pyroscope too, the merge waits for the lesser cursor: none
		 * of Pyroscope's yet, nothing more; pushed to 21 s, merged to 20 s
		 * although ClickHouse has 25 s. */
		store__set_fleet_sinks(st, STORE_SINK_CLICKHOUSE | STORE_SINK_PYROSCOPE);
		snprintf(sql, sizeof(sql),
			 "UPDATE fleet_cursors SET shipped_until_ns = %llu WHERE session_id = %lld",
			 (unsigned long long)(t0 + 25 * sec), (long long)a);
		CHECK_INT_EQ(sqlite3_exec(store__db(st), sql, NULL, NULL, NULL), SQLITE_OK);
		CHECK_INT_EQ(fleet_merge(st, t0 + 30 * sec), 0);
		add_cursor(st, a, "pyroscope", t0 + 21 * sec, false);
		CHECK_INT_EQ(fleet_merge(st, t0 + 30 * sec), 1);
		CHECK_INT_EQ(merged_until_s(st, a), 20);
		CHECK_INT_EQ(session_sum(st, "sum(count)", "samples", a), 30);
	}

	/* Both sinks: the age limit deletes a session only once both have it
	 * whole; ClickHouse alone is not enough. */
	{
		int64_t both = add_session(st, 1 * day, 2 * day);
		int64_t half = add_session(st, 1 * day, 2 * day);

		add_cursor(st, both, "clickhouse", 0, true);
		add_cursor(st, both, "pyroscope", 0, true);
		add_cursor(st, half, "clickhouse", 0, true);
		add_cursor(st, half, "pyroscope", 0, false);
		CHECK_INT_EQ(store__retention(st, now, 30 * day, 0, &res), 0);
		CHECK_INT_EQ(res.sessions_deleted, 1);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM sessions WHERE id IN (%lld, %lld)",
			 (long long)both, (long long)half);
		CHECK_INT_EQ(query_int(st, sql), 1);
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM sessions WHERE id = %lld",
			 (long long)half);
		CHECK_INT_EQ(query_int(st, sql), 1);
		/* Pushed whole at last: it goes too. */
		snprintf(sql, sizeof(sql),
			 "UPDATE fleet_cursors SET done = 1 WHERE session_id = %lld",
			 (long long)half);
		CHECK_INT_EQ(sqlite3_exec(store__db(st), sql, NULL, NULL, NULL), SQLITE_OK);
		CHECK_INT_EQ(store__retention(st, now, 30 * day, 0, &res), 0);
		CHECK_INT_EQ(res.sessions_deleted, 1);
	}
	store__close(st);
}

int main(void)
{
	char dir[] = "/tmp/test-store-XXXXXX", path[128], bad[128];
	struct store *st = NULL;
	struct stat sb;
	int64_t sid, f1, f2, f3, s1, s2;
	int fd;

	test_db_path(dir, path, sizeof(path));

	/* Empty database: every migration applied, WAL, not world-readable. */
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(store__schema_version(st), store__latest_version());
	CHECK(store__latest_version() >= 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sqlite_master WHERE name IN "
				   "('sessions','threads','mappings','frames','stacks',"
				   "'stack_frames','samples','windows')"),
		     8);
	CHECK_INT_EQ(stat(path, &sb), 0);
	CHECK_INT_EQ(sb.st_mode & 0077, 0);

	/* Writes: a session, deduplicated frames and stacks, samples that add up. */
	struct store_session row = test_session_row(1234, "spin", "cpu", 1000);
	struct frame_info a = {.module = "/bin/a",
			       .build_id = "ab",
			       .rel_addr = 0x10,
			       .function = "main",
			       .file = "a.c",
			       .line = 3};
	struct frame_info b = {.module = "/bin/a", .build_id = "ab", .rel_addr = 0x20};
	struct frame_info k = {.kernel = true,
			       .module = "[kernel.kallsyms]",
			       .build_id = "",
			       .rel_addr = 0xffffffff81000000ULL,
			       .function = "schedule"};
	row.pid_start_ticks = 99;
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(store__frame_id(st, &a, &f1), 0);
	CHECK_INT_EQ(store__frame_id(st, &b, &f2), 0);
	CHECK_INT_EQ(store__frame_id(st, &k, &f3), 0);
	CHECK(f1 != f2 && f2 != f3);
	CHECK_INT_EQ(store__frame_id(st, &a, &s1), 0);
	CHECK_INT_EQ(s1, f1);
	int64_t ids1[] = {f3, f2, f1}, ids2[] = {f2, f1};
	CHECK_INT_EQ(store__stack_id(st, ids1, 3, false, true, &s1), 0);
	CHECK_INT_EQ(store__stack_id(st, ids2, 2, false, false, &s2), 0);
	CHECK(s1 != s2);
	CHECK_INT_EQ(store__stack_id(st, ids1, 3, false, true, &f1), 0);
	CHECK_INT_EQ(f1, s1);
	CHECK_INT_EQ(store__sample_add(st, sid, 1000, 7, s1, 5, 0), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 1000, 7, s1, 2, 0), 0);
	struct store_counts c = {.samples = 7};
	CHECK_INT_EQ(store__window_add(st, sid, 1000, &c), 0);
	CHECK_INT_EQ(store__session_add_counts(st, sid, &c), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(query_int(st, "SELECT count FROM samples"), 7);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM stack_frames"), 5);
	CHECK_INT_EQ(query_int(st, "SELECT frame_id FROM stack_frames WHERE pos = 0 AND "
				   "stack_id = (SELECT MIN(id) FROM stacks)"),
		     f3);
	CHECK_INT_EQ(query_int(st, "SELECT samples FROM sessions"), 7);
	CHECK_INT_EQ(query_int(st, "SELECT sum(reached_root) FROM stacks"), 1);

	/* A stack of 17 frames (rows written 8 a statement, then one by one):
	 * every frame at its position, found again by its frames. */
	int64_t deep[17], s3, s4;
	long long weighted = 0;
	for (int i = 0; i < 17; i++) {
		deep[i] = i % 3 == 0 ? f1 : i % 3 == 1 ? f2 : f3;
		weighted += (long long)(i + 1) * deep[i];
	}
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__stack_id(st, deep, 17, false, false, &s3), 0);
	CHECK_INT_EQ(store__stack_id(st, deep, 17, false, false, &s4), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(s4, s3);
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) * 1000000 + sum((pos + 1) * frame_id) FROM stack_frames "
		 "WHERE stack_id = %lld", (long long)s3);
	CHECK_INT_EQ(query_int(st, sql), 17 * 1000000LL + weighted);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM stack_frames"), 5 + 17);

	/* A frame some lookup left without a module is stored as unknown: a NOT NULL
	 * failure would roll back the flush of every session, again and again. */
	struct frame_info nomod = {.build_id = "", .rel_addr = 0xfe0000dead001234ULL};
	int64_t f4, f5;
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__frame_id(st, &nomod, &f4), 0);
	CHECK_INT_EQ(store__frame_id(st, &nomod, &f5), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(f5, f4);
	snprintf(sql, sizeof(sql), "SELECT module = '[unknown]' FROM frames WHERE id = %lld",
		 (long long)f4);
	CHECK_INT_EQ(query_int(st, sql), 1);

	/* A rolled-back transaction leaves nothing behind. */
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 2000, 7, s1, 100, 0), 0);
	store__rollback(st);
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM samples"), 7);
	store__close(st);

	/* Existing database: reopened, migrations not re-applied, data kept;
	 * the session left 'running' is marked interrupted. */
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(store__schema_version(st), store__latest_version());
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM samples"), 7);
	CHECK_INT_EQ(store__mark_interrupted(st), 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sessions WHERE state = 'ended' AND "
				   "end_reason = 'interrupted' AND ended_at_ns = 1000001000"),
		     1);
	CHECK_INT_EQ(store__mark_interrupted(st), 0);

	/* A database at schema 1 with data, as the first release left it: migrated
	 * in place, data kept, new columns at their defaults; its stacks get their
	 * hash (schema 18), so the same frames are found, not inserted again; its
	 * stack_frames rows, in their order, are what the stack_frames view reads
	 * (schema 20), and the table is gone. */
	store__close(st);
	open_old_db(dir, "v1.db", 1,
		    "INSERT INTO sessions (pid, pid_start_ticks, comm, uid, event, "
		    "events, freq_hz, started_at_ns, state, samples) VALUES "
		    "(9, 1, 'old', 0, 'cpu-clock', 'cpu', 99, 5, 'ended', 42);"
		    "INSERT INTO frames (id, kind, module, rel_addr) VALUES (7, 'user', '/a', 16),"
		    " (8, 'user', '/a', 32);"
		    "INSERT INTO stacks (id, frame_ids, depth) VALUES (5, x'0700000000000000', 1),"
		    " (6, x'08000000000000000700000000000000', 2);"
		    "INSERT INTO stack_frames VALUES (5, 0, 7), (6, 1, 7), (6, 0, 8);",
		    &st);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sqlite_master WHERE name = 'stack_frames' "
				   "AND type = 'view'"),
		     1);
	CHECK_INT_EQ(query_int(st, "SELECT group_concat(stack_id || ':' || pos || ':' || frame_id,"
				   " ' ') = '5:0:7 6:0:8 6:1:7' FROM (SELECT * FROM stack_frames"
				   " ORDER BY stack_id, pos)"),
		     1);
	CHECK_INT_EQ(query_int(st, "SELECT frame_ids_json = '[8,7]' FROM stacks WHERE id = 6"), 1);
	CHECK_INT_EQ(query_int(st, "SELECT samples FROM sessions WHERE comm = 'old'"), 42);
	CHECK_INT_EQ(query_int(st, "SELECT stack_bytes + unwind_dropped FROM sessions"), 0);
	CHECK_INT_EQ(query_int(st, "SELECT reached_root FROM stacks"), 0);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM stacks WHERE hash IS NULL"), 0);
	int64_t old_frames[] = {7};
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__stack_id(st, old_frames, 1, false, false, &s1), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(s1, 5);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM stacks"), 2);
	store__close(st);
	CHECK_INT_EQ(store__open(path, &st), 0);

	/* A database from a newer profd is refused, not downgraded. */
	CHECK_INT_EQ(sqlite3_exec(store__db(st), "PRAGMA user_version = 999", NULL, NULL, NULL),
		     SQLITE_OK);
	store__close(st);
	CHECK_INT_EQ(store__open(path, &st), -EPROTO);
	store__close(st);

	/* A file that is not a database: an error, and the file is left alone. */
	snprintf(bad, sizeof(bad), "%s/not-a-db", dir);
	fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(write(fd, "this is not an SQLite database, just text that must stay\n", 58) == 58);
	close(fd);
	CHECK_INT_EQ(store__open(bad, &st), -EIO);
	store__close(st);
	CHECK_INT_EQ(stat(bad, &sb), 0);
	CHECK_INT_EQ(sb.st_size, 58);

	/* A directory that does not exist. */
	CHECK(store__open("/nonexistent-dir/x/profd.db", &st) == -ENOENT);
	store__close(st);

	test_retention(dir);
	test_rollups(dir);
	test_merge_windows(dir);
	test_fleet_guards(dir);

	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path) != 0)
		return 99;
	return check_exit("test-store");
}
