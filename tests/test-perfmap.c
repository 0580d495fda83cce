/*
 * test-perfmap.c - JIT symbols from /tmp/perf-PID.map (symbols/perfmap.c)
 * for a real process (a child, cat reading a pipe): an entry is found by address;
 * a map file last written before the process started, as one left by an
 * earlier process with the same PID would be, is not read. Needs neither
 * root nor BPF.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "check_workload.h"
#include "symbols/perfmap.h"

/* Sets @path's modification time to @age_s seconds ago (0: now). */
static void set_mtime(const char *path, long age_s)
{
	struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_NOW}};

	if (age_s) {
		clock_gettime(CLOCK_REALTIME, &t[1]);
		t[1].tv_sec -= age_s;
	}
	if (utimensat(AT_FDCWD, path, t, 0) < 0)
		SETUP_FAIL("utimensat %s: %m", path);
}

int main(void)
{
	char *argv[] = {"/bin/cat", NULL};
	char path[64];
	const char *name = NULL, *file = NULL;
	struct perfmap *pm;
	FILE *f;
	int go = workload_start(argv, NULL, STDIN_FILENO);
	pid_t child = workload_pid;

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", child);
	f = fopen(path, "w");
	if (!f)
		SETUP_FAIL("%s: %m", path);
	fprintf(f, "1000 100 jit_fn\n2000 10 jit_other\n");
	fclose(f);

	/* Written an hour before the process started: an earlier process's file. */
	set_mtime(path, 3600);
	pm = perfmap__new(child);
	if (!pm)
		SETUP_FAIL("out of memory");
	CHECK_INT_EQ(perfmap__lookup(pm, 0x1050, &name, &file), -ENOENT);
	perfmap__free(pm);

	/* Written by this process (now): read, each address in its function. */
	set_mtime(path, 0);
	pm = perfmap__new(child);
	if (!pm)
		SETUP_FAIL("out of memory");
	CHECK_INT_EQ(perfmap__lookup(pm, 0x1050, &name, &file), 0);
	CHECK_STR_EQ(name, "jit_fn");
	CHECK(file && strstr(file, path + strlen("/tmp/")));
	CHECK_INT_EQ(perfmap__lookup(pm, 0x2009, &name, &file), 0);
	CHECK_STR_EQ(name, "jit_other");
	CHECK_INT_EQ(perfmap__lookup(pm, 0x1100, &name, &file), -ENOENT);
	perfmap__free(pm);

	unlink(path);
	close(go);
	workload_kill();
	return check_exit("perfmap");
}
