/*
 * test-offcpu.c - test of daemon/collect/offcpu.c and bpf/offcpu.bpf.c on a real
 * workload (tests/workloads/offcpu-mix, path from OFFCPU_MIX or argv[1]).
 *
 * It starts offcpu-mix, adds it as a target, collects off-CPU records for
 * RUN_NS and checks what a user would see:
 *  - the sleeper thread (5 ms of CPU, 5 ms of nanosleep) is off the CPU
 *    about half the wall time (50% +- 10 points), mostly SLEEPING (on a busy
 *    machine, where it also waits for a CPU: asleep half of the time it
 *    does not wait), and its sleeping stacks, completed with CFI by
 *    offcpu__user_stack(), hold sleep_half() and a nanosleep (libc or
 *    kernel), which the frame-pointer walk alone misses;
 *  - the waiter thread, blocked on a mutex the holder keeps 50 ms at a
 *    time, is off the CPU mostly SLEEPING in a futex wait, under
 *    wait_for_lock();
 *  - the kernel stacks of both (taken when the thread runs again) name the
 *    wait: hrtimer_nanosleep or do_nanosleep, futex_wait*;
 *  - the off-CPU and run-queue times agree with the kernel's own account
 *    (/proc/PID/task/TID/schedstat), where it exists;
 *  - no record is lost to a full ring buffer or map, or malformed; switch-ins
 *    the program never saw (switch_in_missed, see offcpu.bpf.c) stay under
 *    1% of the records;
 *  - a reader whose own records keep coming as fast as it reads them (the
 *    test process as target, sleeping per record) returns from a poll after
 *    about a ring's worth.
 * It prints the figures per thread, the heaviest stacks, records per second
 * and what the BPF programs cost (BPF run-time statistics).
 *
 * Exit status: 0 passed, 1 a check failed, 77 skipped (not root, or BPF
 * refused; the reason is printed), 99 setup error.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "check.h"
#include "check_workload.h"
#include "collect/offcpu.h"
#include "symbols/symbolize.h"
#include "util.h"

#define SLOT 5
#define RUN_NS (3 * NSEC_PER_SEC)
#define RINGBUF_BYTES (4u << 20)
#define MAX_STACKS 4096
#define NR_ROLES 3

enum role { SLEEPER, HOLDER, WAITER };
static const char *const role_names[NR_ROLES] = { "sleeper", "holder", "waiter" };
static const char *const state_names[OFFCPU_NR_STATES] = { "RUNNABLE", "SLEEPING", "IO", "OTHER" };

/*
 * One distinct (thread, state, stack) and the off-CPU time spent in it.
 * The user stack is the one offcpu__user_stack() completes with CFI; the
 * frame-pointer walk it came from is kept too, to show what it missed.
 */
struct stack {
	uint32_t tid, state, uflags;
	uint16_t klen, ulen, flen;
	uint64_t ips[2 * OFFCPU_MAX_FRAMES]; /* kernel frames, then the frame-pointer walk */
	uint64_t fixed[OFFCPU_MAX_FRAMES];   /* the completed user stack */
	uint64_t total_ns, count;
};

/* One record, kept to be counted once the window is known. */
struct rec {
	uint32_t tid, state, flags;
	uint64_t end_ns, duration_ns, runq_ns;
};

struct collected {
	pid_t pid;
	struct unwinder *unwinder;
	struct addrspace *as;
	struct stack *stacks;
	size_t n_stacks;
	struct rec *recs;
	size_t n_recs, cap_recs;
	uint64_t foreign; /* records of another process or slot: must be 0 */
	uint64_t stack_overflow;
	uint64_t unwind_ns, unwinds; /* CPU time of offcpu__user_stack() */
	uint64_t stack_bytes;        /* user stack bytes carried by the records */
};

static void on_event(void *ctx, const struct offcpu_event *e, size_t size)
{
	struct collected *c = ctx;
	size_t n = (size_t)e->kstack_len + e->ustack_len, i;
	uint64_t fixed[OFFCPU_MAX_FRAMES], t;
	uint32_t uflags;
	int nf;

	if ((pid_t)e->pid != c->pid || e->slot != SLOT) {
		c->foreign++;
		return;
	}
	if (c->n_recs == c->cap_recs) {
		c->cap_recs = c->cap_recs ? 2 * c->cap_recs : 4096;
		c->recs = realloc(c->recs, c->cap_recs * sizeof(*c->recs));
		if (!c->recs)
			SETUP_FAIL("out of memory");
	}
	c->recs[c->n_recs++] = (struct rec){
		.tid = e->tid,
		.state = e->state,
		.flags = e->flags,
		.end_ns = e->time_ns + e->duration_ns,
		.duration_ns = e->duration_ns,
		.runq_ns = e->runq_ns,
	};
	t = now_ns(CLOCK_THREAD_CPUTIME_ID);
	nf = offcpu__user_stack(c->unwinder, c->as, e, fixed, OFFCPU_MAX_FRAMES, &uflags);
	c->unwind_ns += now_ns(CLOCK_THREAD_CPUTIME_ID) - t;
	c->unwinds++;
	c->stack_bytes += e->stack_size;
	if (nf < 0)
		SETUP_FAIL("offcpu__user_stack: %s", strerror(-nf));
	for (i = 0; i < c->n_stacks; i++) {
		struct stack *s = &c->stacks[i];

		if (s->tid == e->tid && s->state == e->state && s->klen == e->kstack_len &&
		    s->ulen == e->ustack_len && s->flen == nf && s->uflags == uflags &&
		    memcmp(s->ips, e->ips, n * sizeof(e->ips[0])) == 0 &&
		    memcmp(s->fixed, fixed, (size_t)nf * sizeof(fixed[0])) == 0)
			break;
	}
	if (i == c->n_stacks) {
		if (i == MAX_STACKS) {
			c->stack_overflow++;
			return;
		}
		c->stacks[i] = (struct stack){ .tid = e->tid, .state = e->state, .uflags = uflags,
					       .klen = e->kstack_len, .ulen = e->ustack_len,
					       .flen = (uint16_t)nf };
		memcpy(c->stacks[i].ips, e->ips, n * sizeof(e->ips[0]));
		memcpy(c->stacks[i].fixed, fixed, (size_t)nf * sizeof(fixed[0]));
		c->n_stacks++;
	}
	c->stacks[i].total_ns += e->duration_ns;
	c->stacks[i].count++;
}

/* The tids of the workload's named threads, from /proc/PID/task/TID/comm. */
static void find_threads(pid_t pid, pid_t tids[NR_ROLES])
{
	pid_t all[64]; /* offcpu-mix runs 4 threads */
	size_t n = workload_tids(pid, all, ARRAY_SIZE(all));

	for (size_t i = 0; i < n; i++) {
		char comm_path[96], comm[32] = "";
		FILE *f;

		snprintf(comm_path, sizeof(comm_path), "/proc/%d/task/%d/comm", (int)pid,
			 (int)all[i]);
		f = fopen(comm_path, "re");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		for (int r = 0; r < NR_ROLES; r++)
			if (strcmp(comm, role_names[r]) == 0)
				tids[r] = all[i];
	}
	for (int r = 0; r < NR_ROLES; r++)
		if (tids[r] <= 0)
			SETUP_FAIL("no thread named %s in %d", role_names[r], (int)pid);
}

/* A thread's schedstat: on-CPU and run-queue nanoseconds, times switched in. */
struct schedstat {
	uint64_t oncpu_ns, runq_ns, switch_ins;
};

/* Read /proc/PID/task/TID/schedstat; false if unavailable (no CONFIG_SCHED_INFO). */
static bool read_schedstat(pid_t pid, pid_t tid, struct schedstat *ret)
{
	char path[96];
	unsigned long long a, b, n;
	bool ok;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)pid, (int)tid);
	f = fopen(path, "re");
	if (!f)
		return false;
	ok = fscanf(f, "%llu %llu %llu", &a, &b, &n) == 3;
	fclose(f);
	*ret = (struct schedstat){ .oncpu_ns = a, .runq_ns = b, .switch_ins = n };
	return ok;
}

/* Which frames of a stack. */
enum part { KERNEL, WALK, FIXED };

static size_t part_len(const struct stack *s, enum part p)
{
	return p == KERNEL ? s->klen : p == WALK ? s->ulen : s->flen;
}

/* The function at frame @i of part @p of @s, NULL if unknown. */
static const char *frame_name(struct symbolizer *sym, const struct addrspace *as,
			      const struct stack *s, enum part p, size_t i)
{
	struct frame_info fi = { 0 };

	if (p == KERNEL) {
		if (symbolizer__kernel(sym, s->ips[i], i > 0, &fi) < 0)
			return NULL;
	} else if (symbolizer__user(sym, as, p == WALK ? s->ips[s->klen + i] : s->fixed[i], i > 0,
				    &fi) < 0) {
		return NULL;
	}
	return fi.function;
}

/*
 * Where a role's SLEEPING time is expected: under its own function (@own)
 * in the stack completed by CFI, and under the wait the kernel or libc
 * names (@kernel, @user; spelled for the report in the *_desc strings).
 * The *_ns sums are what the stacks show.
 */
struct sleep_expect {
	int role;
	const char *const *own, *const *kernel, *const *user;
	const char *wait_desc, *kernel_desc, *user_desc;
	uint64_t sleeping_ns, ok_ns, walk_ns, kernel_ns, user_ns;
};

/* Does a frame of part @p of @s name a function containing one of @subs? */
static bool stack_has(struct symbolizer *sym, const struct addrspace *as, const struct stack *s,
		      enum part p, const char *const *subs)
{
	for (size_t i = 0; i < part_len(s, p); i++) {
		const char *name = frame_name(sym, as, s, p, i);

		for (const char *const *q = subs; name && *q; q++)
			if (strstr(name, *q))
				return true;
	}
	return false;
}

/* Print the kernel frames and the completed user stack; '+' marks frames the walk missed. */
static void print_stack(struct symbolizer *sym, const struct addrspace *as, const struct stack *s)
{
	const uint64_t *walk = &s->ips[s->klen];

	for (size_t i = 0; i < s->klen; i++) {
		const char *name = frame_name(sym, as, s, KERNEL, i);

		printf("      k  %#18" PRIx64 " %s\n", s->ips[i], name ? name : "?");
	}
	for (size_t i = 0; i < s->flen; i++) {
		const char *name = frame_name(sym, as, s, FIXED, i);
		bool in_walk = false;

		for (size_t k = 0; k < s->ulen && !in_walk; k++)
			in_walk = walk[k] == s->fixed[i];
		printf("      u%c %#18" PRIx64 " %s\n", in_walk ? ' ' : '+', s->fixed[i],
		       name ? name : "?");
	}
	if (s->uflags)
		printf("      (user stack flags %#x)\n", s->uflags);
}

static int by_total_desc(const void *a, const void *b)
{
	const struct stack *x = a, *y = b;

	return x->total_ns < y->total_ns ? 1 : x->total_ns > y->total_ns ? -1 : 0;
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0;
}

/* offcpu_fn for check_untraced_slot(): counts the records of process *(pid_t *)@ctx. */
static void count_event(void *ctx, const struct offcpu_event *e, size_t size)
{
	pid_t *pid_and_count = ctx;

	if ((pid_t)e->pid == pid_and_count[0])
		pid_and_count[1]++;
}

/* Poll @o's ring buffer for @ms milliseconds. */
static void poll_for(struct offcpu *o, int ms)
{
	for (int i = 0; i < ms / 50; i++) {
		usleep(50000);
		CHECK(record_reader__poll(offcpu__reader(o)) >= 0);
	}
}

/*
 * A targets map shared with the CPU sampler holds processes of sessions
 * that did not ask for off-CPU intervals: their switches are not traced
 * (no stacks taken for profd to drop), until their slot is added.
 */
static void check_untraced_slot(pid_t pid)
{
	struct offcpu_shared_maps maps = { .cfi_fds = { -1, -1, -1, -1 } };
	__u32 key = (__u32)pid, val = SLOT + 1;
	pid_t seen[2] = { pid, 0 };
	struct offcpu *o = NULL;

	/* as targets.bpf.h defines it, for bpf_map__reuse_fd() */
	maps.targets_fd = bpf_map_create(BPF_MAP_TYPE_HASH, "targets", 4, 4, 4096, NULL);
	if (maps.targets_fd < 0)
		SETUP_FAIL("bpf_map_create: %m");
	CHECK_INT_EQ(offcpu__new_shared(RINGBUF_BYTES, &maps, count_event, seen, &o), 0);
	if (!o)
		return;
	/* what the sampler does for a session of --events cpu */
	CHECK_INT_EQ(bpf_map_update_elem(maps.targets_fd, &key, &val, BPF_NOEXIST), 0);
	poll_for(o, 500);
	printf("slot in the shared targets map, not added: %d intervals\n", seen[1]);
	CHECK_INT_EQ(seen[1], 0);
	CHECK_INT_EQ(offcpu__add_target(o, SLOT, pid, 0), 0);
	poll_for(o, 500);
	printf("the same slot added: %d intervals\n", seen[1]);
	CHECK(seen[1] > 0);
	CHECK_INT_EQ(offcpu__remove_target(o, SLOT, pid), 0);
	offcpu__free(o);
	close(maps.targets_fd);
}

/* What check_bounded_poll()'s reader saw. */
struct feeding {
	int records; /* of this process, read so far */
	int more;    /* records still to cause, one per record read */
};

/* offcpu_fn for check_bounded_poll(): each record of this process sleeps 200 us, which makes
 * another (an off-CPU interval of the reading thread itself). */
static void feed_event(void *ctx, const struct offcpu_event *e, size_t size)
{
	struct feeding *f = ctx;

	if ((pid_t)e->pid != getpid())
		return;
	f->records++;
	if (f->more > 0) {
		f->more--;
		usleep(200);
	}
}

/*
 * A producer as fast as the reader: one poll reads about a ring's worth
 * and returns, not every record the stream goes on to make (the loop's
 * timer would wait for the stream to stop); the next polls read the rest.
 */
static void check_bounded_poll(void)
{
	enum { RING = 64u << 10, STREAM = 2000 };
	struct feeding f = {.more = STREAM};
	struct offcpu *o = NULL;
	int first, later = 0, r;

	CHECK_INT_EQ(offcpu__new(RING, feed_event, &f, &o), 0);
	if (!o)
		return;
	CHECK_INT_EQ(offcpu__add_target(o, SLOT, getpid(), 0), 0);
	usleep(1000); /* the first record */
	first = record_reader__poll(offcpu__reader(o));
	CHECK_INT_EQ(offcpu__remove_target(o, SLOT, getpid()), 0);
	while ((r = record_reader__poll(offcpu__reader(o))) > 0)
		later += r;
	printf("a self-feeding stream, %u KiB ring: first poll %d records (%d of this process), "
	       "%d more after, %d still to cause\n",
	       RING >> 10, first, f.records, later, f.more);
	/* a record holds at least its header (offsetof ips) */
	CHECK(first > 0 && first <= (int)(RING / offsetof(struct offcpu_event, ips)) + 1);
	CHECK(later > 0);
	offcpu__free(o);
}

/* Start offcpu-mix for @seconds; returns after it printed "ready". */
static pid_t start_workload(const char *path, int seconds)
{
	char arg[16], line[32] = "";
	FILE *f;

	snprintf(arg, sizeof(arg), "%d", seconds);
	f = fdopen(workload_start((char *[]){(char *)path, arg, NULL}, NULL, STDOUT_FILENO), "r");
	if (!f || !fgets(line, sizeof(line), f) || strcmp(line, "ready\n") != 0)
		SETUP_FAIL("%s did not start", path);
	fclose(f);
	return workload_pid;
}

int main(int argc, char **argv)
{
	static const char *const nanosleep_user[] = { "nanosleep", NULL };
	static const char *const nanosleep_kernel[] = { "do_nanosleep", "hrtimer_nanosleep", NULL };
	static const char *const sleep_half[] = { "sleep_half", NULL };
	static const char *const futex_kernel[] = { "futex_wait", NULL };
	static const char *const futex_user[] = { "lll_lock_wait", "pthread_mutex_lock", NULL };
	static const char *const wait_for_lock[] = { "wait_for_lock", NULL };
	const char *path = argc > 1 ? argv[1] : getenv("OFFCPU_MIX");
	struct collected c = { 0 };
	struct offcpu *o = NULL;
	struct offcpu_counters cnt = { 0 };
	struct addrspace *as = NULL;
	struct symbolizer *sym;
	pid_t tids[NR_ROLES] = { 0 };
	struct schedstat ss0[NR_ROLES], ss1[NR_ROLES];
	struct sleep_expect expect[] = {
	    {.role = SLEEPER,
	     .own = sleep_half,
	     .kernel = nanosleep_kernel,
	     .user = nanosleep_user,
	     .wait_desc = "nanosleep",
	     .kernel_desc = "do_nanosleep/hrtimer_nanosleep",
	     .user_desc = "*nanosleep"},
	    {.role = WAITER,
	     .own = wait_for_lock,
	     .kernel = futex_kernel,
	     .user = futex_user,
	     .wait_desc = "futex wait",
	     .kernel_desc = "futex_wait*",
	     .user_desc = "__lll_lock_wait/pthread_mutex_lock"},
	};
	uint64_t t0, t1, window_ns, run_cnt = 0, run_ns = 0, n_short = 0, n_window = 0;
	bool have_schedstat = true;
	struct pollfd pfd = {.events = POLLIN};
	int r, stats_fd;

	if (geteuid() != 0) {
		printf("SKIP: needs root (BPF programs on sched_switch)\n");
		return 77;
	}
	if (!path)
		SETUP_FAIL("set OFFCPU_MIX or pass the path of offcpu-mix");
	c.stacks = calloc(MAX_STACKS, sizeof(*c.stacks));
	if (!c.stacks)
		SETUP_FAIL("out of memory");

	/* A sampling period of 0 (offcpu__add_target()): every interval is sent, so the
	 * sums can be compared with the kernel's; the intervals under 10 us are counted apart. */
	r = offcpu__new(RINGBUF_BYTES, on_event, &c, &o);
	if (r == -EPERM || r == -EACCES || r == -ENOSYS || r == -EOPNOTSUPP) {
		printf("SKIP: loading offcpu.bpf.c refused: %s\n", strerror(-r));
		return 77;
	}
	if (r < 0) {
		fprintf(stderr, "offcpu__new: %s\n", strerror(-r));
		return 1;
	}
	/* Run-time statistics of BPF programs, while this fd is open. */
	stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);

	check_bounded_poll();
	c.pid = start_workload(path, (int)(RUN_NS / NSEC_PER_SEC) + 4);
	check_untraced_slot(c.pid);
	find_threads(c.pid, tids);
	r = addrspace__new(c.pid, &as);
	if (r < 0)
		SETUP_FAIL("addrspace__new(%d): %s", (int)c.pid, strerror(-r));
	c.as = as;
	c.unwinder = unwinder__new();
	if (!c.unwinder)
		SETUP_FAIL("out of memory");

	CHECK_INT_EQ(offcpu__add_target(o, SLOT, c.pid, OFFCPU_PERIOD_LIMIT_NS), -EINVAL);
	CHECK_INT_EQ(offcpu__add_target(o, SLOT, c.pid, 0), 0);
	CHECK_INT_EQ(offcpu__add_target(o, SLOT + 1, c.pid, 0), -EBUSY);
	CHECK_INT_EQ(offcpu__add_target(o, OFFCPU_MAX_SLOTS, c.pid, 0), -EINVAL);
	t0 = now_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < NR_ROLES; i++)
		have_schedstat &= read_schedstat(c.pid, tids[i], &ss0[i]);
	if (offcpu__prog_stats(o, &run_cnt, &run_ns) < 0)
		run_cnt = run_ns = 0;

	pfd.fd = record_reader__fd(offcpu__reader(o));
	for (;;) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);

		if (now >= t0 + RUN_NS)
			break;
		/* The fd wakes us only once 1/16 of the ring is full: poll every 100 ms too. */
		r = poll(&pfd, 1, (int)MIN((t0 + RUN_NS - now) / NSEC_PER_MSEC + 1, 100));
		if (r < 0 && errno != EINTR)
			SETUP_FAIL("poll: %m");
		r = record_reader__poll(offcpu__reader(o));
		CHECK(r >= 0);
	}
	t1 = now_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < NR_ROLES; i++)
		have_schedstat &= read_schedstat(c.pid, tids[i], &ss1[i]);
	{
		uint64_t cnt1 = 0, ns1 = 0;

		if (offcpu__prog_stats(o, &cnt1, &ns1) == 0) {
			run_cnt = cnt1 - run_cnt;
			run_ns = ns1 - run_ns;
		}
	}
	CHECK(record_reader__poll(offcpu__reader(o)) >= 0);
	CHECK_INT_EQ(offcpu__remove_target(o, SLOT + 1, c.pid), -ENOENT);
	CHECK_INT_EQ(offcpu__remove_target(o, SLOT, c.pid), 0);
	CHECK_INT_EQ(offcpu__counters(o, SLOT, &cnt), 0);
	window_ns = t1 - t0;

	/* Per thread: off-CPU time by state, for intervals that ended in the window. */
	{
		uint64_t off[NR_ROLES] = { 0 }, by_state[NR_ROLES][OFFCPU_NR_STATES] = { { 0 } },
			 runq[NR_ROLES] = { 0 }, n[NR_ROLES] = { 0 },
			 blocked[NR_ROLES][OFFCPU_NR_STATES] = { { 0 } };

		for (size_t i = 0; i < c.n_recs; i++) {
			const struct rec *e = &c.recs[i];

			if (e->end_ns > t1)
				continue;
			n_window++;
			if (e->duration_ns < 10 * NSEC_PER_USEC)
				n_short++;
			for (int k = 0; k < NR_ROLES; k++)
				if ((pid_t)e->tid == tids[k]) {
					off[k] += e->duration_ns;
					by_state[k][e->state] += e->duration_ns;
					blocked[k][e->state] += e->duration_ns - e->runq_ns;
					runq[k] += e->runq_ns;
					n[k]++;
				}
		}
		printf("window %.3f s, pid %d\n", (double)window_ns / 1e9, (int)c.pid);
		for (int k = 0; k < NR_ROLES; k++) {
			printf("%-8s tid %-7d off-CPU %7.1f ms = %5.1f%% of wall (", role_names[k],
			       (int)tids[k], (double)off[k] / 1e6, pct(off[k], window_ns));
			for (int s = 0; s < OFFCPU_NR_STATES; s++)
				printf("%s%s %.1f%%", s ? ", " : "", state_names[s],
				       pct(by_state[k][s], off[k]));
			printf("), %" PRIu64 " intervals, run-queue %.1f ms\n", n[k],
			       (double)runq[k] / 1e6);
			if (have_schedstat) {
				uint64_t oncpu = ss1[k].oncpu_ns - ss0[k].oncpu_ns;
				uint64_t rq = ss1[k].runq_ns - ss0[k].runq_ns;
				uint64_t ks_off = window_ns > oncpu ? window_ns - oncpu : 0;

				printf("         schedstat: off-CPU %.1f%% of wall, run-queue %.1f ms, "
				       "%" PRIu64 " switch-ins\n",
				       pct(ks_off, window_ns), (double)rq / 1e6,
				       ss1[k].switch_ins - ss0[k].switch_ins);
				/* Intervals cut by the window's ends make the difference: one
				 * per end, up to 5 ms for the sleeper, 50 ms for the others;
				 * plus the intervals reported lost (switch-ins the program
				 * never saw, of any thread), each at most one interval: 10 ms
				 * for the sleeper, whose sleeps are 5 ms, 50 ms for the others
				 * (the waiter waits out the holder's 50 ms holds). */
				uint64_t lost_ns = cnt.switch_in_missed *
						   (k == SLEEPER ? 10 : 50) * NSEC_PER_MSEC;
				double slack = (k == SLEEPER ? 2 : 5) + pct(lost_ns, window_ns);

				if (fabs(pct(off[k], window_ns) - pct(ks_off, window_ns)) >= slack)
					fprintf(stderr, "%s off-CPU %.2f%% vs schedstat %.2f%%, "
							"slack %.2f%% (%" PRIu64 " switch-ins missed)\n",
						role_names[k], pct(off[k], window_ns),
						pct(ks_off, window_ns), slack,
						(uint64_t)cnt.switch_in_missed);
				CHECK(pct(off[k], window_ns) > pct(ks_off, window_ns) - slack &&
				      pct(off[k], window_ns) < pct(ks_off, window_ns) + slack);
				if (k == SLEEPER)
					CHECK(pct(runq[k], window_ns) > pct(rq, window_ns) - 2 &&
					      pct(runq[k], window_ns) < pct(rq, window_ns) + 2);
			}
		}
		/*
		 * The sleeper: 5 ms on the CPU, 5 ms asleep. On an idle machine that
		 * is 50% of the wall time off the CPU, mostly SLEEPING. When other
		 * work keeps it waiting for a CPU (this box has 2), the run-queue
		 * time adds to its off-CPU time: the figures stay right (checked
		 * against schedstat above) but the 50% does not hold, so the check
		 * then takes the run-queue time out: asleep half of the rest.
		 */
		{
			uint64_t sleep_ns = blocked[SLEEPER][OFFCPU_STATE_SLEEPING];
			uint64_t blocked_ns = 0, runnable_wall = window_ns - MIN(runq[SLEEPER], window_ns);

			for (int st = 0; st < OFFCPU_NR_STATES; st++)
				blocked_ns += blocked[SLEEPER][st];
			printf("sleeper: asleep %.1f%% of the time it did not wait for a CPU, "
			       "SLEEPING %.1f%% of its blocked time\n",
			       pct(sleep_ns, runnable_wall), pct(sleep_ns, blocked_ns));
			CHECK(pct(sleep_ns, runnable_wall) >= 40 && pct(sleep_ns, runnable_wall) <= 60);
			CHECK(pct(sleep_ns, blocked_ns) >= 90);
			if (pct(runq[SLEEPER], window_ns) < 10) {
				CHECK(pct(off[SLEEPER], window_ns) >= 40 &&
				      pct(off[SLEEPER], window_ns) <= 60);
				CHECK(pct(by_state[SLEEPER][OFFCPU_STATE_SLEEPING], off[SLEEPER]) >= 80);
			} else {
				printf("machine busy: the sleeper waited %.1f%% of the time for a CPU; "
				       "off-CPU = 50%% +- 10 of wall not checked\n",
				       pct(runq[SLEEPER], window_ns));
			}
		}
		CHECK(pct(by_state[WAITER][OFFCPU_STATE_SLEEPING], off[WAITER]) >= 80);
		CHECK(pct(off[WAITER], window_ns) >= 70);
	}

	/* Stacks: the share of each thread's sleeping time under the expected calls. */
	sym = symbolizer__new();
	if (!sym)
		SETUP_FAIL("out of memory");
	qsort(c.stacks, c.n_stacks, sizeof(*c.stacks), by_total_desc);
	{
		uint64_t unchecked = 0, fixed = 0, all = 0;

		for (size_t i = 0; i < c.n_stacks; i++) {
			const struct stack *s = &c.stacks[i];

			all += s->count;
			fixed += s->uflags & (OFFCPU_USTACK_FIXED | OFFCPU_USTACK_CFI_ONLY) ? s->count : 0;
			unchecked += s->uflags & OFFCPU_USTACK_UNCHECKED ? s->count : 0;
			if (s->state != OFFCPU_STATE_SLEEPING)
				continue;
			for (size_t j = 0; j < ARRAY_SIZE(expect); j++) {
				struct sleep_expect *e = &expect[j];
				bool k, u;

				if (s->tid != (uint32_t)tids[e->role])
					continue;
				k = stack_has(sym, as, s, KERNEL, e->kernel);
				u = stack_has(sym, as, s, FIXED, e->user);
				e->sleeping_ns += s->total_ns;
				e->kernel_ns += k ? s->total_ns : 0;
				e->user_ns += u ? s->total_ns : 0;
				if (stack_has(sym, as, s, FIXED, e->own) && (k || u))
					e->ok_ns += s->total_ns;
				if (stack_has(sym, as, s, WALK, e->own))
					e->walk_ns += s->total_ns;
			}
		}
		for (size_t j = 0; j < ARRAY_SIZE(expect); j++) {
			const struct sleep_expect *e = &expect[j];

			printf("%s SLEEPING time under %s + %s: %.1f%% (kernel %s %.1f%%, user %s "
			       "%.1f%%; %s in the frame-pointer walk alone: %.1f%%)\n",
			       role_names[e->role], e->own[0], e->wait_desc,
			       pct(e->ok_ns, e->sleeping_ns), e->kernel_desc,
			       pct(e->kernel_ns, e->sleeping_ns), e->user_desc,
			       pct(e->user_ns, e->sleeping_ns), e->own[0],
			       pct(e->walk_ns, e->sleeping_ns));
		}
		printf("user stacks: %.1f%% of records completed by CFI, %.1f%% unchecked; "
		       "offcpu__user_stack() %.1f us of CPU per record, %.0f stack bytes per record\n",
		       pct(fixed, all), pct(unchecked, all),
		       c.unwinds ? (double)c.unwind_ns / 1e3 / (double)c.unwinds : 0,
		       c.unwinds ? (double)c.stack_bytes / (double)c.unwinds : 0);
		for (size_t j = 0; j < ARRAY_SIZE(expect); j++) {
			const struct sleep_expect *e = &expect[j];

			if (!(pct(e->ok_ns, e->sleeping_ns) >= 90))
				check_fail(__FILE__, __LINE__,
					   "%s: SLEEPING time under %s + %s %.1f%%, want >= 90%%",
					   role_names[e->role], e->own[0], e->wait_desc,
					   pct(e->ok_ns, e->sleeping_ns));
			/* The kernel stack is taken at the switch-in (offcpu.bpf.c). */
			if (!(pct(e->kernel_ns, e->sleeping_ns) >= 90))
				check_fail(__FILE__, __LINE__,
					   "%s: SLEEPING time with %s in the kernel stack %.1f%%, "
					   "want >= 90%%",
					   role_names[e->role], e->kernel_desc,
					   pct(e->kernel_ns, e->sleeping_ns));
		}
	}
	for (int k = 0; k < NR_ROLES; k++) {
		int shown = 0;

		for (size_t i = 0; i < c.n_stacks && shown < 2; i++) {
			const struct stack *s = &c.stacks[i];

			if (s->tid != (uint32_t)tids[k])
				continue;
			printf("  %s stack #%d: %s, %.1f ms in %" PRIu64 " intervals\n",
			       role_names[k], ++shown, state_names[s->state],
			       (double)s->total_ns / 1e6, s->count);
			print_stack(sym, as, s);
		}
	}

	printf("records: %zu (%" PRIu64 " ended in the window, %.0f per second; %" PRIu64
	       " shorter than 10 us), %zu distinct stacks\n",
	       c.n_recs, n_window, (double)n_window * 1e9 / (double)window_ns, n_short,
	       c.n_stacks);
	if (stats_fd >= 0 && run_cnt)
		printf("BPF programs: %" PRIu64 " runs (%.0f per second, all CPUs and tasks), "
		       "%.0f ns per run, %.3f%% of one CPU\n",
		       run_cnt, (double)run_cnt * 1e9 / (double)window_ns,
		       (double)run_ns / (double)run_cnt, pct(run_ns, window_ns));
	else
		printf("BPF programs: run-time statistics unavailable\n");
	printf("lost: ringbuf_full %" PRIu64 ", tid_map_full %" PRIu64 ", switch_in_missed %" PRIu64
	       ", bad records %" PRIu64 ", foreign %" PRIu64 "\n",
	       (uint64_t)cnt.ringbuf_full, (uint64_t)cnt.tid_map_full,
	       (uint64_t)cnt.switch_in_missed, record_reader__bad_records(offcpu__reader(o)), c.foreign);
	CHECK_INT_EQ(cnt.ringbuf_full, 0);
	CHECK_INT_EQ(cnt.tid_map_full, 0);
	/* Not ours to prevent (offcpu.bpf.c): on this kernel a few switch-ins
	 * in a thousand never reach the program. They must be counted, and rare. */
	CHECK(cnt.switch_in_missed * 100 <= n_window);
	CHECK_INT_EQ(offcpu__lost(o, SLOT), cnt.switch_in_missed);
	CHECK_INT_EQ(record_reader__bad_records(offcpu__reader(o)), 0);
	CHECK_INT_EQ(c.foreign, 0);
	CHECK_INT_EQ(c.stack_overflow, 0);
	CHECK(n_window > 0);

	workload_kill();
	if (stats_fd >= 0)
		close(stats_fd);
	symbolizer__free(sym);
	unwinder__free(c.unwinder);
	addrspace__free(as);
	offcpu__free(o);
	free(c.stacks);
	free(c.recs);
	return check_exit("test-offcpu");
}
