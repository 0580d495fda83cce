/*
 * request.h - parse and validate one protocol request line (docs/protocol.md)
 * into a struct request. The input is untrusted: any malformed line yields
 * an error code and a message for the client, never a crash.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum request_cmd {
	CMD_PING,
	CMD_ATTACH,
	CMD_DETACH,
	CMD_SESSION,
	CMD_SESSIONS,
	CMD_TOP,
	CMD_HOTPATHS,
	CMD_THREADS,
	CMD_RESYMBOLIZE,
	CMD_OFFCPU,
	CMD_MEMORY,
	CMD_PROFILE,
	CMD_SQL,
	CMD_ANALYZE,
	CMD_GPU,
	CMD_RANGES,
};

/* Longest SQL text of an "sql" request, bytes. */
#define REQUEST_MAX_SQL_BYTES 16384

/* Event names a session can ask for (bit i = event_names[i] in request.c). */
#define EVENT_CPU (1u << 0)      /* "cpu": CPU samples with call stacks */
#define EVENT_OFFCPU (1u << 1)   /* "offcpu": off-CPU intervals with blocking stacks */
#define EVENT_COUNTERS (1u << 2) /* "counters": per-thread counters (counting mode) */
#define EVENT_RSS (1u << 3)      /* "rss": each process's memory (RSS, PSS, swap...) every interval */
#define EVENT_MALLOC (1u << 4)   /* "malloc": allocations sampled by bytes (uprobes on the allocator,
				  * or the process's own otel_memory USDT probes) */
#define EVENT_CUDA (1u << 5)     /* "cuda": uprobes on the CUDA runtime and driver API */
#define EVENT_NVTX (1u << 6)     /* "nvtx": uprobes on NVTX ranges */
/*
 * Not counters: per-thread perf events perturb the per-CPU cpu-clock
 * sampling on Linux 6.18 (measured: with them, one thread of spin-threads
 * kept 14-85% fewer samples than its task-clock time; without them, samples
 * match CPU time to 1%). Cause not found; counters stay opt-in until it is.
 */
#define EVENT_DEFAULT (EVENT_CPU | EVENT_OFFCPU | EVENT_RSS)

/*
 * Probed calls per second above which a session's CUDA/NVTX/generic probes
 * are detached by default: each call costs the target microseconds
 * (bench/uprobe-cost: 8-13 us on a Firecracker VM), so 20000 calls/s cost
 * it about a fifth of a CPU.
 */
#define DEFAULT_UPROBE_MAX_CALLS_PER_S 20000

struct request {
	enum request_cmd cmd;
	int64_t pid;          /* attach: >= 1 */
	int64_t session;      /* detach, session, top, hotpaths, threads: >= 1 */
	uint64_t duration_ns; /* attach: 0 = until detach or exit */
	unsigned freq_hz;     /* attach: 1..PROFD_MAX_FREQ_HZ; 0 if not given (profd's default) */
	unsigned events;      /* attach: EVENT_* bits, EVENT_CPU at least */
	char events_str[64];  /* attach: the events as a comma-separated list */
	bool events_given;    /* attach: "events" was in the request (else EVENT_DEFAULT) */
	int limit;            /* top, hotpaths, offcpu, memory: 1..10000 */
	uint64_t memory_interval_ns;  /* attach: RSS series period, 0.1 s..1 h, default 1 s */
	uint64_t malloc_sample_bytes; /* attach: mean bytes between allocation samples, 1..2^40 */
	uint64_t malloc_max_hits_per_s; /* attach: allocation probes detached above it; 0: never */
	int unwind;           /* attach: enum unwind_mode (unwind_worker.h), default auto */
	unsigned stack_bytes; /* attach: 512..PROFILE_MAX_STACK_BYTES, default 16384 */
	bool debuginfod;      /* resymbolize: may fetch through libdebuginfod */
	bool children;        /* attach: follow processes the target forks */
	bool python;          /* attach: merge CPython frames into stacks ("auto", the default) */
	char uprobes[1024];   /* attach: LIB:SYMBOL[,LIB:SYMBOL] generic probes, "" for none */
	uint64_t uprobe_max_calls_per_s; /* attach: CUDA/NVTX/generic probes detached above it; 0: never */
	const char *sampled_event; /* attach: a second event to sample with stacks (static name), or NULL;
				    * top, hotpaths: report that event's samples instead of CPU samples */
	bool python_all;      /* top, hotpaths, profile, analyze: "python_frames":"all", every
			       * frame; else the Python view (report/python_frames.c) */
	bool all_threads;     /* threads: every thread, not only the busy ones plus a summary */
	bool group_by_name;   /* threads: group like-named threads */
	double window_s;      /* threads: > 0, imbalance per window of this many seconds */
	bool has_range;       /* top, hotpaths, profile: from_s or to_s given */
	int64_t from_ns, to_ns; /* their range, ns from the session start; to_ns INT64_MAX: open */
	char sql[REQUEST_MAX_SQL_BYTES]; /* sql: the statement */
	int64_t max_rows;     /* sql: 1..1000000, default 10000 */
	bool per_window;      /* profile: samples per 1-second window (default), or summed */
	bool packed;          /* profile: the samples as one "samples_packed" string */
	bool per_thread;      /* profile, summed: rows per thread (default), or per stack only */
	uint64_t pid_start_ticks; /* attach: if not 0, the target's /proc/PID/stat starttime
				   * the requester saw; another value means the PID was reused */
	char label[257];      /* attach: free text stored with the session, "" if none */
};

/*
 * request__set_events() - set the events of the attach request @req to
 * @events (EVENT_* bits), and its events_str to match (the sampled event,
 * if any, last).
 */
void request__set_events(struct request *req, unsigned events);

/*
 * request__parse() - parse @len bytes at @line (no newline needed, need not
 * be NUL-terminated).
 * Returns 0 with *@ret filled, or -EINVAL (malformed, wrong type, out of
 * range, unknown command or event), -EPROTONOSUPPORT (wrong "v"), -E2BIG
 * (longer than PROFD_MAX_REQUEST_BYTES); on error @errbuf (of @errlen bytes)
 * holds one sentence for the client. Does not log; allocates only
 * temporarily.
 */
int request__parse(const char *line, size_t len, struct request *ret, char *errbuf,
		   size_t errlen);

/*
 * sampled_event_lookup() - the perf_event_open(2) type and config of the
 * event @name that can be sampled with stacks beside the CPU event
 * (page-faults, context-switches, cpu-migrations, instructions,
 * cache-references, cache-misses, branch-misses), and its sample period
 * (events per sample). Returns the static name, or NULL if @name is not one.
 */
const char *sampled_event_lookup(const char *name, uint32_t *ret_type, uint64_t *ret_config,
				 uint64_t *ret_period);
