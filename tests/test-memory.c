/*
 * test-memory.c - the pure parts of memory profiling: allocation records'
 * checks, the weight of a sampled block, the least-squares slope, the leak
 * rule, and reading a real process's memory from /proc.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "collect/malloc_probes.h"
#include "report/memory.h"
#include "session/session.h"

static void test_records(void)
{
	struct malloc_alloc_event *a = calloc(1, sizeof(*a));
	struct malloc_event *e = &a->h;
	size_t head = offsetof(struct malloc_alloc_event, ips);

	if (!a)
		exit(99);
	/* RETURN and FREE records are a header. */
	e->kind = MALLOC_EV_RETURN;
	CHECK(malloc_event__valid(e, sizeof(*e)));
	CHECK(!malloc_event__valid(e, sizeof(*e) - 1));
	e->kind = 3; /* no such kind */
	CHECK(!malloc_event__valid(e, sizeof(*e)));
	e->kind = MALLOC_EV_FREE;
	e->func = MALLOC_NR_FUNCS; /* no such function */
	CHECK(!malloc_event__valid(e, sizeof(*e)));
	e->func = MALLOC_FUNC_FREE;
	e->slot = MALLOC_MAX_SLOTS;
	CHECK(!malloc_event__valid(e, sizeof(*e)));
	e->slot = 0;

	/* ALLOC: the stack and the stack copy within the record. */
	e->kind = MALLOC_EV_ALLOC;
	e->func = MALLOC_FUNC_MALLOC;
	e->ustack_len = 4;
	CHECK(malloc_event__valid(e, head + 4 * 8));
	CHECK(!malloc_event__valid(e, head + 4 * 8 - 1));
	e->flags = MALLOC_HAS_REGS;
	e->stack_size = 1024;
	CHECK(malloc_event__valid(e, head + 4 * 8 + 1024));
	CHECK(!malloc_event__valid(e, head + 4 * 8 + 1023));
	e->stack_size = 1020; /* not a multiple of 8 */
	CHECK(!malloc_event__valid(e, sizeof(*a)));
	e->stack_size = MALLOC_STACK_BYTES + 8;
	CHECK(!malloc_event__valid(e, sizeof(*a) + 64));
	e->stack_size = 8;
	e->flags = 0; /* stack bytes without registers */
	CHECK(!malloc_event__valid(e, sizeof(*a)));
	e->stack_size = 0;
	e->ustack_len = MALLOC_MAX_FRAMES + 1;
	CHECK(!malloc_event__valid(e, sizeof(*a)));
	free(a);
}

static void test_weight(void)
{
	const uint64_t mean = 512 * 1024;
	double sum = 0;

	/* Much larger than the mean: sampled for sure, weighs its size. */
	CHECK(fabs(malloc_probes__weight(64 * mean, mean) - 64.0 * mean) < 1);
	/* Tiny: weighs about the mean plus half its size. */
	CHECK(fabs(malloc_probes__weight(16, mean) - (mean + 8)) < 1);
	/* 64 KiB at 512 KiB: sampled with p = 1 - exp(-1/8). */
	CHECK(fabs(malloc_probes__weight(65536, mean) - 65536 / (1 - exp(-0.125))) < 1e-6 * mean);
	CHECK(malloc_probes__weight(0, mean) == 0);
	/* Unbiased: expected weight of a call = p * w = its size. */
	for (uint64_t s = 1; s < 4 * mean; s = s * 3 + 7) {
		double p = 1 - exp(-(double)s / mean);

		sum += fabs(p * malloc_probes__weight(s, mean) - (double)s) / (double)s;
	}
	CHECK(sum < 1e-9);
	CHECK_STR_EQ(malloc_probes__func_name(MALLOC_FUNC_POSIX_MEMALIGN), "posix_memalign");
	CHECK_STR_EQ(malloc_probes__func_name(99), "?");
}

static void test_slope_and_leaks(void)
{
	double x[5] = { 0, 1, 2, 3, 4 }, y[5] = { 10, 12, 14, 16, 18 };
	double rising[6] = { 0, 1, 2, 2, 3, 4 }, flat[6] = { 5, 4, 6, 5, 4, 5 };
	double one_jump[6] = { 0, 0, 0, 0, 0, 9 }, falling_end[6] = { 0, 1, 2, 3, 4, 0 };
	double churn_drift[7] = { 0, 4, 3, 4, 5, 6, 7 }, leak[7] = { 0, 1, 2, 3, 3, 5, 6 };

	CHECK(fabs(memory__slope(x, y, 5) - 2) < 1e-12);
	CHECK(memory__slope(x, y, 1) == 0);
	CHECK(memory__slope(x, y, 0) == 0);
	CHECK(memory__is_leak_suspect(rising, 5, 10, 3));
	CHECK(!memory__is_leak_suspect(rising, 5, 2, 3));	/* too few live samples */
	CHECK(!memory__is_leak_suspect(flat, 5, 10, 3));	/* up and down */
	CHECK(!memory__is_leak_suspect(one_jump, 5, 10, 3));	/* one step is not a trend */
	CHECK(!memory__is_leak_suspect(falling_end, 5, 10, 3));	/* freed at the end */
	/* Churn reaching its level in the first window, then drifting up by chance. */
	CHECK(!memory__is_leak_suspect(churn_drift, 6, 10, 3));
	/* A leak seen from the attach: linear from 0. */
	CHECK(memory__is_leak_suspect(leak, 6, 10, 3));
}

static void test_read(void)
{
	struct store_memory m;
	size_t big = 32 << 20;
	char *p;

	CHECK_INT_EQ(memory__read(getpid(), &m), 0);
	CHECK(m.rss_bytes > 0 && m.rss_bytes >= m.anon_bytes);
	CHECK(m.rss_bytes == m.anon_bytes + m.file_bytes + m.shmem_bytes);
	/* 32 MiB touched: RSS and anon grow by about as much. */
	p = malloc(big);
	if (!p)
		exit(99);
	memset(p, 1, big);
	{
		struct store_memory after;

		CHECK_INT_EQ(memory__read(getpid(), &after), 0);
		CHECK(after.anon_bytes >= m.anon_bytes + big - (1 << 20));
	}
	free(p);
	CHECK_INT_EQ(memory__read(0x7ffffff0, &m), -ESRCH);
}

int main(void)
{
	test_records();
	test_weight();
	test_slope_and_leaks();
	test_read();
	return check_exit("memory");
}
