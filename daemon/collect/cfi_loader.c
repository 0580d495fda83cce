/*
 * cfi_loader.c - a thread of its own that owns a struct cfi_maps
 * (cfi_loader.h): requests to load or drop a process's tables are queued
 * by the event loop and done in order on the thread, which reads the
 * process's mappings afresh (addrspace__new()): the session's address
 * space is the loop's, and the loop must not wait seconds for its lock.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "collect/cfi_loader.h"
#include "symbols/symbolize.h"
#include "util.h"
#include "worker_thread.h"

struct request {
	pid_t pid;
	bool remove;
};

struct cfi_loader {
	struct worker_thread t;
	struct cfi_maps *maps; /* the thread's only, once it runs */
	/* under t.lock: */
	struct request *queue;
	size_t n_queue, cap_queue;
	struct cfi_maps_stats stats; /* a copy after each batch of requests */
};

/* Does one request on the thread; a process gone or refused is only counted (in the stats). */
static void loader_do(struct cfi_loader *l, const struct request *rq)
{
	struct addrspace *as = NULL;

	if (rq->remove) {
		cfi_maps__remove_process(l->maps, (uint32_t)rq->pid);
		return;
	}
	if (addrspace__new(rq->pid, &as) < 0)
		return;
	cfi_maps__add_process(l->maps, (uint32_t)rq->pid, as);
	addrspace__free(as);
}

static void *loader_main(void *arg)
{
	struct cfi_loader *l = arg;

	pthread_mutex_lock(&l->t.lock);
	for (;;) {
		struct request *batch;
		size_t n;

		while (!l->t.stop && l->n_queue == 0)
			worker_thread__wait(&l->t, now_ns(CLOCK_MONOTONIC) + NSEC_PER_SEC);
		l->t.kicked = false;
		if (l->t.stop)
			break;
		batch = TAKE_PTR(l->queue);
		n = l->n_queue;
		l->n_queue = l->cap_queue = 0;
		pthread_mutex_unlock(&l->t.lock);
		for (size_t i = 0; i < n; i++)
			loader_do(l, &batch[i]);
		free(batch);
		pthread_mutex_lock(&l->t.lock);
		l->stats = *cfi_maps__stats(l->maps);
	}
	pthread_mutex_unlock(&l->t.lock);
	return NULL;
}

/*
 * cfi_loader__new() - a cfi_maps__new() over the maps (@procs_fd,
 * @modules_fd, @rows_fd, borrowed: they must outlive the loader; @rows_cap
 * as cfi_maps__new()) and the thread that fills them. Returns 0 and *@ret,
 * or cfi_maps__new()'s or pthread_create()'s -errno. Does not log.
 */
int cfi_loader__new(int procs_fd, int modules_fd, int rows_fd, uint32_t rows_cap,
		    struct cfi_loader **ret)
{
	struct cfi_loader *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	worker_thread__init(&l->t);
	r = cfi_maps__new(procs_fd, modules_fd, rows_fd, rows_cap, &l->maps);
	if (r == 0)
		r = worker_thread__start(&l->t, loader_main, l);
	if (r < 0) {
		cfi_loader__free(l);
		return r;
	}
	l->stats = *cfi_maps__stats(l->maps);
	*ret = l;
	return 0;
}

static int loader_queue(struct cfi_loader *l, pid_t pid, bool remove)
{
	int r;

	pthread_mutex_lock(&l->t.lock);
	r = grow_array((void **)&l->queue, &l->cap_queue, l->n_queue, sizeof(*l->queue));
	if (r == 0) {
		l->queue[l->n_queue++] = (struct request){.pid = pid, .remove = remove};
		l->t.kicked = true;
		pthread_cond_signal(&l->t.wake);
	}
	pthread_mutex_unlock(&l->t.lock);
	return r;
}

/*
 * cfi_loader__add() - have the thread (re)load process @pid's tables from
 * its mappings as they are when it gets to it: the first time, and again
 * after the mappings changed (a dlopen). Returns 0, or -ENOMEM (nothing
 * queued). Blocks only for the lock; does not log.
 */
int cfi_loader__add(struct cfi_loader *l, pid_t pid)
{
	return loader_queue(l, pid, false);
}

/*
 * cfi_loader__remove() - have the thread drop @pid's tables (rows of
 * modules no other process maps are freed), after the requests before it.
 * Returns 0, or -ENOMEM. Blocks only for the lock; does not log.
 */
int cfi_loader__remove(struct cfi_loader *l, pid_t pid)
{
	return loader_queue(l, pid, true);
}

/* cfi_loader__stats() - the maps' figures after the last request done (cfi_maps__stats()). */
void cfi_loader__stats(struct cfi_loader *l, struct cfi_maps_stats *ret)
{
	pthread_mutex_lock(&l->t.lock);
	*ret = l->stats;
	pthread_mutex_unlock(&l->t.lock);
}

/*
 * cfi_loader__free() - stop the thread (after the request it is on: up to
 * seconds), drop the queued ones, free the maps' bookkeeping (their
 * entries go with the BPF object). Accepts NULL.
 */
void cfi_loader__free(struct cfi_loader *l)
{
	if (!l)
		return;
	worker_thread__stop(&l->t);
	cfi_maps__free(l->maps);
	free(l->queue);
	worker_thread__destroy(&l->t);
	free(l);
}
