/*
 * cfi_cache.h - compiled CFI tables kept on disk, one file per module build
 * ID, so that a module is compiled once per build on a machine, not once per
 * profd run: loading libtorch_cpu.so's 1.4 Mi rows from the file takes
 * milliseconds, compiling them ~1 s of CPU. Holds the rows as the BPF walk
 * reads them (struct cfi_walk_row, after cfi_maps.c narrowed them), so an
 * entry is copied into a row array as it is. Bounded in bytes: the least
 * recently used files go first. Only the loading thread calls it.
 */
#pragma once

#include <stdint.h>

#include "cfi_walk.h"

/*
 * The version of what a file holds: bump it whenever cfi_table.c (or cfi_section.c) compiles
 * other rows from the same file or cfi_maps.c narrows them otherwise, so
 * that files of an older profd are rejected (counted) and compiled again.
 */
#define CFI_CACHE_VERSION 1

struct cfi_cache;

/* An entry found by cfi_cache__find(), to read with cfi_cache__read(). */
struct cfi_cache_entry {
	int fd;
	uint32_t rows;	   /* rows in the file */
	uint32_t crc;	   /* zlib's crc32 of them */
	uint64_t narrowed; /* rows cfi_maps.c made CFI_ROW_EXPR when it narrowed them */
	char path[4096];
};

/* Documented where they are defined, in cfi_cache.c. */
int cfi_cache__new(const char *dir, uint64_t max_bytes, struct cfi_cache **ret);
int cfi_cache__find(struct cfi_cache *c, const char *build_id, struct cfi_cache_entry *ret);
int cfi_cache__read(struct cfi_cache *c, struct cfi_cache_entry *e, struct cfi_walk_row *rows);
int cfi_cache__store(struct cfi_cache *c, const char *build_id, const struct cfi_walk_row *rows,
		     uint32_t n, uint64_t narrowed);
uint64_t cfi_cache__bytes(const struct cfi_cache *c);
void cfi_cache__free(struct cfi_cache *c); /* accepts NULL */
