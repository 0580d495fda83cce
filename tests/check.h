/* check.h - tiny check macros for the C unit tests: print file:line and both values. */
#pragma once

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_skipped;

/*
 * check_fail() - report one failed check: "@file:@line: " and the
 * printf-style message on stderr, a newline added, and count it in
 * check_failures. Every CHECK_* macro ends here, so the format of a
 * failure is the same for all of them.
 */
static inline __attribute__((format(printf, 3, 4))) void check_fail(const char *file, int line,
								    const char *fmt, ...)
{
	va_list ap;

	flockfile(stderr);
	fprintf(stderr, "%s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	funlockfile(stderr);
	check_failures++;
}

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond))                                                                       \
			check_fail(__FILE__, __LINE__, "CHECK failed: %s", #cond);                 \
	} while (0)

#define CHECK_INT_EQ(a, b)                                                                         \
	do {                                                                                       \
		long long _a = (long long)(a), _b = (long long)(b);                                \
		if (_a != _b)                                                                      \
			check_fail(__FILE__, __LINE__, "%s == %s failed: %lld != %lld", #a, #b,    \
				   _a, _b);                                                        \
	} while (0)

#define CHECK_STR_EQ(a, b)                                                                         \
	do {                                                                                       \
		const char *_a = (a), *_b = (b);                                                   \
		if (!_a || !_b || strcmp(_a, _b) != 0)                                             \
			check_fail(__FILE__, __LINE__, "%s == %s failed: \"%s\" != \"%s\"", #a,    \
				   #b, _a ? _a : "(null)", _b ? _b : "(null)");                    \
	} while (0)

#define CHECK_REAL_EQ(a, b)                                                                        \
	do {                                                                                       \
		double _a = (a), _b = (b);                                                         \
		if (!(fabs(_a - _b) < 1e-9))                                                       \
			check_fail(__FILE__, __LINE__, "%s == %s failed: %.17g != %.17g", #a, #b,  \
				   _a, _b);                                                        \
	} while (0)

/* A test that cannot set itself up exits 99, as meson reads it. */
#define SETUP_FAIL(...)                                                                            \
	do {                                                                                       \
		fprintf(stderr, "setup error: " __VA_ARGS__);                                      \
		fputc('\n', stderr);                                                               \
		exit(99);                                                                          \
	} while (0)

/* check_exit() - the test's exit status: 0 if every check passed, 1 otherwise. */
static inline int check_exit(const char *name)
{
	if (check_failures)
		fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
	else
		printf("%s: all checks passed\n", name);
	return check_failures ? 1 : 0;
}

/* check_skip() - say on stdout that @part was not tried and why, and count it. */
static inline void check_skip(const char *part, const char *reason)
{
	printf("SKIP %s: %s\n", part, reason);
	check_skipped++;
}

/*
 * check_exit_skip() - as check_exit(), but 77 (meson's "skipped") when no
 * check failed and a part was skipped by check_skip().
 */
static inline int check_exit_skip(const char *name)
{
	if (check_failures || !check_skipped)
		return check_exit(name);
	printf("%d part(s) skipped, the rest passed\n", check_skipped);
	return 77;
}
