/* conn.c - profctl's connection to profd: one JSON request line out, one response line in. */
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "conn.h"
#include "io.h"
#include "protocol.h"

struct conn {
	int fd;
	char *buf;  /* bytes read but not yet consumed */
	size_t len; /* valid bytes in @buf */
	size_t cap; /* allocated bytes in @buf, at most PROFCTL_MAX_RESPONSE_BYTES */
};

/*
 * connect_wait() - finish a connect() that a signal interrupted. POSIX lets
 * the connection proceed in the background after EINTR; a second connect()
 * would fail with EALREADY, so wait for writability and read SO_ERROR instead.
 */
static int connect_wait(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	socklen_t len = sizeof(int);
	int error = 0;

	for (;;) {
		if (poll(&pfd, 1, -1) >= 0)
			break;
		if (errno != EINTR)
			return -errno;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
		return -errno;
	return -error;
}

/*
 * conn__open() - connect to profd's Unix stream socket at @path.
 *
 * Returns 0 with *@ret_conn (free with conn__free()), -ENAMETOOLONG if @path
 * does not fit in sun_path, -ENOMEM, or the -errno of socket()/connect():
 * -ENOENT or -ECONNREFUSED when no daemon listens there, -EACCES when the
 * caller may not open the socket. The fd is O_CLOEXEC. Blocks; does not log.
 */
int conn__open(const char *path, struct conn **ret_conn)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	struct conn *c;
	int r;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	memcpy(addr.sun_path, path, strlen(path) + 1);

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		if (errno != EINTR)
			return -errno;
		r = connect_wait(fd);
		if (r < 0)
			return r;
	}

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->fd = TAKE_FD(fd);
	*ret_conn = c;
	return 0;
}

/* conn__free() - close the connection and free @c; accepts NULL. */
void conn__free(struct conn *c)
{
	if (!c)
		return;
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c);
}

/*
 * read_line() - read until @c->buf holds a '\n'; returns its offset, -ECONNRESET
 * on EOF before one, -EMSGSIZE past PROFCTL_MAX_RESPONSE_BYTES, -ENOMEM, -errno.
 */
static ssize_t read_line(struct conn *c)
{
	size_t scanned = 0;

	for (;;) {
		char *nl = NULL;
		ssize_t n;

		/* c->buf is still NULL before the first read: memchr() wants a pointer. */
		if (c->len > scanned)
			nl = memchr(c->buf + scanned, '\n', c->len - scanned);
		if (nl)
			return nl - c->buf;
		scanned = c->len;
		if (c->len == c->cap) {
			size_t cap = c->cap ? c->cap * 2 : 64 * 1024;
			char *buf;

			if (c->cap >= PROFCTL_MAX_RESPONSE_BYTES)
				return -EMSGSIZE;
			cap = MIN(cap, (size_t)PROFCTL_MAX_RESPONSE_BYTES);
			buf = realloc(c->buf, cap);
			if (!buf)
				return -ENOMEM;
			c->buf = buf;
			c->cap = cap;
		}
		n = read(c->fd, c->buf + c->len, c->cap - c->len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ECONNRESET;
		c->len += (size_t)n;
	}
}

/*
 * check_envelope() - check "v" and "ok" of response @resp and strip them.
 * Returns 0 for "ok":true, -EREMOTEIO for an error response (*@ret_detail =
 * its message), -EBADMSG for a malformed one (*@ret_detail says why).
 */
static int check_envelope(json_t *resp, char **ret_detail)
{
	json_t *v = json_object_get(resp, "v");
	json_t *ok = json_object_get(resp, "ok");
	json_t *error, *message, *code;

	if (!json_is_integer(v)) {
		*ret_detail = strdup("malformed response from profd: no protocol version \"v\"");
		return -EBADMSG;
	}
	if (json_integer_value(v) != PROFD_PROTOCOL_VERSION) {
		if (asprintf(ret_detail,
			     "profd answered with protocol version %lld, profctl speaks %d",
			     (long long)json_integer_value(v), PROFD_PROTOCOL_VERSION) < 0)
			*ret_detail = NULL;
		return -EBADMSG;
	}
	if (!json_is_boolean(ok)) {
		*ret_detail =
		    strdup("malformed response from profd: \"ok\" is missing or not a boolean");
		return -EBADMSG;
	}
	if (json_is_true(ok)) {
		json_object_del(resp, "v");
		json_object_del(resp, "ok");
		return 0;
	}

	error = json_object_get(resp, "error");
	message = json_object_get(error, "message");
	code = json_object_get(error, "code");
	if (json_is_string(message) && json_string_length(message) > 0) {
		*ret_detail = strdup(json_string_value(message));
		return -EREMOTEIO;
	}
	if (json_is_string(code)) {
		if (asprintf(ret_detail, "profd returned error %s", json_string_value(code)) < 0)
			*ret_detail = NULL;
		return -EREMOTEIO;
	}
	*ret_detail = strdup("malformed error response from profd: no \"error\" message");
	return -EBADMSG;
}

/*
 * Where the last member of the object @line (@len bytes, no newline) starts
 * (the ',' before its key; an only member is left to jansson), when its value is a plain string of
 * at least PROFD_PLAIN_TAIL_MIN_BYTES (common/protocol.h) and its key
 * plain: @ret_key, @ret_key_len, @ret_val and @ret_val_len get them; 0 if
 * the line does not end so. Scanning back from the closing '}' over plain
 * bytes only, each quote met is a string's own (none holds a quote or a
 * backslash), so no string's content can pass for the member.
 */
static size_t plain_tail(const char *line, size_t len, const char **ret_key, size_t *ret_key_len,
			 const char **ret_val, size_t *ret_val_len)
{
	size_t v, k;

	if (len < 4 || line[len - 1] != '}' || line[len - 2] != '"')
		return 0;
	for (v = len - 2; v > 0 && protocol_plain_byte((unsigned char)line[v - 1]); v--)
		;
	/* line[v - 1] is the value's opening quote, line[v - 2] the ':' after the key. */
	if (v < 4 || line[v - 1] != '"' || line[v - 2] != ':' || line[v - 3] != '"' ||
	    len - 2 - v < PROFD_PLAIN_TAIL_MIN_BYTES)
		return 0;
	for (k = v - 3; k > 0 && protocol_plain_byte((unsigned char)line[k - 1]); k--)
		;
	if (k < 2 || line[k - 1] != '"' || line[k - 2] != ',')
		return 0;
	*ret_key = line + k;
	*ret_key_len = v - 3 - k;
	*ret_val = line + v;
	*ret_val_len = len - 2 - v;
	return k - 2;
}

/*
 * parse_response() - the JSON object in @line (@len bytes, no newline; its
 * bytes may be changed), as json_loadb() with JSON_REJECT_DUPLICATES would
 * parse it, NULL with @err filled if malformed. A long plain string as
 * its last member (what profd writes as it is: a profile's packed rows) is
 * not scanned by jansson, which takes 50 ns a byte for it: the rest of the
 * object is parsed, and the string set in it.
 */
static json_t *parse_response(char *line, size_t len, json_error_t *err)
{
	const char *key, *val;
	size_t key_len, val_len, at = plain_tail(line, len, &key, &key_len, &val, &val_len);
	json_t *resp;

	if (at == 0)
		return json_loadb(line, len, JSON_REJECT_DUPLICATES, err);
	/*
	 * The object without its last member: valid and not empty if and only
	 * if the whole line is (but for a duplicate key, checked below), as
	 * the ',' then stands at its top level after a member. An empty one
	 * was "{,": jansson says what is wrong with the line.
	 */
	line[at] = '}';
	resp = json_loadb(line, at + 1, JSON_REJECT_DUPLICATES, err);
	line[at] = ',';
	if (!resp || !json_is_object(resp))
		return resp;
	if (json_object_size(resp) == 0) {
		json_decref(resp);
		return json_loadb(line, len, JSON_REJECT_DUPLICATES, err);
	}
	if (json_object_getn(resp, key, key_len) ||
	    json_object_setn_new_nocheck(resp, key, key_len, json_stringn_nocheck(val, val_len)) <
		0) {
		json_decref(resp);
		snprintf(err->text, sizeof(err->text), "duplicate member \"%.*s\" or out of memory",
			 (int)MIN(key_len, (size_t)64), key);
		err->column = (int)at;
		return NULL;
	}
	return resp;
}

/*
 * conn__call() - send @request (one line) and read its response line.
 * @request: a JSON object; not modified, still owned by the caller.
 * @ret_reply: on success, the response object without "v" and "ok"; caller
 *   owns it (json_decref()).
 * @ret_detail: set to NULL, or to a malloc'ed text (caller frees) that
 *   explains -EREMOTEIO or -EBADMSG.
 *
 * Returns 0; -EREMOTEIO when profd answered with an error (the detail is its
 * message); -EBADMSG when the response is not a JSON object with "v":1 and a
 * boolean "ok"; -EMSGSIZE if the response line exceeds
 * PROFCTL_MAX_RESPONSE_BYTES; -E2BIG if @request exceeds
 * PROFD_MAX_REQUEST_BYTES; -ECONNRESET if profd closed the connection
 * before answering; -EPIPE or another -errno from the socket; -ENOMEM.
 * Blocks until the answer arrives; signals (EINTR) do not interrupt it.
 * Does not log.
 */
int conn__call(struct conn *c, const json_t *request, json_t **ret_reply, char **ret_detail)
{
	_cleanup_free_ char *line = NULL;
	json_error_t jerr;
	json_t *resp;
	size_t len;
	ssize_t nl;
	int r;

	*ret_detail = NULL;

	line = json_dumps(request, JSON_COMPACT);
	if (!line)
		return -ENOMEM;
	len = strlen(line);
	if (len + 1 > PROFD_MAX_REQUEST_BYTES)
		return -E2BIG;
	/* json_dumps() allocates exactly len + 1; add the newline in a copy. */
	{
		char *framed = realloc(line, len + 2);

		if (!framed)
			return -ENOMEM;
		line = framed;
		line[len] = '\n';
		line[len + 1] = '\0';
	}

	r = send_all(c->fd, line, len + 1, -1);
	if (r < 0)
		return r;

	nl = read_line(c);
	if (nl < 0)
		return (int)nl;

	resp = parse_response(c->buf, (size_t)nl, &jerr);
	/* Consume the line whatever it held, so the next call starts after it. */
	c->len -= (size_t)nl + 1;
	memmove(c->buf, c->buf + nl + 1, c->len);
	if (!resp) {
		if (asprintf(ret_detail, "malformed response from profd: %s (column %d)", jerr.text,
			     jerr.column) < 0)
			*ret_detail = NULL;
		return -EBADMSG;
	}
	if (!json_is_object(resp)) {
		json_decref(resp);
		*ret_detail = strdup("malformed response from profd: not a JSON object");
		return -EBADMSG;
	}

	r = check_envelope(resp, ret_detail);
	if (r < 0) {
		json_decref(resp);
		return r;
	}
	*ret_reply = resp;
	return 0;
}
