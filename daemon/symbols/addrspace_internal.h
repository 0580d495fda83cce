/*
 * addrspace_internal.h - what the files of daemon/symbols/ share about a
 * process's address space (addrspace.c): the parsed maps, the files behind
 * the mappings and how they are opened, and the bounded parsers of /proc
 * text. Not for the rest of the daemon, which uses symbolize.h.
 */
#pragma once

#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "symbols/symbolize.h"

#define MAPS_MAX_BYTES (64ULL << 20)
#define LINE_MAX_BYTES (PATH_MAX + 256)
#define ELF_MAX_LOADS 64      /* PT_LOAD headers kept per file */
#define BUILD_ID_MAX_BYTES 64 /* GNU build IDs are 16 (md5/uuid) or 20 (sha1) bytes */
#define VDSO_MAX_BYTES (1ULL << 20)

/* One parsed line of /proc/PID/maps; @path points into the line. */
struct maps_line {
	uint64_t start, end, offset, ino;
	uint64_t dev_major, dev_minor;
	char perms[4];
	const char *path; /* not NUL-terminated; "" for anonymous mappings */
	size_t path_len;
};

/* One PT_LOAD program header. */
struct elf_load {
	uint64_t vaddr, offset, filesz;
	bool exec;
};

/*
 * A file mapped by the process, shared by all its mappings; or its [vdso],
 * one entry per place it was seen at (an exec maps a new one).
 */
struct as_file {
	uint64_t dev_major, dev_minor, ino;
	/* [vdso]: the mapping, and whether it is the image of the daemon's own vDSO */
	uint64_t vdso_start, vdso_end;
	bool vdso_self;
	size_t n_loads;		/* 0: the file could not be read as ELF */
	struct elf_load *loads; /* n_loads of them, allocated: a file has ~4 */
	char build_id[2 * BUILD_ID_MAX_BYTES + 1]; /* lowercase hex, "" if none */
	char path[];
};

/* An address range [start, end). */
struct addr_range {
	uint64_t start, end;
};

struct addrspace {
	pid_t pid;		 /* <= 0: no /proc/PID to open files through */
	struct mapping *maps;	 /* sorted by start, not overlapping */
	struct as_file **owners; /* owners[i] is the file of maps[i] */
	size_t n_maps;
	struct as_file **files;
	size_t n_files;
	/* Executable mappings that are not in maps[] (anonymous: JIT code;
	 * [uprobes], [vsyscall]): every one ever seen, merged, sorted. */
	struct addr_range *other_code;
	size_t n_other_code;
};

/*
 * Ways to open the file behind a mapping, best first:
 * - /proc/PID/map_files/START-END: the very inode mapped, even if deleted or
 *   replaced on disk since (needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE);
 * - /proc/PID/root/PATH: the path as the process sees it (containers);
 * - PATH: the path in our own mount namespace, the only one left once the
 *   process has exited.
 */
enum { OPEN_MAP_FILES, OPEN_ROOT, OPEN_PLAIN, OPEN_N };

/* Documented where they are defined, in addrspace.c. */
bool parse_hex(const char **p, const char *end, uint64_t *ret);
bool parse_dec(const char **p, const char *end, uint64_t *ret);
bool parse_char(const char **p, const char *end, char c);
void skip_blanks(const char **p, const char *end);
int maps_parse_line(const char *line, size_t len, struct maps_line *ret);
bool is_vdso(const char *path, size_t len);
bool maps_line_wanted(const struct maps_line *ml);
int open_path(const struct addrspace *as, uint64_t start, uint64_t end, const char *path, int how,
	      char *buf, size_t size);
Elf *elf_begin_fd(int fd);
void elf_build_id_hex(Elf *e, char buf[static 2 * BUILD_ID_MAX_BYTES + 1]);
ssize_t as_index(const struct addrspace *as, uint64_t addr);
bool elf_fd_matches(int fd, const char *build_id);
