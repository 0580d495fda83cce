/*
 * store.h - the SQLite database: opening, schema migrations and the writes
 * the daemon makes (sessions, threads, mappings, frames, stacks, samples).
 * Reads for reports live in query.c.
 */
#pragma once

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfi_walk.h"
#include "symbols/symbolize.h"

struct store;

/* A new session row (strings are copied by SQLite). */
struct store_session {
	int pid;
	uint64_t pid_start_ticks;
	const char *comm;
	const char *exe;       /* may be NULL */
	unsigned uid;
	const char *event;     /* "cycles" or "cpu-clock" */
	const char *events;    /* comma-separated, as asked */
	unsigned freq_hz;
	const char *unwind;    /* "fp", "dwarf" or "auto" */
	unsigned stack_bytes;  /* user stack copied per sample, 0 with "fp" */
	bool follow_children;  /* processes the target forks join the session */
	const char *sampled_event;        /* second event sampled with stacks, or NULL */
	const char *sampled_event_status; /* "ok" or "unsupported", NULL without one */
	uint64_t duration_ns;  /* 0: none */
	uint64_t started_at_ns;
	const char *label;     /* free text, NULL or "" for none */
	uint64_t offcpu_period_ns; /* off-CPU sampling period (offcpu__period_ns()); 0: no offcpu */
};

/* Counters added to a session (and its window row) at a flush. */
struct store_counts {
	uint64_t samples;
	uint64_t lost_samples;
	uint64_t truncated_stacks;
	uint64_t missing_user_stacks;
	uint64_t unsymbolized_frames;
	uint64_t unwind_dropped;      /* session only: also counted in lost_samples */
	uint64_t frames;              /* session only: distinct frames symbolized */
	uint64_t limit_dropped;       /* session only: samples dropped at a session limit */
};

/*
 * store__init_library() - set SQLite up for profd, before its first use in
 * the process and before any thread: no memory statistics (with them,
 * every allocation SQLite makes takes one process-wide mutex; profd reads
 * none of sqlite3_status(), sqlite3_memory_used() or heap limits). Returns
 * 0, or -EBUSY when SQLite was already initialized (then nothing changed).
 */
int store__init_library(void);

/*
 * store__open() - open or create the database at @path (mode 0600: created
 * so, or made so if others could read it), switch it to WAL, and apply the migrations in schema/ that
 * PRAGMA user_version says are missing, each in its own transaction.
 * The connection has no mutex of its own (SQLITE_OPEN_NOMUTEX): a store
 * is used by one thread at a time (profd's event loop).
 * Returns 0, -EIO if SQLite fails (the message is in store__errmsg() of a
 * half-open store, so *@ret_store is set even then, and must be closed),
 * -EPROTO if the database is newer than this profd, -ENOMEM.
 */
int store__open(const char *path, struct store **ret_store);
void store__close(struct store *st); /* accepts NULL */
sqlite3 *store__db(struct store *st);
const char *store__errmsg(struct store *st);
/* store__schema_version() - PRAGMA user_version after migrations. */
int store__schema_version(struct store *st);
/* Number of migrations this build knows. */
int store__latest_version(void);

int store__begin(struct store *st);
/* Documented in store.c: a flush's transaction, foreign keys not enforced until it ends. */
int store__begin_flush(struct store *st);
int store__commit(struct store *st);
void store__rollback(struct store *st);

/*
 * store__mark_interrupted() - sessions left 'running' by a profd that died
 * are marked ended with end_reason 'interrupted' and ended_at at the end of
 * their last stored window. Returns the number of sessions marked, or -EIO.
 */
int store__mark_interrupted(struct store *st);

/* The fleet sinks sessions are shipped to (fleet_cursors.sink, schema 16). */
enum store_sink {
	STORE_SINK_CLICKHOUSE = 1 << 0,
	STORE_SINK_PYROSCOPE = 1 << 1,
};

/*
 * store__set_fleet_sinks() - the sinks (STORE_SINK_* bits, 0: none) that
 * sessions are shipped to: store__retention()'s age limit then keeps an
 * ended session until every one of them has it whole (fleet_cursors.done),
 * and store__merge_windows() never merges past what any of them has
 * (fleet_cursors.shipped_until_ns: their chunks read the windows). Does not
 * fail.
 */
void store__set_fleet_sinks(struct store *st, unsigned sinks);

/* What store__retention() did. */
struct store_retention {
	unsigned sessions_deleted;
	unsigned unshipped_deleted; /* of those, sessions a fleet sink did not have whole */
	uint64_t bytes_before;   /* database file size before, bytes */
	uint64_t bytes_after;    /* after, once free pages went back to the file system */
	bool over_limit;         /* still above max_db_bytes: only running sessions left */
};

/*
 * store__retention() - delete ended sessions (whole: every row of theirs,
 * then the stacks and frames no session uses any more) that ended more than
 * @retention_ns before @now_ns (0: no age limit) and that every fleet sink
 * (store__set_fleet_sinks()) has whole, then the oldest ended ones while the
 * live data is larger than @max_db_bytes (0: no size limit), shipped or not
 * (unshipped_deleted counts those a sink did not have).
 * Running sessions are never deleted. Free pages go back to the file system
 * (incremental vacuum, if store__enable_incremental_vacuum() was done) and
 * the WAL is truncated. Each round is one transaction.
 * Returns 0 with *@ret filled, or -EIO (store__errmsg()). Blocks for as long
 * as the deletes take; does not log.
 */
int store__retention(struct store *st, uint64_t now_ns, uint64_t retention_ns,
		     uint64_t max_db_bytes, struct store_retention *ret);

/* What store__merge_windows() did. */
struct store_merge {
	unsigned sessions;    /* sessions whose windows were merged (started, for a step) */
	uint64_t rows_before; /* rows of the window tables that were merged */
	uint64_t rows_after;  /* the rows they became */
	bool more;	      /* stopped at @max_windows: older windows are left to merge */
};

/*
 * store__merge_windows() - merge the 1 s windows of every session that
 * ended more than @after_ns before @now_ns (CLOCK_REALTIME ns) into windows
 * of @window_ns, at most @max_windows merged windows in all (oldest first):
 * per merged window, one transaction for the session's mark, then one per
 * table. The rows of samples, event_samples, offcpu,
 * thread_counters and windows in a merged window become one per key with
 * the sums (docs/schema.md, schema 15); the rollups are unchanged; the
 * session's merged_until_ns and merged_window_ns say how far. A session
 * keeps the @window_ns it was first merged with, and merged windows start
 * at started_at_ns + k * window_ns. With fleet sinks set
 * (store__set_fleet_sinks()), a session is merged only up to the least of
 * its fleet_cursors.shipped_until_ns for those sinks (not at all before it
 * has a cursor of each). @after_ns 0 or @window_ns under 2 s:
 * nothing is done. Returns 0 with *@ret filled, -ENOMEM, or -EIO
 * (store__errmsg(); the part being merged is left as it was). Blocks
 * for as long as the merge takes (store__merge_step() is the bounded
 * form); does not log.
 */
int store__merge_windows(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
			 unsigned max_windows, struct store_merge *ret);

/*
 * Where store__merge_step() is: the merged window it works on and how far
 * it got. Zero it before the first call; it lives in memory only (after a
 * restart, rows of a window whose mark had moved stay unmerged: right,
 * only not smaller).
 */
struct store_merge_cursor {
	bool active;				/* a merged window is being merged */
	bool marked;				/* its session's mark has moved */
	int64_t session_id, started_ns, window_ns; /* its session, and the merged window's length */
	int64_t from, to;			/* the span of window_ns it merges, [from, to) */
	size_t table;				/* the table at hand (windows.c) */
	int64_t next_tid;			/* its first thread not merged yet */
};

/*
 * store__merge_step() - one short transaction of what store__merge_windows()
 * does for one merged window at a time: first the session's mark, then each
 * table's rows in parts of a few threads, at most about @max_rows rows per
 * transaction (a thread's rows are never split). For the event loop: it
 * never holds the database (nor the caller) for long. @c carries the work
 * from call to call. *@ret: sessions 1 when a merged window was started,
 * the rows merged, and more false only when nothing was due. Returns 0,
 * -ENOMEM or -EIO (that step rolled back; @c starts over at the next call).
 */
int store__merge_step(struct store *st, uint64_t now_ns, uint64_t after_ns, uint64_t window_ns,
		      unsigned max_rows, struct store_merge_cursor *c, struct store_merge *ret);

/*
 * store__enable_incremental_vacuum() - switch the database to
 * auto_vacuum=INCREMENTAL, so that deleted data can be given back to the
 * file system. A database made before is rewritten once (VACUUM: it needs
 * as much free space as the database, and time). Returns 1 if it rewrote
 * the file, 0 if nothing was needed, -EIO. Does not log.
 */
int store__enable_incremental_vacuum(struct store *st);

/* store__size_bytes() - the database file's size (page_count * page_size), or -EIO. */
int64_t store__size_bytes(struct store *st);

int store__session_insert(struct store *st, const struct store_session *s, int64_t *ret_id);
int store__session_add_counts(struct store *st, int64_t id, const struct store_counts *c);
/*
 * store__session_python() - how the session walks Python frames: @status
 * "off", "ok", "not_found" or "unsupported"; @version "3.11.7" or NULL.
 * Returns 0 or -EIO. Does not log.
 */
int store__session_python(struct store *st, int64_t id, const char *status, const char *version);
/*
 * store__session_add_python() - add @samples CPU samples with Python frames
 * merged, and @unmerged whose Python frames did not match the native stack.
 */
int store__session_add_python(struct store *st, int64_t id, uint64_t samples, uint64_t unmerged);

/* Records whose user stack BPF walked from the CFI tables, and those that fell back. */
struct store_table_walk {
	uint64_t walked;
	uint64_t fallbacks[CFI_STOP_NR]; /* by the reason the walk stopped (enum cfi_walk_stop) */
};

/*
 * store__session_table_walk() - set the unwind "tables" counters of session
 * @id to the running totals @w of its CPU samples (@offcpu: off-CPU
 * intervals); the fallbacks are stored as a JSON object by reason name,
 * END and MAX_FRAMES left out. Returns 0, -ENOMEM, or -EIO.
 */
int store__session_table_walk(struct store *st, int64_t id, bool offcpu,
			      const struct store_table_walk *w);
/*
 * store__session_uid() - the uid that started session @id (its owner, for
 * authz__may_see()). Returns 0 and *@ret_uid, -ENOENT if there is no such
 * session, -EIO. Does not log.
 */
int store__session_uid(struct store *st, int64_t id, uid_t *ret_uid);
/* Documented where they are defined, in store.c: what resymbolize writes. */
int store__frame_name(struct store *st, int64_t frame_id, const char *function, const char *file,
		      int line);
int store__session_frames_named(struct store *st, int64_t id, uint64_t named);
/* store__session_end() - state 'ended', with @reason and @ended_at_ns. */
int store__session_end(struct store *st, int64_t id, const char *reason, uint64_t ended_at_ns);

int store__window_add(struct store *st, int64_t session_id, uint64_t window_ns,
		      const struct store_counts *c);
/* store__thread_upsert() - @exited_ns: when the thread exited (Unix ns), 0 if it did not. */
int store__thread_upsert(struct store *st, int64_t session_id, int pid, int tid, const char *name,
			 uint64_t seen_ns, uint64_t samples, uint64_t exited_ns);
int store__mapping_insert(struct store *st, int64_t session_id, int pid, const struct mapping *m);

/*
 * store__frame_id() - id of the frame row for @f, inserted if new; a frame
 * without module is stored with module "[unknown]". Returns 0 or -errno.
 */
int store__frame_id(struct store *st, const struct frame_info *f, int64_t *ret_id);
/*
 * store__stack_id() - id of the stack of @n frame ids (leaf first), inserted
 * if new with @truncated and @reached_root (see schema/0002): one stacks row,
 * its frames both as the frame_ids blob and as frame_ids_json, which the
 * stack_frames view reads (schema/0020). Returns 0, -ENOMEM or -EIO.
 */
int store__stack_id(struct store *st, const int64_t *frame_ids, size_t n, bool truncated,
		    bool reached_root, int64_t *ret_id);
/*
 * store__offcpu_add() - add @count off-CPU intervals of @tid, @total_ns long
 * together, blocked in @stack_id in @state ("sleeping", "io", "runnable",
 * "other"), to a window.
 */
int store__offcpu_add(struct store *st, int64_t session_id, uint64_t window_ns, int pid, int tid,
		      int64_t stack_id, const char *state, uint64_t count, uint64_t total_ns);
/*
 * store__counter_add() - add @value to counter @name of @tid in a window;
 * @status "ok", "unsupported" or "denied" (value stored NULL unless "ok").
 */
int store__counter_add(struct store *st, int64_t session_id, uint64_t window_ns, int tid,
		       const char *name, const char *status, uint64_t value);
/* store__session_counter() - record whether counter @name is "ok", "unsupported" or "denied". */
int store__session_counter(struct store *st, int64_t session_id, const char *name,
			   const char *status);
/* store__session_add_offcpu_lost() - off-CPU intervals lost before storage. */
int store__session_add_offcpu_lost(struct store *st, int64_t session_id, uint64_t lost);

/* One reading of a process's memory (bytes; time_ns: CLOCK_REALTIME). */
/* Mapping kinds of a memory reading (memory_samples.map_*_bytes; names: memory__map_kind_name()). */
enum memory_map_kind {
	MEMORY_MAP_HEAP,  /* [heap]: the brk heap */
	MEMORY_MAP_ANON,  /* anonymous mappings */
	MEMORY_MAP_STACK, /* [stack] */
	MEMORY_MAP_SHMEM, /* /dev/shm, memfd, SysV shm, shared anonymous */
	MEMORY_MAP_FILE,  /* other files */
	MEMORY_MAP_OTHER, /* [vdso], [vvar], ... */
	MEMORY_MAP_NR_KINDS
};

struct store_memory {
	uint64_t time_ns;
	int pid;
	uint64_t rss_bytes, pss_bytes, anon_bytes, file_bytes, shmem_bytes, swap_bytes;
	bool has_pss;  /* pss_bytes was summed from /proc/PID/smaps */
	bool has_maps; /* map_bytes[] were read (smaps) */
	uint64_t map_bytes[MEMORY_MAP_NR_KINDS]; /* resident bytes by enum memory_map_kind */
};

/* Address-space changes of one process and stack (vm_changes): static strings. */
struct store_vm_change {
	int pid;
	int64_t stack_id;
	const char *change;  /* "brk", "mmap", "munmap", "mremap", "fault" */
	const char *mapping; /* "heap", "anon", "shmem", "file", "touch" */
	uint64_t events;
	int64_t bytes;       /* signed: added to the address space */
};

/* One sampled allocation (times: CLOCK_REALTIME ns; free_ns 0: live). */
struct store_allocation {
	int pid, tid;
	int64_t stack_id;
	const char *func; /* static name */
	uint64_t size_bytes;
	double weight_bytes;
	uint64_t address, alloc_ns, free_ns;
	bool untracked;
};

/* Running totals of a session's allocation probes. */
struct store_malloc {
	uint64_t malloc_calls, free_calls, malloc_bytes, sampled, lost;
	uint64_t stopped_ns; /* CLOCK_REALTIME when the probes were detached for their cost; 0: never */
};

/* store__memory_add() - add one reading of a process's memory (replaces one at the same time). */
int store__memory_add(struct store *st, int64_t session_id, const struct store_memory *m);
/* store__vm_change_add() - add @c's events and bytes to its row of vm_changes. */
int store__vm_change_add(struct store *st, int64_t session_id, const struct store_vm_change *c);
/* store__session_vm() - set the session's address-space totals (running totals, struct vm_stats). */
int store__session_vm(struct store *st, int64_t session_id, uint64_t events, uint64_t unsent,
		      unsigned fault_period);
/* store__allocation_add() - add a sampled allocation; *@ret_id gets its row id. */
int store__allocation_add(struct store *st, int64_t session_id, const struct store_allocation *a,
			  int64_t *ret_id);
/* store__allocation_freed() - set the free time of allocation @id. */
int store__allocation_freed(struct store *st, int64_t id, uint64_t free_ns);
/* store__session_malloc() - set the session's allocation-probe totals. */
int store__session_malloc(struct store *st, int64_t session_id, const struct store_malloc *m);
/*
 * store__session_memory_config() - record how memory is watched: the RSS
 * series period (@interval_ns, 0: none), the mean bytes between allocation
 * samples (0: allocations not traced), what was probed (@probes, or NULL)
 * and the probe hits per second above which they are detached (0: never).
 */
int store__session_memory_config(struct store *st, int64_t session_id, uint64_t interval_ns,
				 uint64_t sample_bytes, const char *probes, uint64_t max_hits_per_s);

/*
 * store__sample_add() - add @count samples of @stack_id in @tid to a window,
 * of the CPU event (@event 0, table samples) or the second sampled event
 * (@event 1, table event_samples).
 */
int store__sample_add(struct store *st, int64_t session_id, uint64_t window_ns, int tid,
		      int64_t stack_id, uint64_t count, int event);

/* CUDA, NVTX and uprobe accounting (store/gpu.c; schema 0009). */
enum store_gpu_table {
	STORE_GPU_API,    /* gpu_api_calls: calls, errors, times per API */
	STORE_GPU_KERNEL, /* gpu_kernels: launches per kernel, API, grid, block, stack */
	STORE_GPU_COPY,   /* gpu_copies: calls and bytes per API and direction */
	STORE_GPU_SYNC,   /* gpu_syncs: calls and time per API and stack */
	STORE_GPU_NVTX,   /* nvtx_ranges: per range path and kind */
	STORE_GPU_UPROBE, /* uprobe_calls: calls and times per --uprobe probe */
	STORE_GPU_NR_TABLES,
};

/* One aggregate row; which fields a table keeps: see agg_sql in store/gpu.c. */
struct store_gpu_agg {
	enum store_gpu_table table;
	const char *key1;       /* API, kernel name, NVTX path or probe label */
	const char *key2;       /* kernel API, copy direction or NVTX kind */
	const char *grid, *block; /* kernel launch dimensions, "x,y,z" */
	const char *name;       /* NVTX range's innermost name */
	int depth;              /* NVTX nesting depth */
	int64_t stack_id;       /* kernels, syncs: the stack row; 0 for none */
	uint64_t calls, errors;
	uint64_t total_ns, min_ns, max_ns; /* time inside the calls */
	uint64_t bytes;         /* copies */
};

struct store_gpu_mem_event {
	uint64_t time_ns;        /* CLOCK_REALTIME */
	const char *api, *space; /* "cudaMalloc", "device" */
	uint64_t requested_bytes, address;
	int64_t live_delta_bytes; /* + allocated, - freed, 0 if the call failed */
	bool ok;
	int64_t stack_id;
};

/* Losses and gaps since the last flush, added to the session's totals. */
struct store_gpu_counts {
	uint64_t lost_calls, nvtx_unmatched, unnamed_launches, truncated_stacks, missing_stacks;
};

/* Documented where they are defined, in store/gpu.c. */
int store__gpu_agg_add(struct store *st, int64_t session_id, uint64_t window_ns,
		       const struct store_gpu_agg *g);
int store__gpu_mem_event_add(struct store *st, int64_t session_id,
			     const struct store_gpu_mem_event *m);
int store__gpu_probe_add(struct store *st, int64_t session_id, pid_t pid, const char *what,
			 const char *file, const char *status);
int store__session_gpu_counts_add(struct store *st, int64_t session_id,
				  const struct store_gpu_counts *c);
