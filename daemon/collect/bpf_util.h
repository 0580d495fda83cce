/*
 * bpf_util.h - what the collectors of daemon/collect/ do alike when they
 * load their BPF object: check a ring buffer's size, count the CPUs, and
 * open the reader of a ring buffer map.
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

/* The CPUs the kernel may bring up (per-CPU maps have this many values): >= 1, or -errno. */
static inline int possible_cpus(void)
{
	int n = libbpf_num_possible_cpus();

	return n > 0 ? n : n < 0 ? n : -ENODEV;
}

/*
 * ringbuf_open() - a reader of ring buffer @map that calls @fn(@ctx, ...)
 * for each record (ring_buffer__consume()). Returns 0 and *@ret, or the
 * -errno libbpf gave. Does not log.
 */
static inline int ringbuf_open(struct bpf_map *map, ring_buffer_sample_fn fn, void *ctx,
			       struct ring_buffer **ret)
{
	*ret = ring_buffer__new(bpf_map__fd(map), fn, ctx, NULL);
	return *ret ? 0 : -errno;
}
