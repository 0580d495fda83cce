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

/*
 * addrspace__is_code() - whether @addr lies in an executable mapping seen in
 * /proc/PID/maps (file, vDSO or anonymous: JIT, [uprobes]); see addrspace.c.
 */
bool addrspace__is_code(const struct addrspace *as, uint64_t addr);

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
/* Documented in addrspace.c: addrspace__open_file(), and [vdso] from the daemon's own copy. */
int addrspace__open_image(const struct addrspace *as, const struct mapping *m, char *ret_path,
			  size_t size);

/* Result of symbolizing one address. Strings are owned by the symbolizer and
 * stay valid until the next symbolizer__trim() (which may start its string
 * pool over) or symbolizer__free(). */
struct frame_info {
	bool kernel;
	const char *module;   /* mapping path, "[kernel.kallsyms]" or "[modname]"; never NULL */
	const char *build_id; /* hex, "" if unknown; never NULL */
	uint64_t rel_addr;    /* user: ELF virtual address in @module; kernel: the address */
	const char *function; /* demangled name, NULL if unsymbolized */
	const char *file;     /* source file from DWARF, NULL without line info */
	int line;             /* 0 without line info */
	int inline_depth;     /* 0: the function the symbol table names; k > 0: the k-th
			       * level of inlining inside it (see symbolizer__user_inline()) */
};

/* open_regular() - open a regular file read-only without blocking on a FIFO; fd or -errno. */
int open_regular(const char *path);

/* Caches opened ELF files (by path + build ID) and the kernel symbol table. */
struct symbolizer;

struct symbolizer *symbolizer__new(void); /* NULL only on out-of-memory */
void symbolizer__free(struct symbolizer *s); /* accepts NULL */
/* Documented in symbolize.c: close the modules not used for @idle_ns, bound the string pool. */
size_t symbolizer__trim(struct symbolizer *s, uint64_t now_ns, uint64_t idle_ns);
/* Documented in symbolize.c: what was read from files, and dropping it from the RSS. */
uint64_t symbolizer__files_opened(const struct symbolizer *s);
int64_t symbolizer__drop_pages(struct symbolizer *s);

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

/*
 * symbolizer__user_inline() - symbolizer__user() with inlined calls expanded
 * into frames of their own, from the DWARF scopes at the address
 * (DW_TAG_inlined_subroutine, dwarf_getscopes()).
 * @ret: receives up to @max frames, innermost first: ret[0] is the deepest
 *   inlined function with the file:line of @addr itself; each next frame is
 *   the function that inlined the previous one, with the file:line of that
 *   call (DW_AT_call_file/DW_AT_call_line); the last, inline_depth 0, is the
 *   function the symbol table names. All share module, build_id, rel_addr;
 *   inline_depth counts down from n - 1 to 0.
 * Without DWARF scopes (no debug info, or no inlining at @addr) it gives the
 * one frame symbolizer__user() gives. Returns the number of frames, 1..@max
 * (@max >= 1; deeper inlining is cut, keeping the innermost), -ENOENT as
 * symbolizer__user() (one frame in ret[0]), -ENOMEM. Does not log.
 */
int symbolizer__user_inline(struct symbolizer *s, const struct addrspace *as, uint64_t addr,
			    bool return_addr, struct frame_info *ret, size_t max);

/*
 * symbolizer__new_with() - a symbolizer with options.
 * @debuginfod: fetch missing debug info through libdebuginfod when the
 *   environment sets DEBUGINFOD_URLS (may block on the network for minutes:
 *   never for the symbolizer that runs on the sampling path).
 * @debug_path: extra directories searched for separate debug files (by
 *   build ID under DIR/.build-id/xx/rest.debug, and by .gnu_debuglink under
 *   DIR/<dir of the file>/), colon-separated, before /usr/lib/debug; NULL
 *   for none. Copied.
 * symbolizer__new() is symbolizer__new_with(false, getenv("PROFD_DEBUG_PATH")).
 * NULL only on out-of-memory.
 */
struct symbolizer *symbolizer__new_with(bool debuginfod, const char *debug_path);

/*
 * symbolizer__file() - symbolize @rel_addr of the ELF file @path whose build
 * ID is @build_id ("" if unknown): for frames stored earlier, whose process
 * is gone (profctl resymbolize). The file is used only if its build ID
 * matches; else its separate debug info is looked up by build ID (and, with
 * debuginfod, fetched). Fills up to @max frames as symbolizer__user_inline().
 * Returns the number of frames (>= 1, function NULL when still unknown),
 * -ENOENT if neither the file nor its debug info can be found, -ENOMEM.
 * May block on file I/O (and the network with debuginfod). Does not log.
 */
int symbolizer__file(struct symbolizer *s, const char *path, const char *build_id,
		     uint64_t rel_addr, struct frame_info *ret, size_t max);
