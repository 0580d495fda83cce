/*
 * test-session.c - a session's flush, its failure and its retry
 * (daemon/session/session.c), on samples of this very process written
 * into a real database: what `profctl top` shows after each step is what
 * was fed, each sample once. A flush that fails part-way (the store
 * refuses a row, or the COMMIT) is rolled back and written whole by the
 * next one, and leaves no row pointing at one that does not exist (a
 * flush does not have SQLite check its foreign keys). A thread that exits
 * makes room under max_threads_per_session.
 * In a session of a CPython child, an address shaped like a Python frame
 * token is stored as [unknown], and the flush works.
 * Needs neither root nor BPF: the session runs without a sampler and the
 * test feeds it the records the BPF program would.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <jansson.h>

#include "check.h"
#include "check_json.h"
#include "check_session.h"
#include "check_store.h"
#include "check_workload.h"
#include "report/query.h"
#include "service/request.h"
#include "session/session.h"
#include "store/store.h"
#include "util.h"

/* Three functions whose addresses stand in the fed stacks; never called. */
static volatile int sink;

__attribute__((noinline)) void session_test_hot(void)
{
	for (int i = 0; i < 100; i++)
		sink += i;
}

__attribute__((noinline)) void session_test_cold(void)
{
	for (int i = 0; i < 100; i++)
		sink -= i;
}

__attribute__((noinline)) void session_test_caller(void)
{
	session_test_hot();
	session_test_cold();
}

static struct session_env env;
static struct session *s;
static int64_t sid;

/* @n samples of thread @tid: @leaf called from session_test_caller. */
static void feed(void (*leaf)(void), unsigned n, pid_t tid)
{
	uint64_t ips[] = {(uint64_t)(uintptr_t)leaf + 4,
			  (uint64_t)(uintptr_t)session_test_caller + 5}; /* then a return address */

	test_session_samples(s, tid, tid == getpid() ? "worker-0" : "worker-1", ips, 2, n);
}

/* Thread @tid of this process exits, as the BPF program's exit record says. */
static void thread_exit(pid_t tid)
{
	struct sample_event e = {.pid = (uint32_t)getpid(), .tid = (uint32_t)tid};

	e.time_ns = now_ns(CLOCK_MONOTONIC);
	snprintf(e.comm, sizeof(e.comm), "worker-1");
	session__on_thread_exit(s, &e);
}

static int flush(void)
{
	return test_session_flush(s, &env);
}

/* Self samples of @function in the top report; -1 if it is not listed. */
static long long self_samples(const char *function)
{
	json_t *top = NULL, *f;
	long long n = -1;
	size_t i;

	if (query__top(store__db(env.store), sid, 20, NULL, NULL, 0, &top) < 0)
		return -2;
	json_array_foreach(json_object_get(top, "functions"), i, f)
	{
		const char *name = json_string_value(json_object_get(f, "function"));

		if (name && strcmp(name, function) == 0)
			n = (long long)json_integer_value(json_object_get(f, "self_samples"));
	}
	json_decref(top);
	return n;
}

static long long scalar(const char *sql)
{
	return test_session_scalar(env.store, sid, sql);
}

/*
 * check_token_shaped() - a session of a CPython process (a child, python3
 * -c reading stdin) merges Python frames, whose tokens are 0xfe << 56 | index: a
 * user address of that shape that is no token of its reader (garbage from
 * a frame-pointer walk) is stored as an [unknown] frame; it does not fail
 * the flush (a frame without a module did, flush after flush).
 */
static void check_token_shaped(const struct session_params *base)
{
	char *argv[] = {"/usr/bin/python3", "-c", "import sys; sys.stdin.read()", NULL};
	struct session_params params = *base;
	struct sample_event *e;
	struct session *py = NULL;
	pid_t child;
	int go;

	if (access(argv[0], X_OK) != 0) {
		check_skip("token-shaped", "no /usr/bin/python3");
		return;
	}
	go = workload_start(argv, NULL, STDIN_FILENO);
	child = workload_pid;
	/* blocked reading stdin: python3 is mapped and initialized */
	if (!wait_blocked_in_read(child, 30))
		SETUP_FAIL("python3 did not start");
	params.pid = child;
	params.python = true;
	CHECK_INT_EQ(session__new(&env, 1, &params, &py), 0);
	e = calloc(1, sizeof(*e));
	if (!py || !e)
		goto out;
	/* the Python frames are on: its reader is what the address is looked up in */
	CHECK_INT_EQ(test_session_scalar(env.store, session__id(py),
					 "SELECT python = 'ok' FROM sessions WHERE id = ?1"),
		     1);
	e->pid = e->tid = (uint32_t)child;
	snprintf(e->comm, sizeof(e->comm), "python3");
	e->ustack_len = 1;
	e->ips[0] = 0xfe0000dead001234ull;
	e->time_ns = now_ns(CLOCK_MONOTONIC);
	session__on_sample(py, e);
	CHECK_INT_EQ(test_session_flush(py, &env), 0);
	CHECK_INT_EQ(test_session_scalar(env.store, session__id(py),
					 "SELECT samples FROM sessions WHERE id = ?1"),
		     1);
	CHECK_INT_EQ(test_session_scalar(env.store, session__id(py),
					 "SELECT count(*) FROM frames WHERE module = '[unknown]' "
					 "AND rel_addr = 0xfe0000dead001234"),
		     1);
out:
	free(e);
	if (py) {
		session__stop(py, &env);
		session__free(py);
	}
	close(go);
	workload_kill();
}

int main(void)
{
	char dir[] = "/tmp/test-session-XXXXXX", path[64];
	struct session_params params = test_session_params("cpu", EVENT_CPU);
	pid_t other_tid = getpid() + 1; /* a second thread, as the kernel would name it */

	params.max_threads = 3;
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return 1;
	sid = session__id(s);

	/* A flush that works. */
	feed(session_test_hot, 30, getpid());
	feed(session_test_cold, 10, other_tid);
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(self_samples("session_test_hot"), 30);
	CHECK_INT_EQ(self_samples("session_test_cold"), 10);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"), 40);

	/* The store refuses the samples rows (as a full disk would): nothing of the
	 * flush is kept, and the samples wait in the session. */
	feed(session_test_hot, 20, getpid());
	test_session_exec(env.store, "CREATE TEMP TRIGGER refuse_samples BEFORE INSERT ON samples "
				     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
	CHECK(flush() < 0);
	CHECK_INT_EQ(self_samples("session_test_hot"), 30);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"), 40);

	/* Fails later in the same flush (the thread rows, after the samples were
	 * written): the rollback takes the samples back too. */
	test_session_exec(env.store, "DROP TRIGGER refuse_samples");
	test_session_exec(env.store, "CREATE TEMP TRIGGER refuse_threads BEFORE UPDATE ON threads "
				     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
	test_session_exec(env.store,
			  "CREATE TEMP TRIGGER refuse_threads_insert BEFORE INSERT ON threads "
			  "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
	feed(session_test_cold, 5, other_tid);
	CHECK(flush() < 0);
	CHECK_INT_EQ(self_samples("session_test_hot"), 30);
	CHECK_INT_EQ(self_samples("session_test_cold"), 10);
	/* A flush does not enforce foreign keys (store__begin_flush()); after its
	 * rollback they are enforced again, for the deletes that cascade. */
	CHECK_INT_EQ(scalar("PRAGMA foreign_keys"), 1);

	/* The store works again: the next flush writes every waiting sample, once. */
	test_session_exec(env.store, "DROP TRIGGER refuse_threads");
	test_session_exec(env.store, "DROP TRIGGER refuse_threads_insert");
	feed(session_test_hot, 1, getpid());
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(self_samples("session_test_hot"), 51);
	CHECK_INT_EQ(self_samples("session_test_cold"), 15);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"), 66);
	CHECK_INT_EQ(scalar("SELECT sum(samples) FROM threads WHERE session_id = ?1"), 66);
	/* And a flush with nothing new adds nothing. */
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(self_samples("session_test_hot"), 51);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"), 66);
	/* Every row those flushes wrote, after two rollbacks, points at a row that exists. */
	CHECK_INT_EQ(scalar("PRAGMA foreign_keys"), 1);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM pragma_foreign_key_check"), 0);

	/* max_threads_per_session (3 here) bounds the threads alive at once: a fourth
	 * thread's samples are refused, and taken once one of the three has exited. */
	feed(session_test_hot, 1, getpid() + 2);
	feed(session_test_hot, 4, getpid() + 3);
	thread_exit(other_tid);
	feed(session_test_hot, 6, getpid() + 3);
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"), 73);
	CHECK_INT_EQ(scalar("SELECT limit_dropped_samples FROM sessions WHERE id = ?1"), 4);
	CHECK_INT_EQ(scalar("SELECT samples FROM threads WHERE session_id = ?1 AND tid = "
			    "(SELECT max(tid) FROM threads WHERE session_id = ?1)"),
		     6);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM threads WHERE session_id = ?1 AND "
			    "exited_at_ns IS NOT NULL"),
		     1);

	check_token_shaped(&params);
	test_session_close(&env, s, dir, path);
	return check_exit("session");
}
