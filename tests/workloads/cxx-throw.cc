/*
 * cxx-throw.cc - a C++ program that throws and catches exceptions all the
 * time, built without frame pointers: its samples land in libstdc++'s
 * __cxa_throw, libgcc_s's unwinder (which reads .eh_frame itself) and
 * libc's dl_iterate_phdr, CFI that deep-nofp never reaches
 * (test-cfi-table). Runs for the seconds given in argv[1] (default 10).
 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <string>
#include <vector>

#define NOIPA __attribute__((noipa))

static volatile int sink;

extern "C" {

/* thrower() - recurse @depth calls deep, then throw. */
NOIPA void thrower(int depth)
{
	if (depth == 0)
		throw std::runtime_error("depth reached after " + std::to_string(sink));
	thrower(depth - 1);
	sink = sink + 1; /* not a tail call */
}

/* catcher() - catch what thrower() throws: the two-phase unwind runs through every frame. */
NOIPA long catcher(int depth)
{
	try {
		thrower(depth);
	} catch (const std::exception &e) {
		return (long)strlen(e.what());
	}
	return 0;
}

/* strings() - work in libstdc++ without exceptions: allocation, formatting, sorting. */
NOIPA long strings(int n)
{
	std::vector<std::string> v;

	for (int i = 0; i < n; i++)
		v.push_back(std::to_string(i * 7919 % 1000));
	std::sort(v.begin(), v.end());
	return (long)v.front().size() + (long)v.back().size();
}

} /* extern "C" */

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	struct timespec t0, t;
	long total = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100; i++)
			total += catcher(1 + i % 12);
		total += strings(200);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
	printf("%ld\n", total);
	return 0;
}
