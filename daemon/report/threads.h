/*
 * threads.h - what the threads report adds to query__threads():
 * on-CPU and off-CPU time per thread, counters, stragglers, imbalance per
 * group of like-named threads and per time window.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

struct threads_opts {
	bool group_by_name; /* group threads whose names differ only in digits ("worker-1", "worker-2") */
	double window_s;    /* > 0: imbalance per window of this many seconds */
};

/*
 * threads_report__extend() - add to @o, a query__threads() result for
 * @session_id: per thread "on_cpu_s" (from the task-clock counter where the
 * session has it, else samples / freq_hz: "on_cpu_source" says which),
 * "off_cpu_s" ({"sleeping","io","runnable"} seconds, null when off-CPU
 * tracing was not on), "counters" ({name: {"value", "status"}}; value null
 * unless status is "ok") and "derived" ({"ipc", "cache_miss_pct",
 * "branch_miss_pki"}, null where an input is missing); in "imbalance",
 * "stragglers": the threads whose samples exceed the mean by more than 20%;
 * with @opts, "groups" and "windows" (each with its own imbalance object).
 * Returns 0, -EIO on an SQLite error, -ENOMEM. Reads only; does not log.
 */
int threads_report__extend(sqlite3 *db, int64_t session_id, const struct threads_opts *opts,
			   json_t *o);

/*
 * imbalance_json() - the imbalance object of docs/protocol.md for @n values
 * (samples per thread; ids and names parallel to them, names may be NULL):
 * threads (with > 0), mean_samples, max_samples, max_over_mean, cv,
 * straggler_tid, straggler_name, stragglers. NULL on out-of-memory.
 */
json_t *imbalance_json(const int64_t *samples, const int64_t *tids, const char *const *names,
		       size_t n);

/*
 * query__offcpu() - the blocking stacks of @session_id by off-CPU time:
 * {"session","total_off_cpu_s","offcpu_lost","by_state":{state: s},
 *  "stacks":[{"state","total_s","pct","count","threads","frames":[{function,
 *  module,file,line,kind,inlined}]}]} with frames leaf first, @limit stacks
 * (1..10000). pct is of total_off_cpu_s. Returns 0, -ENOENT for an unknown
 * session, -EIO, -ENOMEM. Reads only; does not log.
 */
int query__offcpu(sqlite3 *db, int64_t session_id, int limit, json_t **ret);

/* The statement report__stack_frames() steps: ?1 = stacks.id. */
#define REPORT_STACK_FRAMES_SQL                                                                   \
	"SELECT f.function, f.module, f.file, f.line, f.kind, f.rel_addr, f.inline_depth "        \
	"FROM stack_frames sf JOIN frames f ON f.id = sf.frame_id WHERE sf.stack_id = ?1 "        \
	"ORDER BY sf.pos"
json_t *report__stack_frames(sqlite3_stmt *fr, int64_t stack_id);
