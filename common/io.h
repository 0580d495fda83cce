/* io.h - socket and file I/O both profd and profctl need. */
#pragma once

#include <stddef.h>

/*
 * send_all() - write all @len bytes of @buf to socket @fd, without SIGPIPE.
 * On a non-blocking socket that is full, waits up to @timeout_ms (-1: no
 * limit) for room each time. Returns 0, -ETIMEDOUT, -EPIPE if the peer went
 * away, or another -errno of send(2)/poll(2). Retries on EINTR; does not log.
 */
int send_all(int fd, const void *buf, size_t len, int timeout_ms);

/*
 * read_first_line() - the first line of file @path, without its line end
 * ("\n", "\r\n"), malloc'd into *@ret; "" for an empty file (the password
 * files of the fleet settings). Returns 0, fopen()'s -errno, -EIO if
 * reading failed, or -ENOMEM. Does not log.
 */
int read_first_line(const char *path, char **ret);

/*
 * read_all() - read @fd to its end, at most @max bytes, into a malloc'd
 * buffer *@ret with a NUL after the *@ret_len bytes read (the text of a
 * /proc file or a whole small file). What is past @max is not read.
 * Returns 0, read(2)'s -errno, or -ENOMEM. Retries on EINTR; does not log.
 */
int read_all(int fd, size_t max, char **ret, size_t *ret_len);
