/*
 * session.h - one profiling session: a target process, its sampling slot,
 * the samples aggregated since the last flush, and the flush that turns raw
 * addresses into symbolized frames and stacks in the store.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "collect/counters.h"
#include "session/gpu_acc.h"
#include "hashmap.h"
#include "symbols/perfmap.h"
#include "procfs.h"
#include "symbols/python.h"
#include "collect/unwind_worker.h"
#include "bpf/malloc.h"
#include "collect/sampler.h"
#include "store/store.h"
#include "symbols/symbolize.h"
#include "collect/unwind_worker.h"

/* What a session needs from the daemon (all borrowed). */
struct session_env {
	struct store *store;
	struct sampler *sampler; /* NULL: nothing is sampled; the caller feeds the records (tests) */
	struct symbolizer *sym;
	const struct counters_support *counters; /* what this machine can count */
};

struct session_params {
	pid_t pid;
	uid_t uid;            /* requester (SO_PEERCRED) */
	gid_t gid;            /* its gid */
	bool admin;           /* authz__is_admin(): may profile any process */
	unsigned freq_hz;     /* 1..PROFD_MAX_FREQ_HZ */
	uint64_t duration_ns; /* 0: until detach or exit */
	const char *events;   /* comma-separated, validated by the caller */
	unsigned event_bits;  /* EVENT_* of request.h */
	enum unwind_mode unwind;
	unsigned stack_bytes; /* user stack copied per sample (dwarf, auto), 512..PROFILE_MAX_STACK_BYTES */
	bool follow_children; /* processes the target forks after the attach join the session */
	bool python;          /* merge CPython frames into stacks where the target runs CPython */
	const char *sampled_event; /* a second event sampled with stacks (request.c's name), or NULL */
	uint64_t memory_interval_ns;  /* RSS series period (events rss) */
	/* a round of smaps reads waits at least this many times its CPU time (thread CPU clock);
	 * 0: the default, 1000 (0.1% of a core) */
	unsigned maps_cost_factor;
	uint64_t malloc_sample_bytes; /* mean bytes between allocation samples (events malloc) */
	uint64_t malloc_max_hits_per_s; /* probes detached above this rate; 0: never */
	uint64_t pid_start_ticks;  /* if not 0: the starttime the requester saw (PID reuse check) */
	const char *label;         /* stored with the session; NULL or "" for none */
	unsigned max_threads;      /* threads sampled; more at attach: -E2BIG; later: dropped */
	unsigned max_stacks;       /* distinct call stacks (and rows waiting for a flush) */
};

/* Modules per process whose table is loaded on demand (unwind "auto" or "tables");
 * beyond: fallbacks. */
#define PROC_TABLE_MODULES 64

/* One process of a session: the target, or a child it forked (follow_children). */
struct proc {
	pid_t pid;
	/* The unwinding thread reads @as under a read lock; refreshes take it for writing. */
	pthread_rwlock_t as_lock;
	struct addrspace *as;
	struct perfmap *jit; /* /tmp/perf-PID.map, for code outside any file mapping */
	unsigned probes_tried; /* a child: bit (1 << feature) once that probe feature was attached
				* to it, or tried (daemon/service/features.c) */
	bool tables_asked;     /* unwind "auto" or "tables": its CFI tables were asked of the sampler */
	/* unwind "auto" or "tables": the mappings (start addresses) whose module's table was asked
	 * for after a walk stopped there, at most PROC_TABLE_MODULES */
	unsigned n_table_modules;
	uint64_t table_modules[PROC_TABLE_MODULES];
};

/* struct session is private to daemon/session/ (session_internal.h): use the session__*() calls. */
struct session;



/* Documented in procs.c. */
int session__discover_children(struct session *s, int targets_fd);
size_t session__exited_children(struct session *s, struct proc **ret, size_t max);
void session__proc_retire(struct session *s, struct proc *proc);

/* Documented in memory.c. */
int session__read_memory(struct session *s, uint64_t mono_ns);
void session__on_malloc(struct session *s, const struct malloc_event *e, const uint64_t *ips,
			unsigned n);
void session__on_vm(struct session *s, const struct sample_event *e);

/*
 * session__new() - check and open @p->pid, insert the session row, start
 * sampling it in @slot.
 * Returns 0 and *@ret, -ESRCH if the process does not exist (or is a zombie),
 * -E2BIG if the process has more than @p->max_threads threads,
 * -ESTALE if @p->pid_start_ticks is given and differs (the PID was reused),
 * -EPERM if @p->uid may not trace it (authz__may_trace(), unless @p->admin), -EBUSY if it is already a target,
 * -EOPNOTSUPP if no sampling event can be opened, -EIO on a store error,
 * -ENOMEM. Does not log.
 */
int session__new(const struct session_env *env, unsigned slot, const struct session_params *p,
		 struct session **ret);

/*
 * session__proc() - the process @pid of the session: the target, or a child
 * of it when the session follows children (its mappings are read the first
 * time). NULL if @pid is not the session's or its mappings cannot be read
 * (it already exited); the caller counts such samples as lost.
 */
struct proc *session__proc(struct session *s, pid_t pid);

/* session__on_sample() - account one sample (the sampler callback, per sample). */
void session__on_sample(struct session *s, const struct sample_event *e);

/*
 * session__on_offcpu() - account one off-CPU record of @tid (of process
 * @pid, thread name @comm, 16 bytes): @total_ns long, ending at @time_ns (CLOCK_MONOTONIC), in
 * @state
 * ("sleeping", "io", "runnable", "other"; static string), blocked in the
 * stack @ips: @klen kernel frames then @ulen user frames, leaf first.
 * @weight: the intervals the record stands for, >= 1 (a sampled short
 * interval, offcpu.bpf.c's keep_interval(): period / duration); it counts
 * @weight intervals and @weight * @total_ns nanoseconds.
 */
void session__on_offcpu(struct session *s, pid_t pid, pid_t tid, const char *comm, uint64_t time_ns,
			const char *state, uint64_t total_ns, double weight, const uint64_t *ips,
			unsigned klen, unsigned ulen);
/* session__count_offcpu_lost() - off-CPU intervals lost before they reached the session. */
void session__count_offcpu_lost(struct session *s, uint64_t n);

/*
 * session__read_counters() - open counters for threads that appeared since
 * the last call, read every thread's counters and keep the increases for the
 * next flush. Call once per window, before session__flush(). Returns 0 or
 * -ENOMEM; threads that exited are dropped silently. Does not log.
 */
int session__read_counters(struct session *s, const struct session_env *env);

/* session__on_thread_exit() - thread e->tid exited at e->time_ns (a PROFILE_EVENT_THREAD_EXIT record). */
void session__on_thread_exit(struct session *s, const struct sample_event *e);

/*
 * session__count_table_walk() - with unwind "auto" or "tables", a CPU sample @e as
 * BPF took it: walked (SAMPLE_CFI_WALKED) or fallen back to the stack copy
 * (SAMPLE_CFI_TRIED, cfi_stop the reason). Running totals, stored at each
 * flush (sessions.table_walked, table_fallbacks). Call once per record, as
 * it comes from the ring buffer, not again when it comes back unwound.
 */
void session__count_table_walk(struct session *s, const struct sample_event *e);
/*
 * session__count_offcpu_walk() - with the table walk on, an off-CPU interval
 * @e as its user stack was taken: walked in BPF (OFFCPU_CFI_WALKED), or a
 * fallback to the stack copy, counted by e->cfi_stop. Stored at each flush.
 */
struct offcpu_event;
void session__count_offcpu_walk(struct session *s, const struct offcpu_event *e);
/* session__count_dropped() - a sample of @s was lost before unwinding (queue full). */
void session__count_dropped(struct session *s, const struct sample_event *e);

/*
 * session__flush() - write what was aggregated since the last flush:
 * symbolize new stacks, add samples, windows, threads and counters. Must run
 * inside a store transaction the caller opened. Nothing is forgotten here:
 * after COMMIT succeeds the caller calls session__flush_done(); after an
 * error or a failed COMMIT it rolls back and calls session__flush_failed(),
 * and the same samples are written again by the next flush.
 * Returns 0 or -EIO/-ENOMEM. Does not log.
 */
int session__flush(struct session *s, const struct session_env *env);
void session__flush_done(struct session *s);
void session__flush_failed(struct session *s);

/*
 * session__forget_row_ids() - forget the stack and frame row ids the session
 * cached: retention may have deleted rows of other sessions that it shared.
 * They are looked up (or inserted) again at the next flush.
 */
void session__forget_row_ids(struct session *s);

/*
 * session__stop() - stop sampling (events closed; samples already in the ring
 * buffer are still delivered on the next poll of the sampler's ring buffer),
 * and note the target's threads alive now for the next flush (session__new()
 * noted those alive at the start), so that threads that never ran are listed.
 * Idempotent.
 */
void session__stop(struct session *s, const struct session_env *env);

/* session__expired() - true once the requested duration has passed at @mono_ns. */
bool session__expired(const struct session *s, uint64_t mono_ns);

void session__free(struct session *s); /* accepts NULL */

/*
 * What the rest of the daemon may read of a session. Each is a plain read
 * of a value fixed at session__new() (or a running total for
 * session__samples()); none blocks, allocates or logs.
 */
int64_t session__id(const struct session *s);          /* its row in the store */
pid_t session__pid(const struct session *s);           /* the target process */
int session__pidfd(const struct session *s);           /* polls readable when the target exits */
const char *session__comm(const struct session *s);    /* the target's name, <= 15 bytes */
const char *session__event(const struct session *s);   /* "cycles" or "cpu-clock" */
enum unwind_mode session__unwind(const struct session *s);
/* session__walks_tables() - whether its samples walk the CFI tables in BPF first
 * (unwind_walks_tables(): tables, or auto for a long enough session). */
bool session__walks_tables(const struct session *s);
unsigned session__events(const struct session *s);     /* EVENT_* bits of request.h */
bool session__follows_children(const struct session *s);
uint64_t session__samples(const struct session *s);    /* CPU samples so far, flushed or not */
uint64_t session__started_mono_ns(const struct session *s);	/* its attach, CLOCK_MONOTONIC */
uint64_t session__malloc_sample_bytes(const struct session *s); /* 0: allocations not traced */
struct gpu_acc *session__gpu(struct session *s);        /* its CUDA/NVTX/uprobe accounting */
struct proc *session__main_proc(struct session *s);     /* the target's entry */

/*
 * session__next_proc() - the processes of the session, the target and the
 * children it follows, one per call: start with *@iter = 0; NULL after the
 * last. Adding processes (session__proc(), session__discover_children())
 * between calls may skip or repeat some.
 */
struct proc *session__next_proc(struct session *s, size_t *iter);

/* Documented in memory.c. */
void session__set_malloc_stats(struct session *s, const struct malloc_stats *st);
void session__malloc_stopped(struct session *s, uint64_t real_ns);
bool session__malloc_probing(const struct session *s);
int session__store_memory_config(struct session *s, const struct session_env *env,
				 const char *probes);
