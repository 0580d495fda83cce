/*
 * deep-nofp.cc - a CPU workload with deep, known call stacks and no frame
 * pointers, the target of test-unwind (DWARF unwinding of copied stacks).
 *
 * Built with -O2 -g -fomit-frame-pointer -fasynchronous-unwind-tables: the
 * code has .eh_frame CFI everywhere but %rbp is an ordinary register, as in
 * most distribution packages, so a frame-pointer walk gets lost while a CFI
 * walk does not.
 *
 * Two threads run the same loop, the main thread from main() (under
 * glibc's __libc_start_call_main and _start), the other from a std::thread
 * (under libstdc++'s execute_native_thread_routine and glibc's start_thread
 * and clone3):
 *
 *   main | worker_main → run → level1 → level2 → recursive ×5 → one of
 *     sort_c:     qsort (glibc: qsort_r → msort_with_tmp ×k) → cmp_c
 *     sort_cpp:   std::call_once (glibc: __pthread_once_slow) → the lambda
 *                 → std::sort internals (std::__introsort_loop ...) → cmp_cpp
 *     clock_spin: clock_gettime() → the vDSO (a tenth of the rounds)
 *
 * The comparators do real work (a mixing function), so most samples land in
 * them. The chain functions are noipa (no inlining, cloning or IPA-changed
 * signatures) and use the result of every call, so no call becomes a tail
 * call and every function keeps its frame.
 *
 * Usage: deep-nofp [SECONDS] (default 10; 0 = until killed). With
 * DEEP_NOFP_WAIT=1 in the environment it waits for one byte (or EOF) on
 * stdin before it starts, so a test can attach first.
 */
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <time.h>
#include <unistd.h>

#define NOIPA __attribute__((noipa))

enum { SORT_ELEMS = 4096, RECURSION = 5 };

static std::atomic<bool> stop;

/* mix() - a few rounds of multiply-xorshift: the comparators' real work. */
static inline uint64_t mix(uint64_t x)
{
	for (int i = 0; i < 8; i++) {
		x ^= x >> 31;
		x *= 0x9e3779b97f4a7c15ULL;
		x ^= x >> 29;
	}
	return x;
}

extern "C" {

NOIPA int cmp_c(const void *a, const void *b)
{
	uint64_t x = mix(*(const uint64_t *)a), y = mix(*(const uint64_t *)b);

	return (x > y) - (x < y);
}

NOIPA bool cmp_cpp(uint64_t a, uint64_t b)
{
	return mix(a) < mix(b);
}

/* fill() - pseudo-random values, so every sort has work to do. */
NOIPA void fill(uint64_t *v, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		v[i] = seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
}

NOIPA uint64_t sort_c(uint64_t *v, size_t n, uint64_t seed)
{
	fill(v, n, seed);
	qsort(v, n, sizeof(*v), cmp_c);
	return v[n / 2];
}

NOIPA uint64_t sort_cpp(uint64_t *v, size_t n, uint64_t seed)
{
	std::once_flag once;

	fill(v, n, seed);
	std::call_once(once, [v, n] { std::sort(v, v + n, cmp_cpp); });
	return v[n / 2];
}

NOIPA uint64_t clock_spin(uint64_t seed)
{
	struct timespec ts;
	uint64_t sum = seed;

	for (int i = 0; i < 20000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sum += (uint64_t)ts.tv_nsec;
	}
	return sum;
}

NOIPA uint64_t recursive(int depth, uint64_t *v, size_t n, uint64_t round)
{
	uint64_t r;

	if (depth > 1)
		r = recursive(depth - 1, v, n, round);
	else if (round % 10 == 9)
		r = clock_spin(round);
	else if (round % 2)
		r = sort_cpp(v, n, round);
	else
		r = sort_c(v, n, round);
	return r ^ (uint64_t)depth; /* not a tail call */
}

NOIPA uint64_t level2(uint64_t *v, size_t n, uint64_t round)
{
	return recursive(RECURSION, v, n, round) + 2;
}

NOIPA uint64_t level1(uint64_t *v, size_t n, uint64_t round)
{
	return level2(v, n, round) * 3;
}

/* run() - sort and spin until @seconds of wall time passed or stop is set. */
NOIPA uint64_t run(double seconds)
{
	std::vector<uint64_t> v(SORT_ELEMS);
	struct timespec t0, t;
	uint64_t sum = 0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t round = 0; !stop.load(std::memory_order_relaxed); round++) {
		double elapsed;

		sum += level1(v.data(), v.size(), round);
		clock_gettime(CLOCK_MONOTONIC, &t);
		elapsed = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9;
		if (seconds > 0 && elapsed >= seconds)
			break;
	}
	return sum;
}

NOIPA void worker_main(double seconds, uint64_t *ret)
{
	*ret = run(seconds) + 1;
}

} /* extern "C" */

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 10;
	const char *wait = getenv("DEEP_NOFP_WAIT");
	uint64_t a, b = 0;

	if (wait && strcmp(wait, "1") == 0) {
		char c;

		if (read(STDIN_FILENO, &c, 1) < 0)
			return 1;
	}
	std::thread worker(worker_main, seconds, &b);
	a = run(seconds);
	stop = true;
	worker.join();
	printf("%llu\n", (unsigned long long)(a ^ b));
	return 0;
}
