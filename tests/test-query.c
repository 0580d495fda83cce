/* test-query.c - query.c over a small synthetic session in an in-memory database. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sqlite3.h>

#include "check_json.h"
#include "report/python_frames.h"
#include "report/query.h"
#include "util.h"

#ifndef SCHEMA_DIR
#error "SCHEMA_DIR must name the source tree's schema/ directory"
#endif

#define CHECK_INT CHECK_INT_EQ
#define CHECK_STR CHECK_STR_EQ
#define CHECK_REAL CHECK_REAL_EQ

static json_t *get(json_t *o, const char *key)
{
	return json_object_get(o, key);
}

static int is_migration(const struct dirent *d)
{
	size_t len = strlen(d->d_name);

	return d->d_name[0] >= '0' && d->d_name[0] <= '9' && len > 4 &&
	       strcmp(d->d_name + len - 4, ".sql") == 0;
}

/* Runs every schema/NNNN-*.sql in order, as the store's migrations do: the current schema. */
static void load_schema(sqlite3 *db)
{
	struct dirent **names = NULL;
	int n;

	n = scandir(SCHEMA_DIR, &names, is_migration, alphasort);
	if (n <= 0) {
		fprintf(stderr, "setup: no schema/*.sql in %s\n", SCHEMA_DIR);
		exit(99);
	}
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *path = NULL, *sql = NULL;
		_cleanup_fclose_ FILE *f = NULL;
		size_t len = 0;

		if (asprintf(&path, "%s/%s", SCHEMA_DIR, names[i]->d_name) < 0)
			exit(99);
		f = fopen(path, "re");
		if (!f || getdelim(&sql, &len, '\0', f) < 0) {
			fprintf(stderr, "setup: cannot read %s\n", path);
			exit(99);
		}
		exec_sql(db, sql);
		free(names[i]);
	}
	free(names);
}

/* Inserts stack @id with the frame ids @frames (leaf first, @n of them) in both
 * forms: the frame_ids blob and the JSON array the stack_frames view reads. */
static void insert_stack(sqlite3 *db, int64_t id, const int64_t *frames, int n)
{
	sqlite3_stmt *st;
	unsigned char blob[8 * 16];
	char json[16 * 21 + 3] = "[";

	for (int i = 0; i < n; i++) {
		for (int b = 0; b < 8; b++)
			blob[i * 8 + b] = (unsigned char)((uint64_t)frames[i] >> (8 * b));
		snprintf(json + strlen(json), sizeof(json) - strlen(json), "%s%lld", i ? "," : "",
			 (long long)frames[i]);
	}
	strcat(json, "]");
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO stacks (id, frame_ids, depth, frame_ids_json) "
			       "VALUES (?, ?, ?, ?)",
			       -1, &st, NULL) != SQLITE_OK)
		exit(99);
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_blob(st, 2, blob, n * 8, SQLITE_TRANSIENT);
	sqlite3_bind_int(st, 3, n);
	sqlite3_bind_text(st, 4, json, -1, SQLITE_TRANSIENT);
	if (sqlite3_step(st) != SQLITE_DONE)
		exit(99);
	sqlite3_finalize(st);
}

/*
 * Session 1 (ended): threads 101/102/103 with 10/20/30 samples and an idle
 * 104; six stacks over three windows:
 *   S1 hot_loop@0x1200 <- work@0x1100 <- main      20
 *   S2 hot_loop@0x1210 <- work@0x1110 <- main      10  (same functions as S1)
 *   S3 helper <- work <- main                       8
 *   S4 fib@0x1410 <- fib@0x1400 <- work <- main     6  (recursion)
 *   S5 libc+0x2a2f <- helper <- work <- main        4  (unsymbolized leaf)
 *   S6 kernel timer irq <- hot_loop <- work <- main 12
 * Session 2 (running) has 5 samples of S1, which must not leak into session 1.
 */
static void populate(sqlite3 *db)
{
	static const int64_t s1[] = {3, 2, 1}, s2[] = {4, 10, 1}, s3[] = {5, 2, 1},
			     s4[] = {7, 6, 2, 1}, s5[] = {8, 5, 2, 1}, s6[] = {9, 3, 2, 1};

	exec_sql(db, "INSERT INTO sessions (id, pid, pid_start_ticks, comm, exe, uid, event, events,"
		 " freq_hz, duration_ns, started_at_ns, ended_at_ns, state, end_reason, samples,"
		 " lost_samples, truncated_stacks, missing_user_stacks, unsymbolized_frames) VALUES"
		 " (1, 4242, 777, 'spin', '/usr/bin/spin', 0, 'cpu-clock', 'cpu,cycles', 99,"
		 "  10000000000, 1700000000123456789, 1700000010623456789, 'ended', 'duration',"
		 "  60, 3, 1, 2, 1),"
		 " (2, 4343, 888, 'other', NULL, 1000, 'cycles', 'cpu', 99, NULL,"
		 "  1700000100000000000, NULL, 'running', NULL, 5, 0, 0, 0, 0)");
	exec_sql(db, "INSERT INTO threads (session_id, tid, name, first_seen_ns, last_seen_ns, samples) VALUES"
		 " (1, 101, 'worker-1', 1700000000200000000, 1700000009000000000, 10),"
		 " (1, 102, 'worker-2', 1700000000200000000, 1700000009000000000, 20),"
		 " (1, 103, 'worker-3', 1700000000200000000, 1700000009000000000, 30),"
		 " (1, 104, 'idle', 1700000000200000000, 1700000000200000000, 0),"
		 " (2, 201, 'other', 1700000100000000000, 1700000100000000000, 5)");
	exec_sql(db,
	     "INSERT INTO frames (id, kind, module, rel_addr, function, file, line) VALUES"
	     " (1, 'user', '/usr/bin/spin', 4096, 'main', 'spin.c', 10),"
	     " (2, 'user', '/usr/bin/spin', 4352, 'work', 'spin.c', 20),"
	     " (3, 'user', '/usr/bin/spin', 4608, 'hot_loop', 'spin.c', 30),"
	     " (4, 'user', '/usr/bin/spin', 4624, 'hot_loop', 'spin.c', 31),"
	     " (5, 'user', '/usr/bin/spin', 4864, 'helper', 'spin.c', 40),"
	     " (6, 'user', '/usr/bin/spin', 5120, 'fib', 'spin.c', 50),"
	     " (7, 'user', '/usr/bin/spin', 5136, 'fib', 'spin.c', 51),"
	     " (8, 'user', '/usr/lib/x86_64-linux-gnu/libc.so.6', 10799, NULL, NULL, NULL),"
	     " (9, 'kernel', '[kernel.kallsyms]', -2118123456, 'asm_sysvec_apic_timer_interrupt',"
	     "  NULL, NULL),"
	     " (10, 'user', '/usr/bin/spin', 4368, 'work', 'spin.c', 21)");
	insert_stack(db, 1, s1, ARRAY_SIZE(s1));
	insert_stack(db, 2, s2, ARRAY_SIZE(s2));
	insert_stack(db, 3, s3, ARRAY_SIZE(s3));
	insert_stack(db, 4, s4, ARRAY_SIZE(s4));
	insert_stack(db, 5, s5, ARRAY_SIZE(s5));
	insert_stack(db, 6, s6, ARRAY_SIZE(s6));
	/* (session, window, tid, stack, count): tid 101 = 10, 102 = 20, 103 = 30. */
	exec_sql(db, "INSERT INTO samples VALUES"
		 " (1, 1700000000000000000, 101, 3, 8),"
		 " (1, 1700000000000000000, 101, 5, 2),"
		 " (1, 1700000000000000000, 102, 1, 10),"
		 " (1, 1700000001000000000, 102, 2, 4),"
		 " (1, 1700000001000000000, 102, 4, 6),"
		 " (1, 1700000001000000000, 103, 1, 10),"
		 " (1, 1700000000000000000, 103, 2, 6),"
		 " (1, 1700000002000000000, 103, 5, 2),"
		 " (1, 1700000002000000000, 103, 6, 12),"
		 " (2, 1700000100000000000, 201, 1, 5)");
	exec_sql(db, "INSERT INTO windows (session_id, window_ns, samples) VALUES"
		 " (1, 1700000000000000000, 26), (1, 1700000001000000000, 20),"
		 " (1, 1700000002000000000, 14), (2, 1700000100000000000, 5)");
}

/*
 * check_list() - checks a report call that returned @r and *@o: @r is 0
 * and the list @key of *@o has @n entries. Frees *@o and sets it to NULL,
 * ready for the next call.
 */
static void check_list(int r, json_t **o, const char *key, size_t n)
{
	CHECK_INT(r, 0);
	CHECK_INT(json_array_size(get(*o, key)), n);
	json_decref(*o);
	*o = NULL;
}

/* Checks one "functions" entry. */
static void check_fn(json_t *f, const char *name, const char *module, int self, int total,
		     double self_pct, double total_pct)
{
	CHECK(f != NULL);
	CHECK_STR(gs(f, "function"), name);
	CHECK_STR(gs(f, "module"), module);
	CHECK_INT(gi(f, "self_samples"), self);
	CHECK_INT(gi(f, "total_samples"), total);
	CHECK_REAL(gr(f, "self_pct"), self_pct);
	CHECK_REAL(gr(f, "total_pct"), total_pct);
}

/*
 * check_head_s1() - checks a report call on session 1 that returned @r and
 * *@o: @r is 0 and *@o starts with the head every such report has, its
 * totals and loss counters. False if the call failed: nothing more to check.
 * @o is a pointer because the call that fills it is the other argument,
 * and C leaves the order in which arguments are evaluated open.
 */
static bool check_head_s1(int r, json_t **o)
{
	CHECK_INT(r, 0);
	if (r < 0)
		return false;
	CHECK_INT(gi(*o, "session"), 1);
	CHECK_INT(gi(*o, "total_samples"), 60);
	CHECK_INT(gi(*o, "lost_samples"), 3);
	CHECK_INT(gi(*o, "truncated_stacks"), 1);
	CHECK_INT(gi(*o, "missing_user_stacks"), 2);
	CHECK_INT(gi(*o, "unsymbolized_frames"), 1);
	return true;
}

static void test_top(sqlite3 *db)
{
	json_t *o = NULL, *f;

	if (!check_head_s1(query__top(db, 1, 20, NULL, NULL, 0, &o), &o))
		return;
	CHECK_STR(gs(o, "event"), "cpu-clock");
	CHECK_INT(json_array_size(get(o, "functions")), 7);
	/* The session's own columns, not null. */
	CHECK_INT(gi(o, "pid_start_ticks"), 777);
	CHECK(json_is_integer(get(o, "limit_dropped_samples")));
	CHECK(json_is_null(get(o, "label")));

	/* hot_loop: two addresses, one function; file/line of the address with most self. */
	f = at(o, "functions", 0);
	check_fn(f, "hot_loop", "/usr/bin/spin", 30, 42, 50.0, 70.0);
	CHECK_STR(gs(f, "file"), "spin.c");
	CHECK_INT(gi(f, "line"), 30);
	f = at(o, "functions", 1);
	check_fn(f, "asm_sysvec_apic_timer_interrupt", "[kernel.kallsyms]", 12, 12, 20.0, 20.0);
	CHECK(json_is_null(get(f, "file")));
	check_fn(at(o, "functions", 2), "helper", "/usr/bin/spin", 8, 12, 13.3, 20.0);
	/* fib appears twice in S4: total counts the stack once (6, not 12). */
	check_fn(at(o, "functions", 3), "fib", "/usr/bin/spin", 6, 6, 10.0, 10.0);
	f = at(o, "functions", 4);
	check_fn(f, "libc.so.6+0x2a2f", "/usr/lib/x86_64-linux-gnu/libc.so.6", 4, 4, 6.7, 6.7);
	CHECK(json_is_null(get(f, "file")));
	CHECK(json_is_null(get(f, "line")));
	/* No self samples, same total: by name. */
	check_fn(at(o, "functions", 5), "main", "/usr/bin/spin", 0, 60, 0.0, 100.0);
	f = at(o, "functions", 6);
	check_fn(f, "work", "/usr/bin/spin", 0, 60, 0.0, 100.0);
	CHECK_INT(gi(f, "line"), 20);
	json_decref(o);

	o = NULL;
	check_list(query__top(db, 1, 3, NULL, NULL, 0, &o), &o, "functions", 3);

	/* Session 2 sees only its own 5 samples of S1. */
	CHECK_INT(query__top(db, 2, 20, NULL, NULL, 0, &o), 0);
	CHECK_INT(gi(o, "total_samples"), 5);
	check_fn(at(o, "functions", 0), "hot_loop", "/usr/bin/spin", 5, 5, 100.0, 100.0);
	json_decref(o);
}

/* Checks the names and kinds of a path's frames, leaf first. */
static void check_path(json_t *p, int samples, double pct, const char *const *names, size_t n)
{
	json_t *frames = get(p, "frames");

	CHECK(p != NULL);
	CHECK_INT(gi(p, "samples"), samples);
	CHECK_REAL(gr(p, "pct"), pct);
	CHECK_INT(json_array_size(frames), n);
	for (size_t i = 0; i < n && i < json_array_size(frames); i++)
		CHECK_STR(gs(json_array_get(frames, i), "function"), names[i]);
}

static void test_hotpaths(sqlite3 *db)
{
	static const char *const p0[] = {"hot_loop", "work", "main"};
	static const char *const p1[] = {"asm_sysvec_apic_timer_interrupt", "hot_loop", "work",
					 "main"};
	static const char *const p2[] = {"helper", "work", "main"};
	static const char *const p3[] = {"fib", "fib", "work", "main"};
	static const char *const p4[] = {"libc.so.6+0x2a2f", "helper", "work", "main"};
	json_t *o = NULL, *f;

	if (!check_head_s1(query__hotpaths(db, 1, 10, NULL, NULL, 0, &o), &o))
		return;
	CHECK_INT(json_array_size(get(o, "paths")), 5);
	/* S1 and S2 differ only in addresses inside the same functions: one path. */
	check_path(at(o, "paths", 0), 30, 50.0, p0, ARRAY_SIZE(p0));
	/* Its frames are those of the heavier S1. */
	f = json_array_get(get(at(o, "paths", 0), "frames"), 0);
	CHECK_INT(gi(f, "line"), 30);
	CHECK_STR(gs(f, "kind"), "user");
	CHECK_STR(gs(f, "file"), "spin.c");
	CHECK_STR(gs(f, "module"), "/usr/bin/spin");
	CHECK_INT(gi(json_array_get(get(at(o, "paths", 0), "frames"), 1), "line"), 20);
	check_path(at(o, "paths", 1), 12, 20.0, p1, ARRAY_SIZE(p1));
	CHECK_STR(gs(json_array_get(get(at(o, "paths", 1), "frames"), 0), "kind"), "kernel");
	check_path(at(o, "paths", 2), 8, 13.3, p2, ARRAY_SIZE(p2));
	check_path(at(o, "paths", 3), 6, 10.0, p3, ARRAY_SIZE(p3));
	check_path(at(o, "paths", 4), 4, 6.7, p4, ARRAY_SIZE(p4));
	f = json_array_get(get(at(o, "paths", 4), "frames"), 0);
	CHECK(json_is_null(get(f, "file")));
	CHECK(json_is_null(get(f, "line")));
	json_decref(o);

	o = NULL;
	check_list(query__hotpaths(db, 1, 2, NULL, NULL, 0, &o), &o, "paths", 2);
}

static void test_threads(sqlite3 *db)
{
	json_t *o = NULL, *imb;
	int r;

	/* By default the idle thread is summed into "other_threads"... */
	r = query__threads(db, 1, NULL, &o);
	CHECK_INT(r, 0);
	if (r < 0)
		return;
	CHECK_INT(json_array_size(get(o, "threads")), 3);
	CHECK_INT(gi(o, "threads_total"), 4);
	CHECK_INT(gi(get(o, "other_threads"), "threads"), 1);
	CHECK_INT(gi(get(o, "other_threads"), "samples"), 0);
	CHECK_INT(gi(get(o, "imbalance"), "threads"), 3);
	json_decref(o);
	/* ...and listed with all. */
	o = NULL;
	r = query__threads(db, 1, &(struct threads_opts){.all = true}, &o);
	CHECK_INT(r, 0);
	if (r < 0)
		return;
	CHECK_INT(gi(o, "session"), 1);
	CHECK_INT(gi(o, "total_samples"), 60);
	CHECK(json_is_null(get(o, "other_threads")));
	CHECK_INT(json_array_size(get(o, "threads")), 4);
	CHECK_INT(gi(at(o, "threads", 0), "tid"), 103);
	CHECK_STR(gs(at(o, "threads", 0), "name"), "worker-3");
	CHECK_INT(gi(at(o, "threads", 0), "samples"), 30);
	CHECK_REAL(gr(at(o, "threads", 0), "share_pct"), 50.0);
	CHECK_INT(gi(at(o, "threads", 1), "tid"), 102);
	CHECK_INT(gi(at(o, "threads", 1), "samples"), 20);
	CHECK_REAL(gr(at(o, "threads", 1), "share_pct"), 33.3);
	CHECK_INT(gi(at(o, "threads", 2), "tid"), 101);
	CHECK_REAL(gr(at(o, "threads", 2), "share_pct"), 16.7);
	/* An idle thread is listed with 0 and does not count in the imbalance. */
	CHECK_INT(gi(at(o, "threads", 3), "tid"), 104);
	CHECK_INT(gi(at(o, "threads", 3), "samples"), 0);
	CHECK_REAL(gr(at(o, "threads", 3), "share_pct"), 0.0);

	imb = get(o, "imbalance");
	CHECK_INT(gi(imb, "threads"), 3);
	CHECK_REAL(gr(imb, "mean_samples"), 20.0);
	CHECK_INT(gi(imb, "max_samples"), 30);
	CHECK_REAL(gr(imb, "max_over_mean"), 1.5);
	/* Population stddev of 10, 20, 30 is 8.165: cv 0.41. */
	CHECK_REAL(gr(imb, "cv"), 0.41);
	CHECK_INT(gi(imb, "straggler_tid"), 103);
	CHECK_STR(gs(imb, "straggler_name"), "worker-3");
	json_decref(o);
}

/* A session without samples: imbalance nulls, empty lists, no division by zero. */
static void test_empty(sqlite3 *db)
{
	json_t *o = NULL, *imb;

	exec_sql(db, "INSERT INTO sessions (id, pid, pid_start_ticks, comm, uid, event, events,"
		 " freq_hz, started_at_ns, state) VALUES"
		 " (3, 1, 1, 'init', 0, 'cpu-clock', 'cpu', 99, 1700000200000000000, 'running')");
	CHECK_INT(query__threads(db, 3, NULL, &o), 0);
	CHECK_INT(gi(o, "total_samples"), 0);
	CHECK_INT(json_array_size(get(o, "threads")), 0);
	imb = get(o, "imbalance");
	CHECK_INT(gi(imb, "threads"), 0);
	CHECK(json_is_null(get(imb, "cv")));
	CHECK(json_is_null(get(imb, "max_over_mean")));
	CHECK(json_is_null(get(imb, "straggler_tid")));
	json_decref(o);
	o = NULL;
	check_list(query__top(db, 3, 20, NULL, NULL, 0, &o), &o, "functions", 0);
	check_list(query__hotpaths(db, 3, 10, NULL, NULL, 0, &o), &o, "paths", 0);
	exec_sql(db, "DELETE FROM sessions WHERE id = 3");
}

static void test_sessions(sqlite3 *db)
{
	json_t *o = NULL, *s;
	int r;

	r = query__session(db, 1, &o);
	CHECK_INT(r, 0);
	if (r == 0) {
		s = o;
		CHECK_INT(gi(s, "id"), 1);
		CHECK_INT(gi(s, "pid"), 4242);
		CHECK_STR(gs(s, "comm"), "spin");
		CHECK_STR(gs(s, "exe"), "/usr/bin/spin");
		CHECK_STR(gs(s, "state"), "ended");
		CHECK_STR(gs(s, "end_reason"), "duration");
		CHECK_STR(gs(s, "event"), "cpu-clock");
		CHECK_INT(json_array_size(get(s, "events")), 2);
		CHECK_STR(json_string_value(at(s, "events", 0)), "cpu");
		CHECK_STR(json_string_value(at(s, "events", 1)), "cycles");
		CHECK_STR(gs(s, "unwind"), "fp");
		CHECK_REAL(gr(s, "duration_s"), 10.0);
		CHECK_STR(gs(s, "started_at"), "2023-11-14T22:13:20Z");
		CHECK_INT(gi(s, "started_at_ns"), 1700000000123456789LL);
		CHECK_STR(gs(s, "ended_at"), "2023-11-14T22:13:30Z");
		CHECK_INT(gi(s, "ended_at_ns"), 1700000010623456789LL);
		CHECK_REAL(gr(s, "elapsed_s"), 10.5);
		CHECK_INT(gi(s, "samples"), 60);
		CHECK_INT(gi(s, "lost_samples"), 3);
		CHECK_INT(gi(s, "threads"), 4);
		json_decref(o);
	}

	o = NULL;
	r = query__sessions(db, &o);
	CHECK_INT(r, 0);
	if (r < 0)
		return;
	CHECK_INT(json_array_size(get(o, "sessions")), 2);
	/* Newest first; a running session has null end fields and elapsed_s up to now. */
	s = at(o, "sessions", 0);
	CHECK_INT(gi(s, "id"), 2);
	CHECK_STR(gs(s, "state"), "running");
	CHECK(json_is_null(get(s, "exe")));
	CHECK(json_is_null(get(s, "end_reason")));
	CHECK(json_is_null(get(s, "duration_s")));
	CHECK(json_is_null(get(s, "ended_at")));
	CHECK(json_is_null(get(s, "ended_at_ns")));
	CHECK_STR(gs(s, "started_at"), "2023-11-14T22:15:00Z");
	CHECK(gr(s, "elapsed_s") > 3e7); /* over a year: it runs to now */
	CHECK_INT(gi(s, "threads"), 1);
	CHECK_INT(gi(at(o, "sessions", 1), "id"), 1);
	json_decref(o);
}

static void test_enoent(sqlite3 *db)
{
	json_t *o = NULL;

	CHECK_INT(query__session(db, 99, &o), -ENOENT);
	CHECK_INT(query__top(db, 99, 20, NULL, NULL, 0, &o), -ENOENT);
	CHECK_INT(query__hotpaths(db, 99, 10, NULL, NULL, 0, &o), -ENOENT);
	CHECK_INT(query__threads(db, 99, NULL, &o), -ENOENT);
	CHECK(o == NULL);
	CHECK_INT(query__top(db, 1, 0, NULL, NULL, 0, &o), -EINVAL);
}

/* SQLite failures become -EIO: a database without the schema. */
static void test_eio(void)
{
	sqlite3 *db;
	json_t *o = NULL;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		exit(99);
	CHECK_INT(query__sessions(db, &o), -EIO);
	CHECK_INT(query__top(db, 1, 20, NULL, NULL, 0, &o), -EIO);
	CHECK(o == NULL);
	sqlite3_close(db);
}

/* An inconsistent store (a frame_ids blob cut short) is -EIO, not a crash or a wrong answer. */
static void test_corrupt(sqlite3 *db)
{
	json_t *o = NULL;

	exec_sql(db, "INSERT INTO sessions (id, pid, pid_start_ticks, comm, uid, event, events,"
		 " freq_hz, started_at_ns, state) VALUES"
		 " (4, 1, 1, 'bad', 0, 'cpu-clock', 'cpu', 99, 1700000300000000000, 'running');"
		 " INSERT INTO stacks (id, frame_ids, depth) VALUES (40, x'0100000000', 1);"
		 " INSERT INTO samples VALUES (4, 1700000300000000000, 1, 40, 1)");
	CHECK_INT(query__top(db, 4, 20, NULL, NULL, 0, &o), -EIO);
	CHECK_INT(query__hotpaths(db, 4, 10, NULL, NULL, 0, &o), -EIO);
	CHECK(o == NULL);
	/* A frame id with no frames row. */
	exec_sql(db, "UPDATE stacks SET frame_ids = x'e703000000000000' WHERE id = 40");
	CHECK_INT(query__top(db, 4, 20, NULL, NULL, 0, &o), -EIO);
	CHECK(o == NULL);
	exec_sql(db, "DELETE FROM samples WHERE session_id = 4; DELETE FROM stacks WHERE id = 40;"
		 " DELETE FROM sessions WHERE id = 4");
}

/* The raw profile for exporters: whole, summed over windows, and a time range. */
static void test_profile(sqlite3 *db)
{
	struct query_range range = { .from_ns = 1000000000, .to_ns = 2000000000 };
	json_t *o = NULL, *samples, *stacks, *frames, *row;
	int64_t sum = 0;
	size_t i;

	CHECK_INT(query__profile(db, 1, NULL, NULL, true, &o), 0);
	if (!o)
		return;
	samples = get(o, "samples");
	stacks = get(o, "stacks");
	frames = get(o, "frames");
	CHECK_INT(gi(o, "total_samples"), 60);
	CHECK_INT(gi(o, "period"), 1000000000 / 99);
	CHECK_STR(gs(o, "period_unit"), "nanoseconds");
	CHECK_INT(json_array_size(samples), 9);
	CHECK_INT(json_array_size(stacks), 6);
	CHECK_INT(json_array_size(frames), 10);
	json_array_foreach(samples, i, row)
	{
		json_t *stack = json_array_get(stacks, (size_t)json_integer_value(json_array_get(row, 0)));
		json_t *leaf = json_array_get(frames, (size_t)json_integer_value(json_array_get(stack, 0)));
		json_t *root = json_array_get(
		    frames, (size_t)json_integer_value(json_array_get(stack, json_array_size(stack) - 1)));

		sum += json_integer_value(json_array_get(row, 3));
		/* Every stack ends (outermost) in main, and windows are offsets from the start. */
		CHECK_STR(gs(root, "function"), "main");
		CHECK(leaf != NULL);
		CHECK(json_integer_value(json_array_get(row, 2)) >= -123456789);
		CHECK(json_integer_value(json_array_get(row, 2)) < 3000000000);
	}
	CHECK_INT(sum, 60);
	/* Frames: kernel addresses as unsigned hex, unsymbolized with a null function. */
	json_array_foreach(frames, i, row)
	{
		if (json_is_null(get(row, "function")))
			CHECK_STR(gs(row, "address"), "0x2a2f");
		if (strcmp(gs(row, "kind"), "kernel") == 0)
			CHECK_STR(gs(row, "address"), "0xffffffff81c00040");
	}
	CHECK_INT(json_array_size(get(o, "threads")), 4);
	json_decref(o);

	/* Summed: one row per (thread, stack). */
	o = NULL;
	CHECK_INT(query__profile(db, 1, NULL, NULL, false, &o), 0);
	CHECK_INT(json_array_size(get(o, "samples")), 9);
	CHECK_INT(gi(o, "total_samples"), 60);
	json_decref(o);

	/* Summed over threads too (per_thread false): one row per stack, tid 0, the same 60. */
	o = NULL;
	CHECK_INT(query__profile(db, 1, NULL, NULL, PROFILE_BY_STACK, &o), 0);
	{
		json_t *row;
		size_t i;
		/* windows start at whole seconds: the first may be before the session's start */
		long long sum = 0, prev_window = LLONG_MIN;
		bool seen[16] = {false};

		CHECK_INT(json_array_size(get(o, "samples")), json_array_size(get(o, "stacks")));
		json_array_foreach(get(o, "samples"), i, row)
		{
			json_int_t stack = json_integer_value(json_array_get(row, 0));

			/* each stack once */
			CHECK(stack >= 0 && stack < 16 && !seen[stack]);
			if (stack >= 0 && stack < 16)
				seen[stack] = true;
			CHECK_INT(json_integer_value(json_array_get(row, 1)), 0);
			CHECK(json_integer_value(json_array_get(row, 2)) >= prev_window);
			prev_window = json_integer_value(json_array_get(row, 2));
			sum += json_integer_value(json_array_get(row, 3));
		}
		CHECK_INT(sum, 60);
	}
	json_decref(o);

	/* 1 s to 2 s after the start (.123 s past a whole second): windows 1 and 2 overlap it. */
	o = NULL;
	CHECK_INT(query__profile(db, 1, NULL, &range, true, &o), 0);
	CHECK_INT(gi(o, "total_samples"), 34);
	CHECK_INT(json_array_size(get(o, "samples")), 5);
	json_decref(o);
	o = NULL;
	CHECK_INT(query__top(db, 1, 20, NULL, &range, 0, &o), 0);
	CHECK_INT(gi(o, "total_samples"), 34);
	CHECK_REAL(gr(o, "from_s"), 1.0);
	check_fn(at(o, "functions", 0), "hot_loop", "/usr/bin/spin", 14, 26, 41.2, 76.5);
	json_decref(o);
	CHECK_INT(query__profile(db, 99, NULL, NULL, true, &o), -ENOENT);
}

/* The views of schema 11 agree with top and threads. */
static void test_views(sqlite3 *db)
{
	json_t *o = NULL, *f;
	sqlite3_stmt *st;
	size_t i;

	CHECK_INT(query__top(db, 1, 100, NULL, NULL, 0, &o), 0);
	CHECK(sqlite3_prepare_v2(db,
				 "SELECT self_samples, total_samples, self_pct, total_pct FROM hot_functions"
				 " WHERE session_id = 1 AND function = ?1 AND module = ?2",
				 -1, &st, NULL) == SQLITE_OK);
	json_array_foreach(get(o, "functions"), i, f)
	{
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, gs(f, "function"), -1, SQLITE_TRANSIENT);
		sqlite3_bind_text(st, 2, gs(f, "module"), -1, SQLITE_TRANSIENT);
		CHECK_INT(sqlite3_step(st), SQLITE_ROW);
		CHECK_INT(sqlite3_column_int64(st, 0), gi(f, "self_samples"));
		CHECK_INT(sqlite3_column_int64(st, 1), gi(f, "total_samples"));
		CHECK_REAL(sqlite3_column_double(st, 2), gr(f, "self_pct"));
		CHECK_REAL(sqlite3_column_double(st, 3), gr(f, "total_pct"));
	}
	sqlite3_finalize(st);
	json_decref(o);
	CHECK(sqlite3_prepare_v2(db,
				 "SELECT path, samples FROM hot_paths WHERE session_id = 1 AND stack_id = 4",
				 -1, &st, NULL) == SQLITE_OK);
	CHECK_INT(sqlite3_step(st), SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(st, 0), "main;work;fib;fib");
	CHECK_INT(sqlite3_column_int64(st, 1), 6);
	sqlite3_finalize(st);
	CHECK(sqlite3_prepare_v2(db,
				 "SELECT name, samples, share_pct, over_mean FROM thread_imbalance"
				 " WHERE session_id = 1 ORDER BY samples DESC",
				 -1, &st, NULL) == SQLITE_OK);
	CHECK_INT(sqlite3_step(st), SQLITE_ROW);
	CHECK_STR((const char *)sqlite3_column_text(st, 0), "worker-3");
	CHECK_INT(sqlite3_column_int64(st, 1), 30);
	CHECK_REAL(sqlite3_column_double(st, 2), 50.0);
	CHECK_REAL(sqlite3_column_double(st, 3), 1.5);
	sqlite3_finalize(st);
}


/*
 * The Python view (report/python_frames.c): the rule for each kind of frame,
 * and top, hotpaths and profile of a session of four stacks, leaf first:
 *   P1 dgemm_ <- ext+0x10 <- _PyObject_MakeTpCall <- python3.11+0x100 <- dense (py)
 *      <- _PyEval_EvalFrameDefault (libpython) <- train (py) <- Py_BytesMain
 *      <- __libc_start_main                                              10
 *   P2 _PyEval_EvalFrameDefault <- spin (py) <- Py_BytesMain <- __libc_start_main   5
 *   P3 kernel <- clock_nanosleep <- PyEval_RestoreThread <- sleeper (py)  3
 *   P4 _PyEval_EvalFrameDefault <- Py_BytesMain (no Python frame)        2
 */
static void test_python_view(void)
{
	static const struct {
		const char *kind, *module, *build_id, *function, *file;
		enum frame_role role;
	} rule[] = {
	    {"user", "/app/train.py", "", "train", "/app/train.py", FRAME_PYTHON},
	    {"user", "[python]", "", "<unknown>", "[python]", FRAME_PYTHON},
	    {"user", "/usr/bin/python3.11", "ab12", "_PyEval_EvalFrameDefault", NULL,
	     FRAME_INTERPRETER},
	    {"user", "/usr/bin/python3.11", "ab12", NULL, NULL, FRAME_INTERPRETER},
	    {"user", "/opt/py/bin/python3.12d", "", "_PyObject_MakeTpCall", NULL, FRAME_INTERPRETER},
	    {"user", "/usr/bin/python3", "", "_PyObject_MakeTpCall", NULL, FRAME_INTERPRETER},
	    {"user", "/usr/lib/libpython3.11.so.1.0", "cd", "PyObject_Call", "call.c",
	     FRAME_INTERPRETER},
	    {"user", "/usr/lib/libpython3.so", "", "PyObject_Call", NULL, FRAME_INTERPRETER},
	    {"user", "/usr/bin/python3.11", "ab12", "PyEval_RestoreThread", NULL, FRAME_OTHER},
	    {"user", "/usr/lib/libpython3.11.so.1.0", "cd", "take_gil", "ceval_gil.c", FRAME_OTHER},
	    {"user", "/usr/bin/python3.11", "ab12", "time_sleep", NULL, FRAME_OTHER},
	    {"user", "/usr/bin/pythonista", "", "main", NULL, FRAME_OTHER},
	    {"user", "/usr/lib/libpython3.11.a", "", "main", NULL, FRAME_OTHER},
	    {"user", "/usr/lib/x86_64-linux-gnu/libc.so.6", "ef", "clock_nanosleep", "x.c",
	     FRAME_OTHER},
	    {"user", "/usr/lib/python3/dist-packages/numpy/_multiarray_umath.so", "", NULL, NULL,
	     FRAME_OTHER},
	    {"kernel", "[kernel.kallsyms]", "", "do_nanosleep", NULL, FRAME_OTHER},
	};
	static const uint8_t roles[] = {FRAME_OTHER, FRAME_PYTHON, FRAME_INTERPRETER};
	static const int64_t p1[] = {10, 11, 12, 13, 14, 15, 16, 17, 18}, p2[] = {15, 19, 17, 18},
			     p3[] = {20, 21, 22, 23}, p4[] = {15, 17};
	static const struct {
		const int64_t *frames;
		int n;
	} stacks[] = {{p1, ARRAY_SIZE(p1)}, {p2, ARRAY_SIZE(p2)}, {p3, ARRAY_SIZE(p3)},
		      {p4, ARRAY_SIZE(p4)}};
	static const char *const clean1[] = {"dgemm_", "ext.so+0x10", "dense", "train",
					     "__libc_start_main"};
	int64_t fold[] = {2, 0, 2, 1, 2, 0, 1, 2}, native[] = {0, 2, 0};
	json_t *o = NULL, *f;
	sqlite3 *db;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(rule); i++)
		CHECK_INT(python_frames__role(rule[i].kind, rule[i].module, rule[i].build_id,
					      rule[i].function, rule[i].file),
			  rule[i].role);
	/* Interpreter frames go from a stack with a Python frame, wherever they are... */
	CHECK_INT(python_frames__fold(fold, ARRAY_SIZE(fold), roles), 4);
	CHECK_INT(fold[0], 0);
	CHECK_INT(fold[1], 1);
	CHECK_INT(fold[2], 0);
	CHECK_INT(fold[3], 1);
	/* ...and stay in one without. */
	CHECK_INT(python_frames__fold(native, ARRAY_SIZE(native), roles), 3);
	CHECK_INT(native[1], 2);

	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		exit(99);
	load_schema(db);
	exec_sql(db, "INSERT INTO sessions (id, pid, pid_start_ticks, comm, exe, uid, event, events,"
		 " freq_hz, duration_ns, started_at_ns, ended_at_ns, state, end_reason, samples,"
		 " lost_samples, truncated_stacks, missing_user_stacks, unsymbolized_frames) VALUES"
		 " (1, 77, 1, 'python3', '/usr/bin/python3.11', 0, 'cpu-clock', 'cpu', 99,"
		 "  NULL, 1700000000000000000, 1700000001000000000, 'ended', 'duration',"
		 "  20, 0, 0, 0, 2)");
	exec_sql(db,
	     "INSERT INTO frames (id, kind, module, build_id, rel_addr, function, file, line) VALUES"
	     " (10, 'user', '/usr/lib/libblas.so.3', 'b1', 100, 'dgemm_', NULL, NULL),"
	     " (11, 'user', '/usr/lib/ext.so', 'e1', 16, NULL, NULL, NULL),"
	     " (12, 'user', '/usr/bin/python3.11', 'p1', 200, '_PyObject_MakeTpCall', NULL, NULL),"
	     " (13, 'user', '/usr/bin/python3.11', 'p1', 256, NULL, NULL, NULL),"
	     " (14, 'user', '/app/train.py', '', 1, 'dense', '/app/train.py', 5),"
	     " (15, 'user', '/usr/lib/libpython3.11.so.1.0', 'l1', 300, '_PyEval_EvalFrameDefault',"
	     "  'ceval.c', 10),"
	     " (16, 'user', '/app/train.py', '', 2, 'train', '/app/train.py', 9),"
	     " (17, 'user', '/usr/bin/python3.11', 'p1', 400, 'Py_BytesMain', NULL, NULL),"
	     " (18, 'user', '/usr/lib/libc.so.6', 'c1', 500, '__libc_start_main', NULL, NULL),"
	     " (19, 'user', '/app/train.py', '', 3, 'spin', '/app/train.py', 20),"
	     " (20, 'kernel', '[kernel.kallsyms]', '', -4096, 'do_nanosleep', NULL, NULL),"
	     " (21, 'user', '/usr/lib/libc.so.6', 'c1', 600, 'clock_nanosleep', NULL, NULL),"
	     " (22, 'user', '/usr/bin/python3.11', 'p1', 700, 'PyEval_RestoreThread', NULL, NULL),"
	     " (23, 'user', '/app/train.py', '', 4, 'sleeper', '/app/train.py', 30)");
	for (i = 0; i < ARRAY_SIZE(stacks); i++)
		insert_stack(db, (int64_t)i + 1, stacks[i].frames, stacks[i].n);
	exec_sql(db, "INSERT INTO samples VALUES (1, 1700000000000000000, 77, 1, 10),"
		 " (1, 1700000000000000000, 77, 2, 5), (1, 1700000000000000000, 77, 3, 3),"
		 " (1, 1700000000000000000, 77, 4, 2)");
	exec_sql(db, "INSERT INTO windows (session_id, window_ns, samples) VALUES"
		 " (1, 1700000000000000000, 20)");

	/* top: the eval loop's own samples go to spin; only P4's stay with it. */
	CHECK_INT(query__top(db, 1, 100, NULL, NULL, 0, &o), 0);
	CHECK_STR(gs(o, "python_frames"), "clean");
	CHECK_INT(gi(o, "total_samples"), 20);
	check_fn(at(o, "functions", 0), "dgemm_", "/usr/lib/libblas.so.3", 10, 10, 50.0, 50.0);
	check_fn(at(o, "functions", 1), "spin", "/app/train.py", 5, 5, 25.0, 25.0);
	check_fn(at(o, "functions", 2), "do_nanosleep", "[kernel.kallsyms]", 3, 3, 15.0, 15.0);
	check_fn(at(o, "functions", 3), "_PyEval_EvalFrameDefault", "/usr/lib/libpython3.11.so.1.0",
		 2, 2, 10.0, 10.0);
	json_array_foreach(get(o, "functions"), i, f)
	{
		CHECK(strcmp(gs(f, "function"), "_PyObject_MakeTpCall") != 0);
		CHECK(strcmp(gs(f, "function"), "Py_BytesMain") != 0 || gi(f, "total_samples") == 2);
		if (strcmp(gs(f, "function"), "PyEval_RestoreThread") == 0)
			CHECK_INT(gi(f, "total_samples"), 3);
	}
	json_decref(o);
	o = NULL;
	CHECK_INT(query__top(db, 1, 100, NULL, NULL, QUERY_PYTHON_ALL, &o), 0);
	CHECK_STR(gs(o, "python_frames"), "all");
	check_fn(at(o, "functions", 1), "_PyEval_EvalFrameDefault", "/usr/lib/libpython3.11.so.1.0",
		 7, 17, 35.0, 85.0);
	json_decref(o);

	/* hotpaths: P1 without the interpreter between dense and train, nor under train. */
	o = NULL;
	CHECK_INT(query__hotpaths(db, 1, 10, NULL, NULL, 0, &o), 0);
	check_path(at(o, "paths", 0), 10, 50.0, clean1, ARRAY_SIZE(clean1));
	json_decref(o);
	o = NULL;
	CHECK_INT(query__hotpaths(db, 1, 10, NULL, NULL, QUERY_PYTHON_ALL, &o), 0);
	CHECK_INT(json_array_size(get(at(o, "paths", 0), "frames")), 9);
	json_decref(o);

	/* profile: only the frames shown are listed, and the stacks index them. */
	o = NULL;
	CHECK_INT(query__profile(db, 1, NULL, NULL, 0, &o), 0);
	CHECK_STR(gs(o, "python_frames"), "clean");
	CHECK_INT(json_array_size(get(o, "frames")), 12); /* 14 less 12 and 13 (P4 keeps 15, 17) */
	{
		json_t *stacks = get(o, "stacks"), *st, *idx;
		size_t j, depth = 0;

		json_array_foreach(stacks, i, st)
		{
			depth += json_array_size(st);
			json_array_foreach(st, j, idx)
			CHECK(json_integer_value(idx) < (json_int_t)json_array_size(get(o, "frames")));
		}
		CHECK_INT(depth, 5 + 2 + 4 + 2); /* P1, P2 (spin, libc), P3, P4 */
	}
	json_decref(o);
	o = NULL;
	CHECK_INT(query__profile(db, 1, NULL, NULL, QUERY_PYTHON_ALL, &o), 0);
	CHECK_INT(json_array_size(get(o, "frames")), 14);
	json_decref(o);
	sqlite3_close(db);
}

/*
 * A time range over windows merged as they aged (schema 15): read at the
 * merged windows' resolution, its ends widened to whole merged windows,
 * and the response says so; past merged_until_ns the 1 s windows serve.
 * Session 6: merged 60 s windows up to 120 s, then 1 s windows.
 */
static void test_merged_range(sqlite3 *db)
{
	static const struct {
		double from_s, to_s;
		long long total;
		double covered_from_s, covered_to_s, resolution_s;
	} cases[] = {
	    {70, 80, 7, 60, 120, 60},	  /* inside the second merged window */
	    {30, 125.5, 15, 0, 125.5, 60}, /* from a merged window into the 1 s ones */
	    {120, 121.5, 3, 120, 121.5, 1}, /* only 1 s windows */
	    {0, 60, 5, 0, 60, 60},	  /* exactly the first merged window */
	};
	json_t *o = NULL;

	exec_sql(db, "INSERT INTO sessions (id, pid, pid_start_ticks, comm, uid, event, events,"
		 " freq_hz, started_at_ns, ended_at_ns, state, merged_until_ns, merged_window_ns)"
		 " VALUES (6, 1, 1, 'merged', 0, 'cpu-clock', 'cpu', 99, 1700001000000000000,"
		 " 1700001200000000000, 'ended', 1700001120000000000, 60000000000);"
		 " INSERT INTO samples VALUES (6, 1700001000000000000, 1, 1, 5),"
		 " (6, 1700001060000000000, 1, 1, 7), (6, 1700001120000000000, 1, 1, 1),"
		 " (6, 1700001121000000000, 1, 1, 2), (6, 1700001130000000000, 1, 1, 100)");
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct query_range range = {.from_ns = (int64_t)(cases[i].from_s * 1e9),
					    .to_ns = (int64_t)(cases[i].to_s * 1e9)};

		CHECK_INT(query__top(db, 6, 20, NULL, &range, 0, &o), 0);
		if (!o)
			continue;
		CHECK_INT(gi(o, "total_samples"), cases[i].total);
		CHECK_REAL(gr(o, "from_s"), cases[i].from_s);
		CHECK_REAL(gr(o, "covered_from_s"), cases[i].covered_from_s);
		CHECK_REAL(gr(o, "covered_to_s"), cases[i].covered_to_s);
		CHECK_REAL(gr(o, "resolution_s"), cases[i].resolution_s);
		json_decref(o);
		o = NULL;
	}
	exec_sql(db, "DELETE FROM samples WHERE session_id = 6; DELETE FROM sessions WHERE id = 6");
}

int main(void)
{
	sqlite3 *db;
	int changes;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK)
		return 99;
	load_schema(db);
	populate(db);
	changes = sqlite3_total_changes(db);

	test_top(db);
	test_hotpaths(db);
	test_threads(db);
	test_sessions(db);
	test_enoent(db);
	test_profile(db);
	test_views(db);
	/* Queries only read, and leave no transaction open. */
	CHECK_INT(sqlite3_total_changes(db), changes);
	CHECK(sqlite3_get_autocommit(db));
	test_empty(db);
	test_corrupt(db);
	test_merged_range(db);
	test_eio();
	test_python_view();

	sqlite3_close(db);
	return check_exit("query");
}
