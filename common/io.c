/* io.c - socket I/O both profd and profctl need. */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "io.h"

int send_all(int fd, const void *buf, size_t len, int timeout_ms)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = { .fd = fd, .events = POLLOUT };
			int r = poll(&pfd, 1, timeout_ms);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return r == 0 ? -ETIMEDOUT : -errno;
			continue;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}
