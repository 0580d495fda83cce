/*
 * clickhouse.h - queries to a ClickHouse server over its HTTP interface
 * (libcurl), answers as JSON: what profctl fleet needs, no more.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Where the server is and who asks; the strings are borrowed. */
struct clickhouse {
	const char *url;      /* http[s]://HOST:PORT[/], the HTTP interface */
	const char *database; /* the default database of the queries; NULL: the server's */
	const char *user;     /* NULL: the server's default user */
	const char *password; /* NULL: none */
	const char *ca_file;  /* https: CA certificates (PEM) to verify the server; NULL: the system's */
	bool readonly;	      /* send readonly=1: the server refuses writes and DDL */
};

/*
 * clickhouse__query() - run @sql (one statement, without a FORMAT clause:
 * the answer is asked for as JSONCompact) and return the server's answer
 * in *@ret (caller unrefs): {"meta":[{"name","type"}...],"data":[[...]...],
 * "rows":N,...}, 64-bit integers as the server quotes them (strings); see
 * clickhouse__int(). A statement that answers nothing (or not JSON, with
 * a FORMAT clause of its own) gives {"text": BODY}.
 *
 * On failure returns a negative errno and *@ret_error (caller frees) says
 * why in one line, with the server's own message where it sent one:
 * -ECONNREFUSED (nothing listens), -EHOSTUNREACH (name not resolved, or
 * another connection failure), -ETIMEDOUT (connect 5 s, whole query 120 s),
 * -EACCES (HTTP 401/403 or an authentication error: unknown user, wrong
 * password), -EREMOTEIO (another HTTP error: a syntax error, an unknown
 * table, a write refused in readonly mode), -EMSGSIZE (an answer over 64
 * MiB), -EBADMSG (JSON that does not parse), -ENOMEM (*@ret_error NULL).
 * Blocks for the query's time. Does not log.
 */
int clickhouse__query(const struct clickhouse *ch, const char *sql, json_t **ret, char **ret_error);

/*
 * clickhouse__query_all() - clickhouse__query() of the @n statements
 * @sqls at once, each on a connection of its own: the server runs them
 * side by side. Returns 0 with statement i's answer in @rets[i] (caller
 * unrefs each), or the first failure in @sqls order, as clickhouse__query()
 * returns it, with every @rets[i] NULL. Blocks until the last one ends.
 * Does not log.
 */
int clickhouse__query_all(const struct clickhouse *ch, size_t n, const char *const *sqls,
			  json_t **rets, char **ret_error);

/*
 * clickhouse__int() - a cell of an integer column as a number: the server
 * sends (U)Int64 as a decimal string, narrower integers as JSON numbers.
 * Returns 0 with the value in *@ret, or -ERANGE (over INT64_MAX) or
 * -EBADMSG (not an integer); then *@ret is unchanged.
 */
int clickhouse__int(const json_t *v, long long *ret);
