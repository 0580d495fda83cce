/*
 * notify.h - profd under systemd: readiness, status and watchdog through
 * sd_notify(3), and the listening socket from socket activation
 * (sd_listen_fds(3)). Without libsystemd at build time every call is a
 * no-op and profd makes its own socket.
 */
#pragma once

#include <stdint.h>

/*
 * notify__send() - send @fmt (printf) to the service manager: "READY=1",
 * "STATUS=...", "WATCHDOG=1", "STOPPING=1", newline-separated. A no-op when
 * NOTIFY_SOCKET is unset. Returns > 0 sent, 0 not under systemd, -errno.
 * Does not log.
 */
int notify__send(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * notify__watchdog_ns() - how often systemd wants WATCHDOG=1 (half of
 * WatchdogSec=, in ns), or 0 if the watchdog is off.
 */
uint64_t notify__watchdog_ns(void);

/*
 * notify__listen_fd() - the Unix stream socket systemd passed (profd.socket),
 * or -ENOENT if none was, -EINVAL if more than one or not a listening Unix
 * stream socket. Unsets LISTEN_FDS and friends. Does not log.
 */
int notify__listen_fd(void);
