/*
 * bpf_util.c - loading a collector's BPF skeleton, reading its ring buffer
 * and per-CPU maps, deleting entries of its hash maps.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "collect/bpf_util.h"
#include "util.h"

/* A record's bytes in the ring: its header, 8-aligned (kernel/bpf/ringbuf.c). */
#define RING_RECORD_BYTES(size) (((size) + BPF_RINGBUF_HDR_SZ + 7) & ~(size_t)7)

/* A stop asked by reader_record(), not an error: libbpf passes a callback's
 * negative return up as it is, after taking the record. */
#define READ_ENOUGH (-EALREADY)

/* The usual size of a chunk of queued records; a larger record gets one of its own. */
#define CHUNK_BYTES (256u << 10)

/*
 * Records copied out of the ring, in the order the ring held them. Each is
 * a uint64_t (its size in bytes) then its bytes, padded to 8. mmap(2)-ed,
 * so that the memory of a queue grown while the loop was busy goes back
 * to the system once handled (glibc would keep it in the drain thread's
 * arena).
 */
struct record_chunk {
	struct record_chunk *next;
	size_t len, cap; /* bytes of data[] used, and mapped after the header */
	uint64_t data[];
};

/* The bytes a record of @size bytes takes in a chunk: its size word, its bytes padded to 8. */
static size_t slot_bytes(uint64_t size)
{
	return sizeof(uint64_t) + (size_t)((size + 7) & ~(uint64_t)7);
}

static struct record_chunk *chunk_new(size_t need)
{
	size_t bytes = MAX(need + sizeof(struct record_chunk), (size_t)CHUNK_BYTES);
	struct record_chunk *c;

	c = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c == MAP_FAILED)
		return NULL;
	c->next = NULL;
	c->len = 0;
	c->cap = bytes - sizeof(*c);
	return c;
}

static void chunk_free(struct record_chunk *c)
{
	if (c)
		munmap(c, c->cap + sizeof(*c));
}

/*
 * libbpf's ring_buffer_sample_fn, with @r's drain lock held: copy the
 * record to the queue's last chunk (a new one when it is full; a record
 * that cannot be queued for want of memory is counted in @r->unqueued), and
 * stop once a ring's worth of bytes is read.
 */
static int reader_record(void *ctx, void *data, size_t size)
{
	struct record_reader *r = ctx;
	size_t need = slot_bytes(size);
	struct record_chunk *c = r->tail;

	if (!c || c->cap - c->len < need) {
		c = r->spare && r->spare->cap >= need ? r->spare : chunk_new(need);
		if (c == r->spare)
			r->spare = NULL;
	}
	if (c && c != r->tail) {
		c->len = 0;
		c->next = NULL;
		if (r->tail)
			r->tail->next = c;
		else
			r->head = c;
		r->tail = c;
	}
	if (c) {
		uint64_t *at = c->data + c->len / sizeof(uint64_t);

		at[0] = size;
		memcpy(at + 1, data, size);
		c->len += need;
		r->queued_bytes += need;
		r->queued_peak = MAX(r->queued_peak, r->queued_bytes);
	} else {
		r->unqueued++;
	}
	r->read_records++;
	r->read_bytes += RING_RECORD_BYTES(size);
	return r->read_bytes >= r->ring_bytes ? READ_ENOUGH : 0;
}

/* Copy what the ring holds (a ring's worth at most) to the queue. With the drain lock held. */
static int ring_to_queue(struct record_reader *r)
{
	int ret;

	r->read_bytes = 0;
	r->read_records = 0;
	ret = ring_buffer__consume(r->rb);
	return ret == READ_ENOUGH ? r->read_records : ret;
}

/*
 * The drain thread: wait until the BPF side wakes the ring (or for a
 * second), copy the ring to the queue and tell the loop; while the queue
 * is at RECORD_QUEUE_MAX, wait for record_reader__poll() to empty it.
 */
static void *drain_main(void *arg)
{
	struct record_reader *r = arg;
	struct worker_thread *t = &r->drain;
	struct epoll_event ev[2];
	int n, got;

	pthread_mutex_lock(&t->lock);
	while (!t->stop) {
		if (r->queued_bytes >= RECORD_QUEUE_MAX) {
			t->kicked = false;
			worker_thread__wait(t, now_ns(CLOCK_MONOTONIC) + NSEC_PER_SEC);
			continue;
		}
		pthread_mutex_unlock(&t->lock);
		n = epoll_wait(r->drain_epfd, ev, 2, 1000);
		pthread_mutex_lock(&t->lock);
		if (n <= 0 || t->stop)
			continue;
		got = ring_to_queue(r);
		if (got > 0)
			(void)eventfd_write(r->queued_fd, 1);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

/* The reader's fds and drain thread, once its ring buffer is open. 0 or -errno. */
static int reader_start(struct record_reader *r)
{
	int ret;

	r->drain_epfd = epoll_create1(EPOLL_CLOEXEC);
	r->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	r->queued_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->drain_epfd < 0 || r->stop_fd < 0 || r->queued_fd < 0)
		return -errno;
	ret = epoll_add(r->drain_epfd, ring_buffer__epoll_fd(r->rb));
	if (ret == 0)
		ret = epoll_add(r->drain_epfd, r->stop_fd);
	if (ret == 0)
		ret = worker_thread__start(&r->drain, drain_main, r);
	return ret;
}

int collector__load(struct bpf_object_skeleton *s, struct bpf_map *events, size_t ringbuf_bytes,
		    struct bpf_map *targets, int targets_fd, record_fn fn, void *ctx,
		    struct record_reader *reader)
{
	int r;

	if (!ringbuf_size_ok(ringbuf_bytes))
		return -EINVAL;
	r = possible_cpus();
	if (r < 0)
		return r;
	r = bpf_map__set_max_entries(events, (__u32)ringbuf_bytes);
	if (r == 0 && targets_fd >= 0)
		r = bpf_map__reuse_fd(targets, targets_fd);
	if (r == 0)
		r = bpf_object__load_skeleton(s);
	if (r < 0)
		return r;
	*reader = (struct record_reader){.fn = fn,
					 .ctx = ctx,
					 .ring_bytes = ringbuf_bytes,
					 .live = true,
					 .drain_epfd = -1,
					 .stop_fd = -1,
					 .queued_fd = -1};
	worker_thread__init(&reader->drain);
	reader->rb = ring_buffer__new(bpf_map__fd(events), reader_record, reader, NULL);
	if (!reader->rb)
		return -errno;
	return reader_start(reader);
}

void record_reader__close(struct record_reader *r)
{
	struct record_chunk *c;

	if (!r->live)
		return;
	/* Left readable, so that epoll_wait() returns until the thread sees stop. */
	if (r->drain.started)
		(void)eventfd_write(r->stop_fd, 1);
	worker_thread__stop(&r->drain);
	worker_thread__destroy(&r->drain);
	while ((c = r->head)) {
		r->head = c->next;
		chunk_free(c);
	}
	chunk_free(r->spare);
	ring_buffer__free(r->rb);
	if (r->drain_epfd >= 0)
		close(r->drain_epfd);
	if (r->stop_fd >= 0)
		close(r->stop_fd);
	if (r->queued_fd >= 0)
		close(r->queued_fd);
	*r = (struct record_reader){0};
}

int record_reader__fd(struct record_reader *r)
{
	return r->queued_fd;
}

int record_reader__poll(struct record_reader *r)
{
	struct worker_thread *t = &r->drain;
	struct record_chunk *list, *c;
	eventfd_t drained;
	bool was_full, more;
	int ret, n = 0;

	(void)eventfd_read(r->queued_fd, &drained);
	pthread_mutex_lock(&t->lock);
	ret = ring_to_queue(r);
	more = ret > 0 && r->read_bytes >= r->ring_bytes;
	list = r->head;
	was_full = r->queued_bytes >= RECORD_QUEUE_MAX;
	r->head = r->tail = NULL;
	r->queued_bytes = 0;
	pthread_mutex_unlock(&t->lock);
	if (was_full)
		worker_thread__kick(t);

	while ((c = list)) {
		for (size_t off = 0; off < c->len;) {
			uint64_t *at = c->data + off / sizeof(uint64_t);

			if (!r->fn(r->ctx, at + 1, (size_t)at[0]))
				r->bad_records++;
			off += slot_bytes(at[0]);
			n++;
		}
		list = c->next;
		pthread_mutex_lock(&t->lock);
		if (!r->spare && c->cap == CHUNK_BYTES - sizeof(*c)) {
			r->spare = c;
			c = NULL;
		}
		pthread_mutex_unlock(&t->lock);
		chunk_free(c);
	}
	if (more)
		(void)eventfd_write(r->queued_fd, 1); /* the ring may hold more */
	return ret < 0 ? ret : n;
}

size_t record_reader__queued_peak(struct record_reader *r)
{
	size_t peak;

	pthread_mutex_lock(&r->drain.lock);
	peak = r->queued_peak;
	pthread_mutex_unlock(&r->drain.lock);
	return peak;
}

uint64_t record_reader__bad_records(struct record_reader *r)
{
	uint64_t n;

	pthread_mutex_lock(&r->drain.lock);
	n = r->bad_records + r->unqueued;
	pthread_mutex_unlock(&r->drain.lock);
	return n;
}

int percpu_sum(struct bpf_map *map, uint32_t key, uint64_t *ret, size_t nr_u64)
{
	int nr_cpus = possible_cpus();
	_cleanup_free_ uint64_t *vals = NULL;

	if (nr_cpus < 0)
		return nr_cpus;
	vals = calloc((size_t)nr_cpus * nr_u64, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(map), &key, vals) < 0)
		return -errno;
	memset(ret, 0, nr_u64 * sizeof(*ret));
	for (size_t cpu = 0; cpu < (size_t)nr_cpus; cpu++)
		for (size_t k = 0; k < nr_u64; k++)
			ret[k] += vals[cpu * nr_u64 + k];
	return 0;
}

int percpu_zero(struct bpf_map *map, uint32_t key, size_t value_size)
{
	int nr_cpus = possible_cpus();
	_cleanup_free_ void *zero = NULL;

	if (nr_cpus < 0)
		return nr_cpus;
	zero = calloc((size_t)nr_cpus, value_size);
	if (!zero)
		return -ENOMEM;
	return bpf_map_update_elem(bpf_map__fd(map), &key, zero, BPF_ANY) < 0 ? -errno : 0;
}

/*
 * map_delete_if() - delete every key of the BPF hash map open at @fd (keys
 * of @key_size bytes, at most 64) that @match(@ctx, @fd, key) accepts.
 * Deleting the key a walk stands on loses its place, so the walk starts
 * over after each delete: keys x deletes steps, which the maps it serves
 * (thousands of keys at most; a process's or a session's deleted) afford.
 * A key whose delete fails is passed over. Keys added during the walk may
 * or may not be seen.
 *
 * Returns the number of keys deleted, or -EINVAL for a @key_size over 64.
 * Does not block, allocate or log.
 */
int map_delete_if(int fd, size_t key_size, map_key_fn match, void *ctx)
{
	uint64_t key[8], next[8];
	bool walking = false;
	int n = 0;

	if (key_size > sizeof(key))
		return -EINVAL;
	while (bpf_map_get_next_key(fd, walking ? key : NULL, next) == 0) {
		memcpy(key, next, key_size);
		walking = true;
		if (match(ctx, fd, key) && bpf_map_delete_elem(fd, key) == 0) {
			n++;
			walking = false;
		}
	}
	return n;
}
