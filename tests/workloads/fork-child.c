/*
 * fork-child.c - a process that forks a worker after a delay, as a training
 * job starts data-loader workers: the parent spins in parent_work(), the
 * child (named "child-worker") in child_work(). Usage: fork-child [DELAY_S] [SECONDS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "timing.h"

__attribute__((noinline)) uint64_t spin(uint64_t x)
{
	for (int i = 0; i < 100000; i++) {
		x = x * 6364136223846793005ULL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) uint64_t child_work(double seconds)
{
	double t0 = now_s();
	uint64_t x = 2;

	while (now_s() - t0 < seconds)
		x = spin(x);
	return x;
}

__attribute__((noinline)) uint64_t parent_work(double seconds)
{
	double t0 = now_s();
	uint64_t x = 1;

	while (now_s() - t0 < seconds)
		x = spin(x);
	return x;
}

int main(int argc, char **argv)
{
	double delay = argc > 1 ? atof(argv[1]) : 1, seconds = argc > 2 ? atof(argv[2]) : 3;
	pid_t child;

	printf("fork-child: pid %d\n", getpid());
	fflush(stdout);
	sleep_s(delay);
	child = fork();
	if (child == 0) {
		prctl(PR_SET_NAME, "child-worker");
		return child_work(seconds) == 42;
	}
	printf("fork-child: child %d\n", child);
	fflush(stdout);
	parent_work(seconds);
	waitpid(child, NULL, 0);
	return 0;
}
