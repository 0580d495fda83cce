/* notify.c - sd_notify readiness/status/watchdog and socket activation, when built with libsystemd.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>

#include "service/notify.h"
#include "util.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

int notify__send(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return sd_notify(0, msg);
}

uint64_t notify__watchdog_ns(void)
{
	uint64_t usec = 0;

	if (sd_watchdog_enabled(0, &usec) <= 0)
		return 0;
	return usec * 1000 / 2;
}

int notify__listen_fd(void)
{
	int n = sd_listen_fds(1);

	if (n < 0)
		return n;
	if (n == 0)
		return -ENOENT;
	if (n != 1 || sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0)
		return -EINVAL;
	return SD_LISTEN_FDS_START;
}
#else
int notify__send(const char *fmt, ...)
{
	return 0;
}

uint64_t notify__watchdog_ns(void)
{
	return 0;
}

int notify__listen_fd(void)
{
	return -ENOENT;
}
#endif
