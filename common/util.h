/* util.h - cleanup helpers, time units and small macros shared by profd and profctl. */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* glibc's malloc_trim(3): give freed heap memory back to the system, every
 * arena. Declared here because glibc's <malloc.h> is shadowed by
 * bpf/malloc.h on the daemon's include path. */
int malloc_trim(size_t pad);

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

#define NSEC_PER_SEC 1000000000ULL
#define NSEC_PER_MSEC 1000000ULL
#define NSEC_PER_USEC 1000ULL

/*
 * Cleanup attributes in the shape of systemd's _cleanup_free_ & co: the
 * variable is released when it goes out of scope; TAKE_PTR()/TAKE_FD() hand
 * ownership out and leave NULL / -1 behind.
 */
static inline void freep(void *p)
{
	free(*(void **)p);
}

static inline void closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_(f) __attribute__((cleanup(f)))

#include <dirent.h>
static inline void closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}
#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)
#define _cleanup_fclose_ _cleanup_(fclosep)

#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)                                                    \
	static inline void func##p(type *p)                                                        \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}

/* now_ns() - the clock @clk in nanoseconds (CLOCK_MONOTONIC, CLOCK_REALTIME, ...). */
static inline uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/*
 * grow_array_to() - make room for @need elements in the array *@v of *@cap
 * elements of @size bytes (doubling, from 16). Returns 0 or -ENOMEM (*@v
 * and *@cap unchanged), -ENOMEM too if the size would overflow.
 */
static inline int grow_array_to(void **v, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 16;
	void *nv;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	nv = reallocarray(*v, ncap, size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = ncap;
	return 0;
}

/* grow_array() - make room for one more element beside the @n in use (grow_array_to()). */
static inline int grow_array(void **v, size_t *cap, size_t n, size_t size)
{
	return grow_array_to(v, cap, n + 1, size);
}

/*
 * grow_array_gently() - grow_array(), doubling only up to 64 Ki elements,
 * then by a quarter: for arrays of millions of elements (an unwind table's
 * rows, 1.4 million for libtorch_cpu.so), which doubling left up to half
 * empty as profd's largest allocation. Cheap: glibc moves a block that
 * large (its own mapping) with mremap(), not a copy.
 */
static inline int grow_array_gently(void **v, size_t *cap, size_t n, size_t size)
{
	size_t ncap = *cap < 65536 ? MAX(*cap * 2, (size_t)256) : *cap + *cap / 4;
	void *nv;

	if (n < *cap)
		return 0;
	nv = reallocarray(*v, ncap, size);
	if (!nv)
		return -ENOMEM;
	*v = nv;
	*cap = ncap;
	return 0;
}

/*
 * shrink_alloc() - @ptr (malloc'd) reallocated to @bytes, to give back the
 * room an array grew for once it is complete; @ptr as it was if @bytes is
 * 0 or realloc() fails.
 */
static inline void *shrink_alloc(void *ptr, size_t bytes)
{
	void *p = bytes ? realloc(ptr, bytes) : NULL;

	return p ? p : ptr;
}
