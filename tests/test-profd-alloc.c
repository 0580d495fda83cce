/*
 * test-profd-alloc.c - libprofd-alloc.so, the preloaded allocation sampler,
 * keeps every allocation function's contract while it samples. Run with
 * LD_PRELOAD set to the library (meson does), as:
 *
 *   test-profd-alloc sampled   with PROFD_ALLOC_ALWAYS=1 and a mean of a few
 *       hundred bytes: most blocks are sampled (page-aligned, tracked), and
 *       malloc, calloc (zeroed, overflow refused), realloc (contents kept
 *       across sampled and unsampled blocks, size 0 frees), posix_memalign,
 *       aligned_alloc and memalign (alignment kept, bad ones refused) are
 *       checked on 4 threads at once, with a fork in the middle whose child
 *       allocates (the set's lock is not inherited held);
 *   test-profd-alloc idle      without a profiler or PROFD_ALLOC_ALWAYS: no
 *       block is moved to a page boundary (the sampler does nothing).
 *
 * Needs nothing but the library.
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define THREADS 4
#define ROUNDS 20000

struct result {
	unsigned long blocks, page_aligned, bad_contents, bad_zero, bad_align, bad_errors;
};

static bool page_aligned(const void *p)
{
	return ((uintptr_t)p & 4095) == 0;
}

static void fill(unsigned char *p, size_t n, unsigned char seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i * 7);
}

static bool filled(const unsigned char *p, size_t n, unsigned char seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(seed + i * 7))
			return false;
	return true;
}

/* A block of malloc, calloc or realloc (which ask for no alignment): page-aligned if sampled. */
static void count(struct result *r, const void *p)
{
	r->blocks++;
	r->page_aligned += page_aligned(p);
}

/* One round of every function on sizes drawn from @seed; what went wrong counted in @r. */
static void round_of_all(struct result *r, unsigned *seed)
{
	size_t n = 1 + (size_t)(rand_r(seed) % 3000), m = 1 + (size_t)(rand_r(seed) % 6000);
	unsigned char s = (unsigned char)rand_r(seed);
	size_t align = (size_t)8 << (rand_r(seed) % 11); /* 8 .. 8192 */
	unsigned char *p, *q;
	void *a = NULL;

	p = malloc(n);
	count(r, p);
	fill(p, n, s);
	q = realloc(p, m); /* sampled or not, moved or not: the first bytes stay */
	count(r, q);
	r->bad_contents += !filled(q, n < m ? n : m, s);
	free(q);

	p = calloc(n, 3);
	count(r, p);
	for (size_t i = 0; i < n * 3; i++)
		r->bad_zero += p[i] != 0;
	free(p);

	r->bad_errors += posix_memalign(&a, align, n) != 0;
	r->bad_align += ((uintptr_t)a & (align - 1)) != 0;
	fill(a, n, s);
	r->bad_contents += !filled(a, n, s);
	free(a);
	p = aligned_alloc(align, n);
	r->bad_align += ((uintptr_t)p & (align - 1)) != 0;
	free(p);
	p = memalign(align, n);
	r->bad_align += ((uintptr_t)p & (align - 1)) != 0;
	r->bad_contents += malloc_usable_size(p) < n;
	free(p);
}

static void *worker(void *arg)
{
	struct result *r = arg;
	unsigned seed = (unsigned)(uintptr_t)arg;

	for (int i = 0; i < ROUNDS; i++)
		round_of_all(r, &seed);
	return NULL;
}

/* The errors each function must give, sampled or not. */
static void check_errors(void)
{
	volatile size_t huge = SIZE_MAX / 2; /* volatile: no compile-time overflow warning */
	void *a = (void *)1;

	errno = 0;
	CHECK(calloc(huge, 3) == NULL && errno == ENOMEM);
	CHECK_INT_EQ(posix_memalign(&a, 24, 16), EINVAL);
	CHECK_INT_EQ(posix_memalign(&a, 4, 16), EINVAL);
	CHECK(a == (void *)1); /* left unchanged on error */
	errno = 0;
	CHECK(aligned_alloc(3, 16) == NULL && errno == EINVAL);
	a = malloc(100);
	CHECK(realloc(a, 0) == NULL); /* freed, as glibc does */
	a = realloc(NULL, 100);
	CHECK(a != NULL);
	free(a);
	free(NULL);
}

int main(int argc, char **argv)
{
	bool sampled = argc > 1 && strcmp(argv[1], "sampled") == 0;
	struct result r[THREADS] = {}, all = {};
	pthread_t t[THREADS];
	Dl_info info;
	pid_t child;
	int status;

	if (argc != 2 || (!sampled && strcmp(argv[1], "idle") != 0))
		SETUP_FAIL("usage: test-profd-alloc sampled|idle");
	if (!dladdr(dlsym(RTLD_DEFAULT, "malloc"), &info) ||
	    !strstr(info.dli_fname, "libprofd-alloc"))
		SETUP_FAIL("malloc is not libprofd-alloc.so's (LD_PRELOAD=%s)",
			   getenv("LD_PRELOAD"));
	check_errors();
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, worker, &r[i]))
			SETUP_FAIL("pthread_create failed");
	/* A fork while the threads sample: the child's first sampled allocation and free must
	 * not wait for a lock some thread held at the fork. */
	usleep(20000);
	child = fork();
	if (child == 0) {
		struct result c = {};
		unsigned seed = 7;

		for (int i = 0; i < 2000; i++)
			round_of_all(&c, &seed);
		_exit(c.bad_contents || c.bad_zero || c.bad_align || c.bad_errors ? 1 : 0);
	}
	CHECK(child > 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	for (int i = 0; i < THREADS; i++) {
		all.blocks += r[i].blocks;
		all.page_aligned += r[i].page_aligned;
		all.bad_contents += r[i].bad_contents;
		all.bad_zero += r[i].bad_zero;
		all.bad_align += r[i].bad_align;
		all.bad_errors += r[i].bad_errors;
	}
	printf("%lu blocks, %lu page-aligned\n", all.blocks, all.page_aligned);
	CHECK_INT_EQ(all.bad_contents, 0);
	CHECK_INT_EQ(all.bad_zero, 0);
	CHECK_INT_EQ(all.bad_align, 0);
	CHECK_INT_EQ(all.bad_errors, 0);
	/* A sampled block is page-aligned; of glibc's own blocks ~3% land on a page boundary
	 * here (chunks reused after the page-aligned ones are freed). */
	if (sampled)
		CHECK(all.page_aligned > all.blocks / 2);
	else
		CHECK(all.page_aligned < all.blocks / 10);
	return check_exit(argv[0]);
}
