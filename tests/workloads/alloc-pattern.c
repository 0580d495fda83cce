/*
 * alloc-pattern.c - allocation patterns with known answers, for the memory
 * tests and bench/malloc.
 *
 *   alloc-pattern leak  [--seconds S] [--rate-kib N]   leak_chunk() leaks N KiB/s
 *       (default 1024) in 64 KiB blocks it touches (so RSS grows as much),
 *       beside churn_step() that allocates and frees small blocks.
 *   alloc-pattern churn [--seconds S] [--threads T]    T threads (default 2)
 *       allocate and free blocks of 16..4096 bytes, a working set of 256 per
 *       thread: memory stays flat.
 *   alloc-pattern tight [--seconds S] [--threads T] [--iterations N]
 *       the benchmark loop: malloc + free of 16..256 bytes, as fast as it can,
 *       N iterations per thread (then it prints the time taken), or S seconds.
 *   --delay S: sleep S seconds after printing "ready", before the work.
 *   --wait 1: after printing "ready", wait for a line on stdin before the
 *       work (the caller has attached its profiler; EOF: exit 1).
 *   --fork 1: then fork, and do the work in the child (the parent waits).
 *
 * Prints "ready" on stdout once started; at the end, per thread, the bytes
 * it allocated on stderr.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "handshake.h"
#include "timing.h"

#define LEAK_BLOCK (64 * 1024)
#define WORKING_SET 256

static double seconds = 10;
static long rate_kib = 1024;
static long iterations;
static int nthreads = 2;
static double delay_s; /* --delay: sleep after "ready", before the work (a profiler attaches) */
static bool wait_stdin; /* --wait 1: "ready", then a line on stdin before the work */
static bool fork_first; /* --fork 1: a child process does the work, the parent waits for it */

/* A cheap PRNG per thread (xorshift). */
static uint32_t next_rand(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Never inlined, so that it is a frame of the allocating stack. */
__attribute__((noinline)) static void *leak_chunk(void)
{
	char *p = malloc(LEAK_BLOCK);

	if (p)
		memset(p, 0x5a, LEAK_BLOCK); /* resident: RSS grows with the leak */
	return p;
}

/* Replace one block of the working set: as much freed as allocated. */
__attribute__((noinline)) static uint64_t churn_step(void **set, uint32_t *seed, unsigned max)
{
	unsigned i = next_rand(seed) % WORKING_SET, size = 16 + next_rand(seed) % max;

	free(set[i]);
	set[i] = malloc(size);
	if (set[i])
		((volatile char *)set[i])[0] = 1;
	return size;
}

static void *leaked_list; /* keeps the leak reachable, as a real leak in a cache would be */

static void run_leak(void)
{
	void *set[WORKING_SET] = { 0 };
	uint32_t seed = 12345;
	double start = now_s(), next = start, period = (double)LEAK_BLOCK / (rate_kib * 1024.0);

	while (now_s() - start < seconds) {
		while (now_s() >= next) {
			void **p = leak_chunk();

			if (p)
				*p = leaked_list;
			leaked_list = p;
			next += period;
		}
		for (int k = 0; k < 50; k++)
			churn_step(set, &seed, 512);
		usleep(2000);
	}
	for (int i = 0; i < WORKING_SET; i++)
		free(set[i]);
}

__attribute__((noinline)) static void *churn_thread(void *arg)
{
	void *set[WORKING_SET] = { 0 };
	uint32_t seed = 777 + (uint32_t)(uintptr_t)arg;
	double start = now_s();
	uint64_t bytes = 0;

	while (now_s() - start < seconds) {
		for (int k = 0; k < 1000; k++)
			bytes += churn_step(set, &seed, 4096);
		usleep(1000);
	}
	for (int i = 0; i < WORKING_SET; i++)
		free(set[i]);
	fprintf(stderr, "churn thread %ld: %llu bytes allocated\n", (long)(uintptr_t)arg,
		(unsigned long long)bytes);
	return NULL;
}

/* Where the tight loop's blocks pass: the compiler may not drop a malloc/free pair. */
static __thread void *volatile sink;

/* One malloc and one free per iteration. */
__attribute__((noinline)) static void *tight_thread(void *arg)
{
	uint32_t seed = 99 + (uint32_t)(uintptr_t)arg;
	double start = now_s();

	for (long i = 0; iterations ? i < iterations : (i & 1023) || now_s() - start < seconds; i++) {
		char *p = malloc(16 + next_rand(&seed) % 241);

		if (p)
			p[0] = (char)i;
		sink = p;
		free(sink);
	}
	return NULL;
}

static void run_threads(void *(*fn)(void *))
{
	pthread_t t[64];
	double start = now_s();

	for (long i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, fn, (void *)i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	if (fn == tight_thread)
		printf("elapsed %.6f\n", now_s() - start);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--rate-kib") == 0)
			rate_kib = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--threads") == 0)
			nthreads = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--iterations") == 0)
			iterations = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--delay") == 0)
			delay_s = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--wait") == 0)
			wait_stdin = atoi(argv[i + 1]) != 0;
		else if (strcmp(argv[i], "--fork") == 0)
			fork_first = atoi(argv[i + 1]) != 0;
		else {
			fprintf(stderr, "alloc-pattern: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (nthreads < 1 || nthreads > 64 || rate_kib < 1 || seconds <= 0) {
		fprintf(stderr, "alloc-pattern: bad option value\n");
		return 2;
	}
	if (!say_ready(wait_stdin))
		return 1;
	if (delay_s > 0)
		sleep_s(delay_s);
	if (fork_first) {
		pid_t child = fork();
		int status;

		if (child < 0)
			return 1;
		if (child > 0)
			return waitpid(child, &status, 0) == child && WIFEXITED(status)
				       ? WEXITSTATUS(status)
				       : 1;
	}
	if (strcmp(mode, "leak") == 0)
		run_leak();
	else if (strcmp(mode, "churn") == 0)
		run_threads(churn_thread);
	else if (strcmp(mode, "tight") == 0)
		run_threads(tight_thread);
	else {
		fprintf(stderr, "usage: alloc-pattern leak|churn|tight [--seconds S] [--rate-kib N] "
				"[--threads T] [--iterations N] [--delay S] [--wait 1] [--fork 1]\n");
		return 2;
	}
	return 0;
}
