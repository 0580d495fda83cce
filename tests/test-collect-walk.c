/*
 * test-collect-walk.c - test of the two walks the collectors share:
 * proc_maps_files() (common/procfs.c), which the allocation and CUDA probes
 * use to find the files a target has mapped, and map_delete_if()
 * (daemon/collect/bpf_util.c), which forgets a process's or a session's
 * entries in a BPF hash map.
 *
 * What a user would notice if they were wrong: a library probed twice (each
 * allocation counted twice), a deleted or anonymous mapping taken for a file,
 * a target left in the targets map after its session (the next session on
 * it refused), or another process's entries forgotten.
 *
 * Exit status: 0 passed, 1 a check failed, 77 the BPF part skipped (not
 * root, or BPF refused; the reason is printed) after the /proc part passed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "check.h"
#include "collect/bpf_util.h"
#include "procfs.h"

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

#define MAX_SEEN 512

/* What proc_maps_files() called back with. */
struct seen {
	char *paths[MAX_SEEN];
	int n;
	int stop_after; /* > 0: return 1 at that call; < 0: return it at the first call */
	bool root_ok;	/* every root_path was /proc/self-pid/root + path */
};

static int record(void *ctx, const char *path, const char *root_path)
{
	struct seen *s = ctx;
	char want[8192];

	snprintf(want, sizeof(want), "/proc/%d/root%s", (int)getpid(), path);
	if (strcmp(want, root_path) != 0)
		s->root_ok = false;
	if (s->n < MAX_SEEN)
		s->paths[s->n] = strdup(path);
	s->n++;
	if (s->stop_after < 0)
		return s->stop_after;
	return s->stop_after > 0 && s->n >= s->stop_after;
}

static void seen_free(struct seen *s)
{
	for (int i = 0; i < s->n && i < MAX_SEEN; i++)
		free(s->paths[i]);
}

/* How many calls named @path exactly (or, with @part, a path containing it). */
static int count(const struct seen *s, const char *path, bool part)
{
	int n = 0;

	for (int i = 0; i < s->n && i < MAX_SEEN; i++)
		if (s->paths[i] &&
		    (part ? strstr(s->paths[i], path) != NULL : strcmp(s->paths[i], path) == 0))
			n++;
	return n;
}

/* A file of two pages, /tmp/"@name XXXXXX" (a space in it), mapped whole; its path in @path. */
static void *map_file(const char *name, char *path, size_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd;
	void *p;

	snprintf(path, size, "/tmp/%s XXXXXX", name);
	fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, 2 * page) < 0) {
		perror("test file");
		exit(99);
	}
	p = mmap(NULL, 2 * page, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(99);
	}
	return p;
}

static void test_proc_maps_files(void)
{
	long page = sysconf(_SC_PAGESIZE);
	char split[256], gone[256];
	void *a = map_file("profd-split", split, sizeof(split));
	void *b = map_file("profd-gone", gone, sizeof(gone));
	void *anon = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	bool named = false;
	struct seen all = {.root_ok = true}, exec = {.root_ok = true};
	pid_t child;

	/* Two mappings of one file next to each other: one call. */
	CHECK(mprotect((char *)a + page, page, PROT_NONE) == 0);
	CHECK(unlink(gone) == 0);
	/* A named anonymous mapping whose name holds a '/' is not a file (Linux 5.17+). */
	if (anon != MAP_FAILED)
		named = prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)anon, page,
			      (unsigned long)"profd/x") == 0;

	CHECK_INT_EQ(proc_maps_files(getpid(), false, record, &all), 0);
	CHECK_INT_EQ(count(&all, split, false), 1);
	CHECK_INT_EQ(count(&all, "profd-gone", true), 0);
	CHECK_INT_EQ(count(&all, "libc.so", true), 1);
	CHECK_INT_EQ(count(&all, "/x]", true), 0);
	CHECK_INT_EQ(count(&all, "[", true), 0);
	CHECK(all.root_ok);
	for (int i = 0; i < all.n && i < MAX_SEEN; i++)
		CHECK(all.paths[i] && all.paths[i][0] == '/');
	printf("all files: %d calls (named anonymous mapping %s)\n", all.n,
	       named ? "made" : "not supported");

	/* Executable only: libc's text, never the file mapped without PROT_EXEC. */
	CHECK_INT_EQ(proc_maps_files(getpid(), true, record, &exec), 0);
	CHECK_INT_EQ(count(&exec, "libc.so", true), 1);
	CHECK_INT_EQ(count(&exec, split, false), 0);
	CHECK(exec.n > 0 && exec.n < all.n);

	/* The callback stops the walk: > 0 is not an error, < 0 is returned. */
	{
		struct seen one = {.stop_after = 1, .root_ok = true};
		struct seen err = {.stop_after = -EXDEV, .root_ok = true};

		CHECK_INT_EQ(proc_maps_files(getpid(), false, record, &one), 0);
		CHECK_INT_EQ(one.n, 1);
		CHECK_INT_EQ(proc_maps_files(getpid(), false, record, &err), -EXDEV);
		CHECK_INT_EQ(err.n, 1);
		seen_free(&one);
		seen_free(&err);
	}

	/* A process that is gone. */
	child = fork();
	if (child == 0)
		_exit(0);
	CHECK(child > 0 && waitpid(child, NULL, 0) == child);
	{
		struct seen none = {.root_ok = true};

		CHECK_INT_EQ(proc_maps_files(child, false, record, &none), -ESRCH);
		CHECK_INT_EQ(none.n, 0);
	}

	seen_free(&all);
	seen_free(&exec);
	unlink(split);
	munmap(a, 2 * page);
	munmap(b, 2 * page);
	if (anon != MAP_FAILED)
		munmap(anon, page);
}

/* map_delete_if()'s test: the value is *@ctx. */
static bool value_is(void *ctx, int fd, const void *key)
{
	__u32 val;

	return bpf_map_lookup_elem(fd, key, &val) == 0 && val == *(const __u32 *)ctx;
}

static bool never(void *ctx, int fd, const void *key)
{
	return false;
}

/* Returns 0, or 77 if BPF maps cannot be made here. */
static int test_map_delete_if(void)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "walk_test", sizeof(__u32), sizeof(__u32), 4096,
				NULL);
	__u32 zero = 0, key, val, next, *prev = NULL;
	int left = 0, wrong = 0;

	if (fd < 0) {
		printf("map_delete_if: skipped: cannot create a BPF map: %s\n", strerror(errno));
		return 77;
	}
	/* 3000 keys, a third of them (value 0) a "session's". */
	for (key = 1; key <= 3000; key++) {
		val = key % 3;
		CHECK(bpf_map_update_elem(fd, &key, &val, BPF_NOEXIST) == 0);
	}
	CHECK_INT_EQ(map_delete_if(fd, sizeof(__u32), never, NULL), 0);
	CHECK_INT_EQ(map_delete_if(fd, sizeof(__u32), value_is, &zero), 1000);
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		key = next;
		prev = &key;
		left++;
		wrong += bpf_map_lookup_elem(fd, &key, &val) != 0 || val == 0;
	}
	CHECK_INT_EQ(left, 2000);
	CHECK_INT_EQ(wrong, 0);
	CHECK_INT_EQ(map_delete_if(fd, sizeof(__u32), value_is, &zero), 0);
	CHECK_INT_EQ(map_delete_if(fd, 65, never, NULL), -EINVAL);
	close(fd);
	return 0;
}

int main(void)
{
	int r;

	test_proc_maps_files();
	r = test_map_delete_if();
	if (check_failures) {
		fprintf(stderr, "%d check(s) failed\n", check_failures);
		return 1;
	}
	return r;
}
