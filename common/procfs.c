/* procfs.c - small readers of /proc shared by profd and profctl. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "procfs.h"
#include "util.h"

int proc_start_ticks(pid_t pid, uint64_t *ret_ticks)
{
	char path[64], buf[1024], *p;
	_cleanup_close_ int fd = -1;
	unsigned long long ticks;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields restart after the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	/* After ") " come field 3 (state) .. field 22 (starttime): skip 19 fields. */
	p += 2;
	if (*p == 'Z' || *p == 'X')
		return -ESRCH;
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
