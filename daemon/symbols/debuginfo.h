/*
 * debuginfo.h - where the debug information of a binary is, for the
 * symbolizer (symbolize.c) and the CFI unwinder (unwind.c) alike: the
 * libdwfl callbacks that never ask debuginfod, the separate debug file by
 * build ID or by .gnu_debuglink (checked by build ID, or CRC-32 for a file
 * without one) along /usr/lib/debug and $PROFD_DEBUG_PATH, and the copy of
 * the daemon's own vDSO that stands in for a target's.
 */
#pragma once

#include <elfutils/libdwfl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* One search configuration; its address must not change while a Dwfl made with it lives. */
struct debuginfo {
	/* libdwfl's search path: ":.debug:DIR...:/usr/lib/debug" (debuginfo__init()) */
	char *path;
	/* true: look for a separate debug file only for modules whose .eh_frame
	 * does not cover their code (the unwinder wants .debug_frame, nothing else) */
	bool only_without_eh_frame;
	/* find_elf: none (every module comes with its file open); find_debuginfo:
	 * the local search below. Give &callbacks to dwfl_begin(). */
	Dwfl_Callbacks callbacks;
};

/*
 * debuginfo__init() - set up @d for @debug_path: NULL, or directories
 * separated by colons, searched before /usr/lib/debug (absolute entries
 * only): by build ID as DIR/.build-id/xx/rest.debug, by .gnu_debuglink as
 * DIR/<directory of the file>/NAME (and with leading directories dropped,
 * as libdwfl does). Returns 0 or -ENOMEM. Does not log.
 */
int debuginfo__init(struct debuginfo *d, const char *debug_path, bool only_without_eh_frame);
void debuginfo__done(struct debuginfo *d); /* accepts a zeroed @d */

/*
 * debuginfo__attach() - make module @dm (of a Dwfl begun with
 * &d->callbacks) search with @d: its libdwfl userdata is @d.
 */
void debuginfo__attach(Dwfl_Module *dm, const struct debuginfo *d);

/* debuginfo__path_next() - next colon-separated entry of *@p in *@ret; its length, -1 at the end.
 */
ssize_t debuginfo__path_next(const char **p, const char **ret);

/* debuginfo__fd_has_build_id() - whether @fd is an ELF file with GNU build ID @id (@len bytes). */
bool debuginfo__fd_has_build_id(int fd, const unsigned char *id, int len);

/*
 * debuginfo__self_vdso() - the daemon's own vDSO: its address
 * (AT_SYSINFO_EHDR) in *@ret_start and its size in bytes returned; 0 when
 * there is none (booted with vdso=0, or under valgrind), or it is not an ELF
 * image of at most 1 MiB. Reads /proc/self/maps.
 */
uint64_t debuginfo__self_vdso(uint64_t *ret_start);

/*
 * For tests: when set and it returns a size, debuginfo__self_vdso() returns
 * that (valgrind maps no vDSO for the program it runs). NULL in the daemon.
 */
extern uint64_t (*debuginfo__self_vdso_override)(uint64_t *ret_start);

/*
 * debuginfo__vdso_open() - a new fd on a memfd copy of the daemon's own
 * vDSO (made at the first call, for the process's life), whose size goes
 * to *@ret_bytes; -1 when there is none. The kernel maps one and the same
 * 64-bit vDSO image into every x86-64 process, so ours stands in for a
 * target's (32-bit and x32 processes get other images, of other sizes).
 * Thread-safe.
 */
int debuginfo__vdso_open(uint64_t *ret_bytes);
