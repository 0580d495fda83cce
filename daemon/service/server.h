/*
 * server.h - the Unix socket: listening, per-client line framing with a
 * size cap, SO_PEERCRED, and one response line per request line.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Something the daemon's epoll loop waits on: data.ptr of every epoll event. */
struct watch {
	void (*fn)(struct watch *w, uint32_t events);
};

/*
 * Handles one request line from a peer, client number @client (unique for
 * the server's life); returns the full response object (with "v" and
 * "ok"), owned by the caller, or NULL when the answer will come later
 * through server__reply() (the client's next lines wait for it).
 */
typedef json_t *(*server_handler_fn)(void *ctx, uint64_t client, const struct ucred *peer,
				     const char *line, size_t len);

/* Called when client @client, waiting for a later answer, hangs up. */
typedef void (*server_gone_fn)(void *ctx, uint64_t client);

struct server;

/*
 * server__new() - create the directory of @path if missing (0755), replace a
 * stale socket, listen on @path (mode 0666: anyone may connect, SO_PEERCRED
 * decides what they may do), and register with epoll @epfd.
 * Returns 0, -EADDRINUSE if another daemon answers on @path, -errno.
 */
int server__new(const char *path, int epfd, server_handler_fn fn, void *ctx,
		struct server **ret);
/*
 * server__new_from_fd() - serve on @fd, a listening Unix stream socket made
 * by someone else (systemd socket activation: profd.socket). The socket's
 * file, mode and owner are theirs: server__free() closes @fd but does not
 * unlink anything. Takes @fd only on success. Returns 0 or -errno.
 */
int server__new_from_fd(int fd, int epfd, server_handler_fn fn, void *ctx, struct server **ret);
/* server__on_gone() - call @fn(ctx) when a client hangs up while its answer is pending. */
void server__on_gone(struct server *srv, server_gone_fn fn);

/*
 * server__reply() - send @resp (taken) to @client, whose handler returned
 * NULL, then go on with its next request lines. Returns 0, -ENOENT if the
 * client is gone (@resp is dropped), or the -errno of sending (the client
 * is then closed). Blocks up to 2 s for a client that does not read.
 */
int server__reply(struct server *srv, uint64_t client, json_t *resp);

/* server__free() - close every client and the socket, unlink the path server__new() made. */
void server__free(struct server *srv);

/* json_error_response() - {"v":1,"ok":false,"error":{code,errno,message}} for -@err. */
json_t *json_error_response(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
