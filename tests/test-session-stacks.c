/*
 * test-session-stacks.c - a session whose call stacks keep varying (as
 * recursion makes them: deep-nofp has ~230 new stacks a second after
 * minutes) holds a bounded number of raw stacks (session__stacks_evict(),
 * daemon/session/stacks.c), and loses nothing for it: more distinct stacks
 * than max_stacks_per_session are all stored, no sample is dropped at the
 * limit, a stack forgotten and seen again finds its own row in the store
 * (no duplicate) without a lookup while the memo of evicted stacks holds
 * it, a stack seen at every flush is never forgotten, and
 * neither is the stack of a mapping made in the session (its munmap, much
 * later, is counted against it). Its frame cache is bounded too: more
 * distinct code addresses than it holds still give each stack its frames.
 * Neither the CUDA nor the address-space accounting stops the eviction:
 * the stacks of faults stored at a flush may go, and of the stacks CUDA
 * calls took, only a live allocation's stays.
 * Needs neither root nor BPF: the session runs without a sampler and the
 * test feeds it the records the BPF program would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "check_session.h"
#include "session/gpu_acc.h"
#include "session/owned_map.h"
#include "session/session_internal.h"
#include "util.h"

/* Addresses that stand in the fed stacks; never called. */
static volatile int sink;

__attribute__((noinline)) void stacks_test_leaf(void)
{
	sink++;
}

__attribute__((noinline)) void stacks_test_other_leaf(void)
{
	sink--;
}

__attribute__((noinline)) void stacks_test_caller(void)
{
	stacks_test_leaf();
	stacks_test_other_leaf();
}

enum {
	MAX_STACKS = 64,   /* max_stacks_per_session: the cache is half of it */
	ROUNDS = 8,        /* flushes */
	PER_ROUND = 12,    /* new distinct stacks each flush: fewer than the cache */
	WARM_SAMPLES = 5,  /* samples of the stack seen at every flush */
};

static struct session_env env;
static struct session *s;
static int64_t sid;

/*
 * Distinct stack @j (0..ROUNDS * PER_ROUND - 1): a leaf (which one by @j's
 * parity) under 1 + @j / 2 frames of stacks_test_caller, so that each is
 * also its own row in the store.
 */
static void feed(unsigned j, unsigned n)
{
	uint64_t ips[1 + ROUNDS * PER_ROUND / 2];
	unsigned depth = 1 + j / 2;

	ips[0] = (uint64_t)(uintptr_t)(j % 2 ? stacks_test_other_leaf : stacks_test_leaf) + 1;
	for (unsigned i = 1; i <= depth; i++)
		ips[i] = (uint64_t)(uintptr_t)stacks_test_caller + 5; /* return addresses */
	test_session_samples(s, getpid(), "stacks", ips, 1 + depth, n);
}

/* The warm stack: the leaf alone, no caller. The session's copy of it. */
static struct raw_stack *feed_warm(void)
{
	uint64_t ip = (uint64_t)(uintptr_t)stacks_test_leaf + 1;

	test_session_samples(s, getpid(), "stacks", &ip, 1, WARM_SAMPLES);
	return session__stack_intern(s, (pid_t)getpid(), &ip, 0, 1, 0, NULL);
}

/* An anonymous mapping of @len bytes at @addr made by stacks_test_caller, or
 * (@kind VM_MUNMAP) its munmap, sent without a stack, as BPF sends shrinking changes. */
static void feed_vm(uint32_t kind, uint64_t addr, uint64_t len)
{
	test_session_vm(s, kind == VM_MUNMAP ? 0 : (uint64_t)(uintptr_t)stacks_test_caller + 1,
			&(struct vm_change){.addr = addr, .len = len, .kind = kind,
					    .flags = MAP_PRIVATE | MAP_ANONYMOUS});
}

/* The session's copy of the mapping's stack, as feed_vm() sends it. */
static struct raw_stack *vm_stack(void)
{
	uint64_t ip = (uint64_t)(uintptr_t)stacks_test_caller + 1;

	return session__stack_intern(s, (pid_t)getpid(), &ip, 0, 1, 0, NULL);
}

static long long scalar(const char *sql)
{
	return test_session_scalar(env.store, sid, sql);
}

enum {
	FRAME_ADDRS = 300, /* distinct leaf addresses, in main(): more than the frame cache */
	FRAME_ROUNDS = 10, /* over this many flushes: fewer new stacks a flush than the cache */
};

/* A one-frame stack whose leaf is byte @k + 1 of main(). */
static void feed_main(unsigned k)
{
	int main(void);
	uint64_t ip = (uint64_t)(uintptr_t)main + 1 + k;

	test_session_samples(s, getpid(), "stacks", &ip, 1, 1);
}

/*
 * FRAME_ADDRS distinct addresses, 4 per stack of max_stacks at most in the
 * frame cache (SESSION_FRAME_CACHE): it is emptied on the way, and every
 * stack still gets one frame row of its own, in main(); the stacks of the
 * first flush, fed again after, find their rows (no new stack or frame row).
 */
static void test_frame_cache(void)
{
	long long stacks, frames;

	stacks = scalar("SELECT count(*) FROM stacks");
	for (unsigned r = 0; r < FRAME_ROUNDS; r++) {
		for (unsigned k = 0; k < FRAME_ADDRS / FRAME_ROUNDS; k++)
			feed_main(r * (FRAME_ADDRS / FRAME_ROUNDS) + k);
		CHECK_INT_EQ(test_session_flush(s, &env), 0);
		CHECK(s->frames.len <= 4 * MAX_STACKS);
	}
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks"), stacks + FRAME_ADDRS);
	/* one depth-0 frame per address, in main() (code inlined into it: more frames) */
	CHECK_INT_EQ(scalar("SELECT count(*) FROM frames WHERE function = 'main' AND "
			    "inline_depth = 0"),
		     FRAME_ADDRS);
	frames = scalar("SELECT count(*) FROM frames");
	for (unsigned k = 0; k < FRAME_ADDRS / FRAME_ROUNDS; k++)
		feed_main(k);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks"), stacks + FRAME_ADDRS);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM frames"), frames);
	CHECK_INT_EQ(scalar("SELECT limit_dropped_samples FROM sessions WHERE id = ?1"), 0);
}

/* The stack of feed_cuda_malloc()'s calls: the probed function, called from stacks_test_caller. */
static uint64_t cuda_ips[2];

/* The session's copy of that stack. */
static struct raw_stack *cuda_stack(void)
{
	return session__stack_intern(s, (pid_t)getpid(), cuda_ips, 0, 2, 0, NULL);
}

/* A cudaMalloc() of @bytes at @ptr, from cuda_ips, as the uprobe sends it. */
static void feed_cuda_malloc(uint64_t ptr, uint64_t bytes)
{
	static const struct gpu_api api = {.symbol = "cudaMalloc",
					   .kind = GPU_KIND_ALLOC,
					   .flags = UPROBE_F_OUT0,
					   .fn_arg = -1,
					   .size_arg = 1,
					   .ptr_arg = -1,
					   .copy_kind_arg = -1,
					   .space = "device",
					   .error_if_nonzero = true};
	struct gpu_probe p = {.api = &api, .label = "cudaMalloc"};
	struct uprobe_event e = {.pid = (uint32_t)getpid(), .tid = (uint32_t)getpid()};

	e.entry_ns = now_ns(CLOCK_MONOTONIC);
	e.exit_ns = e.entry_ns + 1000;
	e.args[1] = bytes;
	e.out = ptr;
	e.flags = UPROBE_EV_OUT_OK;
	memcpy(e.ips, cuda_ips, sizeof(cuda_ips));
	e.ustack_len = 2;
	gpu_acc__on_event(session__gpu(s), NULL, NULL, &p, &e);
}

/*
 * A session with CUDA calls and address-space changes: a live GPU
 * allocation's stack stays across every flush (the same copy), while
 * FAULT_STACKS fault stacks, more than the cache, seen in the first flush
 * only, and the varying stacks of samples are evicted: the raw stacks stay
 * under the bound and no sample is dropped. Before, the first CUDA stack
 * turned the eviction off for the session's life, and a fault's stack was
 * held by its zeroed accumulator.
 */
static void test_accountings_evict(void)
{
	char dir[] = "/tmp/test-session-stacks-XXXXXX", path[64];
	struct session_params params =
	    test_session_params("cpu,rss,cuda", EVENT_CPU | EVENT_RSS | EVENT_CUDA);
	enum { FAULT_STACKS = MAX_STACKS / 2 + 8 };
	int main(void);
	struct raw_stack *alloc;

	params.max_stacks = MAX_STACKS;
	params.memory_interval_ns = 3600 * NSEC_PER_SEC;
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return;
	sid = session__id(s);
	cuda_ips[0] = 0x1000; /* the probed function: a frame of no module */
	cuda_ips[1] = (uint64_t)(uintptr_t)stacks_test_caller + 1;
	feed_cuda_malloc(0xd000000, 1 << 20);
	alloc = cuda_stack();
	for (unsigned k = 0; k < FAULT_STACKS; k++)
		test_session_vm(s, (uint64_t)(uintptr_t)main + 1 + k,
				&(struct vm_change){.addr = 0x7f0000000000 + 4096 * k,
						    .len = 4096,
						    .kind = VM_FAULT});
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK(scalar("SELECT count(*) FROM vm_changes WHERE session_id = ?1") > 0);
	for (unsigned r = 0; r < ROUNDS; r++) {
		for (unsigned k = 0; k < PER_ROUND; k++)
			feed(r * PER_ROUND + k, 1);
		CHECK_INT_EQ(test_session_flush(s, &env), 0);
		CHECK(s->stacks.len <= MAX_STACKS / 2);
	}
	CHECK_INT_EQ(scalar("SELECT limit_dropped_samples FROM sessions WHERE id = ?1"), 0);
	/* the copy stored at the first flush: a new one would have no row yet */
	CHECK(cuda_stack() == alloc && alloc->stack_id != 0);
	test_session_close(&env, s, dir, path);
	s = NULL;
}

int main(void)
{
	char dir[] = "/tmp/test-session-stacks-XXXXXX", path[64];
	struct session_params params = test_session_params("cpu,rss", EVENT_CPU | EVENT_RSS);
	const uint64_t map_addr = 0x7f0000000000, map_len = 4 << 20;
	struct raw_stack *warm = NULL, *mapper;
	long long rows;

	params.max_stacks = MAX_STACKS;
	params.memory_interval_ns = 3600 * NSEC_PER_SEC; /* no RSS readings during the test */
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return 1;
	sid = session__id(s);
	feed_vm(VM_MMAP, map_addr, map_len);
	mapper = vm_stack();

	for (unsigned r = 0; r < ROUNDS; r++) {
		struct raw_stack *w;

		for (unsigned k = 0; k < PER_ROUND; k++)
			feed(r * PER_ROUND + k, 1);
		w = feed_warm();
		if (r == 0)
			warm = w;
		CHECK_INT_EQ(test_session_flush(s, &env), 0);
		/* bounded after every flush, though each brought PER_ROUND new stacks */
		CHECK(s->stacks.len <= MAX_STACKS / 2);
		/* the stack of every flush stays: the same copy, never forgotten */
		CHECK(w == warm);
	}
	rows = scalar("SELECT count(*) FROM stacks");
	CHECK_INT_EQ(rows, ROUNDS * PER_ROUND + 2); /* and the warm one, and the mapper's */
	CHECK_INT_EQ(scalar("SELECT limit_dropped_samples FROM sessions WHERE id = ?1"), 0);
	CHECK_INT_EQ(scalar("SELECT samples FROM sessions WHERE id = ?1"),
		     ROUNDS * (PER_ROUND + WARM_SAMPLES));

	/* The first round's stacks were forgotten; they come again, and each finds
	 * its row: no new row, two samples on each. */
	for (unsigned k = 0; k < PER_ROUND; k++)
		feed(k, 1);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks"), rows);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM sample_totals WHERE session_id = ?1 AND "
			    "count = 2"),
		     PER_ROUND);
	CHECK_INT_EQ(scalar("SELECT sum(count) FROM sample_totals WHERE session_id = ?1"),
		     ROUNDS * (PER_ROUND + WARM_SAMPLES) + PER_ROUND);

	/* The second round's stacks come again with the frame cache emptied: the
	 * memo of evicted stacks gives their rows, no address is looked up. */
	hashmap_clear_free(&s->frames);
	for (unsigned k = 0; k < PER_ROUND; k++)
		feed(PER_ROUND + k, 1);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(s->frames.len, 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks"), rows);
	/* Once the process's addresses are forgotten (an exited child's, whose PID
	 * may come again), the memo answers no more: the third round's stacks are
	 * symbolized anew, and find their rows in the store. */
	session__forget_frames(s, (pid_t)getpid());
	for (unsigned k = 0; k < PER_ROUND; k++)
		feed(2 * PER_ROUND + k, 1);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK(s->frames.len > 0);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM stacks"), rows);
	CHECK_INT_EQ(scalar("SELECT count(*) FROM sample_totals WHERE session_id = ?1 AND "
			    "count = 2"),
		     3 * PER_ROUND);
	/* Rows of the store may be gone after retention: the memo goes too. */
	session__forget_row_ids(s);
	CHECK(s->stack_memo == NULL);

	/* The mapping's stack, seen once at the start, stayed for its munmap. */
	CHECK(vm_stack() == mapper);
	feed_vm(VM_MUNMAP, map_addr, map_len);
	CHECK_INT_EQ(test_session_flush(s, &env), 0);
	CHECK_INT_EQ(scalar("SELECT coalesce(sum(v.bytes), 0) FROM vm_changes v "
			    "JOIN stack_frames sf ON sf.stack_id = v.stack_id AND sf.pos = 0 "
			    "JOIN frames f ON f.id = sf.frame_id WHERE v.session_id = ?1 AND "
			    "v.change = 'munmap' AND f.function = 'stacks_test_caller'"),
		     -(long long)map_len);

	test_frame_cache();
	test_session_close(&env, s, dir, path);
	test_accountings_evict();
	return check_exit("session-stacks");
}
