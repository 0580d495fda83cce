/* procfs.c - small readers of /proc shared by profd and profctl. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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
