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

/*
 * One text symbol: 16 bytes, as 122,000 of them take ~2 MiB on a Debian
 * 6.x kernel (they took 4 MiB, and as much again for the sort, at 32).
 */
struct ksym {
	uint64_t addr;
	uint32_t name;	 /* offset in kallsyms.names */
	uint16_t module; /* index in kallsyms.modules + 1; 0 for the kernel image */
	uint8_t global;	 /* type T or W: preferred where several share an address */
	uint8_t pad;
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
	char *names;	      /* the symbols' names, NUL-terminated one after the other, in
			       * file order */
	size_t names_len;
	const char **modules; /* module names ("[mod]", interned), by first appearance */
	size_t n_modules;
	bool loaded;
	bool hidden;	   /* kptr_restrict: every address read as 0 */
	struct ksym *syms; /* sorted by address */
	size_t n;
};

/* Documented where they are defined, in kallsyms.c. */
int kallsyms__load_file(struct kallsyms *k, const char *path);
int kallsyms__lookup(struct kallsyms *k, uint64_t addr, bool return_addr, struct frame_info *ret);
void kallsyms__done(struct kallsyms *k);
