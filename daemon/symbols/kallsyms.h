/*
 * kallsyms.h - the kernel's function symbols (kallsyms.c), read once from
 * /proc/kallsyms, sorted by address, one name per address (the global one
 * where several share it), for the symbolizer's kernel frames.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "symbols/strpool.h"
#include "symbols/symbolize.h"

struct ksym {
	uint64_t addr;
	const char *name;   /* in the kallsyms' arena */
	const char *module; /* interned "[mod]", or NULL for the kernel image */
	uint32_t order;	    /* line number in kallsyms, for a stable sort */
	bool global;
};
#define KALLSYMS_MAX_BYTES (256ULL << 20)
#define KSYM_NAME_MAX 1024 /* kernel KSYM_NAME_LEN is 512 since 6.1 */
/*
 * A kernel address further than this above the greatest symbol below it is
 * past the end of that symbol's text region (the end of a module, of the
 * kernel image, or a BPF program that came after kallsyms was read); naming
 * it after that symbol would be a silently wrong frame.
 */
#define KSYM_MAX_DISTANCE (1ULL << 20)

struct kallsyms {
	struct strpool *pool; /* borrowed: module names ("[mod]") are interned in it */
	struct arena names;   /* the symbols' names */
	bool loaded;
	bool hidden;	   /* kptr_restrict: every address read as 0 */
	struct ksym *syms; /* sorted by address */
	size_t n;
};

/* Documented where they are defined, in kallsyms.c. */
int kallsyms__load_file(struct kallsyms *k, const char *path);
int kallsyms__lookup(struct kallsyms *k, uint64_t addr, bool return_addr, struct frame_info *ret);
void kallsyms__done(struct kallsyms *k);
