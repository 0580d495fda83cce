/* readers.c - the reader threads: a bounded job queue, one read-only connection per thread. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "service/readers.h"
#include "service/server.h"
#include "util.h"

/*
 * The page cache of each reader thread's connection, in KiB (SQLite's
 * default is 2000): each reader keeps it between reports, so it is part
 * of profd's resident memory whether or not a report runs. A report over
 * a whole session reads more pages than either size holds anyway (a
 * 10-hour session's rollup is 6 MB); the cache keeps the B-tree's inner
 * pages and the stacks and frames looked up by id.
 */
#define READER_CACHE_KIB 512
#define READER_CACHE_PRAGMA "PRAGMA cache_size = -512"

struct job {
	struct job *next;
	uint64_t client;
	uid_t uid;
	reader_fn fn;
	void *arg;
	void (*free_arg)(void *);
	uint64_t deadline_ns; /* CLOCK_MONOTONIC */
	atomic_bool cancel;
	bool timed_out; /* written by the thread running it */
	json_t *answer;
};

struct reader {
	struct readers *rs;
	pthread_t thread;
	bool started;
	sqlite3 *db;
	struct job *job; /* running now, or NULL; under rs->lock */
};

struct readers {
	pthread_mutex_t lock;
	pthread_cond_t work;
	struct job *queue, **queue_tail; /* waiting for a thread */
	struct job *done, **done_tail;	 /* answered, for readers__take() */
	unsigned nr_jobs;		 /* queued or running */
	bool stopping;
	struct readers_limits lim;
	struct reader *threads;
	int efd;
};

static void job_free(struct job *j)
{
	if (!j)
		return;
	if (j->free_arg && j->arg)
		j->free_arg(j->arg);
	json_decref(j->answer);
	free(j);
}

/* SQLite's progress handler: non-zero stops the statement (SQLITE_INTERRUPT). */
static int progress(void *ctx)
{
	struct reader *t = ctx;
	struct job *j = t->job; /* only this thread changes it */

	if (!j)
		return 0;
	if (!j->timed_out && now_ns(CLOCK_MONOTONIC) > j->deadline_ns) {
		j->timed_out = true;
		atomic_store(&j->cancel, true);
	}
	return atomic_load(&j->cancel);
}

/* Whether @uid has a job running. Under rs->lock. */
static bool uid_running(struct readers *rs, uid_t uid)
{
	for (unsigned i = 0; i < rs->lim.threads; i++)
		if (rs->threads[i].job && rs->threads[i].job->uid == uid)
			return true;
	return false;
}

/*
 * The next job to run, off the queue (not empty): the oldest of a user who
 * has none running, else the oldest, so that one user's many queries do not
 * hold every thread while another's wait. Under rs->lock.
 */
static struct job *take_fair(struct readers *rs)
{
	struct job **pp = &rs->queue, *j;

	while (*pp && uid_running(rs, (*pp)->uid))
		pp = &(*pp)->next;
	if (!*pp)
		pp = &rs->queue;
	j = *pp;
	*pp = j->next;
	if (rs->queue_tail == &j->next)
		rs->queue_tail = pp;
	j->next = NULL;
	return j;
}

static void *reader_main(void *arg)
{
	struct reader *t = arg;
	struct readers *rs = t->rs;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		struct job *j;
		json_t *answer;

		while (!rs->stopping && !rs->queue)
			pthread_cond_wait(&rs->work, &rs->lock);
		if (rs->stopping)
			break;
		j = take_fair(rs);
		t->job = j;
		pthread_mutex_unlock(&rs->lock);

		if (now_ns(CLOCK_MONOTONIC) > j->deadline_ns)
			j->timed_out = true; /* waited in the queue past its deadline */
		answer = j->timed_out || atomic_load(&j->cancel) ? NULL
								 : j->fn(t->db, j->arg, &j->cancel);
		if (j->timed_out) {
			json_decref(answer);
			answer = json_error_response(
			    -ETIMEDOUT,
			    "the query was stopped after %llu s (profd.conf query_timeout_s)",
			    (unsigned long long)(rs->lim.timeout_ns / NSEC_PER_SEC));
		} else if (!answer) {
			answer = json_error_response(-ENOMEM, "out of memory");
		}
		if (j->free_arg)
			j->free_arg(j->arg);
		j->arg = NULL;

		pthread_mutex_lock(&rs->lock);
		t->job = NULL;
		rs->nr_jobs--;
		j->answer = answer;
		*rs->done_tail = j;
		rs->done_tail = &j->next;
		(void)eventfd_write(rs->efd, 1); /* the counter cannot overflow in practice */
	}
	pthread_mutex_unlock(&rs->lock);
	return NULL;
}

int readers__new(const char *db_path, const struct readers_limits *lim, struct readers **ret)
{
	struct readers *rs;
	int r;

	if (lim->threads < 1 || lim->threads > 64 || lim->per_user < 1 ||
	    lim->max_jobs < lim->threads)
		return -EINVAL;
	rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->work, NULL);
	rs->queue_tail = &rs->queue;
	rs->done_tail = &rs->done;
	rs->lim = *lim;
	rs->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	rs->threads = calloc(lim->threads, sizeof(*rs->threads));
	if (rs->efd < 0 || !rs->threads) {
		r = rs->efd < 0 ? -errno : -ENOMEM;
		goto fail;
	}
	/* jansson's hash seed, before any other thread makes an object (jansson's docs). */
	json_object_seed(0);
	for (unsigned i = 0; i < lim->threads; i++) {
		struct reader *t = &rs->threads[i];
		int rc = sqlite3_open_v2(db_path, &t->db,
					 SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);

		t->rs = rs;
		if (rc != SQLITE_OK) {
			log_error("cannot open %s for reading: %s", db_path,
				  t->db ? sqlite3_errmsg(t->db) : "out of memory");
			r = -EIO;
			goto fail;
		}
		sqlite3_busy_timeout(t->db, 5000);
		/* A bounded page cache (READER_CACHE_KIB); on failure SQLite's default stays. */
		(void)sqlite3_exec(t->db, READER_CACHE_PRAGMA, NULL, NULL, NULL);
		sqlite3_progress_handler(t->db, 1000, progress, t);
		r = -pthread_create(&t->thread, NULL, reader_main, t);
		if (r < 0)
			goto fail;
		t->started = true;
	}
	*ret = rs;
	return 0;
fail:
	readers__free(rs);
	return r;
}

void readers__free(struct readers *rs)
{
	struct job *j;

	if (!rs)
		return;
	pthread_mutex_lock(&rs->lock);
	rs->stopping = true;
	for (unsigned i = 0; rs->threads && i < rs->lim.threads; i++)
		if (rs->threads[i].job) {
			atomic_store(&rs->threads[i].job->cancel, true);
			sqlite3_interrupt(rs->threads[i].db);
		}
	pthread_cond_broadcast(&rs->work);
	pthread_mutex_unlock(&rs->lock);
	for (unsigned i = 0; rs->threads && i < rs->lim.threads; i++) {
		if (rs->threads[i].started)
			pthread_join(rs->threads[i].thread, NULL);
		sqlite3_close(rs->threads[i].db);
	}
	while ((j = rs->queue)) {
		rs->queue = j->next;
		job_free(j);
	}
	while ((j = rs->done)) {
		rs->done = j->next;
		job_free(j);
	}
	if (rs->efd >= 0)
		close(rs->efd);
	pthread_cond_destroy(&rs->work);
	pthread_mutex_destroy(&rs->lock);
	free(rs->threads);
	free(rs);
}

int readers__fd(struct readers *rs)
{
	return rs->efd;
}

/* Jobs of @uid queued or running. Under rs->lock. */
static unsigned jobs_of(struct readers *rs, uid_t uid)
{
	unsigned n = 0;

	for (struct job *j = rs->queue; j; j = j->next)
		n += j->uid == uid;
	for (unsigned i = 0; i < rs->lim.threads; i++)
		n += rs->threads[i].job && rs->threads[i].job->uid == uid;
	return n;
}

int readers__submit(struct readers *rs, uint64_t client, uid_t uid, reader_fn fn, void *arg,
		    void (*free_arg)(void *))
{
	struct job *j = calloc(1, sizeof(*j));
	int r = 0;

	if (!j) {
		if (free_arg)
			free_arg(arg);
		return -ENOMEM;
	}
	*j = (struct job){.client = client,
			  .uid = uid,
			  .fn = fn,
			  .arg = arg,
			  .free_arg = free_arg,
			  .deadline_ns = now_ns(CLOCK_MONOTONIC) + rs->lim.timeout_ns};
	pthread_mutex_lock(&rs->lock);
	if (rs->nr_jobs >= rs->lim.max_jobs)
		r = -EBUSY;
	else if (jobs_of(rs, uid) >= rs->lim.per_user)
		r = -EUSERS;
	if (r == 0) {
		*rs->queue_tail = j;
		rs->queue_tail = &j->next;
		rs->nr_jobs++;
		pthread_cond_signal(&rs->work);
	}
	pthread_mutex_unlock(&rs->lock);
	if (r < 0)
		job_free(j);
	return r;
}

void readers__cancel(struct readers *rs, uint64_t client)
{
	struct job *gone = NULL;

	pthread_mutex_lock(&rs->lock);
	for (struct job **pp = &rs->queue; *pp;) {
		struct job *j = *pp;

		if (j->client != client) {
			pp = &j->next;
			continue;
		}
		*pp = j->next;
		j->next = gone;
		gone = j;
		rs->nr_jobs--;
	}
	rs->queue_tail = &rs->queue;
	while (*rs->queue_tail)
		rs->queue_tail = &(*rs->queue_tail)->next;
	for (unsigned i = 0; i < rs->lim.threads; i++) {
		struct job *j = rs->threads[i].job;

		if (j && j->client == client) {
			atomic_store(&j->cancel, true);
			sqlite3_interrupt(rs->threads[i].db);
		}
	}
	pthread_mutex_unlock(&rs->lock);
	while (gone) {
		struct job *next = gone->next;

		job_free(gone);
		gone = next;
	}
}

bool readers__take(struct readers *rs, uint64_t *ret_client, json_t **ret_answer)
{
	struct job *j;
	eventfd_t n;

	pthread_mutex_lock(&rs->lock);
	j = rs->done;
	if (j) {
		rs->done = j->next;
		if (!rs->done)
			rs->done_tail = &rs->done;
	} else {
		/* EAGAIN: nothing was signalled; the counter is reset either way. */
		(void)eventfd_read(rs->efd, &n);
	}
	pthread_mutex_unlock(&rs->lock);
	if (!j)
		return false;
	*ret_client = j->client;
	*ret_answer = TAKE_PTR(j->answer);
	job_free(j);
	return true;
}

unsigned readers__busy(struct readers *rs)
{
	unsigned n;

	pthread_mutex_lock(&rs->lock);
	n = rs->nr_jobs;
	pthread_mutex_unlock(&rs->lock);
	return n;
}
