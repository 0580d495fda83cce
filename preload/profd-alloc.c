/*
 * profd-alloc.c - libprofd-alloc.so, an allocation sampler a process loads
 * (LD_PRELOAD) so that profiling its allocations costs a trap per sampled
 * allocation instead of one per call.
 *
 * It wraps glibc's allocator (malloc, calloc, realloc, posix_memalign,
 * aligned_alloc, memalign and free call glibc's own __libc_* functions or
 * each other: the heap stays glibc's) and implements OpenTelemetry's
 * memory-profiling USDT contract (opentelemetry-ebpf-profiler
 * design-docs/00003), which profd attaches with `--events malloc`:
 *
 *   otel_memory:alloc(ptr, size, weight)  a sampled allocation of size bytes
 *       at ptr, standing for weight bytes of allocations;
 *   otel_memory:free(ptr)                 the free (or realloc) of a sampled
 *       block, and of no other.
 *
 * Sampling is by bytes, as tcmalloc and jemalloc do it: each thread counts
 * down an exponential interval (mean PROFD_ALLOC_SAMPLE_BYTES, default 512
 * KiB); the allocation that crosses it is sampled, and its weight is the
 * intervals it crossed times the mean, an unbiased estimate of the bytes.
 * The probes have SDT semaphores: while no profiler is attached the
 * sampler does nothing but test one (an unwatched process pays a load and a
 * branch per call). A sampled block is page-aligned (glibc's memalign), so
 * that free() looks up only page-aligned blocks in the set of sampled ones.
 *
 * Environment, read once at load:
 *   PROFD_ALLOC_SAMPLE_BYTES  the mean interval in bytes (1 .. 2^40; else
 *                             the default);
 *   PROFD_ALLOC_ALWAYS=1      sample as if a profiler were attached (tests);
 *   PROFD_ALLOC_STATS=1       at exit, print to stderr one line "profd-alloc:
 *                             N sampled, W while watched, F not sampled (the
 *                             set full)": W is what a profiler attached
 *                             throughout should have received.
 *
 * Limits: at most SAMPLED_MAX * 3/4 sampled blocks are live at once (with
 * the default mean, ~48 GiB of live allocations); beyond that an allocation
 * due for a sample is not sampled. valloc and pvalloc are not wrapped: their
 * blocks are glibc's and are never sampled.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
/* Semaphores (.probes section): the kernel raises them while a probe is attached. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#define PUBLIC __attribute__((visibility("default")))
/* Initial-exec TLS: a preloaded library's TLS is static, and its accesses never allocate. */
#define TLS __attribute__((tls_model("initial-exec")))

#define DEFAULT_MEAN (512 * 1024)
#define MAX_MEAN (1ULL << 40)
#define SAMPLED_ALIGN 4096
#define SAMPLED_MAX (1u << 17) /* the set of live sampled blocks: 1 MiB, touched as used */

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);
size_t malloc_usable_size(void *p);

unsigned short otel_memory_alloc_semaphore
    __attribute__((section(".probes"), visibility("hidden")));
unsigned short otel_memory_free_semaphore __attribute__((section(".probes"), visibility("hidden")));

static uint64_t mean = DEFAULT_MEAN;
static bool always, stats;
/* Alloc probes fired, those fired with a probe attached, and samples the full set refused. */
static unsigned long nr_fired, nr_fired_watched, nr_refused;

static TLS __thread int64_t until_sample; /* bytes left before the next sample */
static TLS __thread bool drawn;		  /* until_sample holds a drawn interval */
static TLS __thread uint64_t rng;

/* The sampled blocks not freed yet (open addressing, 0 = empty), under set_lock. */
static uintptr_t sampled[SAMPLED_MAX];
static unsigned nr_sampled; /* read without the lock by free()'s fast path */
static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;

static bool watched(void)
{
	unsigned short sem = __atomic_load_n(&otel_memory_alloc_semaphore, __ATOMIC_RELAXED);

	return __builtin_expect(sem != 0 || always, 0);
}

/* An exponential draw of mean @mean bytes, at least 1 (xorshift64*, seeded per thread). */
static int64_t next_interval(void)
{
	double u;

	if (!rng)
		rng = (uint64_t)(uintptr_t)&rng ^ (uint64_t)time(NULL) ^ 0x9e3779b97f4a7c15ULL;
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	u = (double)((rng * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
	return (int64_t)(-log(1.0 - u) * (double)mean) + 1;
}

/* The first call of a thread draws its interval instead of sampling at once. */
static __attribute__((noinline)) bool first_draw(void)
{
	drawn = true;
	until_sample += next_interval();
	return until_sample <= 0;
}

/* Whether an allocation of @size bytes is sampled: it crosses the thread's sampling point. */
static inline bool due(size_t size)
{
	if (!watched())
		return false;
	until_sample -= (int64_t)(size > INT64_MAX ? INT64_MAX : size);
	return until_sample <= 0 && (drawn || first_draw());
}

static size_t slot_of(uintptr_t p)
{
	return (size_t)((p >> 12) * 0x9e3779b97f4a7c15ULL >> 40) % SAMPLED_MAX;
}

/* Insert @p (under set_lock): false when the set is full (3/4 of its slots). */
static bool set_insert(uintptr_t p)
{
	size_t i;

	if (nr_sampled >= SAMPLED_MAX / 4 * 3)
		return false;
	for (i = slot_of(p); sampled[i]; i = (i + 1) % SAMPLED_MAX)
		;
	sampled[i] = p;
	__atomic_store_n(&nr_sampled, nr_sampled + 1, __ATOMIC_RELAXED);
	return true;
}

/* Remove @p (under set_lock), shifting back the rest of its run; false if absent. */
static bool set_remove(uintptr_t p)
{
	size_t i, hole, j;

	for (i = slot_of(p); sampled[i] != p; i = (i + 1) % SAMPLED_MAX)
		if (!sampled[i])
			return false;
	hole = i;
	for (j = (i + 1) % SAMPLED_MAX; sampled[j]; j = (j + 1) % SAMPLED_MAX) {
		size_t home = slot_of(sampled[j]);

		/* Move j into the hole unless its home lies cyclically in (hole, j]. */
		if (hole <= j ? (home <= hole || home > j) : (home <= hole && home > j)) {
			sampled[hole] = sampled[j];
			hole = j;
		}
	}
	sampled[hole] = 0;
	__atomic_store_n(&nr_sampled, nr_sampled - 1, __ATOMIC_RELAXED);
	return true;
}

/*
 * The sampled allocation of @size bytes aligned to @align (a power of 2, at
 * least SAMPLED_ALIGN), zeroed if @zero: remembered, and the alloc probe
 * fired with the bytes it stands for. NULL with errno ENOMEM as glibc's.
 * Called only after due() said so; the probe fires here, one frame below
 * the public function (profd names the stack by the caller of both).
 */
static __attribute__((noinline)) void *sample_alloc(size_t size, size_t align, bool zero)
{
	void *p = __libc_memalign(align, size);
	uint64_t n = 0;
	bool kept;

	while (until_sample <= 0) {
		until_sample += next_interval();
		n++;
	}
	if (!p)
		return NULL;
	if (zero)
		memset(p, 0, size);
	pthread_mutex_lock(&set_lock);
	kept = set_insert((uintptr_t)p);
	if (kept) {
		nr_fired++;
		nr_fired_watched += otel_memory_alloc_semaphore != 0;
	} else {
		nr_refused++;
	}
	pthread_mutex_unlock(&set_lock);
	if (kept)
		DTRACE_PROBE3(otel_memory, alloc, p, size, n * mean);
	return p;
}

/* Forget @p if it is a live sampled block, and fire its free probe; whether it was one. */
static __attribute__((noinline)) bool sample_free(void *p)
{
	bool found;

	pthread_mutex_lock(&set_lock);
	found = set_remove((uintptr_t)p);
	pthread_mutex_unlock(&set_lock);
	if (found)
		DTRACE_PROBE1(otel_memory, free, p);
	return found;
}

/* Whether @p may be a sampled block: page-aligned, and some are live. */
static inline bool may_be_sampled(const void *p)
{
	return p && ((uintptr_t)p & (SAMPLED_ALIGN - 1)) == 0 &&
	       __atomic_load_n(&nr_sampled, __ATOMIC_RELAXED) != 0;
}

PUBLIC void *malloc(size_t size)
{
	if (due(size))
		return sample_alloc(size, SAMPLED_ALIGN, false);
	return __libc_malloc(size);
}

PUBLIC void free(void *p)
{
	if (may_be_sampled(p))
		sample_free(p);
	__libc_free(p);
}

PUBLIC void *calloc(size_t n, size_t size)
{
	size_t bytes;

	if (__builtin_mul_overflow(n, size, &bytes)) {
		errno = ENOMEM;
		return NULL;
	}
	if (due(bytes))
		return sample_alloc(bytes, SAMPLED_ALIGN, true);
	return __libc_calloc(n, size);
}

/*
 * A sampled block moves (its free fires, the new block is sampled or not as
 * any allocation); a block due for a sample moves to a sampled one; the rest
 * is glibc's realloc. realloc(p, 0) frees p and returns NULL, as glibc's.
 */
PUBLIC void *realloc(void *p, size_t size)
{
	bool was_sampled;
	size_t old;
	void *q;

	if (!p)
		return malloc(size);
	if (size == 0) {
		free(p);
		return NULL;
	}
	was_sampled = may_be_sampled(p) && sample_free(p);
	if (!was_sampled && !due(size))
		return __libc_realloc(p, size);
	q = was_sampled ? malloc(size) : sample_alloc(size, SAMPLED_ALIGN, false);
	if (!q) /* p stays valid; if it was sampled, its free fired: it is no longer tracked */
		return NULL;
	old = malloc_usable_size(p);
	memcpy(q, p, old < size ? old : size);
	__libc_free(p);
	return q;
}

/* Inlined: the probe must fire one frame below the public function. */
static inline __attribute__((always_inline)) void *aligned(size_t align, size_t size)
{
	if (due(size))
		return sample_alloc(size, align > SAMPLED_ALIGN ? align : SAMPLED_ALIGN, false);
	return __libc_memalign(align, size);
}

PUBLIC int posix_memalign(void **ret, size_t align, size_t size)
{
	int saved = errno;
	void *p;

	if (align % sizeof(void *) || (align & (align - 1)) || !align)
		return EINVAL;
	p = aligned(align, size);
	if (!p) {
		errno = saved;
		return ENOMEM;
	}
	*ret = p;
	return 0;
}

PUBLIC void *aligned_alloc(size_t align, size_t size)
{
	if ((align & (align - 1)) || !align) {
		errno = EINVAL;
		return NULL;
	}
	return aligned(align, size);
}

PUBLIC void *memalign(size_t align, size_t size)
{
	return aligned(align, size);
}

/* A fork while another thread holds set_lock would leave the child's lock held for ever. */
static void lock_for_fork(void)
{
	pthread_mutex_lock(&set_lock);
}

static void unlock_after_fork(void)
{
	pthread_mutex_unlock(&set_lock);
}

/* PROFD_ALLOC_STATS=1: the counts, at exit (write(2): no allocation while the process ends). */
__attribute__((destructor)) static void profd_alloc_stats(void)
{
	char line[160];
	int n;

	if (!stats)
		return;
	pthread_mutex_lock(&set_lock);
	n = snprintf(
	    line, sizeof(line),
	    "profd-alloc: %lu sampled, %lu while watched, %lu not sampled (the set full)\n",
	    nr_fired, nr_fired_watched, nr_refused);
	pthread_mutex_unlock(&set_lock);
	if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

__attribute__((constructor)) static void profd_alloc_init(void)
{
	const char *v = getenv("PROFD_ALLOC_SAMPLE_BYTES"), *a = getenv("PROFD_ALLOC_ALWAYS");
	const char *st = getenv("PROFD_ALLOC_STATS");
	char *end;

	if (v && *v) {
		unsigned long long m;

		errno = 0;
		m = strtoull(v, &end, 10);
		if (!errno && !*end && m >= 1 && m <= MAX_MEAN)
			mean = m;
	}
	always = a && strcmp(a, "1") == 0;
	stats = st && strcmp(st, "1") == 0;
	pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}
