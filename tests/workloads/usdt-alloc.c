/*
 * usdt-alloc.c - a process whose allocations are sampled by libprofd-alloc.so
 * (linked, so it comes before libc as a preloaded library would): the
 * library's otel_memory:alloc/free USDT probes, OpenTelemetry's
 * memory-profiling contract, fire for sampled allocations only.
 *
 *   usdt-alloc leak  [--seconds S] [--rate-kib N]   leak_objects() leaks N KiB/s
 *       (default 1024) in 4 KiB blocks, beside churn_objects() that allocates
 *       and frees small blocks; at the end prints "leaked BYTES".
 *   usdt-alloc tight [--threads T] [--iterations N]   the benchmark loop:
 *       N malloc + free of 16..256 bytes per thread through the sampler, then
 *       prints the time taken in seconds (bench/malloc --workload usdt).
 *   --delay S: sleep S seconds after printing "ready", before the work.
 *   --wait 1: after printing "ready", wait for a line on stdin before the
 *       work (the caller has attached its profiler; EOF: exit 1).
 *
 * Prints "ready" on stdout once started. With PROFD_ALLOC_STATS=1 the
 * library prints its counts on stderr at exit (libprofd-alloc(3)).
 */
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handshake.h"
#include "timing.h"

#define LEAK_BLOCK 4096

static double seconds = 10, delay_s;
static long rate_kib = 1024, iterations = 1000000;
static int nthreads = 2, wait_stdin;

static __attribute__((noinline)) void leak_objects(void **keep, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		keep[i] = malloc(LEAK_BLOCK);
		if (keep[i])
			memset(keep[i], 1, LEAK_BLOCK);
	}
}

static __attribute__((noinline)) void churn_objects(void)
{
	void *v[64];

	for (int i = 0; i < 64; i++)
		v[i] = malloc(32 + (size_t)i * 16);
	for (int i = 0; i < 64; i++)
		free(v[i]);
}

static void run_leak(void)
{
	size_t per_tick = (size_t)rate_kib * 1024 / LEAK_BLOCK / 10, leaked = 0;
	double end = now_s() + seconds;

	while (now_s() < end) {
		void **keep = malloc(per_tick * sizeof(*keep)); /* kept: the leak's own table */

		if (!keep)
			exit(1);
		leak_objects(keep, per_tick);
		leaked += per_tick * LEAK_BLOCK;
		for (int i = 0; i < 200; i++)
			churn_objects();
		usleep(100 * 1000);
	}
	printf("leaked %zu\n", leaked);
}

static __attribute__((noinline)) void *tight_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;

	for (long i = 0; i < iterations; i++) {
		void *p = malloc(16 + (rand_r(&seed) & 0xf0));

		free(p);
	}
	return NULL;
}

static void run_tight(void)
{
	pthread_t t[64];
	double t0 = now_s();

	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, tight_thread, (void *)(uintptr_t)(i + 1));
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	printf("%.6f\n", now_s() - t0);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	static const struct option options[] = {
	    {"seconds", required_argument, NULL, 's'}, {"rate-kib", required_argument, NULL, 'r'},
	    {"threads", required_argument, NULL, 't'}, {"iterations", required_argument, NULL, 'n'},
	    {"delay", required_argument, NULL, 'd'},   {"wait", required_argument, NULL, 'w'},
	    {0},
	};
	int c;

	optind = 2;
	while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (c) {
		case 's':
			seconds = atof(optarg);
			break;
		case 'r':
			rate_kib = atol(optarg);
			break;
		case 't':
			nthreads = atoi(optarg);
			break;
		case 'n':
			iterations = atol(optarg);
			break;
		case 'd':
			delay_s = atof(optarg);
			break;
		case 'w':
			wait_stdin = atoi(optarg) != 0;
			break;
		default:
			nthreads = 0; /* the usage below */
		}
	}
	if (nthreads < 1 || nthreads > 64 || (strcmp(mode, "leak") && strcmp(mode, "tight"))) {
		fprintf(stderr, "usage: usdt-alloc leak|tight [--seconds S] [--rate-kib N] "
				"[--threads T] [--iterations N] [--delay S] [--wait 1]\n");
		return 2;
	}
	if (!say_ready(wait_stdin))
		return 1;
	if (delay_s > 0)
		sleep_s(delay_s);
	if (strcmp(mode, "leak") == 0)
		run_leak();
	else
		run_tight();
	fflush(stdout);
	return 0;
}
