/*
 * bpf_util.h - what the collectors of daemon/collect/ do alike with their
 * BPF objects: load a skeleton whose records arrive through a ring buffer
 * map, read that ring buffer (a drain thread empties it into a queue the
 * event loop reads; malformed records are counted), read or
 * reset per-CPU counter maps, and delete the entries of a hash map that
 * belong to a process or session.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bpf/libbpf.h>

#include "worker_thread.h"

/* A BPF ring buffer's size must be a power of two (and fit the map's u32). */
static inline bool ringbuf_size_ok(size_t bytes)
{
	return bytes != 0 && bytes <= UINT32_MAX && (bytes & (bytes - 1)) == 0;
}

/*
 * The CPUs the kernel may bring up (per-CPU maps have this many values): >= 1,
 * or -errno. libbpf reads the count once and keeps it.
 */
static inline int possible_cpus(void)
{
	int n = libbpf_num_possible_cpus();

	return n > 0 ? n : n < 0 ? n : -ENODEV;
}

/*
 * Called for each record read from a ring buffer; @data (@size bytes, as
 * the BPF program submitted it, unchecked) is valid only during the call.
 * Returns false for a malformed record, which the reader counts.
 */
typedef bool (*record_fn)(void *ctx, const void *data, size_t size);

struct record_chunk;

/*
 * The user side of one BPF ring buffer map. Embedded in its collector.
 *
 * A drain thread copies records out of the ring as soon as the BPF side
 * wakes it, into chunks queued for record_reader__poll(), which the event
 * loop calls: a loop busy elsewhere (a flush symbolizing a new module, a
 * database locked by another process) no longer lets the ring fill and
 * drop samples; the queue holds them meanwhile, at most RECORD_QUEUE_MAX
 * bytes, after which the ring fills and the BPF side counts its drops as
 * before. The records are handled (@fn) on the loop's thread only.
 */
struct record_reader {
	struct ring_buffer *rb;
	record_fn fn;
	void *ctx;
	uint64_t bad_records; /* records @fn refused */
	size_t ring_bytes;    /* the ring's size: what one ring_buffer__consume() reads at most */
	size_t read_bytes;    /* read in this consume, headers included */
	int read_records;     /* read in this consume */
	bool live;	      /* collector__load() made everything below */
	struct worker_thread drain; /* the drain thread; its lock guards rb and the queue */
	int drain_epfd;		    /* the drain thread waits on: the ring, stop_fd */
	int stop_fd;		    /* eventfd, readable once the thread must stop */
	int queued_fd;		    /* eventfd, readable when chunks wait: record_reader__fd() */
	struct record_chunk *head, *tail, *spare; /* the queue; one empty chunk kept */
	size_t queued_bytes;			  /* in the queue's chunks */
	size_t queued_peak;			  /* the most queued_bytes so far */
	uint64_t unqueued; /* records dropped for want of memory for a chunk */
};

/* Bytes of records the drain thread queues per ring at most (see struct record_reader). */
#define RECORD_QUEUE_MAX (16u << 20)

/*
 * collector__load() - load the BPF skeleton @s (its X__open() done, its
 * rodata set) whose records arrive in ring buffer map @events, and open
 * @reader on it: its fds and its drain thread, running on return.
 * @ringbuf_bytes: @events' size, a power of two and a multiple of the page size.
 * @targets, @targets_fd: when @targets_fd >= 0, the map @targets is made to
 *   share that map (another object's targets) instead of having its own.
 * @fn, @ctx: called from record_reader__poll() for each record.
 * Returns 0, -EINVAL for a bad size, or the -errno libbpf gave (-EPERM
 * without CAP_BPF + CAP_PERFMON; possible_cpus()' when the CPUs cannot be
 * counted, which percpu_sum() and percpu_zero() then rely on), or that of
 * eventfd(2), epoll_create1(2) or pthread_create(3) (-EMFILE, -ENOMEM,
 * -EAGAIN) for the drain thread. On failure the caller destroys the
 * skeleton and calls record_reader__close(). Does not log.
 */
int collector__load(struct bpf_object_skeleton *s, struct bpf_map *events, size_t ringbuf_bytes,
		    struct bpf_map *targets, int targets_fd, record_fn fn, void *ctx,
		    struct record_reader *reader);

/*
 * record_reader__close() - stop @r's drain thread (it returns within one
 * ring copy) and free the reader; records queued or in the ring are
 * dropped. Idempotent; a no-op on a zeroed reader.
 */
void record_reader__close(struct record_reader *r);

/*
 * record_reader__fd() - an eventfd (O_CLOEXEC, owned by @r) that polls
 * readable when the drain thread has queued records; programs that wake
 * only once a share of the buffer is full need a timer to poll as well.
 */
int record_reader__fd(struct record_reader *r);

/*
 * record_reader__poll() - handle every record waiting, without blocking:
 * those queued by the drain thread and those still in the ring, as they
 * were at the call, not an endless stream from a producer as fast as the
 * reader (libbpf's ring_buffer__consume() reads until the ring stays
 * empty, which a target calling a probed function 75,000 times a second
 * never lets happen; the loop's timer, queries and rate limits would wait
 * for it): at most one ring's worth from the ring itself. Records left
 * wake the reader's fd again. Call from one thread only (the event loop).
 * Returns the number handled, malformed ones included (>= 0), or -errno.
 */
int record_reader__poll(struct record_reader *r);

/* record_reader__queued_peak() - the most bytes of records queued at once so far. */
size_t record_reader__queued_peak(struct record_reader *r);

/* record_reader__bad_records() - records malformed, or dropped for want of memory, so far. */
uint64_t record_reader__bad_records(struct record_reader *r);

/* The number of __u64 counters in struct @v (every counter struct of bpf/ is all __u64). */
#define U64S(v) (sizeof(v) / sizeof(uint64_t))

/*
 * percpu_sum() - the value of @key in per-CPU array map @map, a struct of
 * @nr_u64 __u64 counters per CPU (possible_cpus() of them), summed over
 * CPUs into @ret[0..nr_u64-1]. Returns 0, -ENOMEM, or possible_cpus()' or
 * bpf()'s -errno (then @ret is unchanged).
 */
int percpu_sum(struct bpf_map *map, uint32_t key, uint64_t *ret, size_t nr_u64);

/* percpu_zero() - set @key of per-CPU map @map (@value_size bytes a CPU) to zeros. 0 or -errno. */
int percpu_zero(struct bpf_map *map, uint32_t key, size_t value_size);

/*
 * Called by map_delete_if() for each key (@key, the map's key size, 8-byte
 * aligned) of the map open at @fd: true to delete it. May read the key's
 * value, and change other maps; must not delete from @fd itself.
 */
typedef bool (*map_key_fn)(void *ctx, int fd, const void *key);

/* Documented in bpf_util.c. */
int map_delete_if(int fd, size_t key_size, map_key_fn match, void *ctx);
