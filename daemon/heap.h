/*
 * heap.h - allocation sampling: the heap.bpf.c uprobes, attached per
 * target process to the allocator libraries it has mapped (glibc's libc,
 * jemalloc, tcmalloc, or an executable with its own malloc), their ring
 * buffer and their per-session counters.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/heap.h"
#include "protocol.h"

/* Default mean bytes allocated between two samples (tcmalloc's default). */
#define HEAP_DEFAULT_SAMPLE_BYTES PROFD_DEFAULT_MALLOC_SAMPLE_BYTES

struct heap;

/* The stack bytes of an ALLOC record @a, right after its ips. */
static inline const void *malloc_alloc_event_stack(const struct malloc_alloc_event *a)
{
	return &a->ips[a->h.ustack_len];
}

/*
 * Called for each well-formed record. @e (@size bytes) is valid only during
 * the call; an ALLOC record is a whole struct malloc_alloc_event (its
 * lengths already checked against @size).
 */
typedef void (*heap_fn)(void *ctx, const struct malloc_event *e, size_t size);

/* malloc_event__valid() - whether @size bytes at @data are a well-formed record. */
bool malloc_event__valid(const void *data, size_t size);
/* heap__weight() - the bytes a sampled block of @size_bytes stands for, at @sample_bytes. */
double heap__weight(uint64_t size_bytes, uint64_t sample_bytes);
/* heap__func_name() - "malloc", "calloc", ... for MALLOC_FUNC_* @func; "?" if out of range. */
const char *heap__func_name(unsigned func);

/* Each function is documented where it is defined, in heap.c. */
int heap__new(size_t ringbuf_bytes, int targets_fd, heap_fn fn, void *ctx, struct heap **ret);
void heap__free(struct heap *h); /* accepts NULL */
int heap__fd(struct heap *h);
int heap__poll(struct heap *h);
uint64_t heap__bad_records(struct heap *h);
int heap__attach(struct heap *h, unsigned slot, pid_t pid, uint64_t sample_bytes, char *ret_probes,
		 size_t probes_len);
bool heap__attached(struct heap *h, unsigned slot, pid_t pid);
bool heap__probing(struct heap *h, unsigned slot);
void heap__detach(struct heap *h, unsigned slot);
int heap__stats(struct heap *h, unsigned slot, struct malloc_stats *ret);
