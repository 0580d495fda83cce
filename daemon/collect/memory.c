/* memory.c - one reading of a process's memory from /proc (the rss event). */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect/memory.h"
#include "util.h"

/* Sizes of the /proc files read: smaps_rollup is ~1 KiB, status ~1.5 KiB. */
#define PROC_FILE_BYTES 8192

static int read_proc_file(pid_t pid, const char *name, char *buf, size_t size)
{
	char path[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	n = read(fd, buf, size - 1);
	if (n < 0)
		return errno == ESRCH ? -ESRCH : -errno;
	buf[n] = '\0';
	return 0;
}

/* The "Key:   N kB" line of @buf, in bytes; false if there is none. */
static bool kb_field(const char *buf, const char *key, uint64_t *ret_bytes)
{
	size_t len = strlen(key);
	unsigned long long kb;

	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, len) == 0 && p[len] == ':' &&
		    sscanf(p + len + 1, "%llu kB", &kb) == 1) {
			*ret_bytes = (uint64_t)kb * 1024;
			return true;
		}
	}
	return false;
}

int memory__read(pid_t pid, struct store_memory *ret)
{
	char buf[PROC_FILE_BYTES];
	struct store_memory m = {0};
	int r;

	r = read_proc_file(pid, "status", buf, sizeof(buf));
	if (r < 0)
		return r;
	/* A zombie or a kernel thread has no VmRSS line. */
	if (!kb_field(buf, "VmRSS", &m.rss_bytes))
		return -ESRCH;
	kb_field(buf, "RssAnon", &m.anon_bytes);
	kb_field(buf, "RssFile", &m.file_bytes);
	kb_field(buf, "RssShmem", &m.shmem_bytes);
	kb_field(buf, "VmSwap", &m.swap_bytes);
	if (read_proc_file(pid, "smaps_rollup", buf, sizeof(buf)) == 0)
		m.has_pss = kb_field(buf, "Pss", &m.pss_bytes);
	*ret = m;
	return 0;
}
