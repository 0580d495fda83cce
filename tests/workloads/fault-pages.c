/*
 * fault-pages.c - page faults from a known function: touch_pages() maps
 * 16 MiB, writes one byte per page (a page fault each) and unmaps it, over
 * and over; spin_a_bit() burns CPU between rounds without faulting, four
 * times as long as the round of faults took (measured: a fault costs ten
 * times more in some VMs than on bare metal), so the two events point at
 * different functions on any machine.
 * Usage: fault-pages SECONDS
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "timing.h"

#define BYTES (16u << 20)

__attribute__((noinline)) void touch_pages(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		exit(1);
	for (size_t i = 0; i < BYTES; i += (size_t)page)
		p[i] = 1;
	munmap(p, BYTES);
}

/* Busy without faulting until @until_s (CLOCK_MONOTONIC seconds). */
__attribute__((noinline)) uint64_t spin_a_bit(uint64_t x, double until_s)
{
	do {
		for (int i = 0; i < 100000; i++) {
			x = x * 6364136223846793005ULL + 1;
			__asm__ volatile("" : "+r"(x));
		}
	} while (now_s() < until_s);
	return x;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3, t0 = now_s();
	uint64_t x = 1;

	printf("fault-pages: pid %d\n", getpid());
	fflush(stdout);
	while (now_s() - t0 < seconds) {
		double t = now_s();

		touch_pages();
		t = now_s() - t;
		x = spin_a_bit(x, now_s() + 4 * t);
	}
	return x == 42;
}
