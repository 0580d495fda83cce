/*
 * counters.h - per-thread event counts in counting mode (no sampling): perf
 * software and hardware counters, plus voluntary/involuntary context switches
 * from /proc, each with a status that says whether its value exists.
 *
 * A counter that this machine cannot count (no PMU in a VM), that we may not
 * open, or that has no value for an interval is never reported as 0: every
 * value carries an enum counter_status, and only COUNTER_OK values are numbers.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The counter kinds. The order is fixed; the names (counter_kind__name())
 * are stable and used in the database and in reports.
 */
enum counter_kind {
	/* perf software events */
	COUNTER_TASK_CLOCK,       /* "task-clock": ns on CPU */
	COUNTER_CONTEXT_SWITCHES, /* "context-switches" */
	COUNTER_CPU_MIGRATIONS,   /* "cpu-migrations" */
	COUNTER_PAGE_FAULTS,      /* "page-faults" (minor + major) */
	/* perf hardware events: absent without a PMU */
	COUNTER_CYCLES,           /* "cycles" */
	COUNTER_INSTRUCTIONS,     /* "instructions" */
	COUNTER_CACHE_REFERENCES, /* "cache-references" */
	COUNTER_CACHE_MISSES,     /* "cache-misses" */
	COUNTER_BRANCH_MISSES,    /* "branch-misses" */
	/*
	 * From /proc/PID/task/TID/status (voluntary_ctxt_switches,
	 * nonvoluntary_ctxt_switches), read at each thread_counters__read():
	 * perf's context-switches does not split them.
	 */
	COUNTER_VOLUNTARY_SWITCHES,   /* "voluntary-context-switches" */
	COUNTER_INVOLUNTARY_SWITCHES, /* "involuntary-context-switches" */
	COUNTER_KIND_MAX,
};

/* The kinds below this one are perf events; the others come from /proc. */
#define COUNTER_PERF_KIND_MAX COUNTER_VOLUNTARY_SWITCHES

/*
 * Whether a value exists. Zero is deliberately "no value", so that a zeroed
 * struct never reads as a set of valid zeros.
 */
enum counter_status {
	/*
	 * Opened, but no value this time: the event was enabled yet never on
	 * the PMU during the interval (multiplexed out), its read failed, or
	 * the thread had exited before its /proc file could be read.
	 */
	COUNTER_NOT_COUNTED = 0,
	COUNTER_OK,          /* delta and total are valid */
	COUNTER_UNSUPPORTED, /* this machine cannot count it (ENOENT, EOPNOTSUPP, EINVAL, ENODEV) */
	COUNTER_DENIED,      /* not allowed (EACCES/EPERM, even counting user space only) */
};

/*
 * What counters__probe() found, to pass to every thread_counters__open():
 * kinds marked COUNTER_UNSUPPORTED are not tried again per thread.
 */
struct counters_support {
	enum counter_status status[COUNTER_KIND_MAX]; /* OK, UNSUPPORTED or DENIED */
	bool user_only[COUNTER_KIND_MAX]; /* OK only with exclude_kernel=1 (perf_event_paranoid) */
};

struct counter_value {
	enum counter_status status;
	/* Only when status == COUNTER_OK (0 otherwise). task-clock in ns, the others are counts. */
	uint64_t delta; /* since the previous read (or the open), scaled */
	uint64_t total; /* since thread_counters__open(), scaled */
	/*
	 * perf kinds: the ns the event was enabled and really counting during
	 * the delta's interval. running < enabled means the hardware counter
	 * was multiplexed and delta = raw * enabled / running is an estimate.
	 * 0 for the /proc kinds.
	 */
	uint64_t enabled_ns;
	uint64_t running_ns;
	bool user_only; /* kernel-mode events were excluded (exclude_kernel=1) */
};

struct counter_values {
	struct counter_value v[COUNTER_KIND_MAX]; /* indexed by enum counter_kind */
};

/* A derived figure: value is meaningful only when available is true. */
struct counter_ratio {
	bool available;
	double value;
};

struct counter_derived {
	struct counter_ratio ipc;             /* instructions / cycles */
	struct counter_ratio cache_miss_pct;  /* 100 * cache-misses / cache-references */
	struct counter_ratio branch_miss_pki; /* 1000 * branch-misses / instructions */
};

struct thread_counters;

const char *counter_kind__name(enum counter_kind kind);
int counter_kind__from_name(const char *name);
bool counter_kind__hardware(enum counter_kind kind);
const char *counter_status__name(enum counter_status status);

int counters__probe(struct counters_support *ret);

int thread_counters__open(pid_t pid, pid_t tid, const struct counters_support *sup,
			  struct thread_counters **ret);
int thread_counters__read(struct thread_counters *tc, struct counter_values *ret);
void thread_counters__free(struct thread_counters *tc); /* accepts NULL */

void counters__derive(const struct counter_values *v, struct counter_derived *ret);
