/*
 * unwind_worker.c - the DWARF unwinding thread and its two queues.
 *
 * Samples cross in batches: the main thread gathers what one read of the
 * ring buffer submits and hands the batch over with one signal
 * (unwind_worker__flush()); the thread unwinds a whole batch and wakes the
 * main loop once for it. Jobs come from a pool the main thread owns, so a
 * sample costs no malloc() once the pool has grown to the load.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "collect/unwind_worker.h"
#include "util.h"
#include "worker_thread.h"

struct job {
	struct job *next;
	struct addrspace *as;
	pthread_rwlock_t *as_lock;
	enum unwind_mode mode;
	size_t cap;	       /* bytes allocated for e (job_bytes()) */
	struct sample_event e; /* the record as submitted: its size, its header at least */
};

/* Free jobs kept for reuse; beyond them a drained job is freed (~20 KiB each: 1.2 MiB kept). */
#define POOL_KEEP 64

/* A list of jobs with its tail, in order. */
struct job_list {
	struct job *head, **tail;
	size_t len;
};

struct unwind_worker {
	struct worker_thread worker; /* woken when todo is not empty, or to stop */
	pthread_cond_t idle;   /* pending dropped to 0 */
	struct job_list todo, done;
	size_t pending;        /* jobs in todo or being unwound */
	size_t capacity;
	/* the main thread's own, no lock: */
	struct job_list batch; /* submitted, not yet handed to the thread */
	struct job *pool;      /* free jobs */
	size_t pool_len;
	size_t in_use;         /* jobs submitted and not yet drained (or dropped) */
	int efd;
	struct unwinder *unwinder;
	uint64_t pages_dropped_ns;	/* the thread's own: CLOCK_MONOTONIC of its last drop */
};

/*
 * The thread drops the pages its unwinder read from files from profd's RSS
 * (unwinder__drop_pages()) after a batch, at most this often: until a
 * process's unwind tables are loaded every sample is unwound here, and
 * libdw reads MiBs of libtorch_cpu.so's .eh_frame in a PyTorch job's
 * first second.
 */
#define DROP_PAGES_NS (10 * NSEC_PER_SEC)

DEFINE_TRIVIAL_CLEANUP_FUNC(struct unwind_worker *, unwind_worker__free)

const char *unwind_mode_name(enum unwind_mode mode)
{
	static const char *const names[] = { "fp", "dwarf", "auto", "tables" };

	return mode <= UNWIND_MODE_TABLES ? names[mode] : "fp";
}

int unwind_mode_parse(const char *s)
{
	for (int m = UNWIND_MODE_FP; m <= UNWIND_MODE_TABLES; m++)
		if (strcmp(s, unwind_mode_name(m)) == 0)
			return m;
	return -EINVAL;
}

/* Rewrite @j's user frames with the unwinder's result. */
static void unwind_job(struct unwind_worker *w, struct job *j)
{
	struct sample_event *e = &j->e;
	uint64_t pcs[PROFILE_MAX_FRAMES];
	enum unwind_status status = UNWIND_ERROR;
	int n;

	pthread_rwlock_rdlock(j->as_lock);
	/* The copy starts at rsp's page; the unwinder wants it from rsp. */
	n = unwinder__unwind(w->unwinder, j->as, (const uint64_t *)e->regs,
			     e->stack + e->stack_offset,
			     e->stack_size ? e->stack_size - e->stack_offset : 0, pcs,
			     PROFILE_MAX_FRAMES, &status);
	pthread_rwlock_unlock(j->as_lock);
	if (n < 0)
		n = 0;

	/* Auto: the frame-pointer walk wins only where it went further than CFI
	 * did without reaching the end (JIT code has frame pointers, no CFI). */
	if (j->mode == UNWIND_MODE_AUTO && status != UNWIND_END && e->ustack_len > (unsigned)n) {
		e->flags &= ~SAMPLE_HAS_REGS;
		e->stack_size = 0;
		return;
	}
	/* ips[] has room for PROFILE_MAX_FRAMES user frames after the kernel's. */
	memcpy(&e->ips[e->kstack_len], pcs, (size_t)n * sizeof(uint64_t));
	e->ustack_len = (__u16)n;
	e->flags &= ~(SAMPLE_HAS_REGS | SAMPLE_USER_TRUNCATED | SAMPLE_USER_MISSING);
	e->flags |= SAMPLE_DWARF_UNWOUND;
	if (status == UNWIND_TRUNCATED)
		e->flags |= SAMPLE_USER_TRUNCATED;
	else if (status != UNWIND_END)
		e->flags |= SAMPLE_UNWIND_INCOMPLETE;
	if (n == 0)
		e->flags |= SAMPLE_USER_MISSING;
	e->stack_size = 0;
}

static void list_init(struct job_list *l)
{
	l->head = NULL;
	l->tail = &l->head;
	l->len = 0;
}

/* list_splice() - move every job of @from to the end of @to. */
static void list_splice(struct job_list *to, struct job_list *from)
{
	if (!from->head)
		return;
	*to->tail = from->head;
	to->tail = from->tail;
	to->len += from->len;
	list_init(from);
}

static void *worker_main(void *arg)
{
	struct unwind_worker *w = arg;

	pthread_mutex_lock(&w->worker.lock);
	for (;;) {
		struct job_list batch;

		while (!w->todo.head && !w->worker.stop)
			pthread_cond_wait(&w->worker.wake, &w->worker.lock);
		if (w->worker.stop)
			break;
		batch = w->todo; /* not empty: its tail is its last job's next */
		list_init(&w->todo);
		pthread_mutex_unlock(&w->worker.lock);

		for (struct job *j = batch.head; j; j = j->next)
			unwind_job(w, j);
		if (now_ns(CLOCK_MONOTONIC) - w->pages_dropped_ns >= DROP_PAGES_NS) {
			(void)unwinder__drop_pages(w->unwinder);
			w->pages_dropped_ns = now_ns(CLOCK_MONOTONIC);
		}

		pthread_mutex_lock(&w->worker.lock);
		w->pending -= batch.len;
		list_splice(&w->done, &batch);
		if (w->pending == 0)
			pthread_cond_broadcast(&w->idle);
		/* Cannot fail in practice (the counter does not overflow); the main loop
		 * also drains on its tick. */
		(void)eventfd_write(w->efd, 1);
	}
	pthread_mutex_unlock(&w->worker.lock);
	return NULL;
}

int unwind_worker__new(size_t capacity, struct unwind_worker **ret)
{
	_cleanup_(unwind_worker__freep) struct unwind_worker *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->capacity = capacity;
	list_init(&w->todo);
	list_init(&w->done);
	list_init(&w->batch);
	worker_thread__init(&w->worker);
	pthread_cond_init(&w->idle, NULL);
	w->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->unwinder = unwinder__new();
	w->pages_dropped_ns = now_ns(CLOCK_MONOTONIC);
	if (w->efd < 0 || !w->unwinder)
		return w->efd < 0 ? -errno : -ENOMEM;
	r = worker_thread__start(&w->worker, worker_main, w);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(w);
	return 0;
}

static void free_list(struct job *j)
{
	while (j) {
		struct job *next = j->next;

		free(j);
		j = next;
	}
}

void unwind_worker__free(struct unwind_worker *w)
{
	if (!w)
		return;
	worker_thread__stop(&w->worker);
	free_list(w->todo.head);
	free_list(w->done.head);
	free_list(w->batch.head);
	free_list(w->pool);
	unwinder__free(w->unwinder);
	if (w->efd >= 0)
		close(w->efd);
	pthread_cond_destroy(&w->idle);
	worker_thread__destroy(&w->worker);
	free(w);
}

int unwind_worker__fd(struct unwind_worker *w)
{
	return w->efd;
}

/*
 * The bytes of e a job gets for a record of @size bytes: the record, and
 * at least its header (unwind_job() rewrites ips[]) and a 16 KiB stack copy
 * (attach's default --stack-bytes), so that a pooled job serves most samples.
 * Not room for the largest record (32 KiB of stack): a PyTorch session's
 * first second queued ~400 jobs before its tables loaded, 14.5 MiB of
 * profd's RSS when every job had that room.
 */
static size_t job_bytes(size_t size)
{
	return MAX(size, offsetof(struct sample_event, stack) + (16u << 10));
}

/* job_put() - give a drained job back to the pool, or free it beyond POOL_KEEP. */
static void job_put(struct unwind_worker *w, struct job *j)
{
	w->in_use--;
	if (w->pool_len >= POOL_KEEP) {
		free(j);
		return;
	}
	j->next = w->pool;
	w->pool = j;
	w->pool_len++;
}

int unwind_worker__submit(struct unwind_worker *w, const struct sample_event *e, size_t size,
			  struct addrspace *as, pthread_rwlock_t *as_lock, enum unwind_mode mode)
{
	struct job *j;

	if (size > sizeof(struct sample_event))
		return -EINVAL;
	if (w->in_use >= w->capacity)
		return -ENOBUFS;
	j = w->pool;
	if (j && j->cap >= size) {
		w->pool = j->next;
		w->pool_len--;
	} else {
		size_t cap = job_bytes(size);

		j = malloc(offsetof(struct job, e) + cap);
		if (!j)
			return -ENOMEM;
		j->cap = cap;
	}
	w->in_use++;
	memcpy(&j->e, e, size);
	j->as = as;
	j->as_lock = as_lock;
	j->mode = mode;
	j->next = NULL;
	*w->batch.tail = j;
	w->batch.tail = &j->next;
	w->batch.len++;
	return 0;
}

void unwind_worker__flush(struct unwind_worker *w)
{
	if (!w->batch.head)
		return;
	pthread_mutex_lock(&w->worker.lock);
	w->pending += w->batch.len;
	list_splice(&w->todo, &w->batch);
	pthread_cond_signal(&w->worker.wake);
	pthread_mutex_unlock(&w->worker.lock);
}

void unwind_worker__drain(struct unwind_worker *w, sampler_fn fn, void *ctx)
{
	struct job *list, *next;
	eventfd_t n;

	unwind_worker__flush(w);
	if (eventfd_read(w->efd, &n) < 0 && errno != EAGAIN)
		return;
	pthread_mutex_lock(&w->worker.lock);
	list = w->done.head;
	list_init(&w->done);
	pthread_mutex_unlock(&w->worker.lock);

	for (struct job *j = list; j; j = next) {
		next = j->next;
		fn(ctx, &j->e, offsetof(struct sample_event, ips) +
				       ((size_t)j->e.kstack_len + j->e.ustack_len) * sizeof(uint64_t));
		job_put(w, j);
	}
}

void unwind_worker__wait_idle(struct unwind_worker *w)
{
	unwind_worker__flush(w);
	pthread_mutex_lock(&w->worker.lock);
	while (w->pending > 0)
		pthread_cond_wait(&w->idle, &w->worker.lock);
	pthread_mutex_unlock(&w->worker.lock);
}

void unwind_worker__forget(struct unwind_worker *w, const struct addrspace *as)
{
	/* Idle by contract: the thread is not inside the unwinder. */
	pthread_mutex_lock(&w->worker.lock);
	unwinder__forget(w->unwinder, as);
	pthread_mutex_unlock(&w->worker.lock);
}
