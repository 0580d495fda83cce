/* authz.c - authorization of requests from the peer's credentials (SO_PEERCRED). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "service/authz.h"
#include "util.h"

/* /proc/@pid/status into @buf (NUL-terminated); -ESRCH if the process is gone. */
static int read_status(pid_t pid, char *buf, size_t size)
{
	char path[64];
	_cleanup_close_ int fd = -1;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ESRCH;
	n = read(fd, buf, size - 1);
	if (n <= 0)
		return -ESRCH;
	buf[n] = '\0';
	return 0;
}

/* The four ids of a "Uid:" or "Gid:" line of /proc/PID/status. */
static int status_ids(const char *status, const char *key, unsigned ids[4])
{
	char needle[16];
	const char *line;

	snprintf(needle, sizeof(needle), "\n%s:", key);
	line = strstr(status, needle);
	if (!line ||
	    sscanf(line + strlen(needle), "%u %u %u %u", &ids[0], &ids[1], &ids[2], &ids[3]) != 4)
		return -EPERM;
	return 0;
}

/* Is @gid among the space-separated numbers of the "Groups:" line of @status? */
static int status_has_group(const char *status, gid_t gid)
{
	const char *line = strstr(status, "\nGroups:");
	char *end;

	if (!line)
		return -ENOENT;
	line += strlen("\nGroups:");
	for (;;) {
		unsigned long v;

		while (*line == ' ' || *line == '\t')
			line++;
		if (*line < '0' || *line > '9')
			return 0;
		v = strtoul(line, &end, 10);
		if (v == gid)
			return 1;
		line = end;
	}
}

/* Is @uid (primary group @gid) a member of @group in the group database? */
static bool db_has_group(uid_t uid, gid_t gid, gid_t group)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	gid_t groups[256];
	int n = ARRAY_SIZE(groups);

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return false;
	if (getgrouplist(pw.pw_name, gid, groups, &n) < 0)
		n = ARRAY_SIZE(groups);
	for (int i = 0; i < n; i++)
		if (groups[i] == group)
			return true;
	return false;
}

bool authz__is_admin(const struct ucred *peer)
{
	struct group gr, *res = NULL;
	char buf[4096], status[4096];
	int r;

	if (peer->uid == 0)
		return true;
	if (getgrnam_r(PROFD_ADMIN_GROUP, &gr, buf, sizeof(buf), &res) != 0 || !res)
		return false;
	if (peer->gid == gr.gr_gid)
		return true;
	/* The peer's groups as the kernel sees them (a newgrp or setgroups counts). */
	if (peer->pid > 0 && read_status(peer->pid, status, sizeof(status)) == 0) {
		unsigned uids[4];

		/* Only if the PID still is the peer: same real uid. */
		if (status_ids(status, "Uid", uids) == 0 && uids[0] == peer->uid) {
			r = status_has_group(status, gr.gr_gid);
			if (r >= 0)
				return r == 1;
		}
	}
	return db_has_group(peer->uid, peer->gid, gr.gr_gid);
}

int authz__may_trace(pid_t pid, uid_t uid, gid_t gid)
{
	char path[64], status[4096];
	unsigned uids[4], gids[4];
	struct stat st;

	if (pid <= 0 || read_status(pid, status, sizeof(status)) < 0)
		return -ESRCH;
	if (status_ids(status, "Uid", uids) < 0 || status_ids(status, "Gid", gids) < 0)
		return -EPERM;
	for (int i = 0; i < 4; i++)
		if (uids[i] != uid || gids[i] != gid)
			return -EPERM;
	/* A process that is not dumpable (it ran setuid/setgid, or set
	 * PR_SET_DUMPABLE to 0) has its /proc/PID owned by root (proc(5)). */
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st) < 0)
		return -ESRCH;
	if (st.st_uid != uid)
		return -EPERM;
	return 0;
}

bool authz__may_see(const struct ucred *peer, bool admin, uid_t owner_uid)
{
	return admin || peer->uid == owner_uid;
}
