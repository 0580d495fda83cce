/* test-counters.c - per-thread counters on real threads of this process, and derived figures. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "collect/counters.h"
#include "util.h"

#define PAGES 1000

/* A thread that does one piece of work per phase when told to, then waits. */
struct worker {
	pthread_t thread;
	pid_t tid;
	sem_t ready, go, done;
	void (*phase[2])(void);
};

static void spin_cpu_ns(uint64_t ns)
{
	uint64_t start = now_ns(CLOCK_THREAD_CPUTIME_ID);
	volatile uint64_t x = 0;

	while (now_ns(CLOCK_THREAD_CPUTIME_ID) - start < ns)
		for (int i = 0; i < 1000; i++)
			x += i;
}

static void spin_200ms(void)
{
	spin_cpu_ns(200 * NSEC_PER_MSEC);
}

static void spin_100ms(void)
{
	spin_cpu_ns(100 * NSEC_PER_MSEC);
}

static void sleep_10x10ms(void)
{
	for (int i = 0; i < 10; i++) {
		struct timespec ts = { 0, 10 * NSEC_PER_MSEC };

		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
}

static void touch_pages(void)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len = (size_t)page * PAGES;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	/* One fault per 4 KiB page, not one per transparent huge page. */
	madvise(p, len, MADV_NOHUGEPAGE);
	for (size_t off = 0; off < len; off += (size_t)page)
		((volatile char *)p)[off] = 1;
	munmap(p, len);
}

static void nothing(void)
{
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	w->tid = gettid();
	sem_post(&w->ready);
	for (int i = 0; i < 2; i++) {
		sem_wait(&w->go);
		w->phase[i]();
		sem_post(&w->done);
	}
	sem_wait(&w->go); /* exit when told */
	return NULL;
}

static void worker_start(struct worker *w, void (*p0)(void), void (*p1)(void))
{
	sem_init(&w->ready, 0, 0);
	sem_init(&w->go, 0, 0);
	sem_init(&w->done, 0, 0);
	w->phase[0] = p0;
	w->phase[1] = p1;
	if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
		fprintf(stderr, "pthread_create failed\n");
		exit(99);
	}
	sem_wait(&w->ready);
}

static void worker_stop(struct worker *w)
{
	sem_post(&w->go);
	pthread_join(w->thread, NULL);
	sem_destroy(&w->ready);
	sem_destroy(&w->go);
	sem_destroy(&w->done);
}

/*
 * workers_run_phase() - let each of the @n workers @w run its next phase,
 * and return when all are done: all at once (@together), or one after the
 * other, so that none runs while another does.
 */
static void workers_run_phase(struct worker *const *w, size_t n, bool together)
{
	for (size_t i = 0; i < n; i++) {
		sem_post(&w[i]->go);
		if (!together)
			sem_wait(&w[i]->done);
	}
	for (size_t i = 0; together && i < n; i++)
		sem_wait(&w[i]->done);
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own fd */
}

static bool thread_listed(pid_t tid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
	return stat(path, &st) == 0;
}

static void print_values(const char *who, const struct counter_values *v)
{
	printf("  %s:\n", who);
	for (int k = 0; k < COUNTER_KIND_MAX; k++) {
		const struct counter_value *c = &v->v[k];

		if (c->status == COUNTER_OK)
			printf("    %-29s delta %12llu total %12llu%s\n", counter_kind__name(k),
			       (unsigned long long)c->delta, (unsigned long long)c->total,
			       c->user_only ? " (user only)" : "");
		else
			printf("    %-29s %s\n", counter_kind__name(k),
			       counter_status__name(c->status));
	}
}

static bool near(uint64_t value, uint64_t want, double tolerance)
{
	return (double)value >= (double)want * (1.0 - tolerance) &&
	       (double)value <= (double)want * (1.0 + tolerance);
}

#define CHECK_NEAR(value, want, tol)                                                               \
	do {                                                                                       \
		uint64_t _v = (value), _w = (want);                                                \
		if (!near(_v, _w, tol))                                                            \
			check_fail(__FILE__, __LINE__, "%s ~ %s (+-%.0f%%) failed: %llu vs %llu",  \
				   #value, #want, (tol)*100, (unsigned long long)_v,               \
				   (unsigned long long)_w);                                        \
	} while (0)

static void test_names(void)
{
	static const char *const want[COUNTER_KIND_MAX] = {
		"task-clock",   "context-switches", "cpu-migrations",   "page-faults",
		"cycles",       "instructions",     "cache-references", "cache-misses",
		"branch-misses", "voluntary-context-switches", "involuntary-context-switches",
	};

	for (int k = 0; k < COUNTER_KIND_MAX; k++) {
		CHECK_STR_EQ(counter_kind__name(k), want[k]);
		CHECK_INT_EQ(counter_kind__from_name(want[k]), k);
		CHECK_INT_EQ(counter_kind__hardware(k),
			     k >= COUNTER_CYCLES && k <= COUNTER_BRANCH_MISSES);
	}
	CHECK_INT_EQ(counter_kind__from_name("cpu-clock"), -EINVAL);
	CHECK_INT_EQ(counter_kind__from_name(NULL), -EINVAL);
	CHECK(counter_kind__name(COUNTER_KIND_MAX) == NULL);
}

/* The PMU code path of the derived figures, on synthetic values: runs without a PMU. */
static void test_derive(void)
{
	struct counter_values v = { 0 };
	struct counter_derived d;

	/* A zeroed struct is "no value" everywhere, never a set of zeros. */
	counters__derive(&v, &d);
	CHECK(!d.ipc.available);
	CHECK(!d.cache_miss_pct.available);
	CHECK(!d.branch_miss_pki.available);

	for (int k = 0; k < COUNTER_KIND_MAX; k++)
		v.v[k].status = COUNTER_OK;
	v.v[COUNTER_CYCLES].delta = 1000;
	v.v[COUNTER_INSTRUCTIONS].delta = 2500;
	v.v[COUNTER_CACHE_REFERENCES].delta = 100;
	v.v[COUNTER_CACHE_MISSES].delta = 7;
	v.v[COUNTER_BRANCH_MISSES].delta = 5;
	counters__derive(&v, &d);
	CHECK(d.ipc.available && d.ipc.value == 2.5);
	CHECK(d.cache_miss_pct.available && d.cache_miss_pct.value == 7.0);
	CHECK(d.branch_miss_pki.available && d.branch_miss_pki.value == 2.0);

	/* One input unsupported: unavailable, the others unaffected. */
	v.v[COUNTER_CYCLES].status = COUNTER_UNSUPPORTED;
	counters__derive(&v, &d);
	CHECK(!d.ipc.available);
	CHECK(d.cache_miss_pct.available && d.cache_miss_pct.value == 7.0);
	v.v[COUNTER_CYCLES].status = COUNTER_OK;

	v.v[COUNTER_CACHE_MISSES].status = COUNTER_DENIED;
	counters__derive(&v, &d);
	CHECK(!d.cache_miss_pct.available);
	CHECK(d.ipc.available);
	v.v[COUNTER_CACHE_MISSES].status = COUNTER_OK;

	v.v[COUNTER_INSTRUCTIONS].status = COUNTER_NOT_COUNTED;
	counters__derive(&v, &d);
	CHECK(!d.ipc.available);
	CHECK(!d.branch_miss_pki.available);
	v.v[COUNTER_INSTRUCTIONS].status = COUNTER_OK;

	/* A divisor of 0: unavailable, not 0 and not a division by zero. */
	v.v[COUNTER_CYCLES].delta = 0;
	v.v[COUNTER_CACHE_REFERENCES].delta = 0;
	v.v[COUNTER_INSTRUCTIONS].delta = 0;
	counters__derive(&v, &d);
	CHECK(!d.ipc.available);
	CHECK(!d.cache_miss_pct.available);
	CHECK(!d.branch_miss_pki.available);

	/* A numerator of 0 with a real divisor is a real 0. */
	v.v[COUNTER_CACHE_REFERENCES].delta = 100;
	v.v[COUNTER_CACHE_MISSES].delta = 0;
	counters__derive(&v, &d);
	CHECK(d.cache_miss_pct.available && d.cache_miss_pct.value == 0.0);
}

/* Returns false if the test cannot run here (software counters denied). */
static bool test_probe(struct counters_support *sup)
{
	int r = counters__probe(sup);

	CHECK_INT_EQ(r, 0);
	if (r < 0)
		return false;
	printf("probe:\n");
	for (int k = 0; k < COUNTER_KIND_MAX; k++)
		printf("  %-29s %s%s\n", counter_kind__name(k),
		       counter_status__name(sup->status[k]),
		       sup->user_only[k] ? " (user only)" : "");
	if (sup->status[COUNTER_TASK_CLOCK] == COUNTER_DENIED)
		return false;
	for (int k = 0; k < COUNTER_KIND_MAX; k++) {
		if (counter_kind__hardware(k))
			/* No PMU in a VM: unsupported. With one: checked non-zero below. */
			CHECK(sup->status[k] == COUNTER_UNSUPPORTED ||
			      sup->status[k] == COUNTER_OK);
		else
			CHECK_INT_EQ(sup->status[k], COUNTER_OK);
	}
	return true;
}

static void test_threads(const struct counters_support *sup)
{
	struct worker spinner, sleeper, faulter;
	struct worker *const all[] = {&spinner, &sleeper, &faulter};
	struct thread_counters *tc_spin = NULL, *tc_sleep = NULL, *tc_fault = NULL;
	struct counter_values a1, a2, s1, s2, f1, f2;
	struct counter_derived d;
	pid_t pid = getpid();

	worker_start(&spinner, spin_200ms, spin_100ms);
	worker_start(&sleeper, sleep_10x10ms, nothing);
	worker_start(&faulter, touch_pages, nothing);
	CHECK_INT_EQ(thread_counters__open(pid, spinner.tid, sup, &tc_spin), 0);
	CHECK_INT_EQ(thread_counters__open(pid, sleeper.tid, sup, &tc_sleep), 0);
	CHECK_INT_EQ(thread_counters__open(pid, faulter.tid, sup, &tc_fault), 0);
	if (!tc_spin || !tc_sleep || !tc_fault) {
		fprintf(stderr, "cannot open counters on the workers\n");
		exit(99); /* the workers wait for phases that will not come */
	}

	/* Interval 1: all three work at once. */
	workers_run_phase(all, ARRAY_SIZE(all), true);
	CHECK_INT_EQ(thread_counters__read(tc_spin, &a1), 0);
	CHECK_INT_EQ(thread_counters__read(tc_sleep, &s1), 0);
	CHECK_INT_EQ(thread_counters__read(tc_fault, &f1), 0);
	printf("interval 1:\n");
	print_values("spinner (200 ms CPU)", &a1);
	print_values("sleeper (10 x 10 ms sleep)", &s1);
	print_values("faulter (1000 new pages)", &f1);

	CHECK_INT_EQ(a1.v[COUNTER_TASK_CLOCK].status, COUNTER_OK);
	CHECK_NEAR(a1.v[COUNTER_TASK_CLOCK].delta, 200 * NSEC_PER_MSEC, 0.2);
	CHECK_INT_EQ(s1.v[COUNTER_TASK_CLOCK].status, COUNTER_OK);
	CHECK(s1.v[COUNTER_TASK_CLOCK].delta < 20 * NSEC_PER_MSEC);
	CHECK_INT_EQ(s1.v[COUNTER_VOLUNTARY_SWITCHES].status, COUNTER_OK);
	CHECK(s1.v[COUNTER_VOLUNTARY_SWITCHES].delta >= 10);
	CHECK_INT_EQ(s1.v[COUNTER_CONTEXT_SWITCHES].status, COUNTER_OK);
	CHECK(s1.v[COUNTER_CONTEXT_SWITCHES].delta >= 10);
	/*
	 * perf's context-switches is the sum of the two /proc counts; they are
	 * read moments apart, while the thread may block once more on its way
	 * back to sem_wait().
	 */
	{
		long long perf_cs = (long long)s1.v[COUNTER_CONTEXT_SWITCHES].delta;
		long long proc_cs = (long long)(s1.v[COUNTER_VOLUNTARY_SWITCHES].delta +
						s1.v[COUNTER_INVOLUNTARY_SWITCHES].delta);

		CHECK(perf_cs - proc_cs >= -2 && perf_cs - proc_cs <= 2);
	}
	CHECK_INT_EQ(f1.v[COUNTER_PAGE_FAULTS].status, COUNTER_OK);
	CHECK(f1.v[COUNTER_PAGE_FAULTS].delta >= PAGES);
	CHECK(f1.v[COUNTER_PAGE_FAULTS].delta < PAGES + 200);
	/* The spinner's faults are few: counts are per thread, not per process. */
	CHECK(a1.v[COUNTER_PAGE_FAULTS].delta < 100);

	/* Hardware kinds: unsupported without a PMU, never 0 with one. */
	for (int k = 0; k < COUNTER_KIND_MAX; k++) {
		if (!counter_kind__hardware(k))
			continue;
		if (sup->status[k] == COUNTER_UNSUPPORTED) {
			CHECK_INT_EQ(a1.v[k].status, COUNTER_UNSUPPORTED);
		} else if (k == COUNTER_CYCLES || k == COUNTER_INSTRUCTIONS) {
			CHECK_INT_EQ(a1.v[k].status, COUNTER_OK);
			CHECK(a1.v[k].delta > 0);
		}
	}
	counters__derive(&a1, &d);
	CHECK_INT_EQ(d.ipc.available, a1.v[COUNTER_CYCLES].status == COUNTER_OK &&
					      a1.v[COUNTER_INSTRUCTIONS].status == COUNTER_OK);
	if (d.ipc.available)
		printf("spinner IPC %.2f\n", d.ipc.value);
	else
		printf("spinner IPC unavailable (cycles %s, instructions %s)\n",
		       counter_status__name(a1.v[COUNTER_CYCLES].status),
		       counter_status__name(a1.v[COUNTER_INSTRUCTIONS].status));

	/* Interval 2: only the spinner works; deltas cover this interval only. */
	workers_run_phase(all, ARRAY_SIZE(all), false);
	CHECK_INT_EQ(thread_counters__read(tc_spin, &a2), 0);
	CHECK_INT_EQ(thread_counters__read(tc_sleep, &s2), 0);
	printf("interval 2:\n");
	print_values("spinner (100 ms CPU)", &a2);
	print_values("sleeper (nothing)", &s2);
	CHECK_INT_EQ(a2.v[COUNTER_TASK_CLOCK].status, COUNTER_OK);
	CHECK_NEAR(a2.v[COUNTER_TASK_CLOCK].delta, 100 * NSEC_PER_MSEC, 0.2);
	CHECK_NEAR(a2.v[COUNTER_TASK_CLOCK].total, 300 * NSEC_PER_MSEC, 0.2);
	CHECK_INT_EQ(a2.v[COUNTER_TASK_CLOCK].total,
		     a1.v[COUNTER_TASK_CLOCK].delta + a2.v[COUNTER_TASK_CLOCK].delta);
	CHECK(s2.v[COUNTER_VOLUNTARY_SWITCHES].delta <= 3);
	CHECK(s2.v[COUNTER_VOLUNTARY_SWITCHES].total >= 10);
	CHECK_INT_EQ(s2.v[COUNTER_VOLUNTARY_SWITCHES].total,
		     s1.v[COUNTER_VOLUNTARY_SWITCHES].delta +
			     s2.v[COUNTER_VOLUNTARY_SWITCHES].delta);
	CHECK(s2.v[COUNTER_TASK_CLOCK].delta < 5 * NSEC_PER_MSEC);
	CHECK_INT_EQ(thread_counters__read(tc_fault, &f2), 0);
	CHECK_INT_EQ(f2.v[COUNTER_PAGE_FAULTS].status, COUNTER_OK);
	CHECK(f2.v[COUNTER_PAGE_FAULTS].delta < 100);
	CHECK(f2.v[COUNTER_PAGE_FAULTS].total >= PAGES);
	thread_counters__free(tc_spin);
	thread_counters__free(tc_sleep);
	thread_counters__free(tc_fault);
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		worker_stop(all[i]);
}

struct short_arg {
	sem_t go;
	sem_t ready;
	pid_t tid;
};

static void *short_main(void *arg)
{
	struct short_arg *s = arg;

	s->tid = gettid();
	sem_post(&s->ready);
	sem_wait(&s->go);
	spin_cpu_ns(20 * NSEC_PER_MSEC);
	return NULL;
}

/* A thread that exits: its final values once, then -ESRCH; nothing crashes or leaks. */
static void test_dead_thread(const struct counters_support *sup)
{
	struct short_arg s;
	struct thread_counters *tc = NULL, *tc2 = NULL;
	struct counter_values v;
	pthread_t t;
	int fds_before = count_fds(), fds_open, r;

	sem_init(&s.go, 0, 0);
	sem_init(&s.ready, 0, 0);
	if (pthread_create(&t, NULL, short_main, &s) != 0)
		exit(99);
	sem_wait(&s.ready);
	CHECK_INT_EQ(thread_counters__open(getpid(), s.tid, sup, &tc), 0);
	fds_open = count_fds();
	CHECK(fds_open > fds_before);
	sem_post(&s.go);
	pthread_join(t, NULL);
	/* pthread_join() returns when the tid is cleared, a little before the kernel reaps it. */
	for (int i = 0; i < 200 && thread_listed(s.tid); i++)
		usleep(10000);
	CHECK(!thread_listed(s.tid));

	if (tc) {
		r = thread_counters__read(tc, &v);
		CHECK_INT_EQ(r, 1);
		printf("exited thread, final read (%d):\n", r);
		print_values("short-lived (20 ms CPU)", &v);
		CHECK_INT_EQ(v.v[COUNTER_TASK_CLOCK].status, COUNTER_OK);
		CHECK_NEAR(v.v[COUNTER_TASK_CLOCK].delta, 20 * NSEC_PER_MSEC, 0.5);
		CHECK_INT_EQ(v.v[COUNTER_VOLUNTARY_SWITCHES].status, COUNTER_NOT_COUNTED);
		/* The perf fds are closed as soon as the exit is seen. */
		CHECK_INT_EQ(count_fds(), fds_before + 1);
		CHECK_INT_EQ(thread_counters__read(tc, &v), -ESRCH);
		CHECK_INT_EQ(thread_counters__read(tc, &v), -ESRCH);
		thread_counters__free(tc);
	}
	CHECK_INT_EQ(thread_counters__open(getpid(), s.tid, sup, &tc2), -ESRCH);
	CHECK(tc2 == NULL);
	/* A live thread, but not one of pid 1's. */
	CHECK_INT_EQ(thread_counters__open(1, gettid(), sup, &tc2), -ESRCH);
	CHECK_INT_EQ(thread_counters__open(getpid(), 0, sup, &tc2), -ESRCH);
	CHECK(tc2 == NULL);
	CHECK_INT_EQ(count_fds(), fds_before);
	sem_destroy(&s.go);
	sem_destroy(&s.ready);
}

int main(void)
{
	struct counters_support sup;

	test_names();
	test_derive();
	if (!test_probe(&sup)) {
		printf("SKIP: perf_event_open of software counters is denied for this user "
		       "(see /proc/sys/kernel/perf_event_paranoid)\n");
		return check_failures ? check_exit("test-counters") : 77;
	}
	test_threads(&sup);
	test_dead_thread(&sup);
	/* Without a probe result every kind is tried; hardware kinds still read unsupported. */
	{
		struct thread_counters *tc = NULL;
		struct counter_values v;

		CHECK_INT_EQ(thread_counters__open(getpid(), gettid(), NULL, &tc), 0);
		if (tc) {
			CHECK_INT_EQ(thread_counters__read(tc, &v), 0);
			for (int k = 0; k < COUNTER_KIND_MAX; k++)
				if (sup.status[k] == COUNTER_UNSUPPORTED)
					CHECK_INT_EQ(v.v[k].status, COUNTER_UNSUPPORTED);
			CHECK_INT_EQ(v.v[COUNTER_TASK_CLOCK].status, COUNTER_OK);
			thread_counters__free(tc);
		}
	}
	return check_exit("test-counters");
}
