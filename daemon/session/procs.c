/*
 * procs.c - the processes of a session: the target and the children it
 * follows, each with its address space and JIT map, their mappings in the
 * store, and children found in /proc before their first sample.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "protocol.h"
#include "service/request.h"
#include "session/owned_map.h"
#include "session/session.h"
#include "session/session_internal.h"
#include "util.h"

struct mapping_key {
	uint64_t start, end, file_offset;
	const char *path;
	pid_t pid;
};

static bool mapping_key_eq(const void *entry, const void *key)
{
	const struct mapping_key *a = entry, *b = key;

	return a->start == b->start && a->end == b->end && a->file_offset == b->file_offset &&
	       a->pid == b->pid && strcmp(a->path, b->path) == 0;
}

static uint64_t mapping_key_hash(const struct mapping_key *k)
{
	uint64_t h = hash64(HASH64_INIT, &k->start, sizeof(k->start));

	h = hash64(h, &k->end, sizeof(k->end));
	h = hash64(h, &k->pid, sizeof(k->pid));
	return hash64(h, k->path, strlen(k->path));
}

/*
 * session__store_mappings() - store the mappings of @proc's address space
 * that are not in the store yet, inside the caller's transaction. Returns 0,
 * -EIO or -ENOMEM. Does not log.
 */
int session__store_mappings(struct session *s, struct proc *proc, struct store *store)
{
	const struct mapping *maps;
	size_t n;
	int r;

	maps = addrspace__mappings(proc->as, &n);
	for (size_t i = 0; i < n; i++) {
		struct mapping_key key = {maps[i].start, maps[i].end, maps[i].file_offset,
					  maps[i].path, proc->pid};
		uint64_t h = mapping_key_hash(&key);

		if (hashmap__find(&s->mappings_stored, h, mapping_key_eq, &key))
			continue;
		r = store__mapping_insert(store, s->id, proc->pid, &maps[i]);
		if (r < 0)
			return r;
		/* The path string is owned by the address space, which outlives this map. */
		if (!hashmap_add_copy(&s->mappings_stored, h, &key, sizeof(key)))
			return -ENOMEM;
	}
	return 0;
}

static bool proc_eq(const void *entry, const void *key)
{
	return ((const struct proc *)entry)->pid == *(const pid_t *)key;
}

/*
 * session__exited_children() - up to @max followed children of @s that no
 * longer exist (kill(2) says ESRCH: exited and reaped), in @ret. The
 * target itself is never among them (its exit ends the session). Returns
 * how many. One system call per child; does not log.
 */
size_t session__exited_children(struct session *s, struct proc **ret, size_t max)
{
	struct proc *proc;
	size_t n = 0;

	hashmap__for_each(&s->procs, i, proc)
	{
		if (n == max)
			break;
		if (proc != s->main && kill(proc->pid, 0) < 0 && errno == ESRCH)
			ret[n++] = proc;
	}
	return n;
}

static bool mapping_of_pid(const void *entry, const void *ctx)
{
	return ((const struct mapping_key *)entry)->pid == *(const pid_t *)ctx;
}

/*
 * session__proc_retire() - forget @proc (a child of @s that exited, whose
 * samples were all flushed) and free it: its address space, JIT map and
 * its mappings' entries in the stored set, its frame cache entries and the
 * raw stacks nothing refers to any more. The caller has made the
 * unwinders forget its address space. A record of its PID that comes
 * later gets a new entry, or none if the process is gone (counted as
 * dropped).
 */
void session__proc_retire(struct session *s, struct proc *proc)
{
	pid_t pid = proc->pid;

	/* Every key of the PID, also of mappings a refresh dropped since: their
	 * paths belong to the address space freed below. */
	hashmap__remove_if(&s->mappings_stored, mapping_of_pid, &pid, free);
	session__forget_frames(s, pid);
	session__forget_stacks(s, pid);
	hashmap__remove(&s->procs, hash64(HASH64_INIT, &pid, sizeof(pid)), proc_eq, &pid);
	session__proc_free(proc);
}

/* session__proc_free() - free @proc, its address space and JIT map; accepts NULL. */
void session__proc_free(struct proc *proc)
{
	if (!proc)
		return;
	addrspace__free(proc->as);
	perfmap__free(proc->jit);
	pthread_rwlock_destroy(&proc->as_lock);
	free(proc);
}

/*
 * session__proc_add() - read @pid's mappings into a new process entry of
 * @s. Returns 0 and *@ret, -ESRCH if the process is gone, -ENOMEM. Reads
 * /proc; does not log.
 */
int session__proc_add(struct session *s, pid_t pid, struct proc **ret)
{
	struct proc *proc = calloc(1, sizeof(*proc));
	int r;

	if (!proc)
		return -ENOMEM;
	proc->pid = pid;
	pthread_rwlock_init(&proc->as_lock, NULL);
	r = addrspace__new(pid, &proc->as);
	if (r < 0)
		goto fail;
	proc->jit = perfmap__new(pid);
	r = proc->jit ? hashmap__insert(&s->procs, hash64(HASH64_INIT, &pid, sizeof(pid)), proc)
		      : -ENOMEM;
	if (r < 0)
		goto fail;
	*ret = proc;
	return 0;
fail:
	session__proc_free(proc);
	return r;
}

struct proc *session__proc(struct session *s, pid_t pid)
{
	struct proc *proc =
	    hashmap__find(&s->procs, hash64(HASH64_INIT, &pid, sizeof(pid)), proc_eq, &pid);

	if (proc || (pid != s->pid && !s->follow_children))
		return proc;
	/* A child seen for the first time. Its mappings are stored at the next flush. */
	if (session__proc_add(s, pid, &proc) < 0)
		return NULL;
	s->procs_added = true;
	return proc;
}

/*
 * session__discover_children() - give a proc entry to the children the
 * session follows that profd has not seen yet: the BPF fork program put
 * them in the targets map (@targets_fd, tgid -> slot + 1) at their fork, but
 * an entry is otherwise made at a child's first CPU sample or off-CPU
 * interval, which a mostly idle child may not give for seconds; probes that
 * are per process (allocations, uprobes) wait for that entry. The children
 * are read from /proc/PID/task/TID/children of every process of the
 * session; those not in the map under its slot (forked before the attach)
 * are left alone. Returns how many entries were made, or -ENOMEM. Reads
 * /proc; does not log.
 */
int session__discover_children(struct session *s, int targets_fd)
{
	pid_t found[64];
	size_t n = 0;
	struct proc *proc;
	int added = 0;

	if (!s->follow_children)
		return 0;
	hashmap__for_each(&s->procs, k, proc)
	{
		_cleanup_(closedirp) DIR *d = NULL;
		struct dirent *de;
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/task", (int)proc->pid);
		d = opendir(path);
		while (d && (de = readdir(d)) && n < ARRAY_SIZE(found)) {
			char file[PATH_MAX], buf[1024], *p, *end;
			int fd;
			ssize_t len;

			if (de->d_name[0] < '0' || de->d_name[0] > '9')
				continue;
			snprintf(file, sizeof(file), "%s/%s/children", path, de->d_name);
			fd = open(file, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			len = read(fd, buf, sizeof(buf) - 1);
			close(fd);
			if (len <= 0)
				continue;
			buf[len] = '\0';
			for (p = buf; n < ARRAY_SIZE(found); p = end) {
				long child = strtol(p, &end, 10);
				__u32 key = (__u32)child, val;

				if (end == p)
					break;
				if (child > 0 && bpf_map_lookup_elem(targets_fd, &key, &val) == 0 &&
				    val == s->slot + 1)
					found[n++] = (pid_t)child;
			}
		}
	}
	/* After the walk: session__proc() may grow the map being walked. */
	for (size_t i = 0; i < n; i++) {
		uint64_t h = hash64(HASH64_INIT, &found[i], sizeof(found[i]));

		if (hashmap__find(&s->procs, h, proc_eq, &found[i]))
			continue;
		if (!session__proc(s, found[i]))
			return -ENOMEM;
		added++;
	}
	return added;
}
