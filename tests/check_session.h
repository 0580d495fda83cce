/*
 * check_session.h - what the C tests that feed a session by hand share
 * (test-session.c, test-session-vm.c, test-session-malloc.c,
 * test-session-stacks.c): a session of this very process in a test
 * database, without a sampler; its flush as the daemon's loop runs it (one
 * transaction, done or failed); one number read back from the store; SQL
 * run on it (the triggers that refuse a flush); and the sample and
 * address-space change records the BPF program would send it.
 */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "check_store.h"
#include "service/request.h"
#include "session/session.h"
#include "store/store.h"
#include "util.h"

/*
 * test_session_params() - the settings of a session of this process by an
 * admin at 99 Hz, frame pointers only, of the @events named (a list as
 * attach takes it) whose bits are @bits.
 */
static inline struct session_params test_session_params(const char *events, unsigned bits)
{
	return (struct session_params){
	    .pid = getpid(),
	    .uid = getuid(),
	    .gid = getgid(),
	    .admin = true,
	    .freq_hz = 99,
	    .events = events,
	    .event_bits = bits,
	    .unwind = UNWIND_MODE_FP,
	};
}

/*
 * test_session_open() - open the database @path, a symbolizer, and a
 * session of @params in slot 0 into @env and *@ret (nothing sampled, no
 * counters: the test feeds the records). A failure to set up is a setup
 * error (exit 99); session__new()'s is a failed check and NULL.
 */
static inline void test_session_open(const char *path, const struct session_params *params,
				     struct session_env *env, struct session **ret)
{
	*env = (struct session_env){0};
	if (store__open(path, &env->store) < 0)
		SETUP_FAIL("cannot open the database %s", path);
	env->sym = symbolizer__new();
	if (!env->sym)
		SETUP_FAIL("out of memory");
	*ret = NULL;
	CHECK_INT_EQ(session__new(env, 0, params, ret), 0);
}

/* test_session_close() - undo test_session_open(), and remove the database. */
static inline void test_session_close(struct session_env *env, struct session *s, const char *dir,
				      const char *path)
{
	if (s) {
		session__stop(s, env);
		session__free(s);
	}
	symbolizer__free(env->sym);
	store__close(env->store);
	test_db_remove(dir, path);
}

/*
 * test_session_flush() - flush @s as the daemon does: in one transaction,
 * then session__flush_done(), or rolled back and session__flush_failed().
 * Returns 0 or the failing step's -errno.
 */
static inline int test_session_flush(struct session *s, struct session_env *env)
{
	int r = store__begin_flush(env->store);

	if (r == 0)
		r = session__flush(s, env);
	if (r == 0)
		r = store__commit(env->store);
	if (r == 0) {
		session__flush_done(s);
		return 0;
	}
	store__rollback(env->store);
	session__flush_failed(s);
	return r;
}

/*
 * test_session_scalar() - the first column of the first row of @sql, with
 * ?1 bound to session @sid; -1 if there is no row, -2 if @sql fails to
 * prepare.
 */
static inline long long test_session_scalar(struct store *store, int64_t sid, const char *sql)
{
	sqlite3_stmt *st;
	long long v = -1;

	if (sqlite3_prepare_v2(store__db(store), sql, -1, &st, NULL) != SQLITE_OK)
		return -2;
	sqlite3_bind_int64(st, 1, sid);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* test_session_exec() - run @sql on @store's database (a test's trigger); a failure is a
 * failed check. */
static inline void test_session_exec(struct store *store, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(store__db(store), sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "SQL failed: %s\n%s\n", err, sql);
		check_failures++;
	}
	sqlite3_free(err);
}

/*
 * test_session_samples() - feed @s @n CPU samples of thread @tid of this
 * process, named @comm, whose user stack is @ips (@len addresses, leaf
 * first, at most PROFILE_MAX_FRAMES), as the BPF program sends them.
 */
static inline void test_session_samples(struct session *s, pid_t tid, const char *comm,
					const uint64_t *ips, unsigned len, unsigned n)
{
	static struct sample_event e;

	memset(&e, 0, sizeof(e));
	e.pid = (uint32_t)getpid();
	e.tid = (uint32_t)tid;
	snprintf(e.comm, sizeof(e.comm), "%s", comm);
	e.ustack_len = (uint16_t)len;
	memcpy(e.ips, ips, len * sizeof(*ips));
	for (unsigned i = 0; i < n; i++) {
		e.time_ns = now_ns(CLOCK_MONOTONIC);
		session__on_sample(s, &e);
	}
}

/*
 * test_session_vm() - feed @s the address-space change @vm of this
 * process as the BPF program sends it: a PROFILE_EVENT_VM record with a
 * one-frame stack at @ip, or, with @ip 0, without a stack
 * (SAMPLE_NO_STACK), as shrinking changes and growth over the BPF side's
 * stack budget come.
 */
static inline void test_session_vm(struct session *s, uint64_t ip, const struct vm_change *vm)
{
	static struct sample_event e;

	memset(&e, 0, sizeof(e));
	e.pid = e.tid = (uint32_t)getpid();
	e.event = PROFILE_EVENT_VM;
	e.time_ns = now_ns(CLOCK_MONOTONIC);
	snprintf(e.comm, sizeof(e.comm), "vm-test");
	if (ip) {
		e.ustack_len = 1;
		e.ips[0] = ip;
	} else {
		e.flags = SAMPLE_NO_STACK;
	}
	e.vm = *vm;
	session__on_vm(s, &e);
}
