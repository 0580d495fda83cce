/*
 * usdt-alloc.c - a process that samples its own allocations and says so
 * through USDT probes, as OpenTelemetry's memory-profiling contract asks
 * (opentelemetry-ebpf-profiler design-docs/00003): otel_memory:alloc(ptr,
 * size, weight) for a sampled allocation, weight = the sampling intervals
 * it crossed times the mean interval; otel_memory:free(ptr) for the free of
 * a sampled block only. Sampling is by bytes: a per-thread countdown drawn
 * from an exponential distribution of mean 512 KiB, as tcmalloc and
 * jemalloc do, so an unsampled allocation costs a subtraction and a test.
 * The sampler wraps the process's malloc and free (this executable defines
 * them over glibc's __libc_malloc and __libc_free), as a preloaded sampling
 * library would.
 *
 *   usdt-alloc leak  [--seconds S] [--rate-kib N]   leak_objects() leaks N KiB/s
 *       (default 1024) in 4 KiB blocks, beside churn_objects() that allocates
 *       and frees small blocks; at the end prints "leaked BYTES", then the bytes
 *       leaked and the alloc probes fired while a profiler was attached (the
 *       probes' semaphores set): "leaked_watched BYTES", "fired N".
 *   usdt-alloc tight [--threads T] [--iterations N]   the benchmark loop:
 *       N malloc + free of 16..256 bytes per thread through the sampler, then
 *       prints the time taken in seconds (bench/malloc --workload usdt).
 *   --delay S: sleep S seconds after printing "ready", before the work.
 *
 * Prints "ready" on stdout once started.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* The probes have semaphores (.probes section): a profiler that attaches sets them, which
 * lets the process count what it fires while watched. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

#define MEAN_INTERVAL (512 * 1024)
#define LEAK_BLOCK 4096
#define SAMPLED_MAX 65536 /* sampled blocks live at once, an open-addressing set */
#define SAMPLED_ALIGN 4096

static double seconds = 10, delay_s;
static long rate_kib = 1024, iterations = 1000000;
static int nthreads = 2;

unsigned short otel_memory_alloc_semaphore __attribute__((section(".probes")));
unsigned short otel_memory_free_semaphore __attribute__((section(".probes")));

/* Alloc probes fired, and bytes leaked, while a profiler was attached. */
static unsigned long fired, leaked_watched;

static __thread int64_t until_sample;
static __thread uint64_t rng;

/* The set of sampled blocks not freed yet: frees of the others fire nothing. */
static uintptr_t sampled[SAMPLED_MAX];
static pthread_mutex_t sampled_lock = PTHREAD_MUTEX_INITIALIZER;

/* An exponential draw of mean MEAN_INTERVAL bytes (xorshift64*, seeded per thread). */
static int64_t next_interval(void)
{
	double u;

	if (!rng)
		rng = (uint64_t)(uintptr_t)&rng ^ (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ULL;
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	u = ((rng * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
	return (int64_t)(-log(1.0 - u) * MEAN_INTERVAL) + 1;
}

static size_t slot_of(uintptr_t p)
{
	return (size_t)((p >> 4) * 0x9e3779b97f4a7c15ULL >> 48) % SAMPLED_MAX;
}

void *__libc_malloc(size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

static void set_insert(uintptr_t p)
{
	size_t i;

	for (i = slot_of(p); sampled[i]; i = (i + 1) % SAMPLED_MAX)
		;
	sampled[i] = p;
}

/*
 * The slow path: a sampled allocation of @size bytes, page-aligned so that
 * free() can tell a block that may be sampled by its address alone (the
 * reference sampler tags its blocks instead); remembered, and the probe
 * fired with the bytes it stands for.
 */
static __attribute__((noinline)) void *sample_alloc(size_t size)
{
	void *p = __libc_memalign(SAMPLED_ALIGN, size);
	uint64_t n = 0;

	while (until_sample <= 0) {
		until_sample += next_interval();
		n++;
	}
	if (!p)
		return NULL;
	pthread_mutex_lock(&sampled_lock);
	set_insert((uintptr_t)p);
	fired += otel_memory_alloc_semaphore != 0;
	pthread_mutex_unlock(&sampled_lock);
	DTRACE_PROBE3(otel_memory, alloc, p, size, n * MEAN_INTERVAL);
	return p;
}

void *malloc(size_t size)
{
	if (!until_sample)
		until_sample = next_interval();
	until_sample -= (int64_t)size;
	if (until_sample <= 0)
		return sample_alloc(size);
	return __libc_malloc(size);
}

/* Remove @p from the set if it is there (then its free fires); the rest of its run is
 * inserted again, so that no lookup stops short at the hole. */
static __attribute__((noinline)) void sample_free(void *p)
{
	bool found = false;
	size_t i;

	pthread_mutex_lock(&sampled_lock);
	for (i = slot_of((uintptr_t)p); sampled[i]; i = (i + 1) % SAMPLED_MAX)
		if (sampled[i] == (uintptr_t)p) {
			found = true;
			break;
		}
	if (found) {
		sampled[i] = 0;
		for (i = (i + 1) % SAMPLED_MAX; sampled[i]; i = (i + 1) % SAMPLED_MAX) {
			uintptr_t v = sampled[i];

			sampled[i] = 0;
			set_insert(v);
		}
	}
	pthread_mutex_unlock(&sampled_lock);
	if (found)
		DTRACE_PROBE1(otel_memory, free, p);
}

void free(void *p)
{
	/* Only a page-aligned block may be sampled: the others skip the lock. */
	if (p && ((uintptr_t)p & (SAMPLED_ALIGN - 1)) == 0)
		sample_free(p);
	__libc_free(p);
}

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
		if (otel_memory_alloc_semaphore)
			leaked_watched += per_tick * LEAK_BLOCK;
		for (int i = 0; i < 200; i++)
			churn_objects();
		usleep(100 * 1000);
	}
	printf("leaked %zu\nleaked_watched %lu\nfired %lu\n", leaked, leaked_watched, fired);
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
	    {"delay", required_argument, NULL, 'd'},   {0},
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
		default:
			nthreads = 0; /* the usage below */
		}
	}
	if (nthreads < 1 || nthreads > 64 || (strcmp(mode, "leak") && strcmp(mode, "tight"))) {
		fprintf(stderr, "usage: usdt-alloc leak|tight [--seconds S] [--rate-kib N] "
				"[--threads T] [--iterations N] [--delay S]\n");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	if (delay_s > 0)
		sleep_s(delay_s);
	if (strcmp(mode, "leak") == 0)
		run_leak();
	else
		run_tight();
	fflush(stdout);
	return 0;
}
