/*
 * clickhouse.h - ClickHouse's HTTP interface through libcurl: run a query,
 * insert a body of rows, create profd's tables (docs/fleet.md). One
 * connection (kept alive), used by one thread. Does not log: each failure
 * is a -errno and a message in clickhouse__errmsg().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct clickhouse;

/* A growing byte buffer (request bodies, answers); always NUL-terminated once non-empty. */
struct fleet_buf {
	char *data;
	size_t len, cap;
};

/* fleet_buf__append() - add @len bytes of @p. Returns 0 or -ENOMEM (then @b is unchanged). */
int fleet_buf__append(struct fleet_buf *b, const void *p, size_t len);
void fleet_buf__reset(struct fleet_buf *b); /* empty, keeps the memory */
void fleet_buf__done(struct fleet_buf *b);  /* frees; accepts a zeroed buffer */

/* Asked often during a transfer; true stops it at once (-ECANCELED). */
typedef bool (*clickhouse_cancel_fn)(void *arg);

/* Curl's limits: a request that cannot connect, or cannot finish, in this long fails. */
#define CLICKHOUSE_CONNECT_TIMEOUT_S 5
#define CLICKHOUSE_TIMEOUT_S 30

/*
 * clickhouse__new() - a client of the server at @url ("http://host:8123",
 * no trailing path), database @database (letters, digits and '_' only),
 * as @user (NULL or "": "default") with @password (NULL: none). Strings
 * are copied. @cancel(@arg), if set, is polled during transfers: profd
 * stops promptly even if the server hangs.
 * Returns 0, -EINVAL (bad database name, or a URL that is not http(s)://),
 * -ENOMEM. Does not connect; does not log.
 */
int clickhouse__new(const char *url, const char *database, const char *user, const char *password,
		    clickhouse_cancel_fn cancel, void *arg, struct clickhouse **ret);
void clickhouse__free(struct clickhouse *ch); /* accepts NULL */

/*
 * clickhouse__set_ca_file() - for an https:// URL, verify the server's
 * certificate against the CA certificates (PEM) in @path instead of the
 * system's (curl's CURLOPT_CAINFO); NULL or "": the system's. A
 * verification failure is -EIO with curl's message ("SSL certificate
 * problem: ..."). Returns 0 or -ENOMEM.
 */
int clickhouse__set_ca_file(struct clickhouse *ch, const char *path);

/*
 * clickhouse__query() - run @sql (the POST body) in the client's database
 * (@in_database false: no database, for CREATE DATABASE). The answer
 * (at most 1 MiB kept) replaces @ret_out's contents if @ret_out is set.
 * Returns 0, or on failure (clickhouse__errmsg() says what, as
 * "ClickHouse at URL: ..."): -ECONNREFUSED (nothing listens), -EHOSTUNREACH
 * (cannot resolve or reach), -ETIMEDOUT (connect 5 s, or 30 s in all),
 * -ECONNRESET (the connection broke or closed without an answer: the server
 * may have run the query), -EACCES (authentication failed), -EPROTO (an HTTP
 * status other than 200: the message has the answer's first line),
 * -ECANCELED (@cancel said stop), -ENOMEM, -EIO (another transfer error).
 * Blocks up to CLICKHOUSE_TIMEOUT_S.
 */
int clickhouse__query(struct clickhouse *ch, const char *sql, bool in_database,
		      struct fleet_buf *ret_out);

/*
 * clickhouse__insert() - "INSERT INTO @table FORMAT JSONEachRow" with the
 * @len bytes of @body (one JSON object per line) as the rows, sent gzip'd
 * (Content-Encoding: gzip: a twentieth of the bytes). ClickHouse writes the
 * rows of one INSERT (under max_insert_block_size, ~1 M rows) as one block,
 * atomically, and refuses a cut-off gzip stream whole. Returns what
 * clickhouse__query() returns (-ENOMEM also if @len is over 2 GiB).
 * Allocates a compressed copy of the body, kept for the next insert.
 */
int clickhouse__insert(struct clickhouse *ch, const char *table, const char *body, size_t len);

/*
 * clickhouse__count() - the one number @sql (a SELECT count() ...) answers.
 * Returns 0 and *@ret, -EBADMSG if the answer is not a number (the server
 * is not ClickHouse, or a proxy mangled it), or what clickhouse__query()
 * returns.
 */
int clickhouse__count(struct clickhouse *ch, const char *sql, uint64_t *ret);

/*
 * clickhouse__create_tables() - CREATE DATABASE and every table of
 * docs/fleet.md, IF NOT EXISTS. Returns what clickhouse__query() returns.
 */
int clickhouse__create_tables(struct clickhouse *ch);

/* clickhouse__quote() - @s as a single-quoted SQL string literal, malloc'd; NULL: no memory. */
char *clickhouse__quote(const char *s);

/* The message of the last failure ("ClickHouse at URL: HTTP 500: ..."), "" if none. */
const char *clickhouse__errmsg(const struct clickhouse *ch);
/* Request bytes sent so far (bodies as sent, compressed; headers not counted). */
uint64_t clickhouse__bytes_sent(const struct clickhouse *ch);
/* The server's URL, as given. */
const char *clickhouse__url(const struct clickhouse *ch);
