/*
 * test-session-malloc.c - a session's sampled allocations
 * (session__on_malloc(), daemon/session/memory.c) as the allocations table
 * keeps them, from the records malloc.bpf.c sends: an allocator that hands
 * out the same address again and again (each block freed before the next
 * is made) leaves one row per block, each with its free time, and one live
 * block; a flush the store refuses loses nothing and writes nothing twice;
 * a lost RETURN record is counted and the thread's next call replaces it;
 * a process's own weight (the USDT path) is kept as it says. Needs neither
 * root nor BPF.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "check_session.h"
#include "check_store.h"
#include "service/request.h"
#include "session/session.h"
#include "store/store.h"
#include "util.h"

static volatile int sink;

__attribute__((noinline)) void malloc_test_caller(void)
{
	sink++;
}

static struct session_env env;
static struct session *s;
static int64_t sid;
static uint64_t clock_ns = 1000000000;

/* One record of @kind for block @addr of @size bytes (@weight: the process's, or 0). */
static void feed(uint16_t kind, uint64_t addr, uint64_t size, uint64_t weight, uint16_t func)
{
	static struct malloc_alloc_event a;
	struct malloc_event *e = &a.h;
	uint64_t ip = (uint64_t)(uintptr_t)malloc_test_caller + 4;

	memset(&a, 0, sizeof(a));
	e->time_ns = clock_ns += 1000;
	e->pid = e->tid = (uint32_t)getpid();
	e->kind = kind;
	e->func = func;
	e->addr = kind == MALLOC_EV_ALLOC ? 0 : addr;
	e->size = size;
	e->weight = weight;
	snprintf(e->comm, sizeof(e->comm), "malloc-test");
	session__on_malloc(s, e, kind == MALLOC_EV_ALLOC ? &ip : NULL,
			   kind == MALLOC_EV_ALLOC ? 1 : 0);
}

static void alloc_at(uint64_t addr, uint64_t size, uint64_t weight, uint16_t func)
{
	feed(MALLOC_EV_ALLOC, 0, size, weight, func);
	feed(MALLOC_EV_RETURN, addr, 0, 0, func);
}

static long long scalar(const char *sql)
{
	return test_session_scalar(env.store, sid, sql);
}

int main(void)
{
	char dir[] = "/tmp/test-session-malloc-XXXXXX", path[64];
	struct session_params params = test_session_params("cpu,malloc", EVENT_CPU | EVENT_MALLOC);
	const uint64_t addr = 0x7f0000001000, live = 0x7f0000200000;

	params.malloc_sample_bytes = 512 * 1024;
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return 1;
	sid = session__id(s);

	/* 5,000 blocks at one address, each freed before the next: one row each, all freed. */
	for (int i = 0; i < 5000; i++) {
		alloc_at(addr, 64, 0, MALLOC_FUNC_MALLOC);
		feed(MALLOC_EV_FREE, addr, 0, 0, MALLOC_FUNC_FREE);
	}
	alloc_at(live, 1 << 20, 0, MALLOC_FUNC_MALLOC);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1"), 5001);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1 AND "
			    "free_ns IS NULL"),
		     1);
	CHECK_INT_EQ(scalar("SELECT address FROM allocations WHERE session_id = ?1 AND "
			    "free_ns IS NULL"),
		     (long long)live);

	/* The store refuses the flush: the frees and new blocks wait, then go in once. */
	test_session_exec(env.store, "CREATE TEMP TRIGGER refuse BEFORE INSERT ON allocations "
				     "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END");
	feed(MALLOC_EV_FREE, live, 0, 0, MALLOC_FUNC_FREE);
	for (int i = 0; i < 100; i++) {
		alloc_at(addr, 64, 0, MALLOC_FUNC_MALLOC);
		feed(MALLOC_EV_FREE, addr, 0, 0, MALLOC_FUNC_FREE);
	}
	CHECK(test_session_flush(s, &env) < 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1"), 5001);
	test_session_exec(env.store, "DROP TRIGGER refuse");
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1"), 5101);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1 AND "
			    "free_ns IS NULL"),
		     0);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM allocations WHERE session_id = ?1"), 5101);

	/* An ALLOC whose RETURN was lost is replaced by the thread's next sampled call,
	 * and counted lost; a RETURN with no call waiting is counted lost too. */
	feed(MALLOC_EV_ALLOC, 0, 100, 0, MALLOC_FUNC_MALLOC);
	alloc_at(addr, 200, 0, MALLOC_FUNC_MALLOC);
	feed(MALLOC_EV_RETURN, addr + 4096, 0, 0, MALLOC_FUNC_MALLOC);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT size_bytes FROM allocations WHERE session_id = ?1 AND "
			    "free_ns IS NULL AND address = 0x7f0000001000"),
		     200);
	CHECK_INT_EQ(scalar("SELECT malloc_lost FROM sessions WHERE id = ?1"), 2);
	feed(MALLOC_EV_FREE, addr, 0, 0, MALLOC_FUNC_FREE);

	/* A block the process sampled itself weighs what it says, not what profd would. */
	alloc_at(live, 100, 3 * 512 * 1024, MALLOC_FUNC_USDT_ALLOC);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT weight_bytes FROM allocations WHERE session_id = ?1 AND "
			    "func = 'otel_memory:alloc'"),
		     3 * 512 * 1024);

	test_session_close(&env, s, dir, path);
	return check_exit("session-malloc");
}
