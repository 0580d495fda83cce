/*
 * cfi_maps.h - the user side of cfi_walk.bpf.h: fills its maps from a
 * process's address space (symbols/addrspace.c) and the modules' CFI
 * compiled into tables (symbols/cfi_table.c), once per build ID and shared
 * by every process that maps the module, in one shared row array of a
 * stated size. A module that does not fit is counted and left without rows:
 * the BPF walk stops at its frames (CFI_STOP_NO_TABLE), the sample falls
 * back to the stack copy.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfi_walk.h"
#include "symbols/symbolize.h"

/*
 * The row arrays: each made when a module fits in no other, of
 * CFI_MAPS_FIRST_ROWS rows (512 KiB of kernel memory, allocated whole, and
 * as much of profd's RSS: it is mmap'ed), or of what the module needs in
 * whole CFI_MAPS_FIRST_ROWS steps; all of them hold at most rows_cap rows
 * (CFI_MAPS_DEFAULT_ROWS: 4 Mi rows, 32 MiB); each is freed with the last
 * module in it. libc and a small program need about 40 Ki rows;
 * libtorch_cpu.so needs 1.4 Mi rows (10.7 MiB); a Debian python3 that
 * imported torch maps 315 modules needing 5.9 Mi rows (44.7 MiB), most of
 * them libraries it never runs (libgdal, librsvg, libavcodec...): loaded in
 * address order, the ones that do not fit are refused (counted).
 */
#define CFI_MAPS_DEFAULT_ROWS (4u << 20)
#define CFI_MAPS_FIRST_ROWS (64u << 10)

/* What the maps hold and what did not fit, for figures and counters. */
struct cfi_maps_stats {
	uint64_t procs;		   /* processes in cfi_procs */
	uint64_t procs_refused;	   /* add_process() calls refused: cfi_procs full */
	uint64_t modules;	   /* modules with rows in cfi_rows */
	uint64_t modules_empty;	   /* modules known without rows: no file, no CFI, not compiled */
	uint64_t modules_pending;  /* lazy: modules known, not compiled yet */
	uint64_t modules_no_room;  /* modules refused: rows_cap or CFI_WALK_MAX_MODULES full */
	uint64_t modules_wide;	   /* modules refused: addresses beyond 32 bits */
	uint64_t mappings_dropped; /* beyond CFI_WALK_MAX_MAPPINGS, or overlapping an earlier one */
	uint64_t rows_used;	   /* rows in cfi_rows now */
	uint64_t rows_len;	   /* the size of the row arrays now, in rows (0: none) */
	uint64_t rows_cap;	   /* the most rows they may hold together */
	uint64_t row_arrays;	   /* row arrays now */
	uint64_t row_arrays_made;  /* row arrays made so far */
	uint64_t rows_narrowed; /* rows made CFI_ROW_EXPR: offsets that do not fit (cfi_walk.h) */
	uint64_t compile_ns;	/* time spent compiling tables, CLOCK_MONOTONIC */
	/* The table cache on disk (cfi_cache.h), when one is set: */
	uint64_t cache_hits;	 /* modules whose rows came from it, not compiled */
	uint64_t cache_stored;	 /* compiled tables written to it */
	uint64_t cache_rejected; /* its files that did not read back as written (deleted) */
	uint64_t cache_failed;	 /* tables not written: a write error (full disk), too large */
	uint64_t cache_evicted;	 /* files deleted to keep it within its bound */
	uint64_t cache_bytes;	 /* of its files, as of the last store */
};

struct cfi_maps;
struct cfi_cache;

/* cfi_walk_stop_name() - enum cfi_walk_stop @stop as the JSON counters name it ("no_table"). */
const char *cfi_walk_stop_name(unsigned stop);

/* Documented where they are defined, in cfi_maps.c. */
int cfi_maps__new(int procs_fd, int modules_fd, int rows_fd, uint32_t rows_cap,
		  struct cfi_maps **ret);
int cfi_maps__add_process(struct cfi_maps *m, uint32_t tgid, const struct addrspace *as);
void cfi_maps__set_lazy(struct cfi_maps *m, bool lazy);
void cfi_maps__set_cache(struct cfi_maps *m, struct cfi_cache *cache);
int cfi_maps__load_module(struct cfi_maps *m, const struct addrspace *as, const struct mapping *mp);
int cfi_maps__remove_process(struct cfi_maps *m, uint32_t tgid);
int cfi_maps__module_rows(const struct cfi_maps *m, const struct mapping *mp, uint32_t *ret_rows);
const struct cfi_maps_stats *cfi_maps__stats(const struct cfi_maps *m);
void cfi_maps__free(struct cfi_maps *m); /* accepts NULL */
