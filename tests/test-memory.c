/*
 * test-memory.c - the pure parts of memory profiling: allocation records'
 * checks, the weight of a sampled block, the least-squares slope, the leak
 * rule, and reading a real process's memory from /proc.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "util.h"
#include "collect/malloc_probes.h"
#include "collect/memory.h"
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

/* xorshift64*: a fixed, seeded stream, so that a failure repeats. */
static uint64_t rng_next(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 2685821657736338717ULL;
}

/* A uniform draw in (0, 1]. */
static double rng_unit(uint64_t *x)
{
	return ((double)(rng_next(x) >> 11) + 1.0) / 9007199254740992.0;
}

/*
 * Sampling by bytes as malloc.bpf.c does it, simulated: a countdown drawn
 * from an exponential distribution of mean @mean, lowered by each call's
 * size; the call that takes it to zero or below is sampled and the countdown
 * is drawn anew. The weights user space gives the sampled calls must add up
 * to the bytes really allocated, for each size class of a mixed stream: the
 * expectation is the true total, not the weighting formula.
 */
static void test_weight_estimates_bytes(void)
{
	static const uint64_t sizes[] = { 16, 200, 1000, 4096, 20000, 65536, 1 << 20 };
	enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };
	const uint64_t mean = 4096, per_class_bytes = 64ULL << 20;
	uint64_t calls[NSIZES], seed = 0x9e3779b97f4a7c15ULL, done = 0;
	double estimate[NSIZES] = { 0 }, countdown;
	unsigned samples[NSIZES] = { 0 };

	for (unsigned k = 0; k < NSIZES; k++)
		calls[k] = per_class_bytes / sizes[k];
	countdown = -log(rng_unit(&seed)) * (double)mean;
	/* Interleaved at random: one countdown runs across every size, as in a thread. */
	while (done < NSIZES) {
		unsigned k = (unsigned)(rng_next(&seed) % NSIZES);

		if (!calls[k])
			continue;
		if (--calls[k] == 0)
			done++;
		countdown -= (double)sizes[k];
		if (countdown > 0)
			continue;
		samples[k]++;
		estimate[k] += malloc_probes__weight(sizes[k], mean);
		countdown = -log(rng_unit(&seed)) * (double)mean;
	}
	for (unsigned k = 0; k < NSIZES; k++) {
		double err = fabs(estimate[k] - (double)per_class_bytes) / (double)per_class_bytes;

		printf("size %7llu B: %6u samples, estimate %.4f of the bytes allocated\n",
		       (unsigned long long)sizes[k], samples[k], estimate[k] / (double)per_class_bytes);
		/* >= 10,000 samples per class: one standard deviation is under 1%. */
		CHECK(err < 0.04);
	}
	/* A block far above the mean is always sampled and weighs its own size. */
	CHECK(samples[NSIZES - 1] == per_class_bytes / sizes[NSIZES - 1]);
}

static void test_weight(void)
{
	const uint64_t mean = 512 * 1024;

	/* Much larger than the mean: sampled for sure, weighs its size. */
	CHECK(fabs(malloc_probes__weight(64 * mean, mean) - 64.0 * mean) < 1);
	/* Tiny: rarely sampled, so one sample stands for about the mean of bytes. */
	CHECK(fabs(malloc_probes__weight(16, mean) - (double)mean) < 16);
	CHECK(malloc_probes__weight(0, mean) == 0);
	test_weight_estimates_bytes();
	CHECK_STR_EQ(malloc_probes__func_name(MALLOC_FUNC_POSIX_MEMALIGN), "posix_memalign");
	CHECK_STR_EQ(malloc_probes__func_name(99), "?");
}

static void test_slope_and_leaks(void)
{
	double x[5] = { 0, 1, 2, 3, 4 }, y[5] = { 10, 12, 14, 16, 18 };
	double rising[6] = { 0, 1, 2, 2, 3, 4 }, flat[6] = { 5, 4, 6, 5, 4, 5 };
	double one_jump[6] = { 0, 0, 0, 0, 0, 9 }, falling_end[6] = { 0, 1, 2, 3, 4, 0 };
	double churn_drift[7] = { 0, 4, 3, 4, 5, 6, 7 }, leak[7] = { 0, 1, 2, 3, 3, 5, 6 };

	CHECK(fabs(memory_report__slope(x, y, 5) - 2) < 1e-12);
	CHECK(memory_report__slope(x, y, 1) == 0);
	CHECK(memory_report__slope(x, y, 0) == 0);
	CHECK(memory_report__is_leak_suspect(rising, 5, 10, 3));
	CHECK(!memory_report__is_leak_suspect(rising, 5, 2, 3));	/* too few live samples */
	CHECK(!memory_report__is_leak_suspect(flat, 5, 10, 3));	/* up and down */
	CHECK(!memory_report__is_leak_suspect(one_jump, 5, 10, 3));	/* one step is not a trend */
	CHECK(!memory_report__is_leak_suspect(falling_end, 5, 10, 3));	/* freed at the end */
	/* Churn reaching its level in the first window, then drifting up by chance. */
	CHECK(!memory_report__is_leak_suspect(churn_drift, 6, 10, 3));
	/* A leak seen from the attach: linear from 0. */
	CHECK(memory_report__is_leak_suspect(leak, 6, 10, 3));
	/* Early blocks: a leak keeps them, churn has freed them by the end. */
	CHECK(memory_report__early_blocks_live(10, 10));
	CHECK(memory_report__early_blocks_live(10, 5));
	CHECK(!memory_report__early_blocks_live(10, 4));
	CHECK(!memory_report__early_blocks_live(850, 0));
	CHECK(memory_report__early_blocks_live(1, 0)); /* too few to tell */
	CHECK(memory_report__early_blocks_live(0, 0));
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

	/* 8 MiB of shared anonymous memory touched (smaps names it "/dev/zero (deleted)"):
	 * shmem, by the smaps split; 8 MiB private anonymous (no path): anon. */
	{
		const size_t size = 8 << 20;
		struct store_memory before = {0}, after = {0};
		char *shared, *private;

		CHECK_INT_EQ(memory__read_maps(getpid(), &before, NULL), 0);
		shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		private =
		    mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (shared == MAP_FAILED || private == MAP_FAILED)
			exit(99);
		memset(shared, 1, size);
		memset(private, 1, size);
		CHECK_INT_EQ(memory__read_maps(getpid(), &after, NULL), 0);
		CHECK(after.map_bytes[MEMORY_MAP_SHMEM] >=
		      before.map_bytes[MEMORY_MAP_SHMEM] + size);
		CHECK(after.map_bytes[MEMORY_MAP_ANON] >= before.map_bytes[MEMORY_MAP_ANON] + size);
		munmap(shared, size);
		munmap(private, size);
	}

	/* A status reading has no Pss (it would walk the page tables); a smaps read has Pss and
	 * the split, which sum to about the RSS of a status reading (this process holds still
	 * between the two reads, give or take the pages the reads themselves touch). */
	{
		struct store_memory maps = {0};
		uint64_t split = 0;

		CHECK_INT_EQ(memory__read(getpid(), &m), 0);
		CHECK(!m.has_pss && !m.has_maps);
		CHECK_INT_EQ(memory__read_maps(getpid(), &maps, NULL), 0);
		CHECK(maps.has_pss && maps.has_maps);
		for (int k = 0; k < MEMORY_MAP_NR_KINDS; k++)
			split += maps.map_bytes[k];
		CHECK(llabs((long long)split - (long long)m.rss_bytes) <= 1024 * 1024);
		CHECK(maps.pss_bytes > 0 && maps.pss_bytes <= split);
		/* Each header's kind: this test's own ELF file and its stack are there. */
		CHECK(maps.map_bytes[MEMORY_MAP_FILE] > 0 && maps.map_bytes[MEMORY_MAP_STACK] > 0);
		fprintf(stderr, "RSS: status %llu, smaps %llu bytes; Pss %llu bytes\n",
			(unsigned long long)m.rss_bytes, (unsigned long long)split,
			(unsigned long long)maps.pss_bytes);
	}
}

int main(void)
{
	test_records();
	test_weight();
	test_slope_and_leaks();
	test_read();
	return check_exit("memory");
}
