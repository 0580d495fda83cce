/* targets.h - the processes a snapshot names: by command name or by cgroup. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct target {
	pid_t pid;
	uint64_t start_ticks; /* /proc/PID/stat starttime, so profd can tell a reused PID */
};

/*
 * targets__by_comm() - processes whose command name (/proc/PID/comm, 15
 * bytes at most, as pgrep -x matches it) is @name, ascending by PID, not
 * profctl itself. *@ret (caller frees) may be empty.
 * Returns 0 or -ENOMEM, -errno if /proc cannot be read. Does not log.
 */
int targets__by_comm(const char *name, struct target **ret, size_t *ret_n);

/*
 * targets__by_cgroup() - the processes in cgroup @path (cgroup v2: a
 * directory under /sys/fs/cgroup, absolute or relative to it, as
 * /proc/PID/cgroup shows it), not its child cgroups.
 * Returns 0, -ENOENT if there is no such cgroup, -ENOMEM, -errno. Does not log.
 */
int targets__by_cgroup(const char *path, struct target **ret, size_t *ret_n);

/*
 * targets__may_profile_all() - is the caller root or in the group "profd",
 * whom profd lets profile any process? (profd decides; this only chooses
 * which processes of a name to ask for.)
 */
bool targets__may_profile_all(void);

/* targets__keep_uid() - drop from @v (*@n targets) the processes @uid does not own. */
void targets__keep_uid(struct target *v, size_t *n, uid_t uid);
