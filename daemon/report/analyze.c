/*
 * analyze.c - bottleneck findings for one session (profctl analyze): rules
 * over the store, each giving a severity, the figures it saw and a
 * suggestion, or saying which data it lacked instead of guessing.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sqlite3.h>

#include "report/analyze.h"
#include "report/memory.h"
#include "report/query.h"
#include "report/report.h"
#include "util.h"
#include "store/sqlite_util.h"

/* A dominant function: this share of self samples or more. */
#define HOT_PCT_MEDIUM 30.0
#define HOT_PCT_HIGH 50.0
/* Thread imbalance: the busiest thread over the mean of the busy ones. */
#define IMBALANCE_MEDIUM 1.5
#define IMBALANCE_HIGH 2.0
/* Main thread starved: runnable (waiting for a CPU) this share of the session or more. */
#define STARVED_RUNNABLE_PCT 20.0
/* Cache misses per 1000 instructions counted as high. */
#define CACHE_MPKI_HIGH 10.0
/* Time in CUDA synchronization, summed over threads, as a share of the session. */
#define SYNC_PCT_MEDIUM 20.0
#define SYNC_PCT_HIGH 50.0
/* Kernel launches per second, over at least this many launches (a burst is not a pace). */
#define LAUNCHES_MIN 1000.0
#define LAUNCHES_PER_S_MEDIUM 1000.0
#define LAUNCHES_PER_S_HIGH 10000.0
/* RSS growth over the session: a finding from this share of the start and 1 MiB up. */
#define RSS_GROWTH_MEDIUM 0.10
#define RSS_GROWTH_HIGH 0.50
#define RSS_GROWTH_MIN_BYTES (1 << 20)

struct analysis {
	sqlite3 *db;
	int64_t session;
	int64_t pid;
	int64_t elapsed_ns;
	unsigned flags; /* QUERY_PYTHON_ALL or 0: the call stacks' view */
	json_t *findings;
	json_t *skipped;
};

/*
 * Runs @sql with ?1 = the session and reads column 0 of the first row as a
 * double into *@ret (0 with no row or NULL). Returns 1 with a value, 0 without, -errno.
 */
static int scalar(struct analysis *a, const char *sql, double *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc;

	*ret = 0;
	rc = sqlite3_prepare_v2(a->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return report__errno(rc);
	sqlite3_bind_int64(st, 1, a->session);
	sqlite3_bind_int64(st, 2, a->pid);
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return 0;
	if (rc != SQLITE_ROW)
		return report__errno(rc);
	if (sqlite3_column_type(st, 0) == SQLITE_NULL)
		return 0;
	*ret = sqlite3_column_double(st, 0);
	return 1;
}

/* A finding: @evidence is consumed. */
static int finding(struct analysis *a, const char *rule, const char *severity, json_t *evidence,
		   const char *suggestion, const char *fmt, ...)
{
	char title[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(title, sizeof(title), fmt, ap);
	va_end(ap);
	return json_array_append_new(a->findings,
				     json_pack("{s:s, s:s, s:s, s:o, s:s}", "rule", rule,
					       "severity", severity, "title", title, "evidence",
					       evidence, "suggestion", suggestion)) < 0
		   ? -ENOMEM
		   : 0;
}

/* A rule that found nothing to report (@status "ok") or lacked its data ("no data"). */
static int checked(struct analysis *a, const char *rule, const char *status, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return json_array_append_new(a->skipped, json_pack("{s:s, s:s, s:s}", "rule", rule,
							   "status", status, "detail", why)) < 0
		   ? -ENOMEM
		   : 0;
}

static int rule_hot_function(struct analysis *a)
{
	_cleanup_(json_decrefp) json_t *top = NULL;
	const json_t *f;
	double pct;
	int r;

	r = query__top(a->db, a->session, 1, NULL, NULL, a->flags, &top);
	if (r < 0)
		return r;
	f = json_array_get(json_object_get(top, "functions"), 0);
	if (!f)
		return checked(a, "hot-function", "no data", "the session has no CPU samples");
	pct = json_real_value(json_object_get(f, "self_pct"));
	if (pct < HOT_PCT_MEDIUM)
		return checked(
		    a, "hot-function", "ok",
		    "no function has %.0f%% of the samples (the hottest, %s, has %.1f%%)",
		    HOT_PCT_MEDIUM, json_string_value(json_object_get(f, "function")), pct);
	return finding(
	    a, "hot-function", pct >= HOT_PCT_HIGH ? "high" : "medium",
	    json_pack("{s:O, s:O, s:O, s:O, s:O}", "function", json_object_get(f, "function"),
		      "module", json_object_get(f, "module"), "self_pct",
		      json_object_get(f, "self_pct"), "total_pct", json_object_get(f, "total_pct"),
		      "total_samples", json_object_get(top, "total_samples")),
	    "Make this function cheaper or call it less: see its callers with "
	    "'profctl hotpaths' and its lines with 'profctl export --format pprof'",
	    "%s runs in %.1f%% of the CPU samples",
	    json_string_value(json_object_get(f, "function")), pct);
}

static int rule_imbalance(struct analysis *a)
{
	_cleanup_(json_decrefp) json_t *th = NULL;
	const json_t *imb;
	double ratio;
	json_int_t busy;
	int r;

	r = query__threads(a->db, a->session, NULL, &th);
	if (r < 0)
		return r;
	imb = json_object_get(th, "imbalance");
	busy = json_integer_value(json_object_get(imb, "threads"));
	if (busy < 2)
		return checked(a, "thread-imbalance", "no data",
			       "%lld thread(s) with CPU samples: nothing to compare",
			       (long long)busy);
	ratio = json_real_value(json_object_get(imb, "max_over_mean"));
	if (ratio < IMBALANCE_MEDIUM)
		return checked(a, "thread-imbalance", "ok",
			       "the busiest of %lld threads has %.2fx the mean", (long long)busy,
			       ratio);
	return finding(a, "thread-imbalance", ratio >= IMBALANCE_HIGH ? "high" : "medium",
		       json_pack("{s:I, s:f, s:O, s:O, s:O, s:O}", "threads", busy, "max_over_mean",
				 ratio, "cv", json_object_get(imb, "cv"), "straggler_tid",
				 json_object_get(imb, "straggler_tid"), "straggler_name",
				 json_object_get(imb, "straggler_name"), "max_samples",
				 json_object_get(imb, "max_samples")),
		       "Split the work more evenly (smaller chunks, a shared queue); the others "
		       "wait for the straggler: 'profctl threads' shows each thread",
		       "thread %s has %.2fx the mean CPU samples of %lld busy threads",
		       json_string_value(json_object_get(imb, "straggler_name")) ?: "(unnamed)",
		       ratio, (long long)busy);
}

static int rule_main_starved(struct analysis *a)
{
	double runnable_ns, main_samples, other_samples, events;
	int r;

	r = scalar(a, "SELECT instr(events, 'offcpu') FROM sessions WHERE id = ?1", &events);
	if (r < 0)
		return r;
	if (events <= 0)
		return checked(
		    a, "main-thread-starved", "no data",
		    "off-CPU time not recorded in this session (attach --events cpu,offcpu)");
	r = scalar(a,
		   "SELECT sum(total_ns) FROM offcpu_totals WHERE session_id = ?1 AND tid = ?2"
		   " AND state = 'runnable'",
		   &runnable_ns);
	if (r >= 0)
		r = scalar(a, "SELECT sum(count) FROM sample_totals WHERE session_id = ?1 AND tid = ?2",
			   &main_samples);
	if (r >= 0)
		r = scalar(a, "SELECT sum(count) FROM sample_totals WHERE session_id = ?1 AND tid <> ?2",
			   &other_samples);
	if (r < 0)
		return r;
	if (a->elapsed_ns <= 0)
		return checked(a, "main-thread-starved", "no data", "the session has no duration");
	if (other_samples <= 0)
		return checked(a, "main-thread-starved", "no data",
			       "no thread besides the main thread ran");
	if (100.0 * runnable_ns / (double)a->elapsed_ns < STARVED_RUNNABLE_PCT)
		return checked(a, "main-thread-starved", "ok",
			       "the main thread waited for a CPU %.1f%% of the session",
			       100.0 * runnable_ns / (double)a->elapsed_ns);
	return finding(a, "main-thread-starved", "medium",
		       json_pack("{s:f, s:f, s:f, s:f}", "main_runnable_s", runnable_ns / 1e9,
				 "session_s", (double)a->elapsed_ns / 1e9, "main_samples",
				 main_samples, "other_threads_samples", other_samples),
		       "The workers take all the CPUs: run fewer workers than cores, or lower "
		       "their priority (nice) so the main thread gets scheduled",
		       "the main thread waited for a CPU %.1f%% of the time while workers ran",
		       100.0 * runnable_ns / (double)a->elapsed_ns);
}

static int rule_cache_misses(struct analysis *a)
{
	double status_ok, misses, instructions;
	int r;

	r = scalar(a,
		   "SELECT max(status = 'ok') FROM session_counters WHERE session_id = ?1"
		   " AND counter = 'cache-misses'",
		   &status_ok);
	if (r < 0)
		return r;
	if (r == 0)
		return checked(
		    a, "cache-misses", "no data",
		    "counters not recorded in this session (attach --events cpu,counters)");
	if (status_ok <= 0)
		return checked(a, "cache-misses", "no data",
			       "cache-misses is unsupported on this machine (no hardware PMU)");
	r = scalar(a,
		   "SELECT sum(value) FROM thread_counter_totals WHERE session_id = ?1"
		   " AND counter = 'cache-misses'",
		   &misses);
	if (r >= 0)
		r = scalar(a,
			   "SELECT sum(value) FROM thread_counter_totals WHERE session_id = ?1"
			   " AND counter = 'instructions'",
			   &instructions);
	if (r < 0)
		return r;
	if (instructions <= 0)
		return checked(a, "cache-misses", "no data", "no instructions counted");
	if (1000.0 * misses / instructions < CACHE_MPKI_HIGH)
		return checked(a, "cache-misses", "ok", "%.1f cache misses per 1000 instructions",
			       1000.0 * misses / instructions);
	return finding(a, "cache-misses", "medium",
		       json_pack("{s:f, s:f, s:f}", "cache_misses", misses, "instructions",
				 instructions, "misses_per_1000_instructions",
				 1000.0 * misses / instructions),
		       "Access memory more sequentially (arrays of structs to structs of "
		       "arrays, smaller working sets); sample with --events cpu,cache-misses "
		       "to see where",
		       "%.1f cache misses per 1000 instructions", 1000.0 * misses / instructions);
}

/*
 * Memory: leak suspects (allocating stacks whose live bytes keep rising,
 * from the malloc event), and RSS growth (from the rss event).
 */
static int rule_memory(struct analysis *a)
{
	_cleanup_(json_decrefp) json_t *m = NULL;
	const json_t *rss, *al, *suspects, *s;
	size_t i;
	int r;

	r = query__memory(a->db, a->session, 3, &m);
	if (r < 0)
		return r;
	rss = json_object_get(m, "rss");
	al = json_object_get(m, "allocations");
	suspects = json_object_get(al, "leak_suspects");
	json_array_foreach(suspects, i, s)
	{
		const char *fn = json_string_value(json_object_get(s, "function"));
		double live = json_number_value(json_object_get(s, "live_bytes"));
		double rate = json_number_value(json_object_get(s, "growth_bytes_per_s"));

		r = finding(a, "leak-suspect", "high",
			    json_pack("{s:s?, s:f, s:f, s:I, s:O?}", "function", fn, "live_bytes",
				      live, "growth_bytes_per_s", rate, "live_samples",
				      json_integer_value(json_object_get(s, "live_samples")),
				      "live_series", json_object_get(s, "live_series")),
			    "Check that what this call stack allocates is freed (caches and lists "
			    "without a bound, blocks kept per request); profctl memory shows the "
			    "whole stack",
			    "live bytes allocated by %s keep growing: %.0f KiB/s, %.1f MiB live",
			    fn ? fn : "?", rate / 1024, live / 1048576);
		if (r < 0)
			return r;
	}
	if (!json_is_object(rss) && !json_is_object(al))
		return checked(
		    a, "memory-growth", "no data",
		    "memory not recorded in this session (attach --events cpu,rss,malloc)");
	if (json_is_object(rss) && json_integer_value(json_object_get(rss, "readings")) >= 3) {
		double start = json_number_value(json_object_get(rss, "start_bytes"));
		double end = json_number_value(json_object_get(rss, "end_bytes"));
		double slope = json_number_value(json_object_get(rss, "growth_bytes_per_s"));
		double growth = end - start;
		/* profctl memory's diagnosis: its verdict, evidence and suggestion. */
		const json_t *d = json_object_get(m, "diagnosis");
		const char *verdict = json_string_value(json_object_get(d, "verdict"));
		const char *advice = json_string_value(json_object_get(d, "suggestion"));

		if (slope > 0 && growth >= RSS_GROWTH_MIN_BYTES && start > 0 &&
		    growth >= RSS_GROWTH_MEDIUM * start)
			return finding(
			    a, "memory-growth",
			    growth >= RSS_GROWTH_HIGH * start ? "high" : "medium",
			    json_pack("{s:f, s:f, s:f, s:f, s:f, s:s?, s:O?}", "start_bytes", start,
				      "end_bytes", end, "peak_bytes",
				      json_number_value(json_object_get(rss, "peak_bytes")),
				      "growth_bytes_per_s", slope, "growth_pct",
				      round(1000.0 * growth / start) / 10, "verdict", verdict,
				      "diagnosis", json_object_get(d, "evidence")),
			    advice && verdict && strcmp(verdict, "flat") != 0
				? advice
			    : json_is_object(al)
				? "See profctl memory for the call stacks that hold the growth "
				  "(top stacks by growth, leak suspects)"
				: "Attach again with --events cpu,rss,malloc to see which call "
				  "stacks hold the growth",
			    "RSS grew %.0f%% in the session (%.1f -> %.1f MiB, %.0f KiB/s): %s",
			    100.0 * growth / start, start / 1048576, end / 1048576, slope / 1024,
			    verdict ? verdict : "no diagnosis");
		return checked(a, "memory-growth", "ok", "RSS %.1f -> %.1f MiB (%+.0f KiB/s)",
			       start / 1048576, end / 1048576, slope / 1024);
	}
	if (json_array_size(suspects) == 0 && json_is_object(al))
		return checked(a, "memory-growth", "ok",
			       "no leak suspect among %lld allocating stacks",
			       (long long)json_integer_value(json_object_get(al, "stacks")));
	return json_array_size(suspects)
		   ? 0
		   : checked(a, "memory-growth", "no data", "fewer than 3 RSS readings");
}

/*
 * Whether @rule has CUDA records to read: the session's probes' outcomes
 * are in gpu_probes (attached, missing or failed), and one attached at
 * least. 1 if so; else @rule is checked "no data" (with @not_recorded, what
 * a session without CUDA tracing lacks) and 0 returned; or -errno.
 */
static int cuda_recorded(struct analysis *a, const char *rule, const char *not_recorded)
{
	double n, attached;
	int r = scalar(a, "SELECT count(*) FROM gpu_probes WHERE session_id = ?1", &n);

	if (r < 0)
		return r;
	r = scalar(a,
		   "SELECT count(*) FROM gpu_probes WHERE session_id = ?1 AND status = 'attached'",
		   &attached);
	if (r < 0)
		return r;
	if (n == 0)
		return checked(a, rule, "no data",
			       "%s not recorded in this session (attach --events cpu,cuda)",
			       not_recorded);
	if (attached == 0)
		return checked(a, rule, "no data",
			       "no CUDA function could be probed (see profctl gpu)");
	return 1;
}

/* Threads blocked in cudaDeviceSynchronize & co. for a large share of the session. */
static int rule_cuda_sync(struct analysis *a)
{
	const char *rule = "cuda-synchronize";
	double ns, calls, pct;
	int r = cuda_recorded(a, rule, "CUDA calls");

	if (r <= 0)
		return r;
	if ((r = scalar(a, "SELECT sum(total_ns) FROM gpu_syncs WHERE session_id = ?1", &ns)) < 0 ||
	    (r = scalar(a, "SELECT sum(calls) FROM gpu_syncs WHERE session_id = ?1", &calls)) < 0)
		return r;
	if (a->elapsed_ns <= 0)
		return checked(a, rule, "no data", "the session has no duration");
	pct = 100.0 * ns / (double)a->elapsed_ns;
	if (pct < SYNC_PCT_MEDIUM)
		return checked(a, rule, "ok",
			       "%.0f synchronization calls, %.3f s blocked (%.1f%% of the session)",
			       calls, ns / 1e9, pct);
	return finding(a, rule, pct >= SYNC_PCT_HIGH ? "high" : "medium",
		       json_pack("{s:f, s:f, s:f}", "blocked_s", round(ns / 1e6) / 1e3, "calls",
				 calls, "pct_of_session", round(pct * 10) / 10),
		       "Let the CPU run ahead of the GPU: synchronize once per step rather than "
		       "after each kernel or copy, use streams and events, and asynchronous copies "
		       "from pinned memory (cudaMemcpyAsync); profctl gpu shows the waiting stacks",
		       "CPU threads waited %.1f s in CUDA synchronization (%.0f%% of the session)",
		       ns / 1e9, pct);
}

/* Many kernel launches a second: launch overhead, not the kernels, sets the pace. */
static int rule_tiny_launches(struct analysis *a)
{
	const char *rule = "tiny-kernel-launches";
	double launches, per_s;
	int r = cuda_recorded(a, rule, "CUDA kernel launches");

	if (r <= 0)
		return r;
	if ((r = scalar(a, "SELECT sum(launches) FROM gpu_kernels WHERE session_id = ?1",
			&launches)) < 0)
		return r;
	if (a->elapsed_ns <= 0)
		return checked(a, rule, "no data", "the session has no duration");
	per_s = launches * 1e9 / (double)a->elapsed_ns;
	if (per_s < LAUNCHES_PER_S_MEDIUM || launches < LAUNCHES_MIN)
		return checked(a, rule, "ok", "%.0f kernel launches (%.0f/s)", launches, per_s);
	return finding(
	    a, rule, per_s >= LAUNCHES_PER_S_HIGH ? "high" : "medium",
	    json_pack("{s:f, s:f}", "launches", launches, "launches_per_s", round(per_s)),
	    "Launch fewer, larger kernels: fuse small ones, batch the work, or capture "
	    "the step in a CUDA graph (cudaGraphLaunch). profd sees launches, not kernel "
	    "durations: check them with a GPU profiler before and after",
	    "%.0f kernel launches a second", per_s);
}

/*
 * analyze__session() - the "analyze" response of docs/protocol.md for
 * @session_id: {"session", "findings": [{rule, severity (high, medium),
 * title, evidence {figures}, suggestion}], "checks": [{rule, status ("ok":
 * checked, nothing found; "no data": not checked, and why), detail}]}.
 * Findings are sorted high before medium. @flags: QUERY_PYTHON_ALL to name
 * the hottest function among every frame, else in the Python view.
 * @ret: on success a new object, owned by the caller.
 *
 * Returns 0, -ENOENT for an unknown session, -EIO on an SQLite error,
 * -ENOMEM. Only reads @db; allocates; does not log.
 */
int analyze__session(sqlite3 *db, int64_t session_id, unsigned flags, json_t **ret)
{
	_cleanup_(json_decrefp) json_t *session = NULL, *o = NULL;
	struct analysis a = {.db = db, .session = session_id, .flags = flags};
	json_t *sorted;
	int r;

	r = query__session(db, session_id, &session);
	if (r < 0)
		return r;
	a.pid = json_integer_value(json_object_get(session, "pid"));
	a.elapsed_ns = (int64_t)(json_real_value(json_object_get(session, "elapsed_s")) * 1e9);
	o = json_pack("{s:I, s:[], s:[]}", "session", (json_int_t)session_id, "findings", "checks");
	if (!o)
		return -ENOMEM;
	a.findings = json_object_get(o, "findings");
	a.skipped = json_object_get(o, "checks");

	if ((r = rule_hot_function(&a)) < 0 || (r = rule_imbalance(&a)) < 0 ||
	    (r = rule_main_starved(&a)) < 0 || (r = rule_cache_misses(&a)) < 0 ||
	    (r = rule_cuda_sync(&a)) < 0 || (r = rule_tiny_launches(&a)) < 0 ||
	    (r = rule_memory(&a)) < 0)
		return r;

	/* High before medium, keeping the rules' order otherwise. */
	sorted = json_array();
	if (!sorted)
		return -ENOMEM;
	for (int pass = 0; pass < 2; pass++) {
		size_t i;
		json_t *f;

		json_array_foreach(a.findings, i, f)
		{
			bool high =
			    strcmp(json_string_value(json_object_get(f, "severity")), "high") == 0;

			if (high == (pass == 0) && json_array_append(sorted, f) < 0) {
				json_decref(sorted);
				return -ENOMEM;
			}
		}
	}
	if (json_object_set_new(o, "findings", sorted) < 0)
		return -ENOMEM;
	*ret = TAKE_PTR(o);
	return 0;
}
