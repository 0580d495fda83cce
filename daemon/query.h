/*
 * query.h - read-side analyses over the store: session listings, hottest
 * functions, hottest call stacks and per-thread samples, as the JSON objects
 * docs/protocol.md defines.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

/*
 * Each function reads from @db (an open connection on a database at the
 * current schema) and returns 0 with *@ret a new JSON object (the response
 * fields, without "v"/"ok"; caller owns it), -ENOENT if @session_id does not
 * exist, -EIO on an SQLite error, -ENOMEM. They do not log and do not write.
 */
int query__session(sqlite3 *db, int64_t session_id, json_t **ret);   /* the SESSION object */
int query__sessions(sqlite3 *db, json_t **ret);                      /* {"sessions":[...]} */
/*
 * top and hotpaths read the CPU samples with @event NULL, else the samples
 * of the session's second sampled event named @event: -ENODATA if the
 * session did not sample it, -EOPNOTSUPP if the machine could not.
 */
int query__top(sqlite3 *db, int64_t session_id, int limit, const char *event, json_t **ret);
int query__hotpaths(sqlite3 *db, int64_t session_id, int limit, const char *event,
		    json_t **ret);
int query__threads(sqlite3 *db, int64_t session_id, json_t **ret);
