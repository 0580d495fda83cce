/*
 * worker_thread.h - the one thread an object runs its work on: woken
 * through a condition, told to stop through a flag under the same lock,
 * joined when the object is freed (the link closer, the unwinding thread,
 * the fleet sinks).
 */
#pragma once

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "util.h"

struct worker_thread {
	pthread_t thread;
	bool started;	      /* the thread runs: worker_thread__stop() joins it */
	bool stop, kicked;    /* under lock: return / work is waiting (worker_thread__kick()) */
	pthread_mutex_t lock; /* the object's state the thread shares is under it too */
	pthread_cond_t wake;  /* on CLOCK_MONOTONIC for timed waits; signalled by stop and kick */
};

/* worker_thread__init() - the lock and the condition of @t (zeroed); the thread is not started. */
static inline void worker_thread__init(struct worker_thread *t)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&t->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->wake, &ca);
	pthread_condattr_destroy(&ca);
}

/*
 * worker_thread__start() - run @fn(@arg) on a new thread, which returns
 * when it sees @t->stop. Returns 0, or pthread_create()'s -errno (then
 * nothing runs). Does not log.
 */
static inline int worker_thread__start(struct worker_thread *t, void *(*fn)(void *), void *arg)
{
	int r = -pthread_create(&t->thread, NULL, fn, arg);

	t->started = r == 0;
	return r;
}

/* worker_thread__kick() - set @t->kicked and wake the thread. Blocks only for the lock. */
static inline void worker_thread__kick(struct worker_thread *t)
{
	pthread_mutex_lock(&t->lock);
	t->kicked = true;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
}

/*
 * worker_thread__wait() - on the thread, with @t->lock held: wait until
 * @t->stop or @t->kicked is set, or CLOCK_MONOTONIC reaches @deadline_ns
 * (at once if it has). The lock is held again on return.
 */
static inline void worker_thread__wait(struct worker_thread *t, uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / NSEC_PER_SEC),
			      .tv_nsec = (long)(deadline_ns % NSEC_PER_SEC)};

	while (!t->stop && !t->kicked &&
	       pthread_cond_timedwait(&t->wake, &t->lock, &ts) != ETIMEDOUT)
		;
}

/*
 * worker_thread__stop() - set @t->stop, wake the thread and wait until it
 * returns. Nothing if it was not started. Blocks as long as the thread
 * takes to see the flag.
 */
static inline void worker_thread__stop(struct worker_thread *t)
{
	if (!t->started)
		return;
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	pthread_cond_signal(&t->wake);
	pthread_mutex_unlock(&t->lock);
	pthread_join(t->thread, NULL);
	t->started = false;
}

/* worker_thread__destroy() - the lock and the condition, after worker_thread__stop(). */
static inline void worker_thread__destroy(struct worker_thread *t)
{
	pthread_cond_destroy(&t->wake);
	pthread_mutex_destroy(&t->lock);
}
