/*
 * bpf_util.h - what the collectors of daemon/collect/ do alike with their
 * BPF objects: load a skeleton whose records arrive through a ring buffer
 * map, read that ring buffer (counting malformed records), read or
 * reset per-CPU counter maps, and delete the entries of a hash map that
 * belong to a process or session.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bpf/libbpf.h>

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

/* The user side of one BPF ring buffer map. Embedded in its collector. */
struct record_reader {
	struct ring_buffer *rb;
	record_fn fn;
	void *ctx;
	uint64_t bad_records; /* records @fn refused */
	size_t ring_bytes;    /* the ring's size: what one record_reader__poll() reads at most */
	size_t read_bytes;    /* read in this record_reader__poll(), headers included */
	int read_records;     /* read in this record_reader__poll() */
};

/*
 * collector__load() - load the BPF skeleton @s (its X__open() done, its
 * rodata set) whose records arrive in ring buffer map @events, and open
 * @reader on it.
 * @ringbuf_bytes: @events' size, a power of two and a multiple of the page size.
 * @targets, @targets_fd: when @targets_fd >= 0, the map @targets is made to
 *   share that map (another object's targets) instead of having its own.
 * @fn, @ctx: called from record_reader__poll() for each record.
 * Returns 0, -EINVAL for a bad size, or the -errno libbpf gave (-EPERM
 * without CAP_BPF + CAP_PERFMON; possible_cpus()' when the CPUs cannot be
 * counted, which percpu_sum() and percpu_zero() then rely on). On failure
 * the caller destroys the skeleton and calls record_reader__close(). Does
 * not log.
 */
int collector__load(struct bpf_object_skeleton *s, struct bpf_map *events, size_t ringbuf_bytes,
		    struct bpf_map *targets, int targets_fd, record_fn fn, void *ctx,
		    struct record_reader *reader);

/* record_reader__close() - free @r's ring buffer reader; pending records are dropped. Idempotent.
 */
void record_reader__close(struct record_reader *r);

/*
 * record_reader__fd() - an epoll fd (O_CLOEXEC, owned by @r) that polls
 * readable when the BPF program woke the reader; programs that wake only
 * once a share of the buffer is full need a timer to poll as well.
 */
int record_reader__fd(struct record_reader *r);

/*
 * record_reader__poll() - read every record waiting, without blocking, and
 * no more than one ring's worth of bytes: all that was waiting at the call,
 * not an endless stream from a producer as fast as the reader (libbpf's
 * ring_buffer__consume() reads until the ring stays empty, which a target
 * calling a probed function 75,000 times a second never lets happen; the
 * loop's timer, queries and rate limits would wait for it). Records left
 * wake the reader's fd again.
 * Returns the number read, malformed ones included (>= 0), or -errno.
 */
int record_reader__poll(struct record_reader *r);

/* record_reader__bad_records() - malformed records seen so far. */
uint64_t record_reader__bad_records(const struct record_reader *r);

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
