/*
 * session_internal.h - what the files of daemon/session/ share: the session
 * itself, its interned stacks (stacks.c) and their resolution into the
 * store. Not for the rest of the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cfi_walk.h"
#include "session/session.h"

/*
 * One write fault to a page not present in this many is sampled with its
 * stack when a session follows address-space changes: 256 KiB of first
 * touches per sample.
 */
#define SESSION_VM_FAULT_PERIOD 64
/* Mappings remembered per session for the munmap that undoes them. */
#define SESSION_VM_MAX_REGIONS 65536

/*
 * By default a round of smaps reads (memory.c) also waits at least this
 * many times what it cost (the daemon thread's CPU time): it may take 0.1%
 * of a core. A round walks the page tables and formats ~25 lines per
 * mapping in the kernel: on a PyTorch CPU loop (~1,700 mappings, 240 MiB
 * resident) it is ~6.5 ms, one every 6.5 s; at 1%, a round every 0.65 s,
 * it was ~40% of profd's CPU on that job (8 of ~19 us per CPU sample at
 * 999 Hz). A small process (~100 mappings, ~0.2 ms) keeps a split at every
 * reading, unless the machine stretches one round past 1.5 ms.
 */
#define MAPS_COST_FACTOR 1000

/* One profiling session (session.h says what it is). */
struct session {
	int64_t id;
	unsigned slot;
	pid_t pid;
	uid_t uid;
	char comm[16];
	const char *event; /* "cycles" | "cpu-clock" */
	uint64_t duration_ns;
	uint64_t started_mono_ns; /* CLOCK_MONOTONIC, as the BPF sample times */
	uint64_t started_real_ns; /* CLOCK_REALTIME at the same instant */
	int pidfd;		  /* polls readable when the target exits */
	enum unwind_mode unwind;
	bool walks_tables; /* unwind_walks_tables(): the BPF table walk is on */
	bool follow_children;
	unsigned events; /* EVENT_* */

	struct hashmap procs;		/* struct proc, by PID: the target and followed children */
	struct proc *main;		/* the target's entry in @procs */
	bool procs_added;		/* children whose mappings are not stored yet */
	struct hashmap mappings_stored; /* struct mapping_key, mappings already in the store */
	struct hashmap stacks;		/* struct raw_stack: stacks seen, by content */
	struct hashmap frames;		/* struct frame_cache: address -> frame row */
	struct stack_memo *stack_memo;	/* rows of evicted stacks (stacks.c); NULL until one */
	struct hashmap pending;		/* struct pending_sample: samples since the last flush */
	struct hashmap threads;		/* struct thread_acc: threads seen since the last flush */
	struct hashmap windows;		/* struct window_acc: counters since the last flush */
	uint64_t lost_seen;		/* sampler__lost() at the last committed flush */
	uint64_t lost_flushing;		/* sampler__lost() of the flush in progress */
	uint64_t unsymbolized_pending;	/* new unsymbolized frames since the last flush */
	uint64_t frames_pending;	/* new frames since the last flush */
	uint64_t unwind_dropped; /* samples the unwinding thread had no room for, not yet flushed */
	uint64_t unwind_dropped_flushing;
	uint64_t samples; /* total so far (flushed or not) */
	/* unwind "auto" or "tables": CPU samples and off-CPU intervals walked in BPF, and fallen
	 * back (running totals, written whole at each flush) */
	struct store_table_walk table_walk, offcpu_table_walk;

	struct hashmap offcpu; /* struct offcpu_acc: off-CPU intervals since the last flush */
	uint64_t offcpu_lost;  /* not yet flushed */
	uint64_t offcpu_lost_flushing;
	struct hashmap counters;     /* struct counters_entry: per-thread counters, by tid */
	struct hashmap counter_rows; /* struct counter_row: values read, not yet committed */

	/* Memory (memory.c). */
	uint64_t memory_interval_ns;	  /* RSS series period; 0: no series */
	uint64_t memory_next_ns;	  /* CLOCK_MONOTONIC of the next reading */
	uint64_t maps_next_ns;		  /* CLOCK_MONOTONIC of the next smaps round */
	unsigned maps_cost_factor;	  /* a round waits this many times its CPU time */
	struct store_memory *memory_rows; /* readings not yet committed */
	size_t memory_nrows, memory_cap;
	uint64_t malloc_sample_bytes;  /* mean bytes between allocation samples; 0: not traced */
	struct hashmap alloc_inflight; /* struct alloc_block by tid: sampled call, no return yet */
	struct hashmap alloc_blocks; /* struct alloc_block by (pid, address): live */
	struct alloc_block **alloc_freed; /* freed since the last committed flush, which stores
					   * them (or their free time) and drops them */
	size_t alloc_nfreed, alloc_freed_cap;
	struct store_malloc
	    malloc_totals;	/* the allocation probes' counters, set before each flush */
	uint64_t alloc_orphans; /* samples lost in user space (RETURN without ALLOC...), total */
	uint64_t malloc_max_hits_per_s; /* 0: no limit */
	unsigned vm_fault_period;	/* address-space changes followed (one write fault in this
					 * many sampled); 0: not followed */
	struct hashmap vm_acc;		/* struct vm_acc: changes per (pid, stack, change, mapping),
					 * not yet flushed */
	struct hashmap vm_regions;	/* struct vm_region by (pid, start): mappings made in the
					 * session, for the munmap that undoes them */
	size_t vm_regions_gone;		/* entries of vm_regions unmapped since */
	uint64_t vm_untracked;		/* changes counted without a stack of their own in user space:
					 * mmaps not remembered (vm_regions at its bound), shrinking
					 * ones sent bare (SAMPLE_NO_STACK) of no known region */
	/* Limits (bounded memory): samples past them are counted, not kept. */
	unsigned max_threads, max_stacks;
	uint32_t flushes;	/* flushes committed: the clock of raw_stack.seen */
	struct hashmap tids;	/* tids sampled and not exited, as (void *)(tid + 1) */
	uint64_t limit_dropped; /* samples dropped at a limit, not yet flushed */
	uint64_t limit_dropped_flushing;
	struct python_reader *python; /* NULL: no Python frames walked */
	uint64_t python_samples;      /* samples with Python frames merged, not yet flushed */
	uint64_t python_unmerged; /* samples whose Python frames did not match, not yet flushed */
	uint64_t python_samples_flushing, python_unmerged_flushing;
	struct gpu_acc *gpu; /* CUDA/NVTX/uprobe accounting (gpu_acc.h) */
};

/* Per-thread counters (counters.c). */
struct counters_entry {
	int pid, tid;
	struct thread_counters *tc;
	bool seen; /* found in /proc at the last scan */
};

/* Values read for one thread in one window, kept until the flush that commits them. */
struct counter_row {
	uint64_t window;
	int tid;
	struct counter_values v;
};

/*
 * Raw stacks a session keeps in memory after a flush, at most (and at most
 * half of max_stacks): beyond it session__stacks_evict() forgets the
 * stored ones seen least lately. At a PyTorch job's 60 frames a raw stack
 * is ~0.5 KiB, so the bound is ~8 MiB.
 */
#define SESSION_STACK_CACHE 16384

/*
 * Addresses a session's frame cache holds, at most (and at most four per
 * stack of max_stacks): past it the cache is emptied, and refills from the
 * symbolizer's cache of lookups and the store, where a frame is found by
 * content. An entry is ~120 bytes with its slot: ~15 MiB. A session reaches
 * it only with code that keeps moving (JIT code) or a very large program.
 */
#define SESSION_FRAME_CACHE 131072

/*
 * Slots of a session's memo of evicted stacks (stacks.c), a power of two:
 * 32 bytes each, 2 MiB, allocated at the first eviction.
 */
#define SESSION_STACK_MEMO 65536

/* A call stack as the BPF program saw it: raw addresses, kernel frames first. */
struct raw_stack {
	uint64_t hash;
	pid_t pid;	  /* user addresses are the process's */
	uint32_t seen;	  /* session.flushes when a record last had this stack */
	int64_t stack_id; /* row in the store, 0 until the first flush that needs it */
	uint16_t klen, ulen;
	uint32_t flags; /* SAMPLE_* bits that matter for the stack's identity */
	bool cut_not_code; /* stored cut before a user return address outside all code */
	uint64_t ips[];
};

/* Documented where they are defined, in stacks.c. */
struct raw_stack *session__stack_intern(struct session *s, pid_t pid, const uint64_t *ips,
					unsigned klen, unsigned ulen, uint32_t flags,
					bool *ret_limited);
struct raw_stack *session__sample_stack(struct session *s, const struct sample_event *e,
					bool *ret_limited);
void session__forget_frames(struct session *s, pid_t pid);
void session__stack_memo_free(struct session *s);
bool session__same_stack(const void *entry, const void *key);
/* session__stack_ptr_hash() - the hash of a raw stack kept by pointer (session__same_stack()). */
static inline uint64_t session__stack_ptr_hash(const struct raw_stack *st)
{
	return (uint64_t)(uintptr_t)st * 0x9e3779b97f4a7c15ULL;
}
int session__keep_stack(void *keep, struct raw_stack *st);
size_t session__forget_stacks(struct session *s, pid_t pid);
int session__memory_forget_pid(struct session *s, pid_t pid, struct hashmap *keep);
size_t session__stacks_evict(struct session *s);
int session__memory_keep_stacks(struct session *s, struct hashmap *keep);
int session__resolve_stack(struct session *s, const struct session_env *env, struct raw_stack *st,
			   bool *refreshed);

/* Documented where they are defined, in memory.c. */
int session__flush_memory(struct session *s, const struct session_env *env, bool *refreshed);
void session__flush_memory_done(struct session *s);
void session__flush_memory_failed(struct session *s);
void session__free_memory(struct session *s);

/* Documented where they are defined, in procs.c. */
int session__proc_add(struct session *s, pid_t pid, struct proc **ret);
void session__proc_free(struct proc *proc);
int session__store_mappings(struct session *s, struct proc *proc, struct store *store);

/* Documented where they are defined, in counters.c. */
int session__counters_scan(struct session *s, const struct session_env *env, struct proc *proc);
int session__store_counter_support(struct session *s, const struct session_env *env);
const char *session__counter_status_db(enum counter_status st);
