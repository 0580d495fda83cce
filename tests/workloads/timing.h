/*
 * timing.h - the clocks and the sleep the workloads measure and pace their
 * work with, in the units their options are given in (seconds as a double).
 */
#pragma once

#include <stdint.h>
#include <time.h>

/* clock_ns() - @clk (CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, ...) in nanoseconds. */
static inline int64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* now_s() - CLOCK_MONOTONIC in seconds, for deadlines "run for S seconds". */
static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* sleep_s() - sleep @s seconds (fractions too; 0 or less: not at all), off the CPU. */
static inline void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	if (s > 0)
		nanosleep(&ts, NULL);
}
