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

struct session;
struct session_env;
struct gpu_acc;

/* Each function is documented where it is defined, in gpu_acc.c. */
struct gpu_acc *gpu_acc__new(void);    /* NULL only on out-of-memory */
void gpu_acc__free(struct gpu_acc *a); /* accepts NULL */
void gpu_acc__on_event(struct gpu_acc *a, struct session *s, struct symbolizer *sym,
		       const struct addrspace *as, const struct gpu_probe *p,
		       const struct uprobe_event *e);
int gpu_acc__note_probe(struct gpu_acc *a, pid_t pid, const char *what, const char *file,
			const char *status);
void gpu_acc__count_lost(struct gpu_acc *a, uint64_t n);
int gpu_acc__flush(struct gpu_acc *a, struct session *s, const struct session_env *env,
		   bool *refreshed);
void gpu_acc__flush_done(struct gpu_acc *a);
