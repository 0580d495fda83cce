/*
 * memory.h - a process's memory as /proc tells it (memory.c): the readings
 * of the rss event, which the session keeps as a series.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "store/store.h"

/*
 * memory__read() - one reading of process @pid's memory: VmRSS, RssAnon,
 * RssFile, RssShmem and VmSwap from /proc/PID/status, in bytes; no Pss
 * (has_pss false): Pss needs a walk of the target's page tables, which
 * memory__read_maps() does, at the rate its cost allows. *@ret's time_ns
 * and pid are left to the caller. Returns 0, -ESRCH if the process is gone
 * (or a zombie: no VmRSS line), -errno. Blocks on a /proc read, which takes
 * no lock of the target's address space; does not log.
 */
int memory__read(pid_t pid, struct store_memory *ret);

/*
 * memory__read_maps() - the resident bytes of process @pid by mapping kind
 * (enum memory_map_kind), summed from the Rss line of each mapping in
 * /proc/PID/smaps, into @m->map_bytes (@m->has_maps set), and the sum of
 * their Pss lines into @m->pss_bytes (@m->has_pss set). The kind comes
 * from the mapping's path and sharing (memory__map_kind()). The file is
 * about 1 KiB per mapping and each read walks the target's page tables
 * under its mmap lock: *@ret_cpu_ns (if not NULL) gets the thread CPU time
 * the read took, so the caller can read it less often. Returns 0, -ESRCH if
 * the process is gone (or went while it was read), -errno. Does not log.
 */
int memory__read_maps(pid_t pid, struct store_memory *m, uint64_t *ret_cpu_ns);

/*
 * memory__map_kind() - the kind of a mapping of @path (as /proc/PID/maps
 * shows it: "" for anonymous, "[heap]", "/dev/shm/x (deleted)"...) mapped
 * @shared (MAP_SHARED) or private.
 */
enum memory_map_kind memory__map_kind(const char *path, bool shared);

/* memory__map_kind_name() - "heap", "anon", "stack", "shmem", "file" or "other". */
const char *memory__map_kind_name(enum memory_map_kind k);
