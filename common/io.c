/* io.c - socket and file I/O both profd and profctl need. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

int read_all(int fd, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, cap = 0;

	for (;;) {
		ssize_t n;

		if (len + 1 >= cap && cap < max + 1) {
			size_t c = cap ? cap * 2 : 4096;
			char *b;

			if (c > max + 1)
				c = max + 1;
			b = realloc(buf, c);
			if (!b)
				return -ENOMEM;
			buf = b;
			cap = c;
		}
		if (len == max)
			break;
		n = read(fd, buf + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}
