/*
 * symbolize_internal.h - what symbolize.c shares with symbolize_file.c (the
 * symbolization of stored frames from files): the symbolizer, its modules,
 * and the steps that open a module and look an address up in it. Private to
 * daemon/symbols/.
 */
#pragma once

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "symbols/debuginfo.h"
#include "symbols/kallsyms.h"
#include "symbols/strpool.h"
#include "symbols/symbolize.h"
#include "util.h"

/* A file that could not be opened is tried again after this long. */
#define MODULE_RETRY_NS (10 * NSEC_PER_SEC)

/*
 * One ELF file, by path + build ID, opened in a Dwfl of its own: a file
 * mapped by a process, or (@file) a file named by symbolizer__file().
 */
struct module {
	const char *path;     /* interned; the path in the maps */
	const char *build_id; /* interned */
	/* part of the key only when there is no build ID */
	uint64_t dev_major, dev_minor, ino;
	/* [vdso]: the mapping's size, whether it is our own image; 0/false for files */
	uint64_t vdso_bytes;
	bool vdso_self;
	bool file;  /* opened by symbolizer__file(): by path, else debug info by build ID */
	Dwfl *dwfl; /* NULL: no usable ELF */
	Dwfl_Module *mod;
	struct symindex *index; /* @mod's symbols by address; NULL: ask libdwfl */
	Dwarf_Addr bias;	/* Dwfl address - ELF virtual address */
	uint64_t retry_ns;	/* CLOCK_MONOTONIC time to try opening again when dwfl is NULL */
	uint64_t used_ns;	/* the symbolizer's clock_ns when it was last looked up */
};

/* What identifies a module: interned strings compare by address. Hashed as bytes. */
struct module_key {
	const char *path, *build_id;
	uint64_t dev_major, dev_minor, ino;
	uint64_t vdso_bytes;
	bool vdso_self;
	bool file;
};

struct symbolizer {
	struct strpool pool;

	struct hashmap modules; /* struct module, by path + build ID (+ inode) */
	struct hashmap results; /* struct result, by module + address; emptied when full */

	struct kallsyms kallsyms; /* loaded on first use */

	/* CLOCK_MONOTONIC of the last symbolizer__trim() (of creation before
	 * one): what a module is stamped with when it is looked up, so that a
	 * lookup costs no clock read. */
	uint64_t clock_ns;
	uint64_t files_opened; /* symbolizer__module_report() successes */

	/*
	 * Where separate debug files are looked for (debuginfo.h); with
	 * @debuginfod, libdwfl's standard callbacks replace its own. The Dwfls
	 * point at debuginfo.callbacks.
	 */
	struct debuginfo debuginfo;
	bool debuginfod;
	/* symbolizer__file() with debuginfod: a Dwfl kept only for its debuginfod client */
	Dwfl *debuginfod_dwfl;
};

/* Documented where they are defined, in symbolize.c. */
struct module *symbolizer__module_intern(struct symbolizer *s, const struct module_key *key,
					 uint64_t retry_ns);
int symbolizer__module_report(struct symbolizer *s, struct module *mod, const char *file_name,
			      int fd);
int symbolizer__module_frames(struct symbolizer *s, const struct module *mod, uint64_t vaddr,
			      uint64_t lookup, struct frame_info *ret, size_t max);
