/*
 * unwind_worker.h - a thread that unwinds samples carrying registers and a
 * stack copy, so that DWARF unwinding never delays reading the ring buffer.
 * Samples go in, in batches, through a bounded queue (a full queue is an
 * error the caller counts as lost samples) and come back, unwound, through
 * a second queue whose eventfd wakes the main loop once per batch.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "collect/sampler.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"

enum unwind_mode {
	UNWIND_MODE_FP,    /* frame pointers only (bpf_get_stack) */
	UNWIND_MODE_DWARF, /* CFI unwinding of the copied stack only */
	UNWIND_MODE_AUTO,  /* the CFI-table walk in BPF (unwind_walks_tables()); a sample whose
			    * walk stops before the root takes both of the above, and keeps
			    * DWARF's stack unless the frame-pointer walk got further */
	UNWIND_MODE_TABLES, /* CFI tables walked in BPF (cfi_walk.bpf.h); a walk that stops
			     * before the root falls back to DWARF's copy, unwound here */
};

/*
 * Without the table cache, the samples an auto session must be asked for
 * (duration x frequency) to walk the tables: compiling a process's tables
 * costs about what the walk saves on 15,000 samples (PyTorch: ~1 s of CPU
 * against ~65 us a sample; deep-nofp: ~0.15 s against ~9 us). A session
 * without a duration (the service) always walks them.
 */
#define UNWIND_AUTO_TABLES_MIN_SAMPLES 20000

/*
 * unwind_walks_tables() - whether a session with @mode, @duration_ns (0:
 * until stopped) at @freq_hz walks the CFI tables in BPF first: tables
 * always; auto when compiled tables are kept on disk (@cached: a module is
 * compiled once per build on the machine, so even a short periodic
 * snapshot repays it from the second on), else when the session is long
 * enough to repay the compiles.
 */
static inline bool unwind_walks_tables(enum unwind_mode mode, uint64_t duration_ns,
				       unsigned freq_hz, bool cached)
{
	if (mode == UNWIND_MODE_TABLES)
		return true;
	return mode == UNWIND_MODE_AUTO &&
	       (cached || duration_ns == 0 ||
		(double)duration_ns / 1e9 * freq_hz >= UNWIND_AUTO_TABLES_MIN_SAMPLES);
}

/* unwind_mode_name() - "fp", "dwarf", "auto" or "tables". */
const char *unwind_mode_name(enum unwind_mode mode);
/* unwind_mode_parse() - the mode named @s, or -EINVAL. */
int unwind_mode_parse(const char *s);

struct unwind_worker;

/*
 * unwind_worker__new() - start the thread.
 * @capacity: samples queued or being unwound at most (each up to ~36 KiB).
 * Returns 0, -ENOMEM, or the -errno of pthread_create()/eventfd().
 */
int unwind_worker__new(size_t capacity, struct unwind_worker **ret);
/* unwind_worker__free() - stop the thread, drop queued samples. Accepts NULL. */
void unwind_worker__free(struct unwind_worker *w);

/* unwind_worker__fd() - an eventfd that polls readable when unwound samples wait. */
int unwind_worker__fd(struct unwind_worker *w);

/*
 * unwind_worker__submit() - add a copy of sample @e (@size bytes, with
 * SAMPLE_HAS_REGS) to the batch for unwinding against @as in @mode; the
 * thread sees the batch at the next unwind_worker__flush() (or drain, or
 * wait_idle). @as and @as_lock must stay valid until
 * unwind_worker__wait_idle() has returned after the last submit for them;
 * the worker holds @as_lock for reading while it reads @as. Main thread
 * only. Memory: a job of ~37 KiB per sample in flight, at most @capacity;
 * up to 64 drained jobs are kept for reuse, so a steady load allocates
 * nothing.
 * Returns 0, or -ENOBUFS when @capacity samples are in flight (submitted
 * and not yet drained; the sample is not taken), -EINVAL when @size is
 * larger than a sample_event, -ENOMEM. Does not block.
 */
int unwind_worker__submit(struct unwind_worker *w, const struct sample_event *e, size_t size,
			  struct addrspace *as, pthread_rwlock_t *as_lock, enum unwind_mode mode);

/*
 * unwind_worker__flush() - hand the batch submitted since the last flush
 * to the thread, with one wake-up: call after each read of the ring buffer.
 * Main thread only.
 */
void unwind_worker__flush(struct unwind_worker *w);

/*
 * unwind_worker__drain() - flush, then call @fn for every unwound sample,
 * in submission order, and give their jobs back. Main thread only. In each, ips[kstack_len..] are the user frames
 * (from CFI, or the frame-pointer walk in auto mode when that got further)
 * and flags has SAMPLE_DWARF_UNWOUND / SAMPLE_UNWIND_INCOMPLETE /
 * SAMPLE_USER_TRUNCATED as they apply; SAMPLE_HAS_REGS is cleared.
 */
void unwind_worker__drain(struct unwind_worker *w, sampler_fn fn, void *ctx);

/* unwind_worker__wait_idle() - flush, then block until every submitted sample is unwound. */
void unwind_worker__wait_idle(struct unwind_worker *w);

/*
 * unwind_worker__forget() - drop what the worker caches about @as (call
 * when idle, before freeing @as).
 */
void unwind_worker__forget(struct unwind_worker *w, const struct addrspace *as);
