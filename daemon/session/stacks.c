/*
 * stacks.c - a session's call stacks: interned as raw addresses while
 * sampling, and at the flush symbolized, address by address, into frame and
 * stack rows of the store (cached, so an address is looked up once).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "session/owned_map.h"
#include "session/session.h"
#include "session/session_internal.h"
#include "util.h"

/* Inlined calls kept per address; deeper inlining keeps the innermost (symbolize.h). */
#define MAX_INLINE 8
/* Frames per stored stack, inline frames included: more are cut, and the stack marked truncated. */
#define MAX_STACK_FRAMES 512

struct frame_cache {
	uint64_t addr;
	pid_t pid; /* 0 for kernel frames */
	bool kernel;
	bool return_addr;	 /* looked up as a return address (at addr - 1) */
	bool root;		 /* the address's function is a thread root (is_thread_root()) */
	bool not_code;		 /* a user address in no executable mapping of the process */
	unsigned n;		 /* frames at this address: 1, or more with inlined calls */
	int64_t ids[MAX_INLINE]; /* frame rows, innermost first */
};

static bool raw_stack_eq(const void *entry, const void *key)
{
	const struct raw_stack *a = entry, *b = key;

	return a->klen == b->klen && a->ulen == b->ulen && a->flags == b->flags &&
	       a->pid == b->pid &&
	       memcmp(a->ips, b->ips, sizeof(uint64_t) * (a->klen + a->ulen)) == 0;
}

static bool frame_eq(const void *entry, const void *key)
{
	const struct frame_cache *a = entry, *b = key;

	return a->addr == b->addr && a->kernel == b->kernel && a->pid == b->pid &&
	       a->return_addr == b->return_addr;
}

static bool frame_of_pid(const void *entry, const void *ctx)
{
	const struct frame_cache *fc = entry;

	return !fc->kernel && fc->pid == *(const pid_t *)ctx;
}

/*
 * The memo of evicted stacks: of a stored stack session__stacks_evict()
 * forgets, its row, kept under two hashes of its content instead of the
 * content (a raw stack of 60 frames is ~0.5 KiB, a memo slot 32 bytes). A
 * stack that comes again takes its row from here, not from the store, where
 * store__stack_id() finds it by reads of the stacks index and table; on a
 * long session those outgrow SQLite's page cache, and the reads per sample
 * grew ~4x in 10 minutes of deep-nofp at 999 Hz, whose recursion keeps
 * bringing back more stacks than the raw cache holds. Direct-mapped: a stack
 * evicted later takes the slot of its hash. Both 64-bit hashes, of different
 * seeds, and the PID must match: a false match, a wrong stack, has odds of
 * ~2^-128 per lookup, those of a 128-bit content hash.
 */
struct stack_memo_slot {
	uint64_t hash;	  /* raw_stack.hash */
	uint64_t check;	  /* raw_stack_hash() with STACK_CHECK_SEED */
	int64_t stack_id; /* 0: empty */
	pid_t pid;
	bool cut_not_code;
};

struct stack_memo {
	struct stack_memo_slot slot[SESSION_STACK_MEMO];
};

/*
 * raw_stack_hash() - a hash of what makes @st the stack it is (what
 * raw_stack_eq() compares) from @seed: raw_stack.hash with HASH64_INIT,
 * the memo's check with STACK_CHECK_SEED.
 */
static uint64_t raw_stack_hash(const struct raw_stack *st, uint64_t seed)
{
	uint64_t h = hash64(seed, st->ips, sizeof(uint64_t) * (st->klen + st->ulen));

	h = hash64(h, &st->klen, sizeof(st->klen));
	h = hash64(h, &st->flags, sizeof(st->flags));
	return hash64(h, &st->pid, sizeof(st->pid));
}

/* The seed of the memo's second hash, independent of raw_stack.hash's. */
#define STACK_CHECK_SEED 0x9e3779b97f4a7c15ULL

/* The memo slot of @st: a stack evicted later with the same low bits of its hash takes it. */
static size_t stack_memo_slot(const struct raw_stack *st)
{
	return st->hash & (SESSION_STACK_MEMO - 1);
}

/* Remember the row of @st, stored and about to be freed; without memory, nothing. */
static void stack_memo_add(struct session *s, const struct raw_stack *st)
{
	if (!s->stack_memo)
		s->stack_memo = calloc(1, sizeof(*s->stack_memo));
	if (s->stack_memo)
		s->stack_memo->slot[stack_memo_slot(st)] = (struct stack_memo_slot){
		    .hash = st->hash,
		    .check = raw_stack_hash(st, STACK_CHECK_SEED),
		    .stack_id = st->stack_id,
		    .pid = st->pid,
		    .cut_not_code = st->cut_not_code,
		};
}

/* Give @st the row the memo holds for it; false if it holds none. */
static bool stack_memo_find(const struct session *s, struct raw_stack *st)
{
	const struct stack_memo_slot *m;

	if (!s->stack_memo)
		return false;
	m = &s->stack_memo->slot[stack_memo_slot(st)];
	if (!m->stack_id || m->hash != st->hash || m->pid != st->pid ||
	    m->check != raw_stack_hash(st, STACK_CHECK_SEED))
		return false;
	st->stack_id = m->stack_id;
	st->cut_not_code = m->cut_not_code;
	return true;
}

/* session__stack_memo_free() - forget every evicted stack's row (and the memo's memory). */
void session__stack_memo_free(struct session *s)
{
	free(s->stack_memo);
	s->stack_memo = NULL;
}

/*
 * session__forget_frames() - drop the frame cache's entries for the user
 * addresses of process @pid, and the memo's of its evicted stacks (an
 * exited child: its addresses mean nothing once its PID is reused). The
 * frame and stack rows stay in the store.
 */
void session__forget_frames(struct session *s, pid_t pid)
{
	hashmap__remove_if(&s->frames, frame_of_pid, &pid, free);
	for (size_t i = 0; s->stack_memo && i < SESSION_STACK_MEMO; i++)
		if (s->stack_memo->slot[i].pid == pid)
			s->stack_memo->slot[i].stack_id = 0;
}

/* session__same_stack() - hashmap_eq_fn of raw stacks kept by pointer. */
bool session__same_stack(const void *entry, const void *key)
{
	return entry == key;
}

/*
 * session__keep_stack() - put @st (NULL: nothing) in @keep, a struct hashmap
 * of raw stacks by pointer, once. Returns 0 or -ENOMEM. (void *: it is also
 * gpu_acc__held_stacks()'s callback.)
 */
int session__keep_stack(void *keep, struct raw_stack *st)
{
	uint64_t h = session__stack_ptr_hash(st);

	if (!st || hashmap__find(keep, h, session__same_stack, st))
		return 0;
	return hashmap__insert(keep, h, st);
}

struct stacks_of {
	pid_t pid;
	const struct hashmap *keep;
};

static bool stack_unused_of_pid(const void *entry, const void *ctx)
{
	const struct stacks_of *c = ctx;
	const struct raw_stack *st = entry;

	return st->pid == c->pid &&
	       !hashmap__find(c->keep, session__stack_ptr_hash(st), session__same_stack, st);
}

/*
 * session__forget_stacks() - after the last flush of the exited child
 * @pid: free its raw stacks that nothing refers to any more (samples,
 * off-CPU intervals and address-space changes are stored and their
 * accumulators emptied; sampled allocations and live GPU allocations keep
 * theirs), so that a job forking workers all along does not fill
 * max_stacks with the stacks of the dead. Its address-space accumulators
 * and regions go in any case (session__memory_forget_pid()). Returns how
 * many were freed.
 */
size_t session__forget_stacks(struct session *s, pid_t pid)
{
	struct hashmap keep = {0};
	struct stacks_of c = {.pid = pid, .keep = &keep};
	bool complete = session__memory_forget_pid(s, pid, &keep) == 0 &&
			gpu_acc__held_stacks(s->gpu, session__keep_stack, &keep) == 0;
	size_t n = 0;

	if (complete)
		n = hashmap__remove_if(&s->stacks, stack_unused_of_pid, &c, free);
	hashmap__free(&keep);
	return n;
}

/* raw_stack.seen of a stack session__stacks_evict() chose (flushes never reach it). */
#define STACK_EVICTED UINT32_MAX

static bool stack_evicted(const void *entry, const void *ctx)
{
	(void)ctx;
	return ((const struct raw_stack *)entry)->seen == STACK_EVICTED;
}

static int seen_cmp(const void *a, const void *b)
{
	uint32_t x = (*(struct raw_stack *const *)a)->seen, y = (*(struct raw_stack *const *)b)->seen;

	return (x > y) - (x < y);
}

/*
 * session__stacks_evict() - after a committed flush, bound the raw stacks
 * the session holds: past SESSION_STACK_CACHE (or half of max_stacks, if
 * less), forget the stored ones (a stack_id) that nothing refers to any
 * more, those a record had least lately first (raw_stack.seen), down to
 * three quarters of that bound.
 * A forgotten stack that comes again is interned anew, and its first flush
 * takes its row from the memo of evicted stacks, or, once the memo lost
 * it, symbolizes it from the frame cache and finds its row in the store by
 * content (store__stack_id()): same stack_id, a few SQL lookups. Without
 * it, a session whose stacks keep varying (recursion, deep-nofp's ~230 new
 * stacks a second after minutes) holds every stack it ever saw, and drops
 * samples once at max_stacks. Nothing is forgotten when the set of
 * stacks in use (the memory and GPU accountings') cannot be built (no
 * memory). Returns how many were freed.
 */
size_t session__stacks_evict(struct session *s)
{
	struct hashmap keep = {0};
	struct raw_stack **cand = NULL, *st;
	size_t cache = MIN(SESSION_STACK_CACHE, s->max_stacks / 2), n = 0, want, freed = 0;

	if (s->stacks.len <= cache)
		return 0;
	/* the accumulators of samples and off-CPU intervals are empty after a flush */
	if (session__memory_keep_stacks(s, &keep) < 0 ||
	    gpu_acc__held_stacks(s->gpu, session__keep_stack, &keep) < 0)
		goto out;
	cand = malloc(s->stacks.len * sizeof(*cand));
	if (!cand)
		goto out;
	hashmap__for_each(&s->stacks, i, st)
	{
		if (st->stack_id &&
		    !hashmap__find(&keep, session__stack_ptr_hash(st), session__same_stack, st))
			cand[n++] = st;
	}
	want = MIN(n, s->stacks.len - cache / 4 * 3);
	qsort(cand, n, sizeof(*cand), seen_cmp);
	for (size_t i = 0; i < want; i++) {
		stack_memo_add(s, cand[i]);
		cand[i]->seen = STACK_EVICTED;
	}
	freed = hashmap__remove_if(&s->stacks, stack_evicted, NULL, free);
out:
	free(cand);
	hashmap__free(&keep);
	return freed;
}

/*
 * session__stack_intern() - the session's one copy of a stack of process
 * @pid (@klen kernel then @ulen user frames, leaf first each, at most
 * PROFILE_MAX_FRAMES each), owned by the session; NULL on out-of-memory or
 * a length out of range, or with *@ret_limited set (if not NULL) when the
 * session has max_stacks already.
 */
struct raw_stack *session__stack_intern(struct session *s, pid_t pid, const uint64_t *ips,
					unsigned klen, unsigned ulen, uint32_t flags,
					bool *ret_limited)
{
	size_t n = (size_t)klen + ulen;
	struct raw_stack *key, *st;
	uint64_t h;
	/* A stack-sized key on the heap would cost a malloc per sample; this is 2 KiB. */
	union {
		struct raw_stack rs;
		char buf[sizeof(struct raw_stack) + 2 * PROFILE_MAX_FRAMES * sizeof(uint64_t)];
	} k;

	/* Python frames merged in can make the user part longer than BPF's. */
	if (klen > PROFILE_MAX_FRAMES || n > 2 * PROFILE_MAX_FRAMES)
		return NULL;
	key = &k.rs;
	key->pid = pid;
	key->klen = (uint16_t)klen;
	key->ulen = (uint16_t)ulen;
	key->flags = flags;
	key->stack_id = 0;
	key->cut_not_code = false;
	memcpy(key->ips, ips, n * sizeof(uint64_t));
	h = raw_stack_hash(key, HASH64_INIT);
	key->hash = h;

	st = hashmap__find(&s->stacks, h, raw_stack_eq, key);
	if (st) {
		st->seen = s->flushes;
		return st;
	}
	if (s->stacks.len >= s->max_stacks) {
		if (ret_limited)
			*ret_limited = true;
		return NULL;
	}
	key->seen = s->flushes;
	return hashmap_add_copy(&s->stacks, h, key, sizeof(*key) + n * sizeof(uint64_t));
}

/*
 * session__sample_stack() - the session's copy of @e's stack, Python frames
 * merged where the interpreter's are; NULL without memory or at the stack
 * limit (*@ret_limited set).
 */
struct raw_stack *session__sample_stack(struct session *s, const struct sample_event *e,
					bool *ret_limited)
{
	uint32_t flags = e->flags & (SAMPLE_USER_TRUNCATED | SAMPLE_KERNEL_TRUNCATED);
	uint64_t ips[2 * PROFILE_MAX_FRAMES];
	size_t n;
	bool cut;
	int r;

	if (!s->python || !e->py_len)
		return session__stack_intern(s, (pid_t)e->pid, (const uint64_t *)e->ips,
					     e->kstack_len, e->ustack_len, flags, ret_limited);
	/* Python frames in place of the interpreter's: kernel frames, then the merged user part. */
	memcpy(ips, e->ips, e->kstack_len * sizeof(uint64_t));
	r = python_reader__merge(s->python, e, ips + e->kstack_len, ARRAY_SIZE(ips) - e->kstack_len,
				 &n, &cut);
	if (r == -ENOMEM)
		return NULL;
	if (r == -EPROTO && !e->event)
		s->python_unmerged++;
	if (r > 0 && !e->event)
		s->python_samples++;
	if (r > 0 && (cut || (e->flags & SAMPLE_PY_TRUNCATED)))
		flags |= SAMPLE_USER_TRUNCATED;
	return session__stack_intern(s, (pid_t)e->pid, ips, e->kstack_len, (unsigned)n, flags,
				     ret_limited);
}

/*
 * Functions where a thread's stack begins: a stack whose outermost user
 * frame is one of them is complete (glibc: _start -> __libc_start_main ->
 * __libc_start_call_main -> main; threads: clone3/clone -> start_thread).
 */
static bool is_thread_root(const char *function)
{
	static const char *const roots[] = {
	    "_start",	    "__libc_start_main", "__libc_start_call_main",
	    "main",	    "start_thread",	 "clone",
	    "clone3",	    "__clone",		 "__clone3",
	    "thread_start",
	};

	if (!function)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(roots); i++)
		if (strcmp(function, roots[i]) == 0)
			return true;
	return false;
}

/*
 * user_frame() - the frame rows (@fi, up to MAX_INLINE) of user address
 * @addr of @proc: symbolized from its mapping, read again once a flush for
 * code mapped since (@refreshed), else from the JIT's perf map. Returns the
 * number of rows, -ENOENT with fi[0] "[unknown]" (or the perf map's name),
 * or a store or symbolizer -errno.
 */
static int user_frame(struct session *s, const struct session_env *env, struct proc *proc,
		      uint64_t addr, bool return_addr, bool *refreshed, struct frame_info *fi)
{
	int r;

	r = symbolizer__user_inline(env->sym, proc->as, addr, return_addr, fi, MAX_INLINE);
	/* Code mapped after the last read of /proc/PID/maps (dlopen): read it again, once a
	 * flush. */
	if (r == -ENOENT && !*refreshed) {
		int added;

		*refreshed = true;
		pthread_rwlock_wrlock(&proc->as_lock);
		added = addrspace__refresh(proc->as);
		pthread_rwlock_unlock(&proc->as_lock);
		/* unwind "auto" or "tables": the new modules' tables too, on the sampler's thread */
		if (added > 0 && proc->tables_asked && env->sampler)
			sampler__tables_add(env->sampler, proc->pid);
		if (added > 0) {
			r = session__store_mappings(s, proc, env->store);
			if (r < 0)
				return r;
			r = symbolizer__user_inline(env->sym, proc->as, addr, return_addr,
						    fi, MAX_INLINE);
		}
	}
	/* Outside every file mapping: JIT code, named by the JIT's perf map. */
	if (r == -ENOENT) {
		const char *name, *path;

		if (perfmap__lookup(proc->jit, addr, &name, &path) == 0) {
			fi[0].module = path;
			fi[0].function = name;
			fi[0].rel_addr = addr;
			fi[0].build_id = "";
		}
	}
	return r;
}

/*
 * Frame rows of one address, symbolizing and storing them the first time:
 * one row, or one per inlined call and one for the function around them.
 * Returns the cache entry (owned by the session) in *@ret.
 */
static int frame_ids(struct session *s, const struct session_env *env, struct proc *proc,
		     uint64_t addr, bool kernel, bool return_addr, bool *refreshed,
		     const struct frame_cache **ret)
{
	/* The same address is a leaf in one stack and a return address in
	 * another (a function's entry, where an allocation probe stops, is also
	 * the user IP of a CPU sample taken in the probe's kernel handler):
	 * looked up at addr and at addr - 1, they may be different functions. */
	struct frame_cache key = {.addr = addr,
				  .kernel = kernel,
				  .return_addr = return_addr,
				  .pid = kernel ? 0 : proc->pid},
			   *fc;
	uint64_t h = hash64(hash64(HASH64_INIT, &addr, sizeof(addr)), &key.pid, sizeof(key.pid)) ^
		     kernel ^ ((uint64_t)return_addr << 1);
	struct frame_info fi[MAX_INLINE] = {0};
	bool python = !kernel && s->python && python_token(addr);
	int r, n = 1;

	fc = hashmap__find(&s->frames, h, frame_eq, &key);
	if (fc) {
		*ret = fc;
		return 0;
	}
	if (kernel) {
		r = symbolizer__kernel(env->sym, addr, return_addr, &fi[0]);
	} else {
		r = python ? python_reader__frame(s->python, addr, &fi[0]) : -ENOENT;
		/* Not a token of the session's reader but an address of that shape
		 * (garbage from a frame-pointer walk): looked up as any user address,
		 * it is "[unknown]". A frame with no module would fail the flush. */
		if (r == -ENOENT) {
			python = false;
			r = user_frame(s, env, proc, addr, return_addr, refreshed, fi);
			/* No perf map named it either (user_frame() refreshed the maps). */
			key.not_code =
			    r == -ENOENT && !fi[0].function && !addrspace__is_code(proc->as, addr);
		}
		if (r > 0)
			n = MIN(r, MAX_INLINE);
	}
	if (r < 0 && r != -ENOENT)
		return r;
	/* A return address outside all code is no frame: no row (the stack ends before it). */
	if (key.not_code && return_addr)
		n = 0;
	/*
	 * A user return address is stored minus one, at the address it was
	 * looked up at (the last byte of the call): the row then symbolizes as
	 * it is (profctl resymbolize), and the entry of a function, a leaf in an
	 * allocation stack, is another row than the same address as a return
	 * address (a CPU sample's user IP under a uprobe handler's kernel frames,
	 * looked up in the function before). Rows are shared across sessions by
	 * (module, build ID, rel_addr). Python frames keep their rel_addr: a
	 * number naming a (function, line), not an address.
	 */
	if (!kernel && return_addr && !python)
		for (int i = 0; i < n; i++)
			if (fi[i].rel_addr > 0)
				fi[i].rel_addr--;
	/* Kernel frames and lookups that failed have no inlining: depth 0, from the zeroing. */
	for (int i = 0; i < n; i++) {
		r = store__frame_id(env->store, &fi[i], &key.ids[i]);
		if (r < 0)
			return r;
		if (!fi[i].function)
			s->unsymbolized_pending++;
		s->frames_pending++;
	}
	key.n = (unsigned)n;
	/* The function the symbol table names is last; it decides rootness. */
	key.root = n > 0 && !kernel && is_thread_root(fi[n - 1].function);
	/* No entry is held across calls: the callers use *@ret at once. */
	if (s->frames.len >= MIN(SESSION_FRAME_CACHE, 4 * (size_t)s->max_stacks))
		hashmap_clear_free(&s->frames);
	fc = hashmap_add_copy(&s->frames, h, &key, sizeof(key));
	if (!fc)
		return -ENOMEM;
	*ret = fc;
	return 0;
}

/* The placeholder frame of a sample that has no stack at all: visible, never dropped. */
static const struct frame_info missing_frame = {
    .module = "[missing]",
    .build_id = "",
    .function = "[missing stack]",
};

/*
 * session__resolve_stack() - give @st its row in the store (st->stack_id),
 * symbolizing its new addresses; @refreshed: whether the process's mappings
 * were re-read in this flush already (in/out). Returns 0 or the store's
 * -errno. Call only inside the flush's transaction.
 */
int session__resolve_stack(struct session *s, const struct session_env *env, struct raw_stack *st,
			   bool *refreshed)
{
	int64_t ids[MAX_STACK_FRAMES];
	size_t n = (size_t)st->klen + st->ulen, depth = 0;
	bool root = false, cut = false, not_code = false;
	struct proc *proc;
	int r;

	if (st->stack_id || stack_memo_find(s, st))
		return 0;
	/* NULL only for a child retired since (session__proc_retire()) and gone:
	 * its stack is stored as the missing frame, as one without frames. */
	proc = session__proc(s, st->pid);
	for (size_t i = 0; proc && i < n && !cut; i++) {
		const struct frame_cache *fc;
		bool kernel = i < st->klen;
		/* Every frame but the sampled instruction holds a return address.
		 * A user frame under kernel frames is the address after the syscall. */
		bool return_addr = i > 0;

		r = frame_ids(s, env, proc, st->ips[i], kernel, return_addr, refreshed, &fc);
		if (r < 0)
			return r;
		/* A caller outside all code is garbage (a frame-pointer walk through
		 * code built without them): the stack ends before it, truncated.
		 * The sampled instruction (a leaf without kernel frames) is where
		 * the thread was: kept, as "[unknown]". */
		if (fc->n == 0) {
			not_code = cut = true;
			break;
		}
		for (unsigned k = 0; k < fc->n; k++) {
			if (depth == MAX_STACK_FRAMES) {
				cut = true;
				break;
			}
			ids[depth++] = fc->ids[k];
		}
		root = fc->root;
	}
	/* @root now holds the outermost address's answer. */
	if (st->ulen == 0 || cut)
		root = false;
	if (depth == 0) {
		r = store__frame_id(env->store, &missing_frame, &ids[0]);
		if (r < 0)
			return r;
		depth = 1;
	}
	st->cut_not_code = not_code;
	return store__stack_id(env->store, ids, depth, st->flags != 0 || cut, root, &st->stack_id);
}

void session__forget_row_ids(struct session *s)
{
	struct raw_stack *st;

	hashmap__for_each(&s->stacks, i, st) st->stack_id = 0;
	hashmap_clear_free(&s->frames);
	session__stack_memo_free(s);
}
