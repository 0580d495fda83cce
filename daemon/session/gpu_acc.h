/*
 * gpu_acc.h - one session's CUDA/NVTX/uprobe accounting: turns call records
 * (gpu.h) into API statistics, kernel launches by name, live GPU memory by
 * allocating stack, copies by direction, synchronization waits, the NVTX
 * range tree and generic probe latencies, and writes them at each flush.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "collect/uprobes.h"
#include "symbols/symbolize.h"

struct session_env;
struct store;
struct gpu_acc;
/* A call stack interned by the session that owns the accounting (opaque here). */
struct raw_stack;

/*
 * What the accounting needs of the session that owns it: its row, its
 * clocks, and its table of call stacks. Callbacks, so that the accounting
 * does not depend on the session module that owns it.
 */
struct gpu_acc_owner {
	void *ctx;
	int64_t session_id;
	uint64_t started_real_ns, started_mono_ns; /* the same instant on both clocks */
	/* Intern @n user addresses (leaf first) of process @pid; NULL when over a limit. */
	struct raw_stack *(*intern)(void *ctx, pid_t pid, const uint64_t *ips, unsigned n,
				    uint32_t flags);
	/* The store row of an interned stack, inside a flush: 0 and *@ret_id, or -errno. */
	int (*resolve)(void *ctx, const struct session_env *env, struct raw_stack *stack,
		       bool *refreshed, int64_t *ret_id);
};

/* Each function is documented where it is defined, in gpu_acc.c. */
struct gpu_acc *gpu_acc__new(const struct gpu_acc_owner *owner); /* NULL only on out-of-memory */
void gpu_acc__free(struct gpu_acc *a);                           /* accepts NULL */
int gpu_acc__held_stacks(const struct gpu_acc *a, int (*fn)(void *ctx, struct raw_stack *stack),
			 void *ctx);
void gpu_acc__set_session(struct gpu_acc *a, int64_t id, uint64_t real_ns, uint64_t mono_ns);
void gpu_acc__on_event(struct gpu_acc *a, struct symbolizer *sym,
		       const struct addrspace *as, const struct gpu_probe *p,
		       const struct uprobe_event *e);
int gpu_acc__note_probe(struct gpu_acc *a, pid_t pid, const char *what, const char *file,
			const char *status);
void gpu_acc__count_lost(struct gpu_acc *a, uint64_t n);
int gpu_acc__flush(struct gpu_acc *a, struct store *store, const struct session_env *env,
		   bool *refreshed);
void gpu_acc__flush_done(struct gpu_acc *a);
