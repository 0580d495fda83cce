/* io.c - socket and file I/O both profd and profctl need. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "io.h"
#include "util.h"

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

int read_first_line(const char *path, char **ret)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	_cleanup_free_ char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (!f)
		return -errno;
	n = getline(&line, &cap, f);
	if (n < 0 && ferror(f))
		return -EIO;
	if (n < 0) {
		free(line);
		line = strdup(""); /* an empty file: an empty line */
		if (!line)
			return -ENOMEM;
		n = 0;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	*ret = TAKE_PTR(line);
	return 0;
}
