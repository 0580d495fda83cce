/*
 * test-unwind-worker.c - the unwinding thread takes samples in batches:
 * nothing reaches it before a flush, a batch comes back whole and in
 * submission order, at most @capacity samples are in flight (the next is
 * refused with -ENOBUFS, not queued), drained jobs make room again, a
 * record with the largest stack copy comes back as the small ones do (its
 * job is larger than the pooled ones), and an oversized record is refused. The samples carry no
 * stack (this process's registers with an empty copy), so each comes back unwound to nothing,
 * flagged SAMPLE_USER_MISSING. No root needed.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "collect/unwind_worker.h"
#include "symbols/symbolize.h"

#define CAPACITY 8

struct seen {
	uint64_t times[4 * CAPACITY];
	unsigned n;
	unsigned missing, has_regs;
};

static void on_sample(void *ctx, const struct sample_event *e, size_t size)
{
	struct seen *s = ctx;

	CHECK(size >= offsetof(struct sample_event, ips));
	if (s->n < sizeof(s->times) / sizeof(s->times[0]))
		s->times[s->n] = e->time_ns;
	s->n++;
	s->missing += !!(e->flags & SAMPLE_USER_MISSING);
	s->has_regs += !!(e->flags & SAMPLE_HAS_REGS);
}

/* fd_ready() - whether @fd polls readable within @ms milliseconds. */
static bool fd_ready(int fd, int ms)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	return poll(&pfd, 1, ms) == 1;
}

int main(void)
{
	static struct sample_event e; /* ~37 KiB: not on the stack */
	pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
	struct unwind_worker *w = NULL;
	struct addrspace *as = NULL;
	struct seen seen = {0};
	size_t size = offsetof(struct sample_event, stack);

	if (addrspace__new(getpid(), &as) < 0)
		SETUP_FAIL("addrspace__new(self)");
	CHECK_INT_EQ(unwind_worker__new(CAPACITY, &w), 0);
	if (!w)
		return check_exit("test-unwind-worker");

	e.flags = SAMPLE_HAS_REGS;
	e.pid = e.tid = (__u32)getpid();
	for (unsigned i = 0; i < CAPACITY; i++) {
		e.time_ns = 1000 + i;
		CHECK_INT_EQ(unwind_worker__submit(w, &e, size, as, &lock, UNWIND_MODE_DWARF), 0);
	}
	/* a full batch: the next is refused, not queued */
	CHECK_INT_EQ(unwind_worker__submit(w, &e, size, as, &lock, UNWIND_MODE_DWARF), -ENOBUFS);
	CHECK_INT_EQ(unwind_worker__submit(w, &e, sizeof(e) + 1, as, &lock, UNWIND_MODE_DWARF),
		     -EINVAL);
	/* not flushed: the thread has not seen the batch, so nothing comes back */
	CHECK(!fd_ready(unwind_worker__fd(w), 200));

	unwind_worker__flush(w);
	CHECK(fd_ready(unwind_worker__fd(w), 5000));
	unwind_worker__wait_idle(w);
	unwind_worker__drain(w, on_sample, &seen);
	CHECK_INT_EQ(seen.n, CAPACITY);
	for (unsigned i = 0; i < CAPACITY && i < seen.n; i++)
		CHECK_INT_EQ(seen.times[i], 1000 + i);
	CHECK_INT_EQ(seen.missing, CAPACITY);
	CHECK_INT_EQ(seen.has_regs, 0);

	/* drained jobs make room again: a second batch, through drain's own flush */
	for (unsigned i = 0; i < CAPACITY; i++) {
		e.time_ns = 2000 + i;
		CHECK_INT_EQ(unwind_worker__submit(w, &e, size, as, &lock, UNWIND_MODE_DWARF), 0);
	}
	unwind_worker__wait_idle(w);
	unwind_worker__drain(w, on_sample, &seen);
	CHECK_INT_EQ(seen.n, 2 * CAPACITY);
	CHECK_INT_EQ(seen.times[CAPACITY], 2000);
	CHECK_INT_EQ(seen.times[2 * CAPACITY - 1], 2000 + CAPACITY - 1);

	/* a record with the largest stack copy, larger than the pooled jobs: a job of its own */
	e.time_ns = 3000;
	e.stack_size = PROFILE_MAX_STACK_BYTES;
	CHECK_INT_EQ(unwind_worker__submit(w, &e, sizeof(e), as, &lock, UNWIND_MODE_DWARF), 0);
	unwind_worker__wait_idle(w);
	unwind_worker__drain(w, on_sample, &seen);
	CHECK_INT_EQ(seen.n, 2 * CAPACITY + 1);
	CHECK_INT_EQ(seen.times[2 * CAPACITY], 3000);
	e.stack_size = 0;

	/* freed with a batch still unflushed: nothing leaks or hangs (valgrind setup checks leaks)
	 */
	CHECK_INT_EQ(unwind_worker__submit(w, &e, size, as, &lock, UNWIND_MODE_DWARF), 0);
	unwind_worker__free(w);
	addrspace__free(as);
	return check_exit("test-unwind-worker");
}
