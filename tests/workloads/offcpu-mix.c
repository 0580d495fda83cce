/*
 * offcpu-mix.c - a workload with known off-CPU behaviour, the target of
 * test-offcpu. Usage: offcpu-mix SECONDS. Prints "ready" on stdout once its
 * threads are named, and "done" when they have all stopped.
 *
 * Threads (named with pthread_setname_np):
 *   sleeper  alternates ~5 ms of CPU time (CLOCK_THREAD_CPUTIME_ID) in
 *            spin_half() and a 5 ms nanosleep() in sleep_half(): off the CPU
 *            about half the time, sleeping (TASK_INTERRUPTIBLE);
 *   holder   holds a mutex ~50 ms at a time, spinning in hold_lock(), then
 *            releases it for ~2 ms (nanosleep) so the waiter can take it;
 *   waiter   takes and releases the mutex in wait_for_lock(), blocking in
 *            the futex most of the time while the holder has it, then
 *            sleeps 0.1 ms (so it does not spin while the holder sleeps).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "timing.h"

static volatile int stop;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Give a leaf function a frame (see spin-threads.c: GCC 12 omits it otherwise). */
#define FORCE_FRAME() __asm__ volatile("" : : "r"(__builtin_frame_address(0)))

/* Burn @ns of this thread's CPU time. */
__attribute__((noinline)) void spin_half(int64_t ns)
{
	int64_t end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
	uint64_t x = 1;

	FORCE_FRAME();
	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < end)
		for (int i = 0; i < 1000; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			__asm__ volatile("" : "+r"(x));
		}
}

/* Sleep @ns, off the CPU. */
__attribute__((noinline)) void sleep_half(int64_t ns)
{
	struct timespec ts = { .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };

	nanosleep(&ts, NULL);
	__asm__ volatile(""); /* keep the call from becoming a tail call */
}

/* Spin with the lock held for @ns of wall time. */
__attribute__((noinline)) void hold_lock(int64_t ns)
{
	int64_t end;

	pthread_mutex_lock(&lock);
	end = clock_ns(CLOCK_MONOTONIC) + ns;
	while (clock_ns(CLOCK_MONOTONIC) < end)
		;
	pthread_mutex_unlock(&lock);
}

/* Take the lock (blocking while the holder has it) and let it go. */
__attribute__((noinline)) void wait_for_lock(void)
{
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
	__asm__ volatile("");
}

static void *sleeper_main(void *arg)
{
	while (!stop) {
		spin_half(5000000);
		sleep_half(5000000);
	}
	return NULL;
}

static void *holder_main(void *arg)
{
	struct timespec gap = { .tv_nsec = 2000000 };

	while (!stop) {
		hold_lock(50000000);
		nanosleep(&gap, NULL);
	}
	return NULL;
}

static void *waiter_main(void *arg)
{
	struct timespec gap = { .tv_nsec = 100000 };

	while (!stop) {
		wait_for_lock();
		/* Not a busy loop while the holder sleeps between its holds. */
		nanosleep(&gap, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void *(*fn)(void *);
	} threads[] = { { "sleeper", sleeper_main }, { "holder", holder_main },
			{ "waiter", waiter_main } };
	pthread_t tids[3];
	double seconds;

	if (argc != 2 || (seconds = strtod(argv[1], NULL)) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < 3; i++) {
		if (pthread_create(&tids[i], NULL, threads[i].fn, NULL) != 0) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
		pthread_setname_np(tids[i], threads[i].name);
	}
	printf("ready\n");
	fflush(stdout);
	sleep_s(seconds);
	stop = 1;
	for (int i = 0; i < 3; i++)
		pthread_join(tids[i], NULL);
	printf("done\n");
	return 0;
}
