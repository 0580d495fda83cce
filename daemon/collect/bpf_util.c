/*
 * bpf_util.c - loading a collector's BPF skeleton, reading its ring buffer
 * and per-CPU maps, deleting entries of its hash maps.
 */
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "collect/bpf_util.h"
#include "util.h"

/* A record's bytes in the ring: its header, 8-aligned (kernel/bpf/ringbuf.c). */
#define RING_RECORD_BYTES(size) (((size) + BPF_RINGBUF_HDR_SZ + 7) & ~(size_t)7)

/* A stop asked by reader_record(), not an error: libbpf passes a callback's
 * negative return up as it is, after taking the record. */
#define READ_ENOUGH (-EALREADY)

/*
 * libbpf's ring_buffer_sample_fn: a malformed record is counted, and
 * consumption goes on until a ring's worth of bytes is read.
 */
static int reader_record(void *ctx, void *data, size_t size)
{
	struct record_reader *r = ctx;

	if (!r->fn(r->ctx, data, size))
		r->bad_records++;
	r->read_records++;
	r->read_bytes += RING_RECORD_BYTES(size);
	return r->read_bytes >= r->ring_bytes ? READ_ENOUGH : 0;
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
	*reader = (struct record_reader){.fn = fn, .ctx = ctx, .ring_bytes = ringbuf_bytes};
	reader->rb = ring_buffer__new(bpf_map__fd(events), reader_record, reader, NULL);
	return reader->rb ? 0 : -errno;
}

void record_reader__close(struct record_reader *r)
{
	ring_buffer__free(r->rb);
	r->rb = NULL;
}

int record_reader__fd(struct record_reader *r)
{
	return ring_buffer__epoll_fd(r->rb);
}

int record_reader__poll(struct record_reader *r)
{
	int ret;

	r->read_bytes = 0;
	r->read_records = 0;
	ret = ring_buffer__consume(r->rb);
	return ret == READ_ENOUGH ? r->read_records : ret;
}

uint64_t record_reader__bad_records(const struct record_reader *r)
{
	return r->bad_records;
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
