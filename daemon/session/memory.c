/*
 * memory.c - a session's memory: the RSS series of its processes (split by
 * mapping kind), the address-space changes of its processes per call stack,
 * and its sampled allocations matched with their frees, kept until the
 * flush that stores them (and, for live blocks, until they are freed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect/malloc_probes.h"
#include "collect/memory.h"
#include "session/owned_map.h"
#include "session/session.h"
#include "session/session_internal.h"
#include "util.h"

/* A sampled allocation. */
struct alloc_block {
	int pid, tid;
	unsigned func;             /* MALLOC_FUNC_* */
	bool untracked;            /* its free cannot be seen */
	bool freed;                /* free_ns is set (then it is in alloc_freed until stored) */
	struct raw_stack *stack;
	uint64_t size_bytes;
	double weight_bytes;
	uint64_t addr;
	uint64_t alloc_ns, free_ns; /* CLOCK_MONOTONIC */
	int64_t row_id;            /* committed row; 0: none yet */
	int64_t new_row_id;        /* row written by the flush in progress */
};

/*
 * A round of smaps reads waits at least the session's age over this: a
 * split at every reading for the first 20 s, then every 3 s at one minute,
 * every 3 minutes at an hour (~20 rounds more each time the age grows by
 * e = 2.7x: ~125 in an hour instead of 3,600). Each growth rate still has
 * about 20 points over whatever span it is read at.
 */
#define MAPS_AGE_PARTS 20

static void read_maps(struct session *s, struct store_memory *m, size_t n, uint64_t mono_ns)
{
	uint64_t cost_ns = 0, wait_ns;

	if (mono_ns < s->maps_next_ns)
		return;
	for (size_t i = 0; i < n; i++) {
		uint64_t one_ns = 0;

		/* A process gone since its status was read keeps that reading, without the
		 * split. */
		memory__read_maps(m[i].pid, &m[i], &one_ns);
		cost_ns += one_ns;
	}
	wait_ns =
	    MAX(cost_ns * s->maps_cost_factor,
		mono_ns > s->started_mono_ns ? (mono_ns - s->started_mono_ns) / MAPS_AGE_PARTS : 0);
	/* Half an interval early: the reading on the grid at (or just before) it qualifies. */
	s->maps_next_ns =
	    mono_ns + (wait_ns > s->memory_interval_ns ? wait_ns - s->memory_interval_ns / 2 : 0);
}

/*
 * session__read_memory() - if the session's memory interval has passed at
 * @mono_ns (CLOCK_MONOTONIC), read the memory of each of its processes
 * still alive; kept for the next flush. A process that has exited is
 * skipped: its series ends. Returns the number of readings taken (>= 0), or
 * -ENOMEM. Blocks on /proc reads; does not log.
 */
int session__read_memory(struct session *s, uint64_t mono_ns)
{
	uint64_t real_ns;
	struct proc *proc;
	size_t first = s->memory_nrows;

	if (!s->memory_interval_ns || mono_ns < s->memory_next_ns)
		return 0;
	/* The next reading on the interval's grid, skipping missed ones. */
	s->memory_next_ns += s->memory_interval_ns;
	if (s->memory_next_ns <= mono_ns)
		s->memory_next_ns = mono_ns + s->memory_interval_ns;
	real_ns = s->started_real_ns + (mono_ns - s->started_mono_ns);
	hashmap__for_each(&s->procs, i, proc)
	{
		struct store_memory m;

		if (memory__read(proc->pid, &m) < 0)
			continue;
		m.time_ns = real_ns;
		m.pid = proc->pid;
		if (grow_array((void **)&s->memory_rows, &s->memory_cap, s->memory_nrows,
			       sizeof(*s->memory_rows)) < 0)
			return -ENOMEM;
		s->memory_rows[s->memory_nrows++] = m;
	}
	if (s->memory_nrows > first)
		read_maps(s, &s->memory_rows[first], s->memory_nrows - first, mono_ns);
	return (int)(s->memory_nrows - first);
}

static uint64_t tid_hash(int tid)
{
	return hash64(HASH64_INIT, &tid, sizeof(tid));
}

static bool inflight_eq(const void *entry, const void *key)
{
	return ((const struct alloc_block *)entry)->tid == *(const int *)key;
}

/* The key of a live block (at addr) or of a mapping (starting at addr) of process pid. */
struct pid_addr {
	int pid;
	uint64_t addr;
};

static uint64_t pid_addr_hash(int pid, uint64_t addr)
{
	return hash64(hash64(HASH64_INIT, &pid, sizeof(pid)), &addr, sizeof(addr));
}

static bool block_eq(const void *entry, const void *key)
{
	const struct alloc_block *b = entry;
	const struct pid_addr *k = key;

	return b->pid == k->pid && b->addr == k->addr && !b->freed;
}

static uint64_t block_hash_of(const struct alloc_block *b)
{
	return pid_addr_hash(b->pid, b->addr);
}

/* An ALLOC record: the sampled call waits for its RETURN in alloc_inflight. */
static void on_alloc(struct session *s, const struct malloc_event *e, const uint64_t *ips,
		     unsigned n)
{
	int tid = (int)e->tid;
	struct alloc_block *b, *old;

	b = calloc(1, sizeof(*b));
	if (!b) {
		s->alloc_orphans++;
		return;
	}
	b->pid = (int)e->pid;
	b->tid = tid;
	b->func = e->func;
	b->size_bytes = e->size;
	/* The process's own sampler weighs what it samples (USDT); profd weighs its own. */
	b->weight_bytes =
	    e->weight ? e->weight : malloc_probes__weight(e->size, s->malloc_sample_bytes);
	b->alloc_ns = e->time_ns;
	b->stack = session__stack_intern(s, (pid_t)e->pid, ips, 0, n,
					 e->flags & MALLOC_USER_TRUNCATED ? SAMPLE_USER_TRUNCATED : 0,
					 NULL);
	if (!b->stack) {
		free(b);
		s->alloc_orphans++;
		return;
	}
	/* A call still waiting means its RETURN was lost: replace it. */
	old = hashmap__remove(&s->alloc_inflight, tid_hash(tid), inflight_eq, &tid);
	if (old) {
		free(old);
		s->alloc_orphans++;
	}
	if (hashmap__insert(&s->alloc_inflight, tid_hash(tid), b) < 0) {
		free(b);
		s->alloc_orphans++;
	}
}

/*
 * @b (out of alloc_blocks) was freed at @ns: it waits in alloc_freed for the
 * next flush. Freed blocks leave the map at once: an address the allocator
 * hands out again and again would otherwise pile up entries under one key.
 */
static void block_freed(struct session *s, struct alloc_block *b, uint64_t ns)
{
	b->freed = true;
	b->free_ns = ns;
	if (grow_array((void **)&s->alloc_freed, &s->alloc_freed_cap, s->alloc_nfreed,
		       sizeof(*s->alloc_freed)) < 0) {
		/* Out of memory: its free time is lost; it is (or will be) stored as live. */
		b->freed = false;
		if (b->row_id || hashmap__insert(&s->alloc_blocks, block_hash_of(b), b) < 0)
			free(b);
		return;
	}
	s->alloc_freed[s->alloc_nfreed++] = b;
}

/* A RETURN record: the block becomes live (or is dropped if the call failed). */
static void on_return(struct session *s, const struct malloc_event *e)
{
	int tid = (int)e->tid;
	struct alloc_block *b =
	    hashmap__remove(&s->alloc_inflight, tid_hash(tid), inflight_eq, &tid);
	struct pid_addr key = { (int)e->pid, e->addr };
	struct alloc_block *prev;

	if (!b) {
		s->alloc_orphans++;
		return;
	}
	if (e->addr == 0) { /* the call failed: no block */
		free(b);
		return;
	}
	b->addr = e->addr;
	b->untracked = e->flags & MALLOC_UNTRACKED;
	/* A live block at the same address: its free was not seen (it was untracked). */
	prev = hashmap__remove(&s->alloc_blocks, pid_addr_hash(key.pid, key.addr), block_eq, &key);
	if (prev)
		block_freed(s, prev, e->time_ns);
	if (hashmap__insert(&s->alloc_blocks, block_hash_of(b), b) < 0) {
		free(b);
		s->alloc_orphans++;
	}
}

/* A FREE record: the sampled block at e->addr is no longer live. */
static void on_free(struct session *s, const struct malloc_event *e)
{
	struct pid_addr key = { (int)e->pid, e->addr };
	struct alloc_block *b =
		hashmap__remove(&s->alloc_blocks, pid_addr_hash(key.pid, key.addr), block_eq, &key);

	if (!b)
		return; /* sampled before the session, or its RETURN was lost */
	block_freed(s, b, e->time_ns);
}

/*
 * session__on_malloc() - a record of the allocation probes for this
 * session. For an ALLOC record, @ips (@n addresses, leaf first) is the
 * allocating call stack, already completed with CFI by the caller.
 * Allocates; does not block or log.
 */
void session__on_malloc(struct session *s, const struct malloc_event *e, const uint64_t *ips,
			unsigned n)
{
	if (!s->malloc_sample_bytes)
		return;
	switch (e->kind) {
	case MALLOC_EV_ALLOC:
		on_alloc(s, e, ips, n);
		break;
	case MALLOC_EV_RETURN:
		on_return(s, e);
		break;
	case MALLOC_EV_FREE:
		on_free(s, e);
		break;
	}
}

/* Address-space changes of one (pid, stack, change, mapping) since the last flush. */
struct vm_acc {
	int pid;
	struct raw_stack *stack;
	unsigned change; /* VM_* */
	enum memory_map_kind mapping; /* MEMORY_MAP_NR_KINDS: 'touch' (faults) */
	uint64_t events;
	int64_t bytes;
};

/* A mapping made during the session: who made it, for the munmap that undoes it. */
struct vm_region {
	int pid;
	uint64_t start, len;
	struct raw_stack *stack;
	enum memory_map_kind mapping;
	bool gone;
};

static const char *const vm_change_names[VM_NR_KINDS] = {
    [VM_BRK] = "brk", [VM_MMAP] = "mmap", [VM_MUNMAP] = "munmap", [VM_MREMAP] = "mremap",
    [VM_FAULT] = "fault",
};

static bool vm_acc_eq(const void *entry, const void *key)
{
	const struct vm_acc *a = entry, *b = key;

	return a->pid == b->pid && a->stack == b->stack && a->change == b->change &&
	       a->mapping == b->mapping;
}

static uint64_t vm_acc_hash(const struct vm_acc *a)
{
	uint64_t h = hash64(HASH64_INIT, &a->pid, sizeof(a->pid));

	h = hash64(h, &a->stack, sizeof(a->stack));
	h = hash64(h, &a->change, sizeof(a->change));
	return hash64(h, &a->mapping, sizeof(a->mapping));
}

/* Add @bytes to (pid, @stack, @change, @mapping); an accumulator that cannot be made is lost. */
static void vm_account(struct session *s, int pid, struct raw_stack *stack, unsigned change,
		       enum memory_map_kind mapping, int64_t bytes)
{
	struct vm_acc key = { .pid = pid, .stack = stack, .change = change, .mapping = mapping };
	uint64_t h = vm_acc_hash(&key);
	struct vm_acc *a = hashmap_find_or_add_copy(&s->vm_acc, h, vm_acc_eq, &key, sizeof(key));

	if (!a) {
		s->vm_untracked++;
		return;
	}
	a->events++;
	a->bytes += bytes;
}

static bool region_eq(const void *entry, const void *key)
{
	const struct vm_region *r = entry;
	const struct pid_addr *k = key;

	return r->pid == k->pid && r->start == k->addr && !r->gone;
}

static struct vm_region *region_find(struct session *s, int pid, uint64_t start)
{
	struct pid_addr k = { pid, start };

	return hashmap__find(&s->vm_regions, pid_addr_hash(pid, start), region_eq, &k);
}

static void region_add(struct session *s, int pid, uint64_t start, uint64_t len,
		       struct raw_stack *stack, enum memory_map_kind mapping)
{
	const struct vm_region r = { pid, start, len, stack, mapping, false };

	if (s->vm_regions.len - s->vm_regions_gone >= SESSION_VM_MAX_REGIONS ||
	    !hashmap_add_copy(&s->vm_regions, pid_addr_hash(pid, start), &r, sizeof(r)))
		s->vm_untracked++;
}

static uint64_t page_round(uint64_t n)
{
	return (n + 4095) & ~4095ull;
}

/*
 * The kind of an mmap: anonymous, shared anonymous, or the file behind @fd:
 * as the BPF program found it at the call's return (vm->file_kind), else
 * (a device, or not read) by the path /proc/PID/fd/@fd names now.
 */
static enum memory_map_kind mmap_kind(int pid, const struct vm_change *vm)
{
	char path[64], target[256];
	ssize_t n;

	if (vm->flags & MAP_ANONYMOUS || vm->fd < 0)
		return vm->flags & MAP_SHARED ? MEMORY_MAP_SHMEM : MEMORY_MAP_ANON;
	switch (vm->file_kind) {
	case VM_FILE_SHMEM:
		return MEMORY_MAP_SHMEM;
	case VM_FILE_REGULAR:
		return MEMORY_MAP_FILE;
	case VM_FILE_OTHER:
		return MEMORY_MAP_OTHER;
	}
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, vm->fd);
	n = readlink(path, target, sizeof(target) - 1);
	target[n > 0 ? n : 0] = '\0';
	return memory__map_kind(target, vm->flags & MAP_SHARED);
}

/*
 * session__on_vm() - an address-space change of one of the session's
 * processes (a PROFILE_EVENT_VM record, user stack already unwound): what
 * it adds to (or takes from) the address space, on its call stack; an
 * munmap or mremap of a mapping made during the session counts against the
 * stack that mapped it. A record sent without a stack (SAMPLE_NO_STACK:
 * shrinking, or growth over the BPF side's stack budget) counts on the
 * "[missing stack]" frame where no region names a stack. Allocates; reads
 * /proc/PID/fd for a device mapping; does not log.
 */
void session__on_vm(struct session *s, const struct sample_event *e)
{
	const struct vm_change *vm = &e->vm;
	struct raw_stack *stack = session__sample_stack(s, e, NULL);
	int pid = (int)e->pid;
	struct vm_region *r;

	if (!stack || vm->kind >= VM_NR_KINDS) {
		s->vm_untracked++;
		return;
	}
	switch (vm->kind) {
	case VM_BRK:
		vm_account(s, pid, stack, VM_BRK, MEMORY_MAP_HEAP,
			   (int64_t)(vm->addr - vm->old_addr));
		break;
	case VM_MMAP: {
		enum memory_map_kind k = mmap_kind(pid, vm);

		vm_account(s, pid, stack, VM_MMAP, k, (int64_t)page_round(vm->len));
		region_add(s, pid, vm->addr, page_round(vm->len), stack, k);
		break;
	}
	case VM_MUNMAP: {
		uint64_t len = page_round(vm->len);

		r = region_find(s, pid, vm->addr);
		if (!r) { /* mapped before the session, or not from its start */
			vm_account(s, pid, stack, VM_MUNMAP, MEMORY_MAP_ANON, -(int64_t)len);
			s->vm_untracked += !!(e->flags & SAMPLE_NO_STACK);
			break;
		}
		if (len > r->len)
			len = r->len;
		vm_account(s, pid, r->stack, VM_MUNMAP, r->mapping, -(int64_t)len);
		r->gone = true;
		s->vm_regions_gone++;
		if (len < r->len)
			region_add(s, pid, r->start + len, r->len - len, r->stack, r->mapping);
		break;
	}
	case VM_MREMAP: {
		int64_t delta = (int64_t)page_round(vm->len) - (int64_t)page_round(vm->old_len);

		r = region_find(s, pid, vm->old_addr);
		if (!r) {
			vm_account(s, pid, stack, VM_MREMAP, MEMORY_MAP_ANON, delta);
			s->vm_untracked += !!(e->flags & SAMPLE_NO_STACK);
			break;
		}
		vm_account(s, pid, r->stack, VM_MREMAP, r->mapping, delta);
		r->gone = true;
		s->vm_regions_gone++;
		region_add(s, pid, vm->addr, page_round(vm->len), r->stack, r->mapping);
		break;
	}
	case VM_FAULT:
		vm_account(s, pid, stack, VM_FAULT, MEMORY_MAP_NR_KINDS, (int64_t)vm->len);
		break;
	}
}

/* Store the changes since the last flush; their accumulators are emptied once committed. */
static int flush_vm(struct session *s, const struct session_env *env, bool *refreshed)
{
	struct vm_stats st = { 0 };
	struct vm_acc *a;
	int r;

	if (!s->vm_fault_period)
		return 0;
	hashmap__for_each(&s->vm_acc, i, a)
	{
		struct store_vm_change c = {
		    .pid = a->pid,
		    .change = vm_change_names[a->change],
		    .mapping = a->mapping == MEMORY_MAP_NR_KINDS ? "touch"
								 : memory__map_kind_name(a->mapping),
		    .events = a->events,
		    .bytes = a->bytes,
		};

		if (!a->events)
			continue;
		r = session__resolve_stack(s, env, a->stack, refreshed);
		if (r < 0)
			return r;
		c.stack_id = a->stack->stack_id;
		r = store__vm_change_add(env->store, s->id, &c);
		if (r < 0)
			return r;
	}
	if (env->sampler && sampler__vm_stats(env->sampler, s->slot, &st) < 0)
		memset(&st, 0, sizeof(st));
	{
		uint64_t events = 0;

		for (unsigned k = 0; k < VM_NR_KINDS; k++)
			events += st.events[k];
		return store__session_vm(env->store, s->id, events,
					 st.unsent + st.bare + s->vm_untracked,
					 s->vm_fault_period);
	}
}

/*
 * The flush committed: free the accumulators, whose stacks
 * session__stacks_evict() would otherwise keep (kept zeroed, they held
 * every distinct mmap, brk and fault stack for the session's life), and
 * forget unmapped regions now and then.
 */
static void flush_vm_done(struct session *s)
{
	struct hashmap keep = {0};
	struct vm_region *r;

	hashmap_clear_free(&s->vm_acc);
	if (s->vm_regions_gone < s->vm_regions.len / 2)
		return;
	hashmap__for_each(&s->vm_regions, i, r)
	{
		if (r->gone || hashmap__insert(&keep, pid_addr_hash(r->pid, r->start), r) < 0)
			free(r);
	}
	hashmap__free(&s->vm_regions);
	s->vm_regions = keep;
	s->vm_regions_gone = 0;
}

/* Store @b if it is new (with its free time if it has one), or else its free time if new. */
static int flush_block(struct session *s, const struct session_env *env, struct alloc_block *b,
		       bool *refreshed)
{
	uint64_t free_real = b->freed ? s->started_real_ns + (b->free_ns - s->started_mono_ns) : 0;
	int r;

	if (b->row_id == 0) {
		struct store_allocation a = {
		    .pid = b->pid,
		    .tid = b->tid,
		    .func = malloc_probes__func_name(b->func),
		    .size_bytes = b->size_bytes,
		    .weight_bytes = b->weight_bytes,
		    .address = b->addr,
		    .alloc_ns = s->started_real_ns + (b->alloc_ns - s->started_mono_ns),
		    .free_ns = free_real,
		    .untracked = b->untracked,
		};

		r = session__resolve_stack(s, env, b->stack, refreshed);
		if (r < 0)
			return r;
		a.stack_id = b->stack->stack_id;
		return store__allocation_add(env->store, s->id, &a, &b->new_row_id);
	}
	if (b->freed)
		return store__allocation_freed(env->store, b->row_id, free_real);
	return 0;
}

/*
 * session__flush_memory() - the memory part of session__flush(): readings,
 * new sampled blocks, frees of stored blocks, the probes' totals. Returns 0
 * or the store's -errno (the flush is then rolled back and retried).
 */
int session__flush_memory(struct session *s, const struct session_env *env, bool *refreshed)
{
	struct alloc_block *b;
	int r;

	for (size_t i = 0; i < s->memory_nrows; i++) {
		r = store__memory_add(env->store, s->id, &s->memory_rows[i]);
		if (r < 0)
			return r;
	}
	r = flush_vm(s, env, refreshed);
	if (r < 0)
		return r;
	if (!s->malloc_sample_bytes)
		return 0;
	hashmap__for_each(&s->alloc_blocks, i, b)
	{
		r = flush_block(s, env, b, refreshed);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < s->alloc_nfreed; i++) {
		r = flush_block(s, env, s->alloc_freed[i], refreshed);
		if (r < 0)
			return r;
	}
	{
		struct store_malloc t = s->malloc_totals;

		t.lost += s->alloc_orphans;
		return store__session_malloc(env->store, s->id, &t);
	}
}

/* session__flush_memory_done() - the flush committed: forget what is stored for good. */
void session__flush_memory_done(struct session *s)
{
	struct hashmap keep = { 0 };
	struct alloc_block *b;

	s->memory_nrows = 0;
	flush_vm_done(s);
	hashmap__for_each(&s->alloc_blocks, i, b)
	{
		if (b->new_row_id) {
			b->row_id = b->new_row_id;
			b->new_row_id = 0;
		}
		/* Stored, and its free can never be seen (untracked): nothing more
		 * will change it. (Freed blocks are in alloc_freed, not here.) */
		if (b->row_id && b->untracked) {
			free(b);
			continue;
		}
		if (hashmap__insert(&keep, block_hash_of(b), b) < 0) {
			/* Out of memory: the block stays stored, without its free time. */
			free(b);
		}
	}
	hashmap__free(&s->alloc_blocks);
	s->alloc_blocks = keep;
	/* Freed, and stored with their free time: nothing more will change them. */
	for (size_t i = 0; i < s->alloc_nfreed; i++)
		free(s->alloc_freed[i]);
	s->alloc_nfreed = 0;
}

static bool vm_acc_of_pid(const void *entry, const void *ctx)
{
	return ((const struct vm_acc *)entry)->pid == *(const pid_t *)ctx;
}

struct regions_of {
	pid_t pid;
	size_t gone; /* of those taken out, already marked gone */
};

static bool region_of_pid(const void *entry, const void *ctx)
{
	const struct vm_region *r = entry;
	struct regions_of *c = (struct regions_of *)ctx;

	if (r->pid != c->pid)
		return false;
	c->gone += r->gone;
	return true;
}

/*
 * keep_alloc_stacks() - put in @keep the stacks of the sampled allocations
 * of @pid (every process's for 0), live, in flight or freed and waiting.
 * Returns 0 or -ENOMEM.
 */
static int keep_alloc_stacks(struct session *s, pid_t pid, struct hashmap *keep)
{
	struct alloc_block *b;

	hashmap__for_each(&s->alloc_blocks, i, b)
	{
		if ((!pid || b->pid == pid) && session__keep_stack(keep, b->stack) < 0)
			return -ENOMEM;
	}
	hashmap__for_each(&s->alloc_inflight, i, b)
	{
		if ((!pid || b->pid == pid) && session__keep_stack(keep, b->stack) < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < s->alloc_nfreed; i++)
		if ((!pid || s->alloc_freed[i]->pid == pid) &&
		    session__keep_stack(keep, s->alloc_freed[i]->stack) < 0)
			return -ENOMEM;
	return 0;
}

/*
 * session__memory_forget_pid() - after the last flush of the exited child
 * @pid: drop its address-space accumulators (their counts are stored) and
 * regions (no munmap of its can come any more), and put in @keep (raw
 * stacks, by pointer: session__same_stack()) the stacks its sampled
 * allocations, stored or waiting, still refer to. Returns 0 or -ENOMEM
 * (@keep is then incomplete: the caller must not free stacks by it).
 */
int session__memory_forget_pid(struct session *s, pid_t pid, struct hashmap *keep)
{
	struct regions_of regions = {.pid = pid};

	hashmap__remove_if(&s->vm_acc, vm_acc_of_pid, &pid, free);
	hashmap__remove_if(&s->vm_regions, region_of_pid, &regions, free);
	s->vm_regions_gone -= regions.gone;
	return keep_alloc_stacks(s, pid, keep);
}

/*
 * session__memory_keep_stacks() - put in @keep (by pointer, as
 * session__memory_forget_pid()) every raw stack the memory accounting
 * refers to across flushes: the address-space accumulators, the regions
 * mapped in the session and the sampled allocations. Returns 0 or -ENOMEM
 * (@keep is then incomplete: the caller must not free stacks by it).
 */
int session__memory_keep_stacks(struct session *s, struct hashmap *keep)
{
	struct vm_acc *a;
	struct vm_region *r;

	hashmap__for_each(&s->vm_acc, i, a)
	{
		if (session__keep_stack(keep, a->stack) < 0)
			return -ENOMEM;
	}
	hashmap__for_each(&s->vm_regions, i, r)
	{
		if (session__keep_stack(keep, r->stack) < 0)
			return -ENOMEM;
	}
	return keep_alloc_stacks(s, 0, keep);
}

/* session__flush_memory_failed() - the flush was rolled back: its rows do not exist. */
void session__flush_memory_failed(struct session *s)
{
	struct alloc_block *b;

	hashmap__for_each(&s->alloc_blocks, i, b) b->new_row_id = 0;
	for (size_t i = 0; i < s->alloc_nfreed; i++)
		s->alloc_freed[i]->new_row_id = 0;
}

/* session__free_memory() - free the memory state. */
void session__free_memory(struct session *s)
{
	free(s->memory_rows);
	hashmap_free_all(&s->vm_acc);
	hashmap_free_all(&s->vm_regions);
	hashmap_free_all(&s->alloc_inflight);
	hashmap_free_all(&s->alloc_blocks);
	for (size_t i = 0; i < s->alloc_nfreed; i++)
		free(s->alloc_freed[i]);
	free(s->alloc_freed);
}

/*
 * session__set_malloc_stats() - the allocation probes' counters of the
 * session's slot (malloc_probes__stats(): running totals since the attach),
 * kept for the next flush. When the probes were stopped stays as it was.
 */
void session__set_malloc_stats(struct session *s, const struct malloc_stats *st)
{
	uint64_t stopped_ns = s->malloc_totals.stopped_ns;

	s->malloc_totals = (struct store_malloc){
		.stopped_ns = stopped_ns,
		.free_calls = st->calls[MALLOC_FUNC_FREE] + st->calls[MALLOC_FUNC_MUNMAP] +
			      st->calls[MALLOC_FUNC_USDT_FREE] + st->profile_frees,
		.malloc_bytes = st->alloc_bytes,
		.sampled = st->sampled,
		.lost = st->ringbuf_full,
	};
	for (unsigned f = 0; f < MALLOC_NR_FUNCS; f++)
		if (f != MALLOC_FUNC_FREE && f != MALLOC_FUNC_MUNMAP && f != MALLOC_FUNC_USDT_FREE)
			s->malloc_totals.malloc_calls += st->calls[f];
}

/*
 * session__malloc_stopped() - the allocation probes were detached at
 * @real_ns (CLOCK_REALTIME) for their rate: stored with the session, and
 * said by the memory report. What they recorded stays.
 */
void session__malloc_stopped(struct session *s, uint64_t real_ns)
{
	s->malloc_totals.stopped_ns = real_ns;
}

/* session__malloc_probing() - allocations are traced and the probes were not stopped. */
bool session__malloc_probing(const struct session *s)
{
	return s->malloc_sample_bytes && !s->malloc_totals.stopped_ns;
}

/*
 * session__store_memory_config() - store the session's memory settings:
 * RSS period, mean bytes between allocation samples, the probe limit, and
 * @probes (what the allocation probes were attached to, or NULL).
 * Returns 0 or -EIO (store__errmsg() says why). Does not log.
 */
int session__store_memory_config(struct session *s, const struct session_env *env,
				 const char *probes)
{
	return store__session_memory_config(env->store, s->id, s->memory_interval_ns,
					    s->malloc_sample_bytes, probes,
					    s->malloc_max_hits_per_s);
}
