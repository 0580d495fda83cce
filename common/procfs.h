/* procfs.h - small readers of /proc shared by profd and profctl. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * proc_start_ticks() - /proc/@pid/stat starttime (field 22: clock ticks after
 * boot), which tells a process from a later one that got the same PID.
 * Returns 0, -ESRCH if the process is gone (or a zombie), -EIO if the file is
 * malformed, -errno. Does not log.
 */
int proc_start_ticks(pid_t pid, uint64_t *ret_ticks);

/*
 * proc_start_realtime_ns() - when process @pid started, in CLOCK_REALTIME
 * nanoseconds: its starttime (clock ticks after boot, sysconf(_SC_CLK_TCK)
 * a second) placed on the wall clock by CLOCK_BOOTTIME, to within a tick
 * (10 ms). Returns 0, or proc_start_ticks()'s -errno. Does not log.
 */
int proc_start_realtime_ns(pid_t pid, uint64_t *ret_ns);

/* The kernel-thread bit of proc_state()'s flags (include/linux/sched.h). */
#define PROC_PF_KTHREAD 0x00200000u

/* Documented in procfs.c. */
int proc_state(pid_t pid, char *ret_state, pid_t *ret_ppid, unsigned *ret_flags);

/*
 * Called by proc_maps_files() for each file: @path as /proc/PID/maps names
 * it (in the target's mount namespace), @root_path the same file through
 * /proc/PID/root (openable from any namespace). Both are valid only during
 * the call. Returns 0 to go on, > 0 to stop, or -errno to stop with that.
 */
typedef int (*proc_maps_fn)(void *ctx, const char *path, const char *root_path);

/* Documented in procfs.c. */
int proc_maps_files(pid_t pid, bool exec_only, proc_maps_fn fn, void *ctx);
