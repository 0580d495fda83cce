/*
 * mem-grow.c - memory growth with known causes, for the memory diagnosis
 * tests (test-memory-growth).
 *
 *   mem-grow retention [--seconds S]   for the first half (after 1 s),
 *       churn_tensors() allocates 16 blocks of 256 KiB a second, touches
 *       them, and allocates a small long-lived block right after each; then
 *       every large block is freed. The pins keep glibc's brk heap from
 *       shrinking: RSS stays ~4 MiB higher per second of the first half while
 *       live bytes are back where they started (allocator retention). A
 *       4 MiB block freed at the start raises glibc's dynamic mmap
 *       threshold, so the blocks come from the heap; run with
 *       MALLOC_MMAP_THRESHOLD_=65536 they are mmapped and unmapped: flat.
 *   mem-grow leak [--seconds S]        leak_buffers() leaks 1 MiB/s in
 *       256 KiB blocks it touches (each its own mmap: glibc's threshold).
 *   mem-grow shm [--seconds S]         forks (after 1 s) one child that maps and fills a
 *       new 256 KiB /dev/shm segment four times a second and keeps it
 *       (grow_shared_tensors()), as DataLoader workers share tensors, and
 *       closes its fd, whose number a socket takes at once; the parent waits.
 *   mem-grow maps [--seconds S] [--count N]  makes N anonymous mappings
 *       (default 10000), unmergeable, then sleeps.
 *
 * Prints "ready" on stdout once it is set up.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timing.h"

#define KIB 1024ul

static double seconds = 30;
/* Where blocks are published, so that the compiler keeps every malloc, memset and free. */
void *volatile mem_grow_sink;

static void ready(void)
{
	printf("ready\n");
	fflush(stdout);
}

static void *__attribute__((noinline)) churn_tensors(void **pin)
{
	char *big = malloc(256 * KIB);

	if (!big)
		exit(1);
	memset(big, 1, 256 * KIB);
	*pin = malloc(64); /* long-lived: never freed */
	mem_grow_sink = *pin;
	return big;
}

static void retention(void)
{
	static void *bigs[16 * 64];
	int n = 0;
	void *pin;

	/* Freeing an mmapped block raises glibc's mmap threshold to its size. */
	mem_grow_sink = malloc(4096 * KIB);
	free(mem_grow_sink);
	ready();
	sleep_s(1.0);
	/* Half the time: 4 MiB/s of blocks, each with a pin right after it. */
	for (double end = now_s() + seconds / 2; now_s() < end && n + 16 <= 16 * 64;) {
		for (int i = 0; i < 16; i++)
			bigs[n++] = churn_tensors(&pin);
		sleep_s(1.0);
	}
	/* Then every block is freed: the pins keep the heap from shrinking. */
	while (n > 0)
		free(bigs[--n]);
	sleep_s(seconds / 2);
}

static void *__attribute__((noinline)) leak_buffers(void)
{
	char *p = malloc(256 * KIB);

	if (p)
		memset(p, 2, 256 * KIB);
	mem_grow_sink = p;
	return p;
}

static void leak(void)
{
	ready();
	for (double end = now_s() + seconds; now_s() < end;) {
		leak_buffers();
		sleep_s(0.25);
	}
}

/*
 * A socket that takes the number of the segment's fd as soon as it is
 * closed, as in a job that receives the next fd at once (a DataLoader's
 * shared tensors): /proc/PID/fd/N then names the socket, not the segment.
 */
static int fd_taker = -1;

static void __attribute__((noinline)) grow_shared_tensors(int n)
{
	char name[64];
	int fd;
	void *p;

	if (fd_taker >= 0)
		close(fd_taker);
	snprintf(name, sizeof(name), "/mem-grow-%d-%d", (int)getpid(), n);
	fd = shm_open(name, O_CREAT | O_RDWR | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, 256 * KIB) < 0)
		exit(1);
	shm_unlink(name);
	p = mmap(NULL, 256 * KIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		exit(1);
	close(fd);
	fd_taker = socket(AF_UNIX, SOCK_STREAM, 0);
	memset(p, 3, 256 * KIB);
	mem_grow_sink = p;
}

static void shm(void)
{
	pid_t child;

	ready();
	/* Forked once a profiler has attached: a child it follows from its start. */
	sleep_s(1.0);
	child = fork();
	if (child == 0) {
		int n = 0;

		/* Let the profiler read the child before it grows. */
		sleep_s(1.0);
		for (double end = now_s() + seconds; now_s() < end;) {
			grow_shared_tensors(n++);
			sleep_s(0.25);
		}
		_exit(0);
	}
	waitpid(child, NULL, 0);
}

static void maps(long count)
{
	for (long i = 0; i < count; i++) {
		/* Alternate protections so that neighbours never merge into one mapping. */
		char *p = mmap(NULL, 4096, i % 2 ? PROT_READ : PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			exit(1);
		if (i % 2 == 0)
			p[0] = 1;
	}
	ready();
	sleep_s(seconds);
}

int main(int argc, char **argv)
{
	long count = 10000;

	if (argc < 2) {
		fprintf(stderr, "usage: mem-grow retention|leak|shm|maps [--seconds S] [--count N]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--count") == 0)
			count = atol(argv[i + 1]);
	}
	if (strcmp(argv[1], "retention") == 0)
		retention();
	else if (strcmp(argv[1], "leak") == 0)
		leak();
	else if (strcmp(argv[1], "shm") == 0)
		shm();
	else if (strcmp(argv[1], "maps") == 0)
		maps(count);
	else
		return 2;
	return 0;
}
