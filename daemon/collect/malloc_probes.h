/*
 * malloc_probes.h - allocation sampling: the heap.bpf.c uprobes, attached per
 * target process to the allocator libraries it has mapped (glibc's libc,
 * jemalloc, tcmalloc, or an executable with its own malloc), their ring
 * buffer and their per-session counters.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/malloc.h"
#include "collect/bpf_util.h"
#include "protocol.h"

/* Default mean bytes allocated between two samples (tcmalloc's default). */
#define HEAP_DEFAULT_SAMPLE_BYTES PROFD_DEFAULT_MALLOC_SAMPLE_BYTES

struct malloc_probes;

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
typedef void (*malloc_probes_fn)(void *ctx, const struct malloc_event *e, size_t size);

/* malloc_event__valid() - whether @size bytes at @data are a well-formed record. */
bool malloc_event__valid(const void *data, size_t size);
/* malloc_probes__weight() - the bytes a sampled block of @size_bytes stands for, at @sample_bytes.
 */
double malloc_probes__weight(uint64_t size_bytes, uint64_t sample_bytes);
/* malloc_probes__func_name() - "malloc", "calloc", ... for MALLOC_FUNC_* @func; "?" if out of
 * range. */
const char *malloc_probes__func_name(unsigned func);

/* Each function is documented where it is defined, in malloc_probes.c. */
int malloc_probes__new(size_t ringbuf_bytes, int targets_fd, malloc_probes_fn fn, void *ctx,
		       struct malloc_probes **ret);
void malloc_probes__free(struct malloc_probes *h);		      /* accepts NULL */
struct record_reader *malloc_probes__reader(struct malloc_probes *h); /* owned by @h */
int malloc_probes__attach(struct malloc_probes *h, unsigned slot, pid_t pid, uint64_t sample_bytes,
			  char *ret_probes, size_t probes_len);
bool malloc_probes__attached(struct malloc_probes *h, unsigned slot, pid_t pid);
bool malloc_probes__probing(struct malloc_probes *h, unsigned slot);
void malloc_probes__detach(struct malloc_probes *h, unsigned slot);
int malloc_probes__stats(struct malloc_probes *h, unsigned slot, struct malloc_stats *ret);
int malloc_probes__poll(struct malloc_probes *h, unsigned slot);
