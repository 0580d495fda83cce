/*
 * gpu.c - the store's writes of CUDA/NVTX/uprobe accounting (schema 0009):
 * API, kernel, copy, sync, NVTX and probe aggregates per flush window, GPU
 * memory events, probe attach outcomes, and the session's loss counters.
 */
#include <errno.h>

#include "store/store.h"
#include "store/store_internal.h"
#include "util.h"

/* One statement per aggregate table; the numbered parameters are the same for all. */
static const char *const agg_sql[STORE_GPU_NR_TABLES] = {
    [STORE_GPU_API] = "INSERT INTO gpu_api_calls (session_id, window_ns, api, calls, errors,"
		      " total_ns, min_ns, max_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [STORE_GPU_KERNEL] = "INSERT INTO gpu_kernels (session_id, window_ns, name, api, grid,"
			 " block, stack_id, launches, errors)"
			 " VALUES (?1, ?2, ?3, ?9, ?10, ?11, ?12, ?4, ?5)",
    [STORE_GPU_COPY] = "INSERT INTO gpu_copies (session_id, window_ns, api, direction, calls,"
		       " bytes, errors) VALUES (?1, ?2, ?3, ?9, ?4, ?13, ?5)",
    [STORE_GPU_SYNC] = "INSERT INTO gpu_syncs (session_id, window_ns, api, stack_id, calls,"
		       " total_ns) VALUES (?1, ?2, ?3, ?12, ?4, ?6)",
    [STORE_GPU_NVTX] = "INSERT INTO nvtx_ranges (session_id, window_ns, kind, path, name, depth,"
		       " calls, total_ns, min_ns, max_ns)"
		       " VALUES (?1, ?2, ?9, ?3, ?14, ?15, ?4, ?6, ?7, ?8)",
    [STORE_GPU_UPROBE] = "INSERT INTO uprobe_calls (session_id, window_ns, probe, calls,"
			 " total_ns, min_ns, max_ns) VALUES (?1, ?2, ?3, ?4, ?6, ?7, ?8)",
};

/*
 * store__gpu_agg_add() - one aggregate row @g of session @session_id for
 * the flush window that ends at @window_ns (CLOCK_REALTIME). Returns 0, -EINVAL for an unknown
 * table, -EIO (store__errmsg()). Does not log.
 */
int store__gpu_agg_add(struct store *st, int64_t session_id, uint64_t window_ns,
		       const struct store_gpu_agg *g)
{
	sqlite3_stmt *q;

	if ((unsigned)g->table >= STORE_GPU_NR_TABLES)
		return -EINVAL;
	q = store__lazy(st, STORE_LAZY_GPU_API + (unsigned)g->table, agg_sql[g->table]);
	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, session_id);
	sqlite3_bind_int64(q, 2, (int64_t)window_ns);
	sqlite3_bind_text(q, 3, g->key1, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 4, (int64_t)g->calls);
	sqlite3_bind_int64(q, 5, (int64_t)g->errors);
	sqlite3_bind_int64(q, 6, (int64_t)g->total_ns);
	sqlite3_bind_int64(q, 7, (int64_t)(g->calls ? g->min_ns : 0));
	sqlite3_bind_int64(q, 8, (int64_t)g->max_ns);
	sqlite3_bind_text(q, 9, g->key2, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 10, g->grid, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 11, g->block, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 12, g->stack_id);
	sqlite3_bind_int64(q, 13, (int64_t)g->bytes);
	sqlite3_bind_text(q, 14, g->name, -1, SQLITE_STATIC);
	sqlite3_bind_int(q, 15, g->depth);
	return store__step_done(q);
}

/*
 * store__gpu_mem_event_add() - one GPU memory allocation or free @m of
 * session @session_id. Returns 0 or -EIO. Does not log.
 */
int store__gpu_mem_event_add(struct store *st, int64_t session_id,
			     const struct store_gpu_mem_event *m)
{
	sqlite3_stmt *q = store__lazy(st, STORE_LAZY_GPU_MEM_EVENT,
				      "INSERT INTO gpu_mem_events (session_id, time_ns, api, space,"
				      " requested_bytes, live_delta_bytes, ok, address, stack_id)"
				      " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");

	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, session_id);
	sqlite3_bind_int64(q, 2, (int64_t)m->time_ns);
	sqlite3_bind_text(q, 3, m->api, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 4, m->space, -1, SQLITE_STATIC);
	sqlite3_bind_int64(q, 5, (int64_t)m->requested_bytes);
	sqlite3_bind_int64(q, 6, m->live_delta_bytes);
	sqlite3_bind_int(q, 7, m->ok);
	sqlite3_bind_int64(q, 8, (int64_t)m->address);
	sqlite3_bind_int64(q, 9, m->stack_id);
	return store__step_done(q);
}

/*
 * store__gpu_probe_add() - an attach outcome of session @session_id's
 * probes in process @pid: @what (an API or "uprobes"), @file, @status
 * ("attached", "failed: ...", "detached: ..."). Returns 0 or -EIO.
 */
int store__gpu_probe_add(struct store *st, int64_t session_id, pid_t pid, const char *what,
			 const char *file, const char *status)
{
	sqlite3_stmt *q = store__lazy(st, STORE_LAZY_GPU_PROBE,
				      "INSERT INTO gpu_probes (session_id, pid, what, file, status)"
				      " VALUES (?, ?, ?, ?, ?)");

	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, session_id);
	sqlite3_bind_int(q, 2, pid);
	sqlite3_bind_text(q, 3, what, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 4, file, -1, SQLITE_STATIC);
	sqlite3_bind_text(q, 5, status, -1, SQLITE_STATIC);
	return store__step_done(q);
}

/*
 * store__session_gpu_counts_add() - add @c (counts since the last flush)
 * to session @session_id's totals. Returns 0 or -EIO.
 */
int store__session_gpu_counts_add(struct store *st, int64_t session_id,
				  const struct store_gpu_counts *c)
{
	sqlite3_stmt *q =
	    store__lazy(st, STORE_LAZY_GPU_COUNTS,
			"UPDATE sessions SET gpu_lost_calls = gpu_lost_calls + ?1,"
			" nvtx_unmatched = nvtx_unmatched + ?2,"
			" gpu_unnamed_launches = gpu_unnamed_launches + ?3,"
			" gpu_truncated_stacks = gpu_truncated_stacks + ?4,"
			" gpu_missing_stacks = gpu_missing_stacks + ?5 WHERE id = ?6");

	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, (int64_t)c->lost_calls);
	sqlite3_bind_int64(q, 2, (int64_t)c->nvtx_unmatched);
	sqlite3_bind_int64(q, 3, (int64_t)c->unnamed_launches);
	sqlite3_bind_int64(q, 4, (int64_t)c->truncated_stacks);
	sqlite3_bind_int64(q, 5, (int64_t)c->missing_stacks);
	sqlite3_bind_int64(q, 6, session_id);
	return store__step_done(q);
}
