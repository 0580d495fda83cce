/* link_closer.c - a thread that destroys BPF links (slow uprobe detaches) off the event loop. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "collect/link_closer.h"
#include "util.h"
#include "worker_thread.h"

struct close_job {
	struct close_job *next;
	struct bpf_link **links;
	size_t n;
	link_closer_done_fn done;
	void *ctx;
};

struct link_closer {
	struct worker_thread worker; /* woken for a job, or to stop */
	pthread_cond_t idle;
	struct close_job *head, **tail; /* FIFO */
	size_t running;			/* jobs taken by the thread and not done */
};

static void close_links(struct bpf_link **links, size_t n, link_closer_done_fn done, void *ctx)
{
	for (size_t i = 0; i < n; i++)
		bpf_link__destroy(links[i]);
	if (done)
		done(ctx);
	free(links);
}

static void *closer_main(void *arg)
{
	struct link_closer *c = arg;

	pthread_mutex_lock(&c->worker.lock);
	for (;;) {
		struct close_job *j;

		while (!c->head && !c->worker.stop)
			pthread_cond_wait(&c->worker.wake, &c->worker.lock);
		j = c->head;
		if (!j) /* stop, and nothing left */
			break;
		c->head = j->next;
		if (!c->head)
			c->tail = &c->head;
		c->running++;
		pthread_mutex_unlock(&c->worker.lock);

		close_links(j->links, j->n, j->done, j->ctx);
		free(j);

		pthread_mutex_lock(&c->worker.lock);
		c->running--;
		if (!c->head && !c->running)
			pthread_cond_broadcast(&c->idle);
	}
	pthread_mutex_unlock(&c->worker.lock);
	return NULL;
}

int link_closer__new(struct link_closer **ret)
{
	struct link_closer *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	worker_thread__init(&c->worker);
	pthread_cond_init(&c->idle, NULL);
	c->tail = &c->head;
	r = worker_thread__start(&c->worker, closer_main, c);
	if (r < 0) {
		link_closer__free(c);
		return r;
	}
	*ret = c;
	return 0;
}

void link_closer__free(struct link_closer *c)
{
	if (!c)
		return;
	/* The thread empties the queue before it returns. */
	worker_thread__stop(&c->worker);
	pthread_cond_destroy(&c->idle);
	worker_thread__destroy(&c->worker);
	free(c);
}

void link_closer__close(struct link_closer *c, struct bpf_link **links, size_t n,
			link_closer_done_fn done, void *ctx)
{
	struct close_job *j = c ? malloc(sizeof(*j)) : NULL;

	if (!j) {
		close_links(links, n, done, ctx);
		return;
	}
	*j = (struct close_job){.links = links, .n = n, .done = done, .ctx = ctx};
	pthread_mutex_lock(&c->worker.lock);
	*c->tail = j;
	c->tail = &j->next;
	pthread_cond_signal(&c->worker.wake);
	pthread_mutex_unlock(&c->worker.lock);
}

void link_closer__wait_idle(struct link_closer *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->worker.lock);
	while (c->head || c->running)
		pthread_cond_wait(&c->idle, &c->worker.lock);
	pthread_mutex_unlock(&c->worker.lock);
}
