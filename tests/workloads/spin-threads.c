/*
 * spin-threads.c - a multi-threaded CPU workload with a known profile, the
 * target of the integration tests, the demo and bench/overhead.
 *
 * Duty-cycle mode (default): thread i is busy weight[i] * unit_ms of CPU time
 * in every 100 ms period and sleeps the rest, so the threads' CPU time is in
 * the ratio of the weights whatever the number of cores (the weights must
 * leave the machine some idle time). While busy, 90% of the time is spent in
 * hot_function() and 10% in warm_function(), called through
 * worker_main() -> run_period() -> do_work().
 *
 * Fixed-work mode (--iterations N): every thread runs N units of work without
 * sleeping, then the program prints its wall time in seconds and exits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include <getopt.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "timing.h"

#define PERIOD_NS 100000000LL
#define MAX_THREADS 64
#define MAX_LONG(a, b) ((a) > (b) ? (a) : (b))

static double seconds = 10;
static double delay_s; /* wait before starting the workers */
static long unit_ms = 10;
static double hot_factor = 1; /* hot_function's work per unit, times this (a "regression") */
static long iterations;
static int nr_idle; /* --idle: threads that wait, blocked, until the end */
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int nr_threads = 3;
static long weights[MAX_THREADS] = { 1, 2, 3 };
static long hot_spins, warm_spins; /* calibrated: iterations of ~0.9 ms and ~0.1 ms */
static int calibrate_only;	  /* --calibrate: print hot_spins,warm_spins and exit */
static volatile int stop;
static double cpu_s[MAX_THREADS]; /* each worker's CPU time, seconds, at its end */

/*
 * Give a leaf function a frame: GCC 12 emits none for a leaf that needs no
 * stack even with -mno-omit-leaf-frame-pointer, and then a frame-pointer
 * unwinder skips the leaf's caller (here do_work). Taking the frame address
 * makes GCC set up %rbp. DWARF unwinding needs none of this.
 */
#define FORCE_FRAME() __asm__ volatile("" : : "r"(__builtin_frame_address(0)))

/* The hot function: 9 parts in 10 of the work. */
__attribute__((noinline)) uint64_t hot_function(uint64_t x, long n)
{
	FORCE_FRAME();
	for (long i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

/* The warm function: 1 part in 10. */
__attribute__((noinline)) uint64_t warm_function(uint64_t x, long n)
{
	FORCE_FRAME();
	for (long i = 0; i < n; i++) {
		x ^= x >> 13;
		x *= 0x9e3779b97f4a7c15ULL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

/* One unit of work: about 1 ms, 90% hot, 10% warm. */
__attribute__((noinline)) uint64_t do_work(uint64_t x)
{
	x = hot_function(x, hot_spins);
	x = warm_function(x, warm_spins);
	return x;
}

/* Busy for @busy_ns of this thread's CPU time. */
__attribute__((noinline)) uint64_t run_period(uint64_t x, int64_t busy_ns)
{
	int64_t start = clock_ns(CLOCK_THREAD_CPUTIME_ID);

	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - start < busy_ns)
		x = do_work(x);
	return x;
}

static void *worker_main(void *arg)
{
	long idx = (long)arg;
	char name[16];
	uint64_t x = (uint64_t)idx + 1;
	int64_t next = clock_ns(CLOCK_MONOTONIC);

	snprintf(name, sizeof(name), "worker-%d", (int)(idx % MAX_THREADS) + 1);
	pthread_setname_np(pthread_self(), name);
	if (iterations) {
		for (long i = 0; i < iterations; i++)
			x = do_work(x);
	} else {
		while (!stop) {
			struct timespec ts;

			x = run_period(x, weights[idx] * unit_ms * 1000000LL);
			next += PERIOD_NS;
			ts.tv_sec = next / 1000000000LL;
			ts.tv_nsec = next % 1000000000LL;
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
	}
	cpu_s[idx] = (double)clock_ns(CLOCK_THREAD_CPUTIME_ID) / 1e9;
	return (void *)(uintptr_t)x;
}

/* An idle pool thread: blocked on a condition variable until the program ends. */
static void *idle_main(void *arg)
{
	char name[16];

	snprintf(name, sizeof(name), "idle-%d", (int)((long)arg % MAX_THREADS) + 1);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&idle_lock);
	while (!stop)
		pthread_cond_wait(&idle_cond, &idle_lock);
	pthread_mutex_unlock(&idle_lock);
	return NULL;
}

/* Iterations of @fn that took about @target_ns of CPU time in one trial. */
static long calibrate_once(uint64_t (*fn)(uint64_t, long), int64_t target_ns)
{
	int64_t t0, t = 0;
	uint64_t x = 1;
	long n = 1000;

	while (n < (1L << 40)) {
		t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		x = fn(x, n);
		t = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
		if (t > 20000000)
			break;
		n *= 2;
	}
	if (x == 42)
		puts(""); /* keep x alive */
	return MAX_LONG(1, (long)((double)n * (double)target_ns / (double)(t ? t : 1)));
}

/*
 * Iterations of @fn that take about @target_ns of CPU time: the most of
 * five trials, since a trial can only be slowed down (a busy host steals
 * CPU time from this VM and it still counts as the thread's), never sped
 * up. Without this, the 9:1 split of hot and warm work varied by 30% from
 * run to run on a loaded machine.
 */
static long calibrate(uint64_t (*fn)(uint64_t, long), int64_t target_ns)
{
	long best = 0;

	for (int i = 0; i < 5; i++)
		best = MAX_LONG(best, calibrate_once(fn, target_ns));
	return best;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: spin-threads [--seconds S] [--weights W1,W2,...] [--unit-ms MS]\n"
		   "                    [--iterations N] [--threads N]\n"
		   "  --seconds S       run for S seconds (default 10; duty-cycle mode)\n"
		   "  --weights LIST    relative CPU time per thread (default 1,2,3)\n"
		   "  --unit-ms MS      busy ms per 100 ms period per weight unit (default 10)\n"
		   "  --iterations N    fixed-work mode: N ~1 ms units per thread, no sleeping\n"
		   "  --threads N       threads in fixed-work mode (default 3)\n"
		   "  --delay S         sleep S seconds before starting the workers\n"
		   "  --idle N          also start N idle threads (idle-1, ...), blocked until\n"
		   "                    the end, as a thread pool waiting for work\n"
		   "  --hot-factor F    make hot_function F times slower (default 1), for\n"
		   "                    before/after comparisons (profctl diff)\n"
		   "  --calibrate       print the iterations of hot_function and warm_function\n"
		   "                    in one ~1 ms unit of work (\"HOT,WARM\") and exit\n"
		   "  --spins HOT,WARM  use these iterations instead of calibrating: two runs\n"
		   "                    to compare then do the same work per unit\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "seconds", required_argument, NULL, 's' },
		{ "weights", required_argument, NULL, 'w' },
		{ "unit-ms", required_argument, NULL, 'u' },
		{ "iterations", required_argument, NULL, 'i' },
		{ "threads", required_argument, NULL, 't' },
		{ "delay", required_argument, NULL, 'd' },
		{ "hot-factor", required_argument, NULL, 'F' },
		{ "idle", required_argument, NULL, 'I' },
		{ "calibrate", no_argument, NULL, 'C' },
		{ "spins", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{},
	};
	pthread_t threads[MAX_THREADS], idle[MAX_THREADS];
	int64_t t0;
	int c;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		switch (c) {
		case 's':
			seconds = atof(optarg);
			break;
		case 'w': {
			char *p = optarg;

			nr_threads = 0;
			while (*p && nr_threads < MAX_THREADS) {
				weights[nr_threads++] = strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
			break;
		}
		case 'u':
			unit_ms = atol(optarg);
			break;
		case 'i':
			iterations = atol(optarg);
			break;
		case 't':
			nr_threads = atoi(optarg);
			break;
		case 'd':
			delay_s = atof(optarg);
			break;
		case 'F':
			hot_factor = atof(optarg);
			break;
		case 'I':
			nr_idle = atoi(optarg);
			break;
		case 'C':
			calibrate_only = 1;
			break;
		case 'S': {
			char *p = optarg;

			hot_spins = strtol(p, &p, 10);
			warm_spins = *p == ',' ? strtol(p + 1, &p, 10) : 0;
			if (*p || hot_spins < 1 || warm_spins < 1) {
				fprintf(stderr,
					"spin-threads: --spins wants HOT,WARM, two counts >= 1\n");
				return 2;
			}
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (nr_threads < 1 || nr_threads > MAX_THREADS || seconds <= 0 || !(hot_factor > 0) ||
	    nr_idle < 0 || nr_idle > MAX_THREADS) {
		usage(stderr);
		return 2;
	}
	if (!hot_spins) {
		hot_spins = calibrate(hot_function, 900000);
		warm_spins = calibrate(warm_function, 100000);
	}
	if (calibrate_only) {
		printf("%ld,%ld\n", hot_spins, warm_spins);
		return 0;
	}
	hot_spins = (long)((double)hot_spins * hot_factor);
	if (delay_s > 0) {
		printf("spin-threads: pid %d, workers start in %.1f s\n", getpid(), delay_s);
		fflush(stdout);
		sleep_s(delay_s);
	}
	for (long i = 0; i < nr_idle; i++)
		pthread_create(&idle[i], NULL, idle_main, (void *)i);
	t0 = clock_ns(CLOCK_MONOTONIC);
	for (long i = 0; i < nr_threads; i++)
		pthread_create(&threads[i], NULL, worker_main, (void *)i);
	if (!iterations) {
		printf("spin-threads: pid %d, %d threads, %.1f s\n", getpid(), nr_threads, seconds);
		fflush(stdout);
		sleep_s(seconds);
		stop = 1;
	}
	for (int i = 0; i < nr_threads; i++)
		pthread_join(threads[i], NULL);
	pthread_mutex_lock(&idle_lock);
	stop = 1;
	pthread_cond_broadcast(&idle_cond);
	pthread_mutex_unlock(&idle_lock);
	for (int i = 0; i < nr_idle; i++)
		pthread_join(idle[i], NULL);
	/* The ground truth a profile is checked against: CPU time per thread. */
	for (int i = 0; i < nr_threads; i++)
		fprintf(stderr, "worker-%d cpu %.3f s\n", i + 1, cpu_s[i]);
	if (iterations)
		printf("%.6f\n", (double)(clock_ns(CLOCK_MONOTONIC) - t0) / 1e9);
	return 0;
}
