/*
 * cfi_loader.c - a thread of its own that owns a struct cfi_maps
 * (cfi_loader.h), in lazy mode: requests to add or drop a process, or to
 * compile the module behind a PC, are queued by the event loop and done in
 * order on the thread. The thread keeps its own copy of each process's
 * mappings (addrspace__new()): the session's address space is the loop's,
 * and the loop must not wait seconds for its lock.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "collect/cfi_loader.h"
#include "symbols/symbolize.h"
#include "util.h"
#include "worker_thread.h"

enum request_kind { RQ_ADD, RQ_REMOVE, RQ_MODULE };

struct request {
	enum request_kind kind;
	pid_t pid;
	uint64_t pc; /* RQ_MODULE: an address in the module */
};

/* A process added, with the thread's copy of its mappings. */
struct loaded {
	pid_t pid;
	struct addrspace *as;
};

struct cfi_loader {
	struct worker_thread t;
	struct cfi_maps *maps;	 /* the thread's only, once it runs */
	struct loaded *procs;	 /* the thread's only */
	size_t n_procs, cap_procs;
	/* under t.lock: */
	struct request *queue;
	size_t n_queue, cap_queue;
	struct cfi_maps_stats stats; /* a copy after each batch of requests */
};

static struct loaded *loaded_find(struct cfi_loader *l, pid_t pid)
{
	for (size_t i = 0; i < l->n_procs; i++)
		if (l->procs[i].pid == pid)
			return &l->procs[i];
	return NULL;
}

/* (Re)read @pid's mappings and put them in the maps; the module tables load on demand. */
static void loader_add(struct cfi_loader *l, pid_t pid)
{
	struct loaded *p = loaded_find(l, pid);
	struct addrspace *as = NULL;

	if (addrspace__new(pid, &as) < 0)
		return;
	if (cfi_maps__add_process(l->maps, (uint32_t)pid, as) < 0) {
		addrspace__free(as);
		return;
	}
	if (!p) {
		if (grow_array((void **)&l->procs, &l->cap_procs, l->n_procs, sizeof(*l->procs)) < 0) {
			cfi_maps__remove_process(l->maps, (uint32_t)pid);
			addrspace__free(as);
			return;
		}
		p = &l->procs[l->n_procs++];
		p->pid = pid;
		p->as = NULL;
	}
	addrspace__free(p->as);
	p->as = as;
}

static void loader_remove(struct cfi_loader *l, pid_t pid)
{
	struct loaded *p = loaded_find(l, pid);

	cfi_maps__remove_process(l->maps, (uint32_t)pid);
	if (!p)
		return;
	addrspace__free(p->as);
	*p = l->procs[--l->n_procs];
}

/* Compile the module at @pc of @pid; a PC in no known mapping (a dlopen since) re-adds @pid. */
static void loader_module(struct cfi_loader *l, pid_t pid, uint64_t pc)
{
	struct loaded *p = loaded_find(l, pid);
	const struct mapping *mp;

	if (!p)
		return;
	mp = addrspace__find(p->as, pc);
	if (!mp) {
		loader_add(l, pid);
		p = loaded_find(l, pid);
		mp = p ? addrspace__find(p->as, pc) : NULL;
		if (!mp)
			return;
	}
	cfi_maps__load_module(l->maps, p->as, mp);
}

static void *loader_main(void *arg)
{
	struct cfi_loader *l = arg;

	pthread_mutex_lock(&l->t.lock);
	for (;;) {
		struct request *batch;
		bool compiled = false;
		size_t n;

		while (!l->t.stop && l->n_queue == 0)
			worker_thread__wait(&l->t, UINT64_MAX); /* no timer: requests kick it */
		l->t.kicked = false;
		if (l->t.stop)
			break;
		batch = TAKE_PTR(l->queue);
		n = l->n_queue;
		l->n_queue = l->cap_queue = 0;
		pthread_mutex_unlock(&l->t.lock);
		for (size_t i = 0; i < n; i++) {
			switch (batch[i].kind) {
			case RQ_ADD:
				loader_add(l, batch[i].pid);
				break;
			case RQ_REMOVE:
				loader_remove(l, batch[i].pid);
				break;
			case RQ_MODULE:
				loader_module(l, batch[i].pid, batch[i].pc);
				compiled = true;
				break;
			}
		}
		free(batch);
		/* A compile's many small allocations, freed, stay in this thread's
		 * malloc arena: ~20 MiB of profd's RSS on a PyTorch job, given back. */
		if (compiled)
			malloc_trim(0);
		pthread_mutex_lock(&l->t.lock);
		l->stats = *cfi_maps__stats(l->maps);
	}
	pthread_mutex_unlock(&l->t.lock);
	return NULL;
}

/*
 * cfi_loader__new() - a cfi_maps__new() over the maps (@procs_fd,
 * @modules_fd, @rows_fd, borrowed: they must outlive the loader; @rows_cap
 * as cfi_maps__new()), lazy, with table cache @cache (cfi_maps__set_cache():
 * borrowed, NULL for none; only the thread uses it), and the thread that
 * fills them. Returns 0 and
 * *@ret, or cfi_maps__new()'s or pthread_create()'s -errno. Does not log.
 */
int cfi_loader__new(int procs_fd, int modules_fd, int rows_fd, uint32_t rows_cap,
		    struct cfi_cache *cache, struct cfi_loader **ret)
{
	struct cfi_loader *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	worker_thread__init(&l->t);
	r = cfi_maps__new(procs_fd, modules_fd, rows_fd, rows_cap, &l->maps);
	if (r == 0) {
		cfi_maps__set_lazy(l->maps, true);
		cfi_maps__set_cache(l->maps, cache);
		l->stats = *cfi_maps__stats(l->maps);
		r = worker_thread__start(&l->t, loader_main, l);
	}
	if (r < 0) {
		cfi_loader__free(l);
		return r;
	}
	*ret = l;
	return 0;
}

static int loader_queue(struct cfi_loader *l, enum request_kind kind, pid_t pid, uint64_t pc)
{
	int r;

	pthread_mutex_lock(&l->t.lock);
	r = grow_array((void **)&l->queue, &l->cap_queue, l->n_queue, sizeof(*l->queue));
	if (r == 0) {
		l->queue[l->n_queue++] = (struct request){.kind = kind, .pid = pid, .pc = pc};
		l->t.kicked = true;
		pthread_cond_signal(&l->t.wake);
	}
	pthread_mutex_unlock(&l->t.lock);
	return r;
}

/*
 * cfi_loader__add() - have the thread (re)read process @pid's mappings as
 * they are when it gets to it and put them in the maps: the first time,
 * and again after they changed (a dlopen). The modules' tables are
 * compiled on demand (cfi_loader__load_module()). Returns 0, or -ENOMEM
 * (nothing queued). Blocks only for the lock; does not log.
 */
int cfi_loader__add(struct cfi_loader *l, pid_t pid)
{
	return loader_queue(l, RQ_ADD, pid, 0);
}

/*
 * cfi_loader__load_module() - have the thread compile and load, once, the
 * table of the module of process @pid (added) that holds address @pc: a
 * walk stopped there at CFI_STOP_NO_TABLE. A @pc in no mapping the thread
 * knows re-reads @pid's mappings first. Returns 0, or -ENOMEM. Blocks only
 * for the lock; does not log.
 */
int cfi_loader__load_module(struct cfi_loader *l, pid_t pid, uint64_t pc)
{
	return loader_queue(l, RQ_MODULE, pid, pc);
}

/*
 * cfi_loader__remove() - have the thread drop @pid's tables (rows of
 * modules no other process maps are freed), after the requests before it.
 * Returns 0, or -ENOMEM. Blocks only for the lock; does not log.
 */
int cfi_loader__remove(struct cfi_loader *l, pid_t pid)
{
	return loader_queue(l, RQ_REMOVE, pid, 0);
}

/* cfi_loader__stats() - the maps' figures after the last batch done (cfi_maps__stats()). */
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
	for (size_t i = 0; i < l->n_procs; i++)
		addrspace__free(l->procs[i].as);
	free(l->procs);
	free(l->queue);
	worker_thread__destroy(&l->t);
	free(l);
}
