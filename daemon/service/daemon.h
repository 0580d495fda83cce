/*
 * daemon.h - the running daemon's state, shared by the files of the service:
 * the session slots, the collectors that feed them, the event loop's
 * watches, and the calls between main.c (the loop), sessions.c (records,
 * flush, end), features.c (probe features), attach.c and dispatch.c.
 * Not for the rest of the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <jansson.h>

#include "bpf/profile.h"
#include "collect/counters.h"
#include "collect/malloc_probes.h"
#include "collect/offcpu.h"
#include "service/config.h"
#include "service/request.h"
#include "service/server.h"
#include "session/session.h"

/*
 * The probe features a session may add to CPU sampling, each with its own
 * BPF object (features.c): what the service does for all of them alike
 * (probes for followed children, a limit on probed calls per second,
 * records lost in the kernel charged to the session) is written once.
 */
enum probe_kind {
	PROBE_OFFCPU,  /* sched_switch intervals (collect/offcpu.c) */
	PROBE_MALLOC,  /* allocation uprobes (collect/malloc_probes.c) */
	PROBE_UPROBES, /* CUDA, NVTX and --uprobe probes (collect/uprobes.c) */
	PROBE_NR,
};

/* What features.c keeps for each session slot and probe feature; zeroed at attach. */
struct probe_state {
	uint64_t
	    lost_charged;    /* the collector's running total of lost records, when last charged */
	uint64_t max_per_s;  /* probes detached above this many calls/s; 0: no limit */
	uint64_t calls_seen; /* calls at the last rate check */
	uint64_t calls_base; /* calls at the attach (the collector's counters run on) */
	uint64_t rate_mono_ns; /* ...and when it was (CLOCK_MONOTONIC) */
	bool stopped;	       /* detached for their rate */
};

struct profd {
	const struct profd_config *cfg; /* the effective settings */
	int epfd;
	bool quit;
	struct session_env env;
	struct server *server;
	struct readers *readers; /* reports and SQL run there, never on the loop */
	struct pyroscope *pyroscope; /* the Pyroscope push thread; NULL without pyroscope_url */
	struct shipper *shipper; /* ships sessions to ClickHouse; NULL without clickhouse_url */
	struct unwind_worker *worker;
	struct offcpu *offcpu; /* NULL if off-CPU tracing cannot load */
	struct malloc_probes
	    *malloc_probes;	   /* loaded at first use; NULL before or if it cannot load */
	struct uprobes *uprobes;   /* CUDA, NVTX, --uprobe; loaded at first use, or NULL */
	struct unwinder *unwinder; /* the loop's, for off-CPU and allocation stacks */
	struct counters_support counters; /* what this machine can count */
	struct session *slots[PROFILE_MAX_SLOTS];
	struct probe_state probes[PROFILE_MAX_SLOTS][PROBE_NR];
	struct watch sampler_watch, timer_watch, signal_watch, worker_watch, offcpu_watch,
	    malloc_watch, uprobes_watch, readers_watch;
	int timer_fd, signal_fd;
	uint64_t last_flush_ns;	    /* CLOCK_MONOTONIC */
	uint64_t last_counters_ns;  /* CLOCK_MONOTONIC: hardware counters read per window */
	uint64_t last_retire_ns;    /* CLOCK_MONOTONIC: exited children looked for */
	uint64_t last_refresh_ns;   /* CLOCK_MONOTONIC of the last features__refresh() round */
	uint64_t last_retention_ns; /* CLOCK_MONOTONIC */
	uint64_t last_merge_ns;	    /* CLOCK_MONOTONIC of the last profd__merge_windows() */
	uint64_t last_symbols_trim_ns; /* CLOCK_MONOTONIC of the last symbolizer__trim() */
	uint64_t last_file_pages_ns;   /* CLOCK_MONOTONIC of the last symbolizer__drop_pages() */
	uint64_t file_pages_files;     /* symbolizer__files_opened() at that time */
	bool file_pages_due;	       /* a session ended since: drop at the next tick */
	bool merge_backlog;	    /* it stopped at its bound: older windows wait */
	struct store_merge_cursor merge_cursor; /* the merged window it works on */
	uint64_t watchdog_ns;	    /* WATCHDOG=1 this often; 0: no watchdog */
	uint64_t last_watchdog_ns;
	uint64_t flush_errors;		 /* failed flushes in a row */
	uint64_t flush_failing_since_ns; /* CLOCK_REALTIME of the first of them */
	char flush_error[256];		 /* SQLite's message for the last one */
	/* A session's pidfd, watched for the target's exit. */
	struct pid_watch {
		struct watch watch;
		struct profd *profd;
		unsigned slot;
	} pid_watches[PROFILE_MAX_SLOTS];
};

/* profd__add_watch() - call @fn from the loop when @fd is readable. Returns 0 or -errno. */
int profd__add_watch(struct profd *p, int fd, struct watch *w,
		     void (*fn)(struct watch *, uint32_t));

/* In sessions.c; each is documented there. */
void profd__on_sample(void *ctx, const struct sample_event *e, size_t size);
void profd__on_offcpu(void *ctx, const struct offcpu_event *e, size_t size);
void profd__on_malloc(void *ctx, const struct malloc_event *e, size_t size);
void profd__collect(struct profd *p, bool wait_for_unwinder);
int profd__flush(struct profd *p);
void profd__retire_exited(struct profd *p);
int profd__end_session(struct profd *p, unsigned slot, const char *reason);
int profd__watch_exit(struct profd *p, unsigned slot);
void profd__run_retention(struct profd *p);
void profd__merge_windows(struct profd *p);
void profd__notify_status(struct profd *p);
unsigned profd__running(const struct profd *p);

/* In features.c; each is documented there. */
int features__load_malloc(struct profd *p);
int features__load_uprobes(struct profd *p);
void features__start(struct profd *p, unsigned slot, const struct request *req);
void features__attach_uprobes(struct profd *p, unsigned slot, const struct request *req);
void features__charge_lost(struct profd *p);
void features__tick(struct profd *p, uint64_t mono_ns);
void features__before_flush(struct profd *p);
void features__stop(struct profd *p, unsigned slot);

/* In attach.c. */
json_t *attach__run(struct profd *p, const struct ucred *peer, bool admin,
		    const struct request *req);

/* In dispatch.c. */
json_t *dispatch__request(void *ctx, uint64_t client, const struct ucred *peer, const char *line,
			  size_t len);
json_t *dispatch__finish(struct profd *p, json_t *resp);
void dispatch__gone(void *ctx, uint64_t client);
json_t *dispatch__ok(json_t *fields);
json_t *dispatch__result(int r, json_t *fields, int64_t session_id);

/* In options.c. */
int options__parse(int argc, char **argv, struct profd_config *cfg);
