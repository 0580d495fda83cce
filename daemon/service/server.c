/* server.c - Unix socket server: accept, frame lines, answer, keep serving. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "io.h"
#include "log.h"
#include "protocol.h"
#include "service/server.h"
#include "util.h"

/* A response must reach the client within this time, or the client is dropped. */
#define SEND_TIMEOUT_MS 2000
/* Clients at once; more are accepted and told so, then closed. */
#define MAX_CLIENTS 256

struct client {
	struct watch watch;
	struct server *srv;
	int fd;
	struct ucred peer;
	uint64_t id;
	bool waiting; /* for an answer through server__reply(): its next lines wait */
	size_t len;
	char *buf; /* PROFD_MAX_REQUEST_BYTES */
	struct client *next;
};

struct server {
	struct watch watch;
	int fd, epfd;
	char *path;
	server_handler_fn fn;
	server_gone_fn gone;
	void *ctx;
	struct client *clients;
	unsigned nr_clients;
	uint64_t last_id;
	/*
	 * An fd kept open for the moment profd has no other (EMFILE): closed,
	 * it lets accept() take a waiting client to tell it so, instead of
	 * leaving it in the backlog, and the loop spinning on a socket that
	 * stays readable. -1 if it could not be reopened.
	 */
	int spare_fd;
	bool out_of_fds; /* logged for this shortage */
};

json_t *json_error_response(int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	const char *code;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	code = strerrorname_np(-err);
	return json_pack("{s:i, s:b, s:{s:s, s:i, s:s}}", "v", PROFD_PROTOCOL_VERSION, "ok", 0,
			 "error", "code", code ? code : "EIO", "errno", -err, "message", msg);
}

static void client_free(struct client *c)
{
	struct client **p;

	for (p = &c->srv->clients; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	c->srv->nr_clients--;
	if (c->waiting && c->srv->gone)
		c->srv->gone(c->srv->ctx, c->id);
	epoll_ctl(c->srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->buf);
	free(c);
}

/* A response is sent in pieces of this size as jansson writes it, not as one whole string. */
#define SEND_CHUNK_BYTES (64u << 10)

struct sender {
	int fd;
	int r;
	size_t len;
	char buf[SEND_CHUNK_BYTES];
};

static int sender_flush(struct sender *s)
{
	if (s->r == 0 && s->len)
		s->r = send_all(s->fd, s->buf, s->len, SEND_TIMEOUT_MS);
	s->len = 0;
	return s->r;
}

/*
 * json_dump_callback()'s callback: 0, or -1 to stop (the client is gone or
 * too slow). A full buffer is sent before more is added, not as soon as it
 * fills, so that the last byte written is still in s->buf afterwards.
 */
static int sender_write(const char *buf, size_t size, void *data)
{
	struct sender *s = data;

	while (size && s->r == 0) {
		size_t n;

		if (s->len == sizeof(s->buf))
			sender_flush(s);
		n = MIN(size, sizeof(s->buf) - s->len);
		memcpy(s->buf + s->len, buf, n);
		s->len += n;
		buf += n;
		size -= n;
	}
	return s->r == 0 ? 0 : -1;
}

/* Whether all @len bytes at @p are protocol_plain_byte()s. */
static bool plain_bytes(const char *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (!protocol_plain_byte((unsigned char)p[i]))
			return false;
	return true;
}

/*
 * The last member of object @resp if its value is a plain string of at
 * least PROFD_PLAIN_TAIL_MIN_BYTES (common/protocol.h) and its key plain
 * too: its key (*@ret_key) and value, else NULL.
 */
static json_t *plain_tail(json_t *resp, const char **ret_key)
{
	void *it = json_object_iter(resp), *last = NULL;
	json_t *v;

	for (; it; it = json_object_iter_next(resp, it))
		last = it;
	if (!last)
		return NULL;
	v = json_object_iter_value(last);
	*ret_key = json_object_iter_key(last);
	if (!json_is_string(v) || json_string_length(v) < PROFD_PLAIN_TAIL_MIN_BYTES ||
	    !plain_bytes(*ret_key, strlen(*ret_key)) ||
	    !plain_bytes(json_string_value(v), json_string_length(v)))
		return NULL;
	return v;
}

/*
 * Send @resp (taken) and a newline. A large answer (a profile, 16 MiB of SQL
 * rows) is never held twice in memory as text, and a long plain string as
 * its last member (plain_tail()) is written as it is, not through jansson's
 * escaping: the same bytes, as jansson keeps the members in the order they
 * were set. Returns 0 or -errno.
 */
static int send_response(struct client *c, json_t *resp)
{
	struct sender *s = malloc(sizeof(*s));
	_cleanup_free_ char *key = NULL;
	const char *k = NULL;
	json_t *tail = json_is_object(resp) ? plain_tail(resp, &k) : NULL;
	int r;

	if (!s) {
		json_decref(resp);
		return -ENOMEM;
	}
	*s = (struct sender){ .fd = c->fd };
	if (tail) {
		key = strdup(k);
		json_incref(tail);
		if (!key || json_object_del(resp, key) < 0) {
			json_decref(tail);
			tail = NULL;
		}
	}
	if (json_dump_callback(resp, sender_write, s, JSON_COMPACT | JSON_REAL_PRECISION(15)) < 0 &&
	    s->r == 0)
		s->r = -ENOMEM;
	/* The object's closing brace is the last byte in s->buf: the member goes before it. */
	if (tail && s->r == 0 && s->len > 0 && s->buf[s->len - 1] == '}') {
		s->len--;
		if (json_object_size(resp) > 0)
			sender_write(",", 1, s);
		sender_write("\"", 1, s);
		sender_write(key, strlen(key), s);
		sender_write("\":\"", 3, s);
		sender_write(json_string_value(tail), json_string_length(tail), s);
		sender_write("\"}", 2, s);
	}
	json_decref(tail);
	json_decref(resp);
	sender_write("\n", 1, s);
	r = sender_flush(s);
	free(s);
	return r;
}

/* Listen to @c for requests, or, while it waits for an answer, only for its hanging up. */
static void client_listen(struct client *c)
{
	struct epoll_event ev = {.events = c->waiting ? 0 : EPOLLIN, .data.ptr = &c->watch};

	/* EPOLLHUP is reported whatever the mask: the client closed its socket. A client
	 * that only shut down its writing side (EPOLLRDHUP) still gets its answer. */
	epoll_ctl(c->srv->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

/*
 * Answer the complete lines in @c's buffer, in order, until one is answered
 * later. Returns 0, or -errno when @c was closed (and freed).
 */
static int client_answer_lines(struct client *c)
{
	char *nl;

	while (!c->waiting && (nl = memchr(c->buf, '\n', c->len))) {
		size_t line_len = (size_t)(nl - c->buf);
		json_t *resp = c->srv->fn(c->srv->ctx, c->id, &c->peer, c->buf, line_len);

		memmove(c->buf, nl + 1, c->len - line_len - 1);
		c->len -= line_len + 1;
		if (!resp) {
			c->waiting = true;
			client_listen(c);
		} else if (send_response(c, resp) < 0) {
			client_free(c);
			return -EPIPE;
		}
	}
	return 0;
}

static void client_on_event(struct watch *w, uint32_t events)
{
	struct client *c = (struct client *)w;

	if (c->waiting) {
		if (events & (EPOLLHUP | EPOLLERR))
			client_free(c);
		return;
	}
	for (;;) {
		ssize_t n = recv(c->fd, c->buf + c->len, PROFD_MAX_REQUEST_BYTES - c->len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			client_free(c);
			return;
		}
		c->len += (size_t)n;
		if (client_answer_lines(c) < 0 || c->waiting)
			return;
		if (c->len == PROFD_MAX_REQUEST_BYTES) {
			/* No newline within the limit: answer, and drop the connection,
			 * since the rest of the line cannot be framed. */
			send_response(c, json_error_response(-E2BIG, "request larger than %d bytes",
							     PROFD_MAX_REQUEST_BYTES));
			client_free(c);
			return;
		}
	}
}

void server__on_gone(struct server *srv, server_gone_fn fn)
{
	srv->gone = fn;
}

int server__reply(struct server *srv, uint64_t client, json_t *resp)
{
	struct client *c = srv->clients;

	while (c && c->id != client)
		c = c->next;
	if (!c || !c->waiting) {
		json_decref(resp);
		return -ENOENT;
	}
	c->waiting = false;
	if (send_response(c, resp) < 0) {
		client_free(c);
		return -EPIPE;
	}
	if (client_answer_lines(c) < 0)
		return -EPIPE;
	if (!c->waiting)
		client_listen(c);
	return 0;
}

/* refuse() - answer a client just accepted with @resp (consumed), without waiting, and close it. */
static void refuse(int fd, json_t *resp)
{
	char *text = json_dumps(resp, JSON_COMPACT | JSON_REAL_PRECISION(15));

	if (text) {
		send(fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);
		send(fd, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	free(text);
	json_decref(resp);
	close(fd);
}

static int open_spare(void)
{
	return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/*
 * accept_out_of_fds() - accept(2) failed with EMFILE or ENFILE: take the
 * first waiting client with the spare fd and tell it, then take the spare
 * back. Returns whether a client was told (the backlog may hold more).
 */
static bool accept_out_of_fds(struct server *srv, int err)
{
	int fd;

	if (!srv->out_of_fds)
		log_error("Out of file descriptors (%s): clients are refused until some close",
			  strerror(err));
	srv->out_of_fds = true;
	if (srv->spare_fd < 0)
		return false;
	close(srv->spare_fd);
	fd = accept4(srv->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (fd >= 0)
		refuse(fd, json_error_response(-err, "profd is out of file descriptors (%s)",
					       strerror(err)));
	srv->spare_fd = open_spare();
	return fd >= 0;
}

static void server_on_event(struct watch *w, uint32_t events)
{
	struct server *srv = (struct server *)w;

	for (;;) {
		socklen_t len = sizeof(struct ucred);
		struct epoll_event ev = {.events = EPOLLIN};
		struct client *c;
		int fd;

		fd = accept4(srv->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE) && accept_out_of_fds(srv, errno))
			continue;
		if (fd < 0)
			return; /* EAGAIN, or a transient error: epoll will tell us again */
		if (srv->spare_fd < 0)
			srv->spare_fd = open_spare();
		srv->out_of_fds = false;
		if (srv->nr_clients >= MAX_CLIENTS) {
			refuse(fd, json_error_response(-EBUSY, "too many clients (%d)", MAX_CLIENTS));
			continue;
		}
		c = calloc(1, sizeof(*c));
		if (c)
			c->buf = malloc(PROFD_MAX_REQUEST_BYTES);
		if (!c || !c->buf || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->peer, &len) < 0) {
			if (c)
				free(c->buf);
			free(c);
			close(fd);
			continue;
		}
		c->watch.fn = client_on_event;
		c->srv = srv;
		c->fd = fd;
		c->id = ++srv->last_id;
		ev.data.ptr = &c->watch;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			free(c->buf);
			free(c);
			close(fd);
			continue;
		}
		c->next = srv->clients;
		srv->clients = c;
		srv->nr_clients++;
	}
}

static int mkdir_parents(const char *path)
{
	_cleanup_free_ char *dir = strdup(path);
	char *slash;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int server_adopt(int fd, const char *path, int epfd, server_handler_fn fn, void *ctx,
			struct server **ret);

int server__new(const char *path, int epfd, server_handler_fn fn, void *ctx, struct server **ret)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	_cleanup_close_ int fd = -1;
	int r;

	if (strlen(path) >= sizeof(addr.sun_path))
		return -ENAMETOOLONG;
	strcpy(addr.sun_path, path);
	r = mkdir_parents(path);
	if (r < 0)
		return r;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		_cleanup_close_ int probe = -1;

		if (errno != EADDRINUSE)
			return -errno;
		/* A socket file exists: in use if someone answers, stale otherwise. */
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&addr, sizeof(addr)) == 0)
			return -EADDRINUSE;
		if (unlink(path) < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			return -errno;
	}
	if (chmod(path, 0666) < 0 || listen(fd, 64) < 0)
		return -errno;
	r = server_adopt(fd, path, epfd, fn, ctx, ret);
	if (r == 0)
		fd = -1; /* the server owns it now */
	return r;
}

/* Serve on the listening socket @fd (closed by server__free() on success); @path: unlink it then,
 * or NULL. */
static int server_adopt(int fd, const char *path, int epfd, server_handler_fn fn, void *ctx,
			struct server **ret)
{
	struct epoll_event ev = {.events = EPOLLIN};
	struct server *srv;
	int r;

	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->fd = -1;
	srv->spare_fd = open_spare();
	if (path) {
		srv->path = strdup(path);
		if (!srv->path) {
			free(srv);
			return -ENOMEM;
		}
	}
	srv->watch.fn = server_on_event;
	srv->epfd = epfd;
	srv->fn = fn;
	srv->ctx = ctx;
	ev.data.ptr = &srv->watch;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		r = -errno;
		server__free(srv);
		return r;
	}
	srv->fd = fd;
	*ret = srv;
	return 0;
}

int server__new_from_fd(int fd, int epfd, server_handler_fn fn, void *ctx, struct server **ret)
{
	int flags = fcntl(fd, F_GETFL);

	/* Accepting must not block the loop; systemd hands the socket over blocking. */
	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	return server_adopt(fd, NULL, epfd, fn, ctx, ret);
}

void server__free(struct server *srv)
{
	if (!srv)
		return;
	while (srv->clients)
		client_free(srv->clients);
	if (srv->fd >= 0) {
		close(srv->fd);
		if (srv->path)
			unlink(srv->path);
	}
	if (srv->spare_fd >= 0)
		close(srv->spare_fd);
	free(srv->path);
	free(srv);
}
