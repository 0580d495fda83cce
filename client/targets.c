/* targets.c - find the processes a snapshot names, by command name or cgroup. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "procfs.h"
#include "targets.h"
#include "util.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

/*
 * target_add() - append process @pid, as listed by /proc or cgroup.procs, to
 * @v (*@n of *@cap used); skips a number that is no PID, profctl itself and
 * a process gone since. Returns 0 or -ENOMEM.
 */
static int target_add(struct target **v, size_t *n, size_t *cap, long pid)
{
	struct target t = {.pid = (pid_t)pid};

	if (pid <= 0 || pid > INT_MAX || pid == getpid())
		return 0;
	/* Gone since it was listed: not a target. */
	if (proc_start_ticks(t.pid, &t.start_ticks) < 0)
		return 0;
	if (grow_array((void **)v, cap, *n, sizeof(**v)) < 0)
		return -ENOMEM;
	(*v)[(*n)++] = t;
	return 0;
}

static int cmp_pid(const void *a, const void *b)
{
	const struct target *x = a, *y = b;

	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Hand @v (@n targets, taken) to the caller, ascending by PID; or free it after error @r. */
static int targets_finish(int r, struct target *v, size_t n, struct target **ret, size_t *ret_n)
{
	if (r < 0) {
		free(v);
		return r;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_pid);
	*ret = v;
	*ret_n = n;
	return 0;
}

int targets__by_comm(const char *name, struct target **ret, size_t *ret_n)
{
	_cleanup_free_ struct target *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	d = opendir("/proc");
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char path[64], comm[64];
		_cleanup_close_ int fd = -1;
		ssize_t len;
		long pid;
		char *end;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = strtol(de->d_name, &end, 10);
		if (*end)
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, comm, sizeof(comm) - 1);
		if (len <= 0)
			continue;
		comm[len] = '\0';
		comm[strcspn(comm, "\n")] = '\0';
		/* The kernel keeps 15 bytes of the name: match a longer NAME by its prefix. */
		if (strncmp(comm, name, 15) != 0 || (strlen(name) < 15 && strcmp(comm, name) != 0))
			continue;
		r = target_add(&v, &n, &cap, pid);
		if (r < 0)
			break;
	}
	closedir(d);
	return targets_finish(r, TAKE_PTR(v), n, ret, ret_n);
}

int targets__by_cgroup(const char *path, struct target **ret, size_t *ret_n)
{
	_cleanup_free_ struct target *v = NULL;
	_cleanup_free_ char *procs = NULL;
	size_t n = 0, cap = 0;
	char line[32];
	FILE *f;
	int r = 0;

	if (strncmp(path, CGROUP_ROOT "/", strlen(CGROUP_ROOT) + 1) == 0)
		r = asprintf(&procs, "%s/cgroup.procs", path);
	else
		r = asprintf(&procs, CGROUP_ROOT "/%s/cgroup.procs", path + (path[0] == '/'));
	if (r < 0) {
		procs = NULL;
		return -ENOMEM;
	}
	f = fopen(procs, "re");
	if (!f)
		return -errno;
	r = 0;
	while (fgets(line, sizeof(line), f)) {
		r = target_add(&v, &n, &cap, strtol(line, NULL, 10));
		if (r < 0)
			break;
	}
	fclose(f);
	return targets_finish(r, TAKE_PTR(v), n, ret, ret_n);
}

bool targets__may_profile_all(void)
{
	struct group gr, *res = NULL;
	gid_t groups[256];
	char buf[4096];
	int n;

	if (geteuid() == 0)
		return true;
	if (getgrnam_r("profd", &gr, buf, sizeof(buf), &res) != 0 || !res)
		return false;
	if (getegid() == gr.gr_gid)
		return true;
	n = getgroups(ARRAY_SIZE(groups), groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == gr.gr_gid)
			return true;
	return false;
}

void targets__keep_uid(struct target *v, size_t *n, uid_t uid)
{
	size_t kept = 0;

	for (size_t i = 0; i < *n; i++) {
		char path[64];
		struct stat st;

		snprintf(path, sizeof(path), "/proc/%d", v[i].pid);
		if (stat(path, &st) == 0 && st.st_uid == uid)
			v[kept++] = v[i];
	}
	*n = kept;
}
