/*
 * symbolize.h - process address spaces (/proc/PID/maps) and symbolization of
 * user addresses (libelf/libdw: symbols, C++ demangling, DWARF file:line) and
 * kernel addresses (/proc/kallsyms).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One file-backed executable mapping of a process, as /proc/PID/maps shows it. */
struct mapping {
	uint64_t start;       /* first address, inclusive */
	uint64_t end;         /* last address, exclusive */
	uint64_t file_offset; /* offset in the file of @start */
	uint64_t load_bias;   /* runtime address - ELF virtual address; 0 for ET_EXEC */
	const char *path;     /* file path as in /proc/PID/maps (owned by the addrspace) */
	const char *build_id; /* lowercase hex GNU build ID, "" if none or unreadable */
};

/*
 * Address space of one process: its executable file mappings. Kept after the
 * process exits, so samples read late can still be symbolized.
 */
struct addrspace;

/*
 * addrspace__new() - read /proc/@pid/maps. Returns 0 and *@ret_as, -ESRCH if
 * the process is gone, -EACCES/-EPERM if maps cannot be read, -ENOMEM.
 * Does not log.
 */
int addrspace__new(pid_t pid, struct addrspace **ret_as);

/*
 * addrspace__refresh() - re-read /proc/PID/maps (after a dlopen, say). New
 * mappings are added; mappings that went away are kept (samples taken before
 * an munmap may still arrive). Returns the number of new mappings (>= 0),
 * -ESRCH if the process is gone (the address space is left unchanged).
 */
int addrspace__refresh(struct addrspace *as);

/* addrspace__find() - the mapping holding @addr, or NULL. */
const struct mapping *addrspace__find(const struct addrspace *as, uint64_t addr);

/* addrspace__mappings() - all mappings, sorted by start; count in *@ret_n. */
const struct mapping *addrspace__mappings(const struct addrspace *as, size_t *ret_n);

void addrspace__free(struct addrspace *as); /* accepts NULL */

/*
 * addrspace__open_file() - open the ELF file behind mapping @m of @as as the
 * symbolizer does (/proc/PID/map_files, /proc/PID/root, the path; build ID
 * checked). Returns an O_CLOEXEC fd and the name to look for debug files
 * next to in @ret_path, or -ENOENT, -ENAMETOOLONG. Does not log.
 */
int addrspace__open_file(const struct addrspace *as, const struct mapping *m, char *ret_path,
			 size_t size);

/* Result of symbolizing one address. Strings are owned by the symbolizer and
 * stay valid until symbolizer__free(). */
struct frame_info {
	bool kernel;
	const char *module;   /* mapping path, "[kernel.kallsyms]" or "[modname]"; never NULL */
	const char *build_id; /* hex, "" if unknown; never NULL */
	uint64_t rel_addr;    /* user: ELF virtual address in @module; kernel: the address */
	const char *function; /* demangled name, NULL if unsymbolized */
	const char *file;     /* source file from DWARF, NULL without line info */
	int line;             /* 0 without line info */
};

/* Caches opened ELF files (by path + build ID) and the kernel symbol table. */
struct symbolizer;

struct symbolizer *symbolizer__new(void); /* NULL only on out-of-memory */
void symbolizer__free(struct symbolizer *s); /* accepts NULL */

/*
 * symbolizer__user() - symbolize user address @addr of a process whose
 * mappings are @as.
 * @return_addr: true for a return address from an unwound stack (every frame
 *   but the leaf): the lookup uses @addr - 1 so a call at the very end of a
 *   function is attributed to that function and its line.
 *
 * Returns 0 with *@ret filled: when a mapping holds @addr, module/build_id/
 * rel_addr are always set, and function/file/line when the ELF (or its
 * separate debug info) knows them. Returns -ENOENT if no mapping holds @addr
 * (*@ret then has module "[unknown]" and rel_addr = @addr). Does not log.
 * May block on file I/O.
 */
int symbolizer__user(struct symbolizer *s, const struct addrspace *as, uint64_t addr,
		     bool return_addr, struct frame_info *ret);

/*
 * symbolizer__kernel() - symbolize kernel address @addr from /proc/kallsyms
 * (read once, on first use). Returns 0 with function set, or 0 with function
 * NULL when kallsyms hides addresses (kptr_restrict) or has no symbol below
 * @addr. Does not log.
 */
int symbolizer__kernel(struct symbolizer *s, uint64_t addr, bool return_addr,
		       struct frame_info *ret);
