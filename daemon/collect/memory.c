/* memory.c - one reading of a process's memory from /proc (the rss event), and its split by mapping kind. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collect/memory.h"
#include "util.h"

/* The size of /proc/PID/status is ~1.5 KiB. */
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
	*ret = m;
	return 0;
}

static const char *const map_kind_names[MEMORY_MAP_NR_KINDS] = {
    [MEMORY_MAP_HEAP] = "heap",   [MEMORY_MAP_ANON] = "anon", [MEMORY_MAP_STACK] = "stack",
    [MEMORY_MAP_SHMEM] = "shmem", [MEMORY_MAP_FILE] = "file", [MEMORY_MAP_OTHER] = "other",
};

const char *memory__map_kind_name(enum memory_map_kind k)
{
	return (unsigned)k < MEMORY_MAP_NR_KINDS ? map_kind_names[k] : "other";
}

enum memory_map_kind memory__map_kind(const char *path, bool shared)
{
	static const char *const shmem_prefixes[] = { "/dev/shm/", "/memfd:", "/SYSV", "/dev/zero" };

	if (strcmp(path, "[heap]") == 0)
		return MEMORY_MAP_HEAP;
	if (strncmp(path, "[stack", 6) == 0)
		return MEMORY_MAP_STACK;
	for (size_t i = 0; i < ARRAY_SIZE(shmem_prefixes); i++)
		if (strncmp(path, shmem_prefixes[i], strlen(shmem_prefixes[i])) == 0)
			return MEMORY_MAP_SHMEM;
	if (!path[0] || strncmp(path, "[anon:", 6) == 0)
		return shared ? MEMORY_MAP_SHMEM : MEMORY_MAP_ANON;
	return path[0] == '/' ? MEMORY_MAP_FILE : MEMORY_MAP_OTHER;
}

/*
 * The kind of the mapping a smaps header line names ("start-end perms offset
 * dev inode path": fields separated by spaces, the path padded to a column
 * and absent for an anonymous mapping; proc(5)). Parsed by hand: sscanf()
 * was 5% of profd's CPU on a PyTorch job, one header a mapping.
 */
static enum memory_map_kind header_kind(const char *line)
{
	const char *p = line, *perms = NULL;
	int field;

	/* Past the five fields; the inode may end the line (no path, no padding). */
	for (field = 0; field < 5; field++) {
		p += strcspn(p, " ");
		if (!*p)
			break;
		p += strspn(p, " ");
		if (field == 0)
			perms = p;
	}
	if (field < 4 || strnlen(perms, 4) < 4)
		return MEMORY_MAP_OTHER;
	return memory__map_kind(p, perms[3] == 's');
}

/* The kB figure of a smaps line after its "Name:", in bytes. */
static uint64_t smaps_kb_bytes(const char *value)
{
	return (uint64_t)strtoull(value, NULL, 10) * 1024;
}

int memory__read_maps(pid_t pid, struct store_memory *m, uint64_t *ret_cpu_ns)
{
	uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID), bytes[MEMORY_MAP_NR_KINDS] = { 0 }, pss = 0;
	enum memory_map_kind kind = MEMORY_MAP_OTHER;
	char path[64], line[PATH_MAX + 128];
	bool any = false;
	FILE *f;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		if (len && line[len - 1] == '\n')
			line[len - 1] = '\0';
		/* Attribute lines start with a capital letter; a header with an address. */
		if ((line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f')) {
			kind = header_kind(line);
			any = true;
		} else if (strncmp(line, "Rss:", 4) == 0) {
			bytes[kind] += smaps_kb_bytes(line + 4);
		} else if (strncmp(line, "Pss:", 4) == 0) {
			pss += smaps_kb_bytes(line + 4);
		}
	}
	if (ferror(f))
		r = errno == ESRCH || errno == 0 ? -ESRCH : -errno;
	fclose(f);
	if (ret_cpu_ns)
		*ret_cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
	if (r < 0)
		return r;
	/* A process that exited while it was read leaves a short file, or none. */
	if (!any || kill(pid, 0) < 0)
		return -ESRCH;
	memcpy(m->map_bytes, bytes, sizeof(bytes));
	m->has_maps = true;
	m->pss_bytes = pss;
	m->has_pss = true;
	return 0;
}
