/*
 * check_workload.h - a workload program (tests/workloads/) run as a child of
 * a C test, talked to through one pipe, and killed when the test exits,
 * even after a setup error. One workload at a time.
 */
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static pid_t workload_pid; /* 0: none running */

/* workload_kill() - kill the running workload with SIGKILL and reap it; nothing if none. */
static inline void workload_kill(void)
{
	if (workload_pid > 0) {
		kill(workload_pid, SIGKILL);
		waitpid(workload_pid, NULL, 0);
		workload_pid = 0;
	}
}

/*
 * workload_start() - run @argv (@argv[0] the program's path) as a child
 * whose @child_fd (STDIN_FILENO or STDOUT_FILENO) is one end of a new pipe,
 * with @env ("NAME=value", or NULL) added to its environment. Returns the
 * other end of the pipe (O_CLOEXEC, the caller's to close); the child's pid
 * is in workload_pid until workload_kill(), which also runs at exit. A
 * failed pipe or fork is a setup error (exit 99); a failed exec, the
 * child's exit status 127.
 */
static inline int workload_start(char *const argv[], const char *env, int child_fd)
{
	static bool kill_at_exit;
	int fds[2], ours = child_fd == STDIN_FILENO ? 1 : 0;

	if (pipe2(fds, O_CLOEXEC) < 0)
		SETUP_FAIL("pipe2: %m");
	workload_pid = fork();
	if (workload_pid < 0)
		SETUP_FAIL("fork: %m");
	if (workload_pid == 0) {
		dup2(fds[!ours], child_fd);
		if (env)
			putenv((char *)env);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[!ours]);
	if (!kill_at_exit)
		atexit(workload_kill);
	kill_at_exit = true;
	return fds[ours];
}

/*
 * workload_tids() - the threads of @pid now, from /proc/PID/task in the
 * order it lists them: at most @cap of them into @tids. Returns how many.
 * A process gone already (no /proc/PID/task) is a setup error (exit 99).
 */
static inline size_t workload_tids(pid_t pid, pid_t *tids, size_t cap)
{
	char path[64];
	struct dirent *de;
	size_t n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		SETUP_FAIL("%s: %m (the workload exited early?)", path);
	while (n < cap && (de = readdir(d))) {
		int tid = atoi(de->d_name);

		if (tid > 0)
			tids[n++] = tid;
	}
	closedir(d);
	return n;
}

/*
 * wait_blocked_in_read() - wait up to @seconds until @pid (just exec'd)
 * blocks in read(2) on stdin: by then its libraries are mapped (a Python
 * that imported torch takes many seconds). False if it did not, or is gone.
 */
static inline bool wait_blocked_in_read(pid_t pid, int seconds)
{
	char path[64], buf[256];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	for (int i = 0; i < seconds * 100; i++) {
		FILE *f = fopen(path, "re");
		bool in_read = false;

		if (!f)
			return false;
		/* "0 0x0 ..." is read(0, ...); the test's own fork never reads */
		if (fgets(buf, sizeof(buf), f))
			in_read = strncmp(buf, "0 0x0 ", 6) == 0;
		fclose(f);
		if (in_read)
			return true;
		usleep(10000);
	}
	return false;
}
