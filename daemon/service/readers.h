/*
 * readers.h - reports and SQL on threads of their own, so that the event
 * loop (ring buffers, session timers, flushes, attach and detach) never
 * waits for a reader. Each thread has its own read-only SQLite connection:
 * the store is in WAL mode, where readers and the one writer do not block
 * each other (https://sqlite.org/wal.html).
 *
 * A job is submitted by the loop for one client's request; the answer comes
 * back to the loop through readers__fd() and readers__take(). Jobs are
 * bounded: at most per_user queued or running for one uid, and at most
 * max_jobs in all. A job stops at its deadline, or at once when its client
 * is gone (readers__cancel()): the thread's connection is interrupted with
 * sqlite3_interrupt() and a progress handler checks both every 1000
 * virtual machine instructions.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct readers;

/*
 * A job's work, run on a reader thread: @db is the thread's read-only
 * connection, @arg the job's argument, @cancel set once the job must stop
 * (its client left, or its deadline passed), for work that does not go
 * through @db (profctl sql opens a connection of its own). Returns the
 * response object (owned by the caller), or NULL for "out of memory".
 */
typedef json_t *(*reader_fn)(sqlite3 *db, void *arg, const atomic_bool *cancel);

struct readers_limits {
	unsigned threads;    /* reader threads, 1..64 */
	unsigned per_user;   /* jobs queued or running for one uid, >= 1 */
	unsigned max_jobs;   /* jobs queued or running in all, >= threads */
	uint64_t timeout_ns; /* a job's deadline, from its submission */
};

/*
 * readers__new() - start @lim->threads threads, each with a read-only
 * connection to the database at @db_path (which must exist, in WAL mode).
 * Returns 0 and *@ret, -EINVAL for bad limits, -EIO if the database cannot
 * be opened (logged, with SQLite's message), -ENOMEM, or pthread_create()'s
 * -errno.
 */
int readers__new(const char *db_path, const struct readers_limits *lim, struct readers **ret);

/* readers__free() - cancel every job, join the threads, close their connections. Accepts NULL. */
void readers__free(struct readers *rs);

/* readers__fd() - an eventfd (owned by @rs) that polls readable when answers wait for
 * readers__take(). */
int readers__fd(struct readers *rs);

/*
 * readers__submit() - queue @fn(@arg) for @client (the server's client id)
 * of user @uid. @free_arg(@arg) is called when the job is done with (also
 * on failure here). Returns 0, -EUSERS if @uid has per_user jobs already,
 * -EBUSY if max_jobs are queued or running, -ENOMEM. Does not block.
 */
int readers__submit(struct readers *rs, uint64_t client, uid_t uid, reader_fn fn, void *arg,
		    void (*free_arg)(void *));

/*
 * readers__cancel() - @client is gone: its queued job is dropped, its
 * running job interrupted; no answer will come for it. Does not block.
 */
void readers__cancel(struct readers *rs, uint64_t client);

/*
 * readers__take() - the next answer: true with *@ret_client and
 * *@ret_answer (owned by the caller), or false when none waits.
 * A job stopped at its deadline answers -ETIMEDOUT.
 */
bool readers__take(struct readers *rs, uint64_t *ret_client, json_t **ret_answer);

/* readers__busy() - jobs queued or running now (for status and tests). */
unsigned readers__busy(struct readers *rs);
