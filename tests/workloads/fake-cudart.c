/*
 * fake-cudart.c - a program that defines cudaMalloc, cudaFree, cudaMemcpy
 * and cudaDeviceSynchronize itself, with the CUDA runtime's signatures, and
 * makes them succeed (host memory stands in for device memory). On a
 * machine without a GPU the real runtime fails every allocation, so this is
 * how test-cuda checks, through the same probes (found by symbol in the
 * executable, as for a statically linked runtime), what profd reports when
 * allocations succeed: live bytes, growth by allocating stack, frees
 * matched by pointer. Also the target of the generic --uprobe test
 * (work_unit: WORK_UNITS calls of at least 20 ms each).
 *
 * Prints "ready", waits for a line on stdin, then 4 times: alloc_temp()
 * allocates 256 KiB and frees it, alloc_cache() allocates 1 MiB and keeps
 * it (4 MiB leaked); copies 8192 bytes HtoD each time; then calls
 * work_unit() WORK_UNITS times; prints "done" and exits.
 * With --block-in-sync, the first cudaDeviceSynchronize() prints "syncing"
 * and waits there for a second line on stdin, before it all: a thread
 * inside a probed call while a session detaches and the next one attaches.
 * With --calls N (bench/uprobe-cost), it calls cudaDeviceSynchronize() N
 * times instead, prints the nanoseconds that took, and exits.
 * With --varied SECONDS, it allocates 1 MiB from alloc_cache() (kept
 * live), then for SECONDS goes down call chains of descend(), spinning
 * (~0.5 ms) at the bottom and calling cudaDeviceSynchronize() there: in its
 * second t, chains of 12 (t % 10) to 12 (t % 10) + 11 frames, in turn. CPU
 * samples and CUDA calls from a band of 12 chain lengths a second, 120 in
 * all (under the 128 frames of a walk), a band coming back 10 s after it
 * went (test-limits: a session with CUDA probes on forgets stacks too);
 * prints "done" and exits.
 * With --fork, it forks a child instead, which prints "child PID", spins on
 * the CPU for 0.3 s (so that a profiler following children sees it), waits
 * for a line on stdin, allocates 2 x 1 MiB from alloc_cache() (kept) and
 * exits; the parent waits for it and exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "handshake.h"

#define WORK_UNITS 7

__attribute__((noinline, used)) int cudaMalloc(void **p, size_t size)
{
	*p = malloc(size);
	__asm__ volatile("" ::: "memory");
	return *p ? 0 : 2; /* cudaErrorMemoryAllocation */
}

__attribute__((noinline, used)) int cudaFree(void *p)
{
	free(p);
	__asm__ volatile("" ::: "memory");
	return 0;
}

__attribute__((noinline, used)) int cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
	memcpy(dst, src, count);
	__asm__ volatile("" ::: "memory");
	return kind < 0;
}

static int block_in_sync;

__attribute__((noinline, used)) int cudaDeviceSynchronize(void)
{
	if (block_in_sync) {
		block_in_sync = 0;
		if (!say_and_wait("syncing"))
			return 1;
	}
	__asm__ volatile("" ::: "memory");
	return 0;
}

__attribute__((noinline)) static void alloc_temp(void)
{
	void *p = NULL;

	cudaMalloc(&p, 256 << 10);
	cudaFree(p);
}

static void *cache[4];

__attribute__((noinline)) static void alloc_cache(int i)
{
	cudaMalloc(&cache[i], 1 << 20);
}

#define VARIED_BAND 12 /* chain lengths a second */
#define VARIED_BANDS 10

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* --varied: @depth more frames of itself, then 250,000 additions (~0.5 ms) and a sync. */
__attribute__((noinline)) static void descend(int depth)
{
	static volatile unsigned long spin;

	if (depth > 0) {
		descend(depth - 1);
		__asm__ volatile("" ::: "memory"); /* not a tail call: each frame stays */
		return;
	}
	for (int i = 0; i < 250000; i++)
		spin += (unsigned long)i;
	cudaDeviceSynchronize();
}

__attribute__((noinline, used)) void work_unit(void)
{
	struct timespec ts = { 0, 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	static char host[8192];
	char line[64];

	block_in_sync = argc > 1 && strcmp(argv[1], "--block-in-sync") == 0;
	if (argc > 1 && strcmp(argv[1], "--fork") == 0) {
		struct timespec t0, t;
		volatile unsigned long spin = 0;
		pid_t child;

		if (!say_and_wait("ready"))
			return 1;
		child = fork();
		if (child < 0)
			return 1;
		if (child > 0)
			return waitpid(child, NULL, 0) == child ? 0 : 1;
		printf("child %d\n", (int)getpid());
		fflush(stdout);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do {
			for (int i = 0; i < 100000; i++)
				spin += (unsigned long)i;
			clock_gettime(CLOCK_MONOTONIC, &t);
		} while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < 300000000LL);
		if (!fgets(line, sizeof(line), stdin))
			_exit(1);
		alloc_cache(0);
		alloc_cache(1);
		printf("done\n");
		fflush(stdout);
		_exit(0);
	}
	if (argc > 2 && strcmp(argv[1], "--varied") == 0) {
		double start, end;

		if (!say_and_wait("ready"))
			return 1;
		alloc_cache(0);
		start = now_s();
		end = start + atof(argv[2]);
		for (int i = 0; now_s() < end; i++) {
			int band = (int)(now_s() - start) % VARIED_BANDS;

			descend(band * VARIED_BAND + i % VARIED_BAND);
		}
		printf("done\n");
		fflush(stdout);
		return 0;
	}
	if (argc > 2 && strcmp(argv[1], "--calls") == 0) {
		long n = atol(argv[2]);
		struct timespec t0, t1;

		if (!say_and_wait("ready"))
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < n; i++)
			cudaDeviceSynchronize();
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
		return 0;
	}

	if (!say_and_wait("ready"))
		return 1;
	if (block_in_sync)
		cudaDeviceSynchronize();
	for (int i = 0; i < 4; i++) {
		alloc_temp();
		alloc_cache(i);
		cudaMemcpy(cache[i], host, sizeof(host), 1);
	}
	cudaDeviceSynchronize();
	for (int i = 0; i < WORK_UNITS; i++)
		work_unit();
	printf("done\n");
	fflush(stdout);
	return 0;
}
