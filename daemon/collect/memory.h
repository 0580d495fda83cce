/*
 * memory.h - a process's memory as /proc tells it (memory.c): the readings
 * of the rss event, which the session keeps as a series.
 */
#pragma once

#include <sys/types.h>

#include "store/store.h"

/*
 * memory__read() - one reading of process @pid's memory: VmRSS, RssAnon,
 * RssFile, RssShmem and VmSwap from /proc/PID/status, Pss from
 * /proc/PID/smaps_rollup (Linux 4.14; has_pss false without it), in bytes.
 * *@ret's time_ns and pid are left to the caller. Returns 0, -ESRCH if the
 * process is gone (or a zombie: no VmRSS line), -errno. Blocks on /proc
 * reads (smaps_rollup takes the target's mmap lock); does not log.
 */
int memory__read(pid_t pid, struct store_memory *ret);
