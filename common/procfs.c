/* procfs.c - small readers of /proc shared by profd and profctl. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"
#include "util.h"

/*
 * Reads /proc/@pid/stat into @buf (@size bytes) and sets *@ret to its field
 * 3 (the state; proc_pid_stat(5)). 0, -ESRCH if the process is gone, -EIO
 * if malformed, -errno.
 */
static int stat_read(pid_t pid, char *buf, size_t size, char **ret)
{
	_cleanup_close_ int fd = -1;
	char path[64], *p;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, size - 1);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields restart after the last ')'. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -EIO;
	*ret = p + 2;
	return 0;
}

int proc_start_ticks(pid_t pid, uint64_t *ret_ticks)
{
	char buf[1024], *p;
	unsigned long long ticks;
	int r;

	r = stat_read(pid, buf, sizeof(buf), &p);
	if (r < 0)
		return r;
	if (*p == 'Z' || *p == 'X')
		return -ESRCH;
	/* From field 3 (state) to field 22 (starttime): skip 19 fields. */
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -EIO;
		p++;
	}
	if (sscanf(p, "%llu", &ticks) != 1)
		return -EIO;
	*ret_ticks = ticks;
	return 0;
}

int proc_start_realtime_ns(pid_t pid, uint64_t *ret_ns)
{
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t ticks, since_boot, up;
	int r;

	r = proc_start_ticks(pid, &ticks);
	if (r < 0)
		return r;
	if (hz <= 0)
		return -EIO;
	since_boot = ticks / (uint64_t)hz * NSEC_PER_SEC +
		     ticks % (uint64_t)hz * NSEC_PER_SEC / (uint64_t)hz;
	up = now_ns(CLOCK_BOOTTIME);
	*ret_ns = now_ns(CLOCK_REALTIME) - (up > since_boot ? up - since_boot : 0);
	return 0;
}

/*
 * proc_state() - fields 3, 4 and 9 of /proc/@pid/stat (proc_pid_stat(5)):
 * the state letter (R, S, D, Z, ...), the parent's PID and the kernel's
 * task flags (PF_KTHREAD, 0x00200000 in include/linux/sched.h, marks a
 * kernel thread). Returns 0, -ESRCH if the process is gone, -EIO if the
 * file is malformed, -errno. Does not log.
 */
int proc_state(pid_t pid, char *ret_state, pid_t *ret_ppid, unsigned *ret_flags)
{
	char buf[1024], *p;
	int ppid;
	unsigned flags;
	char state;
	int r;

	r = stat_read(pid, buf, sizeof(buf), &p);
	if (r < 0)
		return r;
	if (sscanf(p, "%c %d %*d %*d %*d %*d %u", &state, &ppid, &flags) != 3)
		return -EIO;
	*ret_state = state;
	*ret_ppid = ppid;
	*ret_flags = flags;
	return 0;
}

/*
 * proc_maps_files() - call @fn for the files process @pid has mapped, in
 * the address order of /proc/@pid/maps: every mapping whose name is an
 * absolute path, with @exec_only only the executable ones. A run of
 * mappings of one file (its segments lie next to each other) is one call;
 * a file mapped again further on is called again. Deleted files ("...
 * (deleted)") and anonymous, special and named-anonymous mappings ([heap],
 * [vdso], [anon:...]) are skipped. A read error ends the walk as the end of
 * the file would.
 *
 * Returns 0 (the walk ended, or @fn returned > 0), -ESRCH if @pid does not
 * exist, -errno of opening the file (-EACCES), or @fn's -errno. Allocates,
 * blocks on /proc, does not log.
 */
int proc_maps_files(pid_t pid, bool exec_only, proc_maps_fn fn, void *ctx)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	char maps[64], last[PATH_MAX] = "", root_path[PATH_MAX + 64];
	size_t cap = 0;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)pid);
	f = fopen(maps, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (getline(&line, &cap, f) > 0) {
		char perms[8];
		const char *path;
		int off = 0, r;

		/* address perms offset dev inode [path]: the path may hold spaces. */
		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%*s %7s %*s %*s %*s %n", perms, &off) != 1 || off == 0)
			continue;
		path = line + off;
		if (path[0] != '/' || (exec_only && perms[2] != 'x') ||
		    strstr(path, " (deleted)") || strcmp(path, last) == 0)
			continue;
		snprintf(last, sizeof(last), "%s", path);
		snprintf(root_path, sizeof(root_path), "/proc/%d/root%s", (int)pid, path);
		r = fn(ctx, path, root_path);
		if (r != 0)
			return r < 0 ? r : 0;
	}
	return 0;
}
