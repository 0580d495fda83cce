/* procfs.h - small readers of /proc shared by profd and profctl. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/*
 * proc_start_ticks() - /proc/@pid/stat starttime (field 22: clock ticks after
 * boot), which tells a process from a later one that got the same PID.
 * Returns 0, -ESRCH if the process is gone (or a zombie), -EIO if the file is
 * malformed, -errno. Does not log.
 */
int proc_start_ticks(pid_t pid, uint64_t *ret_ticks);

/* The kernel-thread bit of proc_state()'s flags (include/linux/sched.h). */
#define PROC_PF_KTHREAD 0x00200000u

/* Documented in procfs.c. */
int proc_state(pid_t pid, char *ret_state, pid_t *ret_ppid, unsigned *ret_flags);
