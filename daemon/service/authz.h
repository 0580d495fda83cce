/*
 * authz.h - who may do what, from the peer's SO_PEERCRED credentials: admins
 * (root, members of the "profd" group) may do everything; any other user
 * may profile only processes it could ptrace itself, and sees only its own
 * sessions.
 */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/types.h>

/* The group whose members are admins, besides root. */
#define PROFD_ADMIN_GROUP "profd"

/*
 * authz__is_admin() - is the peer root or a member (primary or supplementary)
 * of the group PROFD_ADMIN_GROUP? Reads /proc/PEER/status, or the group
 * database (getgrouplist) if the peer is gone. False if the group does not
 * exist. Blocks on NSS lookups; does not log.
 */
bool authz__is_admin(const struct ucred *peer);

/*
 * authz__may_trace() - may @uid/@gid (a non-admin requester) profile @pid?
 * Only if the process's real, effective, saved and filesystem uids all are
 * @uid, the same for its gids and @gid, and it is dumpable (not setuid, not
 * PR_SET_DUMPABLE 0: /proc/PID is then owned by root): the ptrace(2) access
 * rules an unprivileged tracer meets. Admins skip this check.
 * Returns 0, -ESRCH if @pid does not exist, -EPERM. Does not log.
 */
int authz__may_trace(pid_t pid, uid_t uid, gid_t gid);

/*
 * authz__may_see() - may the peer read a session owned by @owner_uid?
 * Admins see every session, other users their own.
 */
bool authz__may_see(const struct ucred *peer, bool admin, uid_t owner_uid);
