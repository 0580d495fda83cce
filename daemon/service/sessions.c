/*
 * sessions.c - the running sessions of the daemon: records from the
 * collectors routed to their session, the flush of every session in one
 * transaction, the end of a session, and retention.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include "collect/malloc_probes.h"
#include "collect/offcpu.h"
#include "collect/sampler.h"
#include "collect/unwind_worker.h"
#include "fleet/pyroscope.h"
#include "fleet/shipper.h"
#include "log.h"
#include "service/daemon.h"
#include "service/notify.h"
#include "store/store.h"
#include "symbols/unwind.h"
#include "util.h"

/*
 * Off-CPU intervals, in the same blocking stack: the blocked part, then the
 * part spent runnable (woken, waiting for a CPU).
 */
static const char *const offcpu_state_names[OFFCPU_NR_STATES] = {
    [OFFCPU_STATE_RUNNABLE] = "runnable",
    [OFFCPU_STATE_SLEEPING] = "sleeping",
    [OFFCPU_STATE_IO] = "io",
    [OFFCPU_STATE_OTHER] = "other",
};

/*
 * table_module_wanted() - a walk of @proc's stack stopped at a module
 * without rows (CFI_STOP_NO_TABLE) at the last PC of fallback record @e:
 * ask the sampler's loading thread for that module's table, once per
 * mapping (at most PROC_TABLE_MODULES per process). A module without CFI
 * is asked for once and then keeps stopping there, counted.
 */
static void table_module_wanted(struct profd *p, struct proc *proc, const struct sample_event *e)
{
	const struct mapping *mp;
	uint64_t pc, key;

	if (e->cfi_stop != CFI_STOP_NO_TABLE || e->cfi_frames == 0 || !e->cfi_stop_pc)
		return;
	pc = e->cfi_stop_pc;
	if (e->cfi_frames > 1)
		pc--; /* a return address: the walk looks it up at - 1 */
	mp = addrspace__find(proc->as, pc);
	key = mp ? mp->start : pc;
	for (unsigned i = 0; i < proc->n_table_modules; i++)
		if (proc->table_modules[i] == key)
			return;
	if (proc->n_table_modules >= PROC_TABLE_MODULES)
		return;
	if (sampler__tables_load_module(p->env.sampler, proc->pid, pc) == 0)
		proc->table_modules[proc->n_table_modules++] = key;
}

/*
 * profd__on_sample() - a CPU sample (or an address-space change) from the
 * ring buffer, or back from the unwinding thread (sampler_fn,
 * unwind_worker__drain()). A record with registers and a stack copy goes to
 * the unwinding thread first.
 */
void profd__on_sample(void *ctx, const struct sample_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = p->slots[e->slot];
	struct proc *proc;

	/* A sample of a session that already ended (or never started) is dropped. */
	if (!s)
		return;
	if (e->event == PROFILE_EVENT_THREAD_EXIT) {
		session__on_thread_exit(s, e);
		return;
	}
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc) {
		/* Not the session's process, or a child gone before its mappings were read. */
		if ((pid_t)e->pid != session__pid(s) && session__follows_children(s))
			session__count_dropped(s, e);
		return;
	}
	/* Counted once, as the record comes from the ring buffer: walked ones never
	 * go to the unwinding thread, and those that come back have no registers. */
	if (e->flags & (SAMPLE_CFI_WALKED | SAMPLE_HAS_REGS))
		session__count_table_walk(s, e);
	/* unwind "auto" or "tables": a process's tables are asked for at its first
	 * record (the target's at the attach), and load on the sampler's thread */
	if (session__walks_tables(s) && p->env.sampler) {
		if (!proc->tables_asked) {
			proc->tables_asked = true;
			if (sampler__tables_add(p->env.sampler, proc->pid) < 0)
				proc->tables_asked = false;
		} else if (e->flags & SAMPLE_CFI_TRIED) {
			table_module_wanted(p, proc, e);
		}
	}
	if (e->flags & SAMPLE_HAS_REGS) {
		if (unwind_worker__submit(p->worker, e, size, proc->as, &proc->as_lock,
					  session__unwind(s)) < 0)
			session__count_dropped(s, e);
		return;
	}
	if (e->event == PROFILE_EVENT_VM)
		session__on_vm(s, e);
	else
		session__on_sample(s, e);
}

/*
 * profd__on_offcpu() - an off-CPU interval (offcpu_fn): split into its
 * blocked and runnable part. An interval shorter than the period it was
 * sampled with came with probability duration / period (offcpu.bpf.c,
 * keep_interval()), so it stands for period / duration intervals.
 */
void profd__on_offcpu(void *ctx, const struct offcpu_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = e->slot < PROFILE_MAX_SLOTS ? p->slots[e->slot] : NULL;
	uint64_t ips[2 * OFFCPU_MAX_FRAMES];
	uint32_t flags = 0;
	struct proc *proc;
	double weight;
	int ulen;

	if (!s || !(session__events(s) & EVENT_OFFCPU))
		return;
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc) {
		session__count_offcpu_lost(s, 1);
		return;
	}
	session__count_offcpu_walk(s, e);
	memcpy(ips, e->ips, e->kstack_len * sizeof(uint64_t));
	pthread_rwlock_rdlock(&proc->as_lock);
	ulen = offcpu__user_stack(p->unwinder, proc->as, e, ips + e->kstack_len, OFFCPU_MAX_FRAMES,
				  &flags);
	pthread_rwlock_unlock(&proc->as_lock);
	if (ulen < 0)
		ulen = 0;
	weight =
	    e->period_ns > e->duration_ns ? (double)e->period_ns / (double)e->duration_ns : 1.0;
	if (e->state < OFFCPU_NR_STATES && e->duration_ns > e->runq_ns)
		session__on_offcpu(s, (pid_t)e->pid, (pid_t)e->tid, e->comm,
				   e->time_ns + e->duration_ns, offcpu_state_names[e->state],
				   e->duration_ns - e->runq_ns, weight, ips, e->kstack_len,
				   (unsigned)ulen);
	if (e->runq_ns && e->state != OFFCPU_STATE_RUNNABLE)
		session__on_offcpu(s, (pid_t)e->pid, (pid_t)e->tid, e->comm,
				   e->time_ns + e->duration_ns, "runnable", e->runq_ns, weight, ips,
				   e->kstack_len, (unsigned)ulen);
}

/*
 * profd__on_malloc() - a record of the allocation probes (malloc_probes_fn);
 * an allocation's user stack is completed with CFI here.
 */
void profd__on_malloc(void *ctx, const struct malloc_event *e, size_t size)
{
	struct profd *p = ctx;
	struct session *s = p->slots[e->slot];
	const struct malloc_alloc_event *a = (const void *)e;
	uint64_t ips[MALLOC_MAX_FRAMES];
	uint32_t flags;
	struct proc *proc;
	int n;

	if (!s)
		return;
	if (e->kind != MALLOC_EV_ALLOC) {
		session__on_malloc(s, e, NULL, 0);
		return;
	}
	proc = session__proc(s, (pid_t)e->pid);
	if (!proc)
		return;
	pthread_rwlock_rdlock(&proc->as_lock);
	n = unwinder__complete_walk(
	    p->unwinder, proc->as, e->flags & MALLOC_HAS_REGS ? (const uint64_t *)a->regs : NULL,
	    malloc_alloc_event_stack(a), e->stack_size, (const uint64_t *)a->ips, e->ustack_len,
	    ips, ARRAY_SIZE(ips), &flags);
	pthread_rwlock_unlock(&proc->as_lock);
	if (flags & UNWIND_WALK_PARTIAL) {
		/* Right as far as it goes, and counted as a truncated stack. */
		struct malloc_event h = *e;

		h.flags |= MALLOC_USER_TRUNCATED;
		session__on_malloc(s, &h, ips, n > 0 ? (unsigned)n : 0);
		return;
	}
	session__on_malloc(s, e, ips, n > 0 ? (unsigned)n : 0);
}

/*
 * profd__collect() - take everything the collectors and the unwinding
 * thread have for the sessions. @wait_for_unwinder: first wait until the
 * unwinding thread has no sample left (a session's end, not the loop's
 * ticks: it may take milliseconds).
 */
void profd__collect(struct profd *p, bool wait_for_unwinder)
{
	if (p->offcpu)
		record_reader__poll(offcpu__reader(p->offcpu));
	if (p->malloc_probes)
		record_reader__poll(malloc_probes__reader(p->malloc_probes));
	if (p->uprobes)
		record_reader__poll(uprobes__reader(p->uprobes));
	features__charge_lost(p);
	record_reader__poll(sampler__reader(p->env.sampler));
	if (wait_for_unwinder)
		unwind_worker__wait_idle(p->worker);
	unwind_worker__drain(p->worker, profd__on_sample, p);
}

/*
 * profd__retire_exited() - free what the running sessions hold for the
 * children they follow that have exited (a DataLoader forks its workers
 * anew every epoch: each kept its address space, ~0.2-0.6 MiB, for the
 * session's life). Their records are taken and their samples flushed
 * first, the unwinders forget their address spaces, their tables go. At
 * most once a second; nothing is freed if the flush fails (tried again at
 * the next call). Blocks while the unwinding thread finishes its queue.
 */
void profd__retire_exited(struct profd *p)
{
	struct {
		unsigned slot;
		struct proc *proc;
	} gone[256];
	struct proc *found[64];
	size_t n = 0;
	uint64_t now = now_ns(CLOCK_MONOTONIC);

	if (now - p->last_retire_ns < NSEC_PER_SEC)
		return;
	p->last_retire_ns = now;
	/* All found before the records are taken: none may come after its flush. */
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS && n < ARRAY_SIZE(gone); i++) {
		size_t k;

		if (!p->slots[i] || !session__follows_children(p->slots[i]))
			continue;
		k = session__exited_children(p->slots[i], found,
					     MIN(ARRAY_SIZE(found), ARRAY_SIZE(gone) - n));
		for (size_t j = 0; j < k; j++) {
			gone[n].slot = i;
			gone[n++].proc = found[j];
		}
	}
	if (n == 0)
		return;
	profd__collect(p, true);
	if (profd__flush(p) < 0)
		return;
	for (size_t j = 0; j < n; j++) {
		struct proc *proc = gone[j].proc;

		unwind_worker__forget(p->worker, proc->as);
		unwinder__forget(p->unwinder, proc->as);
		if (proc->tables_asked && p->env.sampler)
			sampler__tables_remove(p->env.sampler, proc->pid);
		session__proc_retire(p->slots[gone[j].slot], proc);
	}
	log_debug("freed %zu exited children", n);
}

/* profd__running() - the number of running sessions. */
unsigned profd__running(const struct profd *p)
{
	unsigned running = 0;

	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		running += p->slots[i] != NULL;
	return running;
}

/* profd__notify_status() - STATUS= for systemctl status: what profd is doing. */
void profd__notify_status(struct profd *p)
{
	notify__send("STATUS=%u session(s) running%s", profd__running(p),
		     p->flush_errors ? "; database writes failing" : "");
}

/*
 * profd__flush() - write every running session's pending samples in one
 * transaction. On failure everything is rolled back and kept for the next
 * flush, the first failure of a burst is logged, and answers carry a
 * warning until a flush works again (dispatch.c). Returns 0 or -errno.
 */
int profd__flush(struct profd *p)
{
	int r;

	/* Every flush, the timer's and the one before each report alike. */
	features__before_flush(p);
	r = store__begin_flush(p->env.store);
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++) {
		if (!p->slots[i])
			continue;
		r = session__flush(p->slots[i], &p->env);
		if (r < 0)
			goto fail;
	}
	r = store__commit(p->env.store);
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			session__flush_done(p->slots[i]);
	p->last_flush_ns = now_ns(CLOCK_MONOTONIC);
	if (p->flush_errors)
		log_info("Database writes work again, after %llu failed flush(es)",
			 (unsigned long long)p->flush_errors);
	p->flush_errors = 0;
	return 0;
fail:
	/* SQLite's message before the ROLLBACK replaces it. */
	snprintf(p->flush_error, sizeof(p->flush_error), "%s", store__errmsg(p->env.store));
	store__rollback(p->env.store);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i])
			session__flush_failed(p->slots[i]);
	/* Report once per burst of failures (a full disk fails every second). */
	if (p->flush_errors++ == 0) {
		p->flush_failing_since_ns = now_ns(CLOCK_REALTIME);
		log_error_errno(r, "Failed to write samples to the database: %s (will retry)",
				p->flush_error);
	}
	p->last_flush_ns = now_ns(CLOCK_MONOTONIC);
	return r;
}

/*
 * profd__end_session() - end the session in @slot: stop sampling, take the
 * samples still in the ring buffer, write them and the end state. The
 * session is freed even if the write fails (its row then stays 'running'
 * and is marked 'interrupted' at the next start). Returns 0, -ENOENT if
 * the slot is empty, or the flush's -errno (logged).
 */
int profd__end_session(struct profd *p, unsigned slot, const char *reason)
{
	struct session *s = p->slots[slot];
	uint64_t ended_ns =
	    now_ns(CLOCK_REALTIME); /* when sampling stops, not when the flush ends */
	struct proc *proc;
	size_t iter = 0;
	int r;

	if (!s)
		return -ENOENT;
	/* The last counter values, before the events stop. */
	session__read_counters(s, &p->env);
	/* Before the sampler drops the slot's targets from the map they share. */
	features__stop(p, slot);
	session__stop(s, &p->env);
	profd__collect(p, true);
	r = profd__flush(p);
	if (r == 0) {
		r = store__session_end(p->env.store, session__id(s), reason, ended_ns);
		if (r < 0)
			log_error_errno(r, "Failed to mark session %lld ended: %s",
					(long long)session__id(s), store__errmsg(p->env.store));
	}
	log_info("session %lld ended (%s): %llu samples", (long long)session__id(s), reason,
		 (unsigned long long)session__samples(s));
	if (session__walks_tables(s) && p->env.sampler) {
		struct cfi_maps_stats t;

		sampler__tables_stats(p->env.sampler, &t);
		log_info("unwind tables: %llu processes, %llu modules with rows (%llu without, "
			 "%llu not needed so far, %llu refused), %.1f MiB of rows in arrays of "
			 "%.1f MiB (at most %.1f), %.1f s compiling so far, %llu modules read from "
			 "the table cache",
			 (unsigned long long)t.procs, (unsigned long long)t.modules,
			 (unsigned long long)t.modules_empty, (unsigned long long)t.modules_pending,
			 (unsigned long long)(t.modules_no_room + t.modules_wide),
			 (double)t.rows_used * sizeof(struct cfi_walk_row) / (1 << 20),
			 (double)t.rows_len * sizeof(struct cfi_walk_row) / (1 << 20),
			 (double)t.rows_cap * sizeof(struct cfi_walk_row) / (1 << 20),
			 (double)t.compile_ns / 1e9, (unsigned long long)t.cache_hits);
	}
	p->slots[slot] = NULL;
	p->file_pages_due = true; /* what its stacks read is not needed now */
	while ((proc = session__next_proc(s, &iter))) {
		unwind_worker__forget(p->worker, proc->as);
		unwinder__forget(p->unwinder, proc->as); /* off-CPU and allocation stacks' */
		if (proc->tables_asked)
			sampler__tables_remove(p->env.sampler, proc->pid);
	}
	session__free(s);
	profd__notify_status(p);
	pyroscope__session_ended(p->pyroscope); /* its last piece, now */
	/* Its last chunk goes to ClickHouse now, not at the next interval. */
	shipper__kick(p->shipper);
	return r;
}

static void on_pid_exit(struct watch *w, uint32_t events)
{
	struct pid_watch *pw = (struct pid_watch *)w;

	profd__end_session(pw->profd, pw->slot, "target_exited");
}

/* profd__watch_exit() - end the session in @slot when its target exits. Returns 0 or -errno. */
int profd__watch_exit(struct profd *p, unsigned slot)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &p->pid_watches[slot].watch};

	p->pid_watches[slot] = (struct pid_watch){{on_pid_exit}, p, slot};
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, session__pidfd(p->slots[slot]), &ev) < 0)
		return -errno;
	return 0;
}

/*
 * profd__run_retention() - delete what retention_days and max_db_bytes say
 * is too old or too much (never a running session), and log what was done.
 */
void profd__run_retention(struct profd *p)
{
	struct store_retention res;
	int r;

	p->last_retention_ns = now_ns(CLOCK_MONOTONIC);
	if (!p->cfg->retention_ns && !p->cfg->max_db_bytes)
		return;
	/* Pending samples first, so that the deletes run in a quiet store
	 * (at start, before the sampler exists, there are none). */
	if (p->env.sampler) {
		profd__collect(p, false);
		profd__flush(p);
	}
	r = store__retention(p->env.store, now_ns(CLOCK_REALTIME), p->cfg->retention_ns,
			     p->cfg->max_db_bytes, &res);
	if (r < 0) {
		log_error_errno(r, "Retention failed: %s", store__errmsg(p->env.store));
		return;
	}
	if (res.sessions_deleted) {
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				session__forget_row_ids(p->slots[i]);
		log_info("retention: deleted %u ended session(s); database %llu -> %llu bytes",
			 res.sessions_deleted, (unsigned long long)res.bytes_before,
			 (unsigned long long)res.bytes_after);
		if (res.unshipped_deleted)
			log_warning("retention: %u of the deleted sessions were not shipped to the "
				    "fleet sinks whole (max_db_bytes reached)",
				    res.unshipped_deleted);
	}
	if (res.over_limit)
		log_warning("database is larger than max_db_bytes (%llu) with only running "
			    "sessions left to delete",
			    (unsigned long long)p->cfg->max_db_bytes);
}

/*
 * profd__merge_windows() merges in short transactions (store__merge_step())
 * until it has held the loop this long; a part is at most this many rows
 * (about 6 us a row here, triggers skipped: a 10-hour, 64-thread session's
 * minute of 16,000 rows was one 100 ms transaction before it was split).
 */
#define MERGE_PASS_NS (20 * NSEC_PER_MSEC)
#define MERGE_ROWS_PER_PART 2000

/*
 * profd__merge_windows() - merge the 1 s windows older than
 * merge_windows_after_s into windows of merged_window_s, a few short
 * transactions at a time (MERGE_PASS_NS), so that the loop goes back to the
 * ring buffers soon; merge_backlog tells the caller to call again at its
 * next tick.
 */
void profd__merge_windows(struct profd *p)
{
	uint64_t start = now_ns(CLOCK_MONOTONIC), rows_before = 0, rows_after = 0;
	unsigned windows = 0;
	struct store_merge res = {0};
	int r;

	p->last_merge_ns = start;
	p->merge_backlog = false;
	if (!p->cfg->merge_windows_after_s)
		return;
	do {
		r = store__merge_step(p->env.store, now_ns(CLOCK_REALTIME),
				      (uint64_t)p->cfg->merge_windows_after_s * NSEC_PER_SEC,
				      (uint64_t)p->cfg->merged_window_s * NSEC_PER_SEC,
				      MERGE_ROWS_PER_PART, &p->merge_cursor, &res);
		if (r < 0) {
			log_error_errno(r, "Merging old windows failed: %s",
					store__errmsg(p->env.store));
			return;
		}
		windows += res.sessions;
		rows_before += res.rows_before;
		rows_after += res.rows_after;
	} while (res.more && now_ns(CLOCK_MONOTONIC) - start < MERGE_PASS_NS);
	p->merge_backlog = res.more;
	if (rows_before)
		log_debug("merging windows: %u started, %llu rows -> %llu in %.1f ms%s", windows,
			  (unsigned long long)rows_before, (unsigned long long)rows_after,
			  (double)(now_ns(CLOCK_MONOTONIC) - start) / 1e6,
			  res.more ? ", more to merge" : "");
}
