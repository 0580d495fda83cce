/* counters.c - per-thread perf counters in counting mode, and context switches from /proc. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "collect/counters.h"
#include "util.h"

static const struct {
	const char *name;
	uint32_t type; /* PERF_TYPE_*, for the perf kinds */
	uint64_t config;
} kinds[COUNTER_KIND_MAX] = {
	[COUNTER_TASK_CLOCK] = { "task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK },
	[COUNTER_CONTEXT_SWITCHES] = { "context-switches", PERF_TYPE_SOFTWARE,
				       PERF_COUNT_SW_CONTEXT_SWITCHES },
	[COUNTER_CPU_MIGRATIONS] = { "cpu-migrations", PERF_TYPE_SOFTWARE,
				     PERF_COUNT_SW_CPU_MIGRATIONS },
	[COUNTER_PAGE_FAULTS] = { "page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS },
	[COUNTER_CYCLES] = { "cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES },
	[COUNTER_INSTRUCTIONS] = { "instructions", PERF_TYPE_HARDWARE,
				   PERF_COUNT_HW_INSTRUCTIONS },
	[COUNTER_CACHE_REFERENCES] = { "cache-references", PERF_TYPE_HARDWARE,
				       PERF_COUNT_HW_CACHE_REFERENCES },
	[COUNTER_CACHE_MISSES] = { "cache-misses", PERF_TYPE_HARDWARE,
				   PERF_COUNT_HW_CACHE_MISSES },
	[COUNTER_BRANCH_MISSES] = { "branch-misses", PERF_TYPE_HARDWARE,
				    PERF_COUNT_HW_BRANCH_MISSES },
	[COUNTER_VOLUNTARY_SWITCHES] = { "voluntary-context-switches", 0, 0 },
	[COUNTER_INVOLUNTARY_SWITCHES] = { "involuntary-context-switches", 0, 0 },
};

/* What perf_event_open(2) returns for one kind: read_format below. */
struct perf_reading {
	uint64_t value;
	uint64_t enabled_ns;
	uint64_t running_ns;
};

/* One /proc/PID/task/TID/status read. */
struct proc_reading {
	uint64_t voluntary, involuntary;
	bool have_voluntary, have_involuntary;
	bool dead; /* State: Z or X (a zombie thread-group leader, or a task being reaped) */
};

struct thread_counters {
	pid_t pid, tid;
	bool exited;   /* the final values were returned; reads now give -ESRCH */
	int status_fd; /* /proc/PID/task/TID/status, pins this thread's struct pid */
	int fds[COUNTER_PERF_KIND_MAX];
	enum counter_status status[COUNTER_KIND_MAX]; /* OK, UNSUPPORTED or DENIED */
	bool user_only[COUNTER_KIND_MAX];
	struct perf_reading prev[COUNTER_PERF_KIND_MAX]; /* at the previous read (0 at the open) */
	uint64_t proc_prev[2], proc_first[2];            /* voluntary, involuntary */
};

/* counter_kind__name() - the stable name of @kind ("task-clock", ...), or NULL if out of range. */
const char *counter_kind__name(enum counter_kind kind)
{
	if ((unsigned)kind >= COUNTER_KIND_MAX)
		return NULL;
	return kinds[kind].name;
}

/* counter_kind__from_name() - the enum counter_kind named @name, or -EINVAL. */
int counter_kind__from_name(const char *name)
{
	for (int k = 0; k < COUNTER_KIND_MAX; k++)
		if (name && strcmp(name, kinds[k].name) == 0)
			return k;
	return -EINVAL;
}

/* counter_kind__hardware() - true if @kind needs a hardware PMU. */
bool counter_kind__hardware(enum counter_kind kind)
{
	return (unsigned)kind < COUNTER_PERF_KIND_MAX && kinds[kind].type == PERF_TYPE_HARDWARE;
}

/* counter_status__name() - "ok", "unsupported", "denied", "not-counted" (static strings). */
const char *counter_status__name(enum counter_status status)
{
	switch (status) {
	case COUNTER_OK:
		return "ok";
	case COUNTER_UNSUPPORTED:
		return "unsupported";
	case COUNTER_DENIED:
		return "denied";
	case COUNTER_NOT_COUNTED:
		return "not-counted";
	}
	return "invalid";
}

static int perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu)
{
	int fd = (int)syscall(SYS_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/*
 * Open one counting event for @kind on thread @tid (0: the calling thread),
 * all CPUs, counting from now (not disabled), not inherited by children.
 * Tries kernel + user first unless @*user_only, then user only (exclude_kernel
 * and exclude_hv, as perf stat does) when perf_event_paranoid refuses the
 * former; sets @*user_only to what was used.
 *
 * Returns the fd (>= 0), or:
 *   -ENOENT/-EOPNOTSUPP/-EINVAL/-ENODEV: the kind is not supported here (no
 *      PMU gives ENOENT on x86 VMs; other PMU drivers use the others);
 *   -EACCES/-EPERM: denied even counting user space only;
 *   -ESRCH: no such thread; other -errno (-EMFILE, -ENOMEM, ...).
 */
static int open_kind(enum counter_kind kind, pid_t tid, bool *user_only)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = kinds[kind].type,
		.config = kinds[kind].config,
		.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
		.inherit = 0,
		.disabled = 0,
	};
	int fd = -EACCES;

	if (!*user_only) {
		fd = perf_event_open(&attr, tid, -1);
		if (fd != -EACCES && fd != -EPERM)
			return fd;
	}
	attr.exclude_kernel = 1;
	attr.exclude_hv = 1;
	fd = perf_event_open(&attr, tid, -1);
	if (fd >= 0)
		*user_only = true;
	return fd;
}

static bool unsupported_errno(int r)
{
	return r == -ENOENT || r == -EOPNOTSUPP || r == -EINVAL || r == -ENODEV;
}

static bool denied_errno(int r)
{
	return r == -EACCES || r == -EPERM;
}

/*
 * Parse the two context-switch counters and State out of a status file, one
 * line at a time through a fixed buffer: the file is untrusted input whose
 * Groups: and Cpus_allowed_list: lines can be long, and the lines we want
 * come last. Over-long lines are skipped. Returns 0, or -errno of read(2)
 * (-ESRCH once the thread has been reaped).
 */
static int read_proc_status(int fd, struct proc_reading *ret)
{
	char buf[1024];
	size_t len = 0;
	bool skipping = false; /* inside a line longer than buf */
	struct proc_reading p = { 0 };

	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	for (;;) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - len);
		char *line, *nl;
		bool eof;

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		eof = n == 0;
		len += (size_t)n;
		line = buf;
		while ((nl = memchr(line, '\n', len - (size_t)(line - buf))) ||
		       (eof && line < buf + len)) {
			if (!nl) /* a last line without '\n' */
				nl = buf + len;
			*nl = '\0';
			if (!skipping) {
				unsigned long long v;
				char st;

				if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1) {
					p.voluntary = v;
					p.have_voluntary = true;
				} else if (sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) ==
					   1) {
					p.involuntary = v;
					p.have_involuntary = true;
				} else if (sscanf(line, "State: %c", &st) == 1) {
					p.dead = st == 'Z' || st == 'X';
				}
			}
			skipping = false;
			line = nl + 1;
			if (line >= buf + len)
				break;
		}
		if (eof)
			break;
		if (line > buf + len)
			line = buf + len;
		len -= (size_t)(line - buf);
		memmove(buf, line, len);
		if (len == sizeof(buf)) { /* a line longer than buf: drop what we have of it */
			skipping = true;
			len = 0;
		}
	}
	*ret = p;
	return 0;
}

/*
 * counters__probe() - find which counter kinds this machine supports, by
 * opening each perf kind on the calling thread once (and closing it again)
 * and reading /proc/thread-self/status once.
 * @ret: filled with COUNTER_OK, COUNTER_UNSUPPORTED or COUNTER_DENIED per
 *       kind, and whether a perf kind could count user space only.
 *
 * Call it once per daemon and pass the result to every thread_counters__open():
 * absence of a PMU does not change while the daemon runs, so unsupported kinds
 * are not retried per thread. Returns 0, or -EMFILE/-ENOMEM/... from
 * perf_event_open() (then @ret is unchanged). Does not log, does not block.
 */
int counters__probe(struct counters_support *ret)
{
	struct counters_support sup = { 0 };
	_cleanup_close_ int sfd = -1;
	struct proc_reading p;
	int r;

	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++) {
		bool user_only = false;
		int fd = open_kind(k, 0, &user_only);

		if (fd >= 0) {
			close(fd);
			sup.status[k] = COUNTER_OK;
			sup.user_only[k] = user_only;
		} else if (unsupported_errno(fd)) {
			sup.status[k] = COUNTER_UNSUPPORTED;
		} else if (denied_errno(fd)) {
			sup.status[k] = COUNTER_DENIED;
		} else {
			return fd;
		}
	}

	sfd = open("/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
	r = sfd < 0 ? -errno : read_proc_status(sfd, &p);
	if (r < 0 && r != -ENOENT && r != -EACCES)
		return r;
	sup.status[COUNTER_VOLUNTARY_SWITCHES] =
		r == 0 && p.have_voluntary ? COUNTER_OK : COUNTER_UNSUPPORTED;
	sup.status[COUNTER_INVOLUNTARY_SWITCHES] =
		r == 0 && p.have_involuntary ? COUNTER_OK : COUNTER_UNSUPPORTED;
	*ret = sup;
	return 0;
}

/*
 * thread_counters__free() - close every fd of @tc and free it. Accepts NULL
 * and a half-opened @tc.
 */
void thread_counters__free(struct thread_counters *tc)
{
	if (!tc)
		return;
	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++)
		if (tc->fds[k] >= 0)
			close(tc->fds[k]);
	if (tc->status_fd >= 0)
		close(tc->status_fd);
	free(tc);
}

static void close_perf_fds(struct thread_counters *tc)
{
	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++)
		if (tc->fds[k] >= 0) {
			close(tc->fds[k]);
			tc->fds[k] = -1;
		}
}

/*
 * thread_counters__open() - start counting every supported kind on thread
 * @tid of process @pid.
 * @pid, @tid: the thread is /proc/@pid/task/@tid (@tid == @pid for the main thread).
 * @sup: from counters__probe(); kinds it marks COUNTER_UNSUPPORTED are not
 *       tried (and read as COUNTER_UNSUPPORTED). NULL: try every kind.
 * @ret: the new object, owned by the caller (thread_counters__free()).
 *
 * One independent perf fd per kind (no group): pid=@tid, cpu=-1, counting
 * mode, inherit=0 (this thread only, not threads it creates),
 * read_format=TOTAL_TIME_ENABLED|TOTAL_TIME_RUNNING, O_CLOEXEC. Not a group,
 * so that each hardware kind is multiplexed and scaled on its own and one kind
 * that cannot be scheduled does not take the others with it; the cost is one
 * read(2) per kind at each thread_counters__read(). Kernel-mode events are
 * counted where allowed, else user only (see counter_value.user_only).
 *
 * A kind that cannot be opened is not an error: its status becomes
 * COUNTER_UNSUPPORTED (ENOENT/EOPNOTSUPP/EINVAL/ENODEV) or COUNTER_DENIED
 * (EACCES/EPERM) and every read reports that status.
 *
 * The thread is pinned by an open /proc/@pid/task/@tid/status, checked after
 * the perf events are opened, so a tid that exits and is reused meanwhile is
 * detected (-ESRCH) rather than counted as the wrong thread.
 *
 * Returns 0, -ESRCH if the thread is gone or is not a thread of @pid, -ENOMEM,
 * -EMFILE or another -errno of perf_event_open(2)/open(2) (then *@ret is
 * unchanged and nothing stays open). Allocates; does not block; does not log.
 */
int thread_counters__open(pid_t pid, pid_t tid, const struct counters_support *sup,
			  struct thread_counters **ret)
{
	struct thread_counters *tc;
	struct proc_reading p;
	char path[64];
	int r;

	if (pid <= 0 || tid <= 0)
		return -ESRCH;
	tc = calloc(1, sizeof(*tc));
	if (!tc)
		return -ENOMEM;
	*tc = (struct thread_counters){.pid = pid, .tid = tid, .status_fd = -1};
	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++)
		tc->fds[k] = -1;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
	tc->status_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (tc->status_fd < 0) {
		r = errno == ENOENT ? -ESRCH : -errno;
		goto fail;
	}

	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++) {
		bool user_only = sup && sup->user_only[k];
		int fd;

		if (sup && sup->status[k] == COUNTER_UNSUPPORTED) {
			tc->status[k] = COUNTER_UNSUPPORTED;
			continue;
		}
		fd = open_kind(k, tid, &user_only);
		if (fd >= 0) {
			tc->fds[k] = fd;
			tc->status[k] = COUNTER_OK;
			tc->user_only[k] = user_only;
		} else if (unsupported_errno(fd)) {
			tc->status[k] = COUNTER_UNSUPPORTED;
		} else if (denied_errno(fd)) {
			tc->status[k] = COUNTER_DENIED;
		} else {
			r = fd;
			goto fail;
		}
	}

	/* After the perf events: the thread they name is still the one we pinned. */
	r = read_proc_status(tc->status_fd, &p);
	if (r < 0 || p.dead) {
		r = r == -ENOENT || r == 0 ? -ESRCH : r;
		goto fail;
	}
	tc->status[COUNTER_VOLUNTARY_SWITCHES] =
		p.have_voluntary ? COUNTER_OK : COUNTER_UNSUPPORTED;
	tc->status[COUNTER_INVOLUNTARY_SWITCHES] =
		p.have_involuntary ? COUNTER_OK : COUNTER_UNSUPPORTED;
	tc->proc_prev[0] = tc->proc_first[0] = p.voluntary;
	tc->proc_prev[1] = tc->proc_first[1] = p.involuntary;
	*ret = tc;
	return 0;
fail:
	thread_counters__free(tc);
	return r;
}

/* @value * @enabled / @running without overflow, rounded to nearest. @running > 0. */
static uint64_t scale(uint64_t value, uint64_t enabled, uint64_t running)
{
	if (enabled == running)
		return value;
#ifdef __SIZEOF_INT128__
	return (uint64_t)(((unsigned __int128)value * enabled + running / 2) / running);
#else
	return (uint64_t)((long double)value * enabled / running + 0.5L);
#endif
}

/*
 * Scale a raw count over an interval in which the event was enabled for
 * @enabled ns and on the PMU for @running ns. Returns false if there is no
 * value: enabled but never running (multiplexed out the whole interval).
 * With nothing enabled (a thread that did not run) the raw count is exact.
 */
static bool scaled(uint64_t value, uint64_t enabled, uint64_t running, uint64_t *ret)
{
	if (running == 0) {
		if (enabled != 0)
			return false;
		*ret = value;
		return true;
	}
	*ret = scale(value, enabled, running);
	return true;
}

static void read_perf_kind(struct thread_counters *tc, int k, struct counter_value *v)
{
	struct perf_reading now, *prev = &tc->prev[k];
	ssize_t n;

	v->user_only = tc->user_only[k];
	if (tc->status[k] != COUNTER_OK) {
		v->status = tc->status[k];
		return;
	}
	v->status = COUNTER_NOT_COUNTED;
	do
		n = read(tc->fds[k], &now, sizeof(now));
	while (n < 0 && errno == EINTR);
	/* A short read is an event in error state (e.g. pinned and unschedulable). */
	if (n != (ssize_t)sizeof(now) || now.value < prev->value ||
	    now.enabled_ns < prev->enabled_ns || now.running_ns < prev->running_ns)
		return;

	v->enabled_ns = now.enabled_ns - prev->enabled_ns;
	v->running_ns = now.running_ns - prev->running_ns;
	/*
	 * As perf stat -I does: the delta is scaled by the interval's own
	 * enabled/running times, the total by the totals, so the sum of the
	 * deltas of a multiplexed counter may differ slightly from the total.
	 * The event started at 0 when it was opened, so its totals are since then.
	 */
	if (scaled(now.value - prev->value, v->enabled_ns, v->running_ns, &v->delta) &&
	    scaled(now.value, now.enabled_ns, now.running_ns, &v->total))
		v->status = COUNTER_OK;
	else
		v->delta = v->total = 0;
	*prev = now;
}

static void proc_kind(struct thread_counters *tc, int k, int i, bool have, uint64_t now,
		      struct counter_value *v)
{
	if (tc->status[k] != COUNTER_OK) {
		v->status = tc->status[k];
		return;
	}
	/* Missing, or going backwards: untrusted input, no value this time. */
	if (!have || now < tc->proc_prev[i]) {
		v->status = COUNTER_NOT_COUNTED;
		return;
	}
	v->status = COUNTER_OK;
	v->delta = now - tc->proc_prev[i];
	v->total = now - tc->proc_first[i];
	tc->proc_prev[i] = now;
}

/*
 * thread_counters__read() - the counts of @tc's thread since the previous
 * read (the open, for the first) and since the open.
 * @ret: every kind's value with its status (see struct counter_value); only
 *       COUNTER_OK values are numbers. Hardware counts are scaled for
 *       multiplexing (value * enabled / running).
 *
 * /proc is read first: if the thread is still there, the perf values read
 * after it are at least as recent; if it is gone, the kernel has already
 * stopped its perf events (perf_event_exit_task() runs before the thread is
 * unhashed from /proc), so the perf values are final.
 *
 * Returns:
 *   0       the thread is alive; @ret filled.
 *   1       the thread has exited: @ret holds its final perf deltas (counted
 *           up to the exit) and COUNTER_NOT_COUNTED for the /proc kinds,
 *           whose file is gone; the perf fds are closed now.
 *   -ESRCH  the exit was already reported by a previous read (@ret unchanged).
 *   other -errno from reading /proc (@ret unchanged).
 * Does not allocate, block or log.
 */
int thread_counters__read(struct thread_counters *tc, struct counter_values *ret)
{
	struct counter_values out = { 0 };
	struct proc_reading p = { 0 };
	bool gone;
	int r;

	if (tc->exited)
		return -ESRCH;
	r = read_proc_status(tc->status_fd, &p);
	if (r < 0 && r != -ESRCH && r != -ENOENT)
		return r;
	gone = r < 0 || p.dead;

	for (int k = 0; k < COUNTER_PERF_KIND_MAX; k++)
		read_perf_kind(tc, k, &out.v[k]);
	if (gone) {
		for (int k = COUNTER_PERF_KIND_MAX; k < COUNTER_KIND_MAX; k++)
			out.v[k].status = tc->status[k] == COUNTER_OK ? COUNTER_NOT_COUNTED
								       : tc->status[k];
		tc->exited = true;
		close_perf_fds(tc);
	} else {
		proc_kind(tc, COUNTER_VOLUNTARY_SWITCHES, 0, p.have_voluntary, p.voluntary,
			  &out.v[COUNTER_VOLUNTARY_SWITCHES]);
		proc_kind(tc, COUNTER_INVOLUNTARY_SWITCHES, 1, p.have_involuntary, p.involuntary,
			  &out.v[COUNTER_INVOLUNTARY_SWITCHES]);
	}
	*ret = out;
	return gone ? 1 : 0;
}

/* @num / @den * @mul if both inputs are OK and @den != 0; unavailable otherwise. */
static struct counter_ratio ratio(const struct counter_values *v, enum counter_kind num,
				  enum counter_kind den, double mul)
{
	const struct counter_value *n = &v->v[num], *d = &v->v[den];

	if (n->status != COUNTER_OK || d->status != COUNTER_OK || d->delta == 0)
		return (struct counter_ratio){ .available = false };
	return (struct counter_ratio){ .available = true,
				       .value = mul * (double)n->delta / (double)d->delta };
}

/*
 * counters__derive() - figures derived from the deltas of @v (one interval):
 * IPC = instructions / cycles, cache-miss % = 100 * cache-misses /
 * cache-references, branch misses per 1000 instructions (there is no
 * "branches" kind to divide by). Each is unavailable, not 0, when an input's
 * status is not COUNTER_OK or its divisor is 0. Pure: no PMU, no syscalls.
 */
void counters__derive(const struct counter_values *v, struct counter_derived *ret)
{
	ret->ipc = ratio(v, COUNTER_INSTRUCTIONS, COUNTER_CYCLES, 1.0);
	ret->cache_miss_pct = ratio(v, COUNTER_CACHE_MISSES, COUNTER_CACHE_REFERENCES, 100.0);
	ret->branch_miss_pki = ratio(v, COUNTER_BRANCH_MISSES, COUNTER_INSTRUCTIONS, 1000.0);
}
