/* perfmap.c - /tmp/perf-PID.map symbols of JIT code. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "procfs.h"
#include "symbols/addr_bound.h"
#include "symbols/perfmap.h"
#include "util.h"

struct perfmap_entry {
	uint64_t start, end;
	char *name;
};

struct perfmap {
	pid_t pid;
	uint64_t started_ns; /* the process's start, CLOCK_REALTIME; 0: not known yet */
	char path[192];      /* the file last read (one of refresh()'s paths) */
	struct stat st;      /* its identity and size when read */
	bool read_once;
	struct perfmap_entry *entries;
	size_t n;
};

struct perfmap *perfmap__new(pid_t pid)
{
	struct perfmap *pm = calloc(1, sizeof(*pm));

	if (pm)
		pm->pid = pid;
	return pm;
}

static void clear(struct perfmap *pm)
{
	for (size_t i = 0; i < pm->n; i++)
		free(pm->entries[i].name);
	free(pm->entries);
	pm->entries = NULL;
	pm->n = 0;
}

void perfmap__free(struct perfmap *pm)
{
	if (!pm)
		return;
	clear(pm);
	free(pm);
}

static int cmp_entry(const void *a, const void *b)
{
	const struct perfmap_entry *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Parse one "START SIZE NAME" line; 0 or -EINVAL. */
static int parse_line(char *line, struct perfmap_entry *ret)
{
	char *p = line, *end;
	uint64_t start, size;

	start = strtoull(p, &end, 16);
	if (end == p || *end != ' ')
		return -EINVAL;
	p = end + 1;
	size = strtoull(p, &end, 16);
	if (end == p || *end != ' ' || size == 0 || start + size < start)
		return -EINVAL;
	p = end + 1;
	p[strcspn(p, "\n")] = '\0';
	if (!*p)
		return -EINVAL;
	ret->start = start;
	ret->end = start + size;
	ret->name = strdup(p);
	return ret->name ? 0 : -ENOMEM;
}

static int load(struct perfmap *pm, const char *path, const struct stat *st)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0, alloc = 0;
	ssize_t len;

	if (!f)
		return -errno;
	clear(pm);
	while ((len = getline(&line, &cap, f)) >= 0 && pm->n < PERFMAP_MAX_ENTRIES) {
		struct perfmap_entry e;

		if (len > 4096 || parse_line(line, &e) < 0)
			continue;
		if (grow_array((void **)&pm->entries, &alloc, pm->n, sizeof(*pm->entries)) < 0) {
			free(e.name);
			return -ENOMEM;
		}
		pm->entries[pm->n++] = e;
	}
	/* Sorted by start; where entries overlap, a lookup takes the last one starting below it. */
	qsort(pm->entries, pm->n, sizeof(*pm->entries), cmp_entry);
	snprintf(pm->path, sizeof(pm->path), "%s", path);
	pm->st = *st;
	pm->read_once = true;
	return 0;
}

/*
 * A file last written a second or more before the process started was
 * left by an earlier process with the same PID (PIDs wrap at pid_max,
 * 32768 by default, and JITs do not remove their maps): not this one's.
 */
static bool stale(struct perfmap *pm, const struct stat *st)
{
	uint64_t mtime =
	    (uint64_t)st->st_mtim.tv_sec * NSEC_PER_SEC + (uint64_t)st->st_mtim.tv_nsec;

	if (!pm->started_ns && proc_start_realtime_ns(pm->pid, &pm->started_ns) < 0)
		return false;
	return mtime + NSEC_PER_SEC <= pm->started_ns;
}

/* Re-read the file if it is new or changed; one older than the process is not read. */
static int refresh(struct perfmap *pm)
{
	char paths[2][96];
	struct stat st;

	snprintf(paths[0], sizeof(paths[0]), "/proc/%d/root/tmp/perf-%d.map", pm->pid, pm->pid);
	snprintf(paths[1], sizeof(paths[1]), "/tmp/perf-%d.map", pm->pid);
	for (int i = 0; i < 2; i++) {
		if (stat(paths[i], &st) < 0 || stale(pm, &st))
			continue;
		if (pm->read_once && st.st_ino == pm->st.st_ino && st.st_dev == pm->st.st_dev &&
		    st.st_size == pm->st.st_size && st.st_mtim.tv_sec == pm->st.st_mtim.tv_sec &&
		    st.st_mtim.tv_nsec == pm->st.st_mtim.tv_nsec)
			return 0;
		return load(pm, paths[i], &st);
	}
	return pm->read_once ? 0 : -ENOENT;
}

int perfmap__lookup(struct perfmap *pm, uint64_t addr, const char **ret_name,
		    const char **ret_path)
{
	size_t lo;
	int r;

	r = refresh(pm);
	if (r < 0)
		return r == -ENOMEM ? r : -ENOENT;
	/* The last entry starting at or below @addr. */
	lo = addr_upper_bound(pm->entries, pm->n, sizeof(*pm->entries),
			      offsetof(struct perfmap_entry, start), addr);
	if (lo == 0 || addr >= pm->entries[lo - 1].end)
		return -ENOENT;
	*ret_name = pm->entries[lo - 1].name;
	*ret_path = pm->path;
	return 0;
}
