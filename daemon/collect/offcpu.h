/*
 * offcpu.h - off-CPU time per thread and per blocking stack, through the
 * offcpu.bpf.c programs on sched_switch and sched_wakeup: one record per
 * interval a thread of a target process spent off the CPU, with its state
 * class and the kernel and user stacks it left from.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/offcpu.h"
#include "collect/bpf_util.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"

/* Threads that can be off the CPU at once, over all targets (size of the BPF 'starts' map). */
#define OFFCPU_MAX_THREADS 16384

/* offcpu__user_stack() result flags: unwinder__complete_walk()'s. */
#define OFFCPU_USTACK_FIXED UNWIND_WALK_FIXED
#define OFFCPU_USTACK_CFI_ONLY UNWIND_WALK_CFI_ONLY
#define OFFCPU_USTACK_UNCHECKED UNWIND_WALK_UNCHECKED

/* The user stack bytes of @e (e->stack_size of them), right after its ips. */
static inline const void *offcpu_event_stack(const struct offcpu_event *e)
{
	return &e->ips[(size_t)e->kstack_len + e->ustack_len];
}

struct offcpu;

/*
 * offcpu_event__valid() - whether the @size bytes at @data are a well-formed
 * struct offcpu_event: stack lengths and the stack copy within their bounds
 * and within @size, slot and state in range, runq_ns <= duration_ns.
 */
bool offcpu_event__valid(const void *data, size_t size);

/*
 * Called for each well-formed record read from the ring buffer. @e (@size
 * bytes) is valid only during the call; its ips[] hold e->kstack_len +
 * e->ustack_len addresses, then e->stack_size bytes of user stack (all
 * already checked against @size).
 */
typedef void (*offcpu_fn)(void *ctx, const struct offcpu_event *e, size_t size);

/*
 * Maps of the sampler (sampler__shared_maps()) that offcpu.bpf.c uses as
 * its own: the target processes, and the CFI tables its user-stack walk
 * reads (cfi_walk.bpf.h). Borrowed fds; -1: the object's own, empty map.
 */
struct offcpu_shared_maps {
	int targets_fd;
	int cfi_fds[4]; /* cfi_procs, cfi_modules, cfi_rows, cfi_row_cache (sampler__cfi_fds()) */
};

/* Each function is documented where it is defined, in offcpu.c. */
int offcpu__new(size_t ringbuf_bytes, offcpu_fn fn, void *ctx,
		struct offcpu **ret); /* load; attached while traced */
int offcpu__new_shared(size_t ringbuf_bytes, const struct offcpu_shared_maps *maps, offcpu_fn fn,
		       void *ctx, struct offcpu **ret); /* offcpu__new() with the sampler's maps */
void offcpu__free(struct offcpu *o);			/* accepts NULL */
/* The ring buffer's reader (owned by @o); its fd is readable when 1/16 of the ring is full. */
struct record_reader *offcpu__reader(struct offcpu *o);
int offcpu__add_target(struct offcpu *o, unsigned slot, pid_t pid, uint64_t period_ns);
uint64_t offcpu__period_ns(unsigned freq_hz); /* a session's sampling period */
int offcpu__remove_target(struct offcpu *o, unsigned slot, pid_t pid);
uint64_t offcpu__lost(struct offcpu *o, unsigned slot); /* intervals dropped, all causes */
int offcpu__counters(struct offcpu *o, unsigned slot, struct offcpu_counters *ret);
int offcpu__prog_stats(struct offcpu *o, uint64_t *ret_run_cnt, uint64_t *ret_run_time_ns);
int offcpu__user_stack(struct unwinder *u, const struct addrspace *as, const struct offcpu_event *e,
		       uint64_t *ret_ips, size_t max, uint32_t *ret_flags); /* FP + CFI */
