/*
 * cfi_loader.h - the thread that loads processes' CFI tables into the maps
 * of cfi_walk.bpf.h (collect/cfi_maps.c) for the sampler's table walk, so
 * that compiling a module (seconds for libtorch_cpu.so) never blocks the
 * event loop. The loop asks; the thread reads the process's mappings
 * itself (until then the process's samples stop at CFI_STOP_NO_PROCESS),
 * and compiles a module's table when the loop asks for it, after a walk
 * stopped in it (CFI_STOP_NO_TABLE): only modules on sampled stacks cost
 * rows. Samples that stop fall back to the stack copy.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "collect/cfi_maps.h"

struct cfi_loader;

/* Documented where they are defined, in cfi_loader.c. */
int cfi_loader__new(int procs_fd, int modules_fd, int rows_fd, uint32_t rows_cap,
		    struct cfi_cache *cache, struct cfi_loader **ret);
int cfi_loader__add(struct cfi_loader *l, pid_t pid);
int cfi_loader__load_module(struct cfi_loader *l, pid_t pid, uint64_t pc);
int cfi_loader__remove(struct cfi_loader *l, pid_t pid);
void cfi_loader__stats(struct cfi_loader *l, struct cfi_maps_stats *ret);
void cfi_loader__free(struct cfi_loader *l); /* accepts NULL */
