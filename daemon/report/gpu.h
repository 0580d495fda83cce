/*
 * gpu.h - the GPU reports over the store (schema 0009): kernels by
 * launches, CUDA API times, copies, synchronization waits, GPU memory growth,
 * generic probe latencies (query__gpu), and the NVTX range tree
 * (query__ranges), as the JSON objects docs/protocol.md defines.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

/*
 * As query.h: 0 with *@ret a new JSON object owned by the caller, -ENOENT if
 * @session_id does not exist, -EIO on an SQLite error, -ENOMEM. @limit
 * (1..10000) bounds each list. Read-only; do not log.
 */
int query__gpu(sqlite3 *db, int64_t session_id, int limit, json_t **ret);
int query__ranges(sqlite3 *db, int64_t session_id, json_t **ret);
