/*
 * memory.h - the memory report (profctl memory): RSS series, live
 * bytes and growth per allocating call stack, leak suspects.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * query__memory() - the memory report of @session_id (docs/protocol.md,
 * "memory"): {"session", "state", "duration_s",
 *   "rss": null (no series) | {"interval_s", "readings", "start_bytes",
 *     "end_bytes", "peak_bytes", "growth_bytes_per_s" (least-squares slope
 *     of the summed RSS of the session's processes), "last_reading_s",
 *     "series": [{"t_s", "rss_bytes", "pss_bytes", "anon_bytes",
 *     "file_bytes", "shmem_bytes", "swap_bytes", "processes"}],
 *     "processes": [{"pid", "readings", "start_bytes", "end_bytes",
 *     "peak_bytes", "growth_bytes_per_s", "first_s", "last_s"}]},
 *   "allocations": null (not traced) | {"sample_bytes", "probes", "calls",
 *     "free_calls", "bytes", "calls_per_s", "bytes_per_s" (over the time
 *     the probes were attached), "max_hits_per_s", "stopped_at_s" (null, or
 *     when the probes were detached for trapping more often than
 *     max_hits_per_s: figures end there), "sampled",
 *     "lost", "untracked", "live_bytes", "stacks", "windows", "window_s",
 *     "top_live", "top_growth", "leak_suspects": [{"function", "live_bytes",
 *     "live_samples", "allocated_bytes", "samples", "growth_bytes_per_s",
 *     "leak_suspect", "live_series", "frames"}]}}
 * Bytes are estimates from the samples' weights where they come from
 * allocations (live_bytes, allocated_bytes), exact counts otherwise; times
 * in seconds from the session start. @limit: stacks per list, 1..10000.
 * Returns 0, -ENOENT for an unknown session, -EIO, -ENOMEM. Reads only;
 * does not log.
 */
int query__memory(sqlite3 *db, int64_t session_id, int limit, json_t **ret);

/* Helpers of the report, pure (unit-tested); documented in report/memory.c. */
double memory_report__slope(const double *x, const double *y, size_t n);
bool memory_report__is_leak_suspect(const double *live, unsigned n, uint64_t live_samples,
			     uint64_t min_live_samples);
bool memory_report__early_blocks_live(uint64_t early, uint64_t early_live);
