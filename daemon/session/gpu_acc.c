/* gpu_acc.c - one session's accounting of CUDA/NVTX/uprobe calls, and its rows in the store. */
#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/gpu_acc.h"
#include "session/owned_map.h"
#include "protocol.h"
#include "bpf/profile.h"
#include "hashmap.h"
#include "store/store.h"
#include "util.h"

extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

#define NVTX_MAX_DEPTH 32
#define NAME_BYTES 256
#define PATH_BYTES 1024

/* One aggregate row: its key as text fields plus a stack, its numbers. */
struct agg {
	int table;		  /* AGG_* */
	char key1[PATH_BYTES];	  /* api / kernel name / nvtx path / probe label */
	char key2[64];		  /* kernel api / copy direction / nvtx kind */
	char grid[48], block[48]; /* kernels */
	char name[NAME_BYTES];	  /* nvtx innermost name */
	int depth;		  /* nvtx */
	struct raw_stack *stack;  /* kernels, syncs */
	uint64_t calls, errors, total_ns, min_ns, max_ns, bytes;
};

/* The aggregate tables, as the store names them. */
enum {
	AGG_API = STORE_GPU_API,
	AGG_KERNEL = STORE_GPU_KERNEL,
	AGG_COPY = STORE_GPU_COPY,
	AGG_SYNC = STORE_GPU_SYNC,
	AGG_NVTX = STORE_GPU_NVTX,
	AGG_UPROBE = STORE_GPU_UPROBE,
};

struct mem_row {
	uint64_t time_ns; /* CLOCK_MONOTONIC */
	const char *api;  /* static (catalogue) */
	const char *space;
	uint64_t requested_bytes, address;
	int64_t live_delta_bytes;
	bool ok;
	struct raw_stack *stack;
};

/* A live allocation (tsearch tree, by address). */
struct live_alloc {
	uint64_t address, bytes;
	const char *space;
	struct raw_stack *stack;
};

/* An NVTX push/pop stack of one thread (hashmap by tid, never removed). */
struct nvtx_thread {
	int tid;
	unsigned n;
	uint64_t start_ns[NVTX_MAX_DEPTH];
	char name[NVTX_MAX_DEPTH][UPROBE_STR_BYTES];
};

/* An NVTX start/end range (tsearch tree, by id). */
struct nvtx_open {
	uint64_t id, start_ns;
	char name[UPROBE_STR_BYTES];
};

/*
 * Kernel names already found, by host function address or by the content of
 * the launching stack (its process and addresses: not the raw stack's
 * pointer, which the session frees and reuses once the stack is evicted).
 * At most NAMES_MAX, then emptied whole: each is found again by
 * symbolizing a few frames.
 */
struct name_cache {
	uint64_t key;
	bool by_stack;
	char name[NAME_BYTES];
};
#define NAMES_MAX 4096

struct note {
	pid_t pid;
	char what[160], file[512], status[192];
};

struct gpu_acc {
	struct agg **aggs; /* pending since the last flush */
	size_t nr_aggs, cap_aggs;
	struct hashmap agg_index; /* the same rows, by key */
	struct mem_row *mem;
	size_t nr_mem, cap_mem;
	struct note *notes;
	size_t nr_notes, cap_notes;
	void *live;	 /* struct live_alloc tree */
	void *nvtx_open; /* struct nvtx_open tree */
	struct hashmap nvtx_threads;
	struct hashmap names;
	/* Counters not yet flushed, and the values the flush in progress wrote. */
	struct gpu_counts {
		uint64_t lost, unmatched, unnamed, truncated, no_stack;
	} c, flushing;
	size_t nr_notes_flushing;
	struct gpu_acc_owner owner;
};

struct held_walk {
	int (*fn)(void *ctx, struct raw_stack *stack);
	void *ctx;
	int r;
};

static void live_visit(const void *node, VISIT v, void *closure)
{
	struct held_walk *w = closure;

	if ((v == postorder || v == leaf) && w->r >= 0)
		w->r = w->fn(w->ctx, (*(struct live_alloc *const *)node)->stack);
}

/*
 * gpu_acc__held_stacks() - call @fn(@ctx, stack) for every raw stack @a
 * refers to: the launching stacks of the rows not flushed yet and of the
 * live allocations (a free, maybe hours later, is counted against its
 * allocation's stack). Every other stack the session may free. Returns 0,
 * or @fn's first negative return (the walk stops there). Accepts NULL.
 */
int gpu_acc__held_stacks(const struct gpu_acc *a, int (*fn)(void *ctx, struct raw_stack *stack),
			 void *ctx)
{
	struct held_walk w = {.fn = fn, .ctx = ctx};

	if (!a)
		return 0;
	for (size_t i = 0; i < a->nr_aggs && w.r >= 0; i++)
		if (a->aggs[i]->stack)
			w.r = fn(ctx, a->aggs[i]->stack);
	for (size_t i = 0; i < a->nr_mem && w.r >= 0; i++)
		if (a->mem[i].stack)
			w.r = fn(ctx, a->mem[i].stack);
	if (w.r >= 0)
		twalk_r(a->live, live_visit, &w);
	return w.r;
}

/*
 * gpu_acc__new() - an empty accounting for the session @owner describes
 * (copied; its ctx is borrowed for the accounting's life). NULL only on
 * out-of-memory.
 */
struct gpu_acc *gpu_acc__new(const struct gpu_acc_owner *owner)
{
	struct gpu_acc *a = calloc(1, sizeof(struct gpu_acc));

	if (a)
		a->owner = *owner;
	return a;
}

/*
 * gpu_acc__set_session() - the owning session's row @id, and its start on
 * both clocks (@real_ns CLOCK_REALTIME, @mono_ns CLOCK_MONOTONIC, the same
 * instant), once the row exists.
 */
void gpu_acc__set_session(struct gpu_acc *a, int64_t id, uint64_t real_ns, uint64_t mono_ns)
{
	a->owner.session_id = id;
	a->owner.started_real_ns = real_ns;
	a->owner.started_mono_ns = mono_ns;
}

static void free_pending(struct gpu_acc *a)
{
	for (size_t i = 0; i < a->nr_aggs; i++)
		free(a->aggs[i]);
	a->nr_aggs = 0;
	hashmap__clear(&a->agg_index);
	a->nr_mem = 0;
}

/* gpu_acc__free() - free everything, unflushed rows included. Accepts NULL. */
void gpu_acc__free(struct gpu_acc *a)
{
	if (!a)
		return;
	free_pending(a);
	free(a->aggs);
	hashmap__free(&a->agg_index);
	free(a->mem);
	free(a->notes);
	tdestroy(a->live, free);
	tdestroy(a->nvtx_open, free);
	hashmap_free_all(&a->nvtx_threads);
	hashmap_free_all(&a->names);
	free(a);
}

static bool agg_eq(const void *entry, const void *key)
{
	const struct agg *x = entry, *y = key;

	return x->table == y->table && x->stack == y->stack && strcmp(x->key1, y->key1) == 0 &&
	       strcmp(x->key2, y->key2) == 0 && strcmp(x->grid, y->grid) == 0 &&
	       strcmp(x->block, y->block) == 0;
}

/*
 * The pending row of @table with these keys (cut to their fields' sizes),
 * created with zero counts; NULL on OOM. Rows stay in insertion order in
 * a->aggs for the flush; a->agg_index finds them in one hash lookup (a
 * busy job makes thousands of calls a second).
 */
static struct agg *agg_get(struct gpu_acc *a, int table, const char *key1, const char *key2,
			   const char *grid, const char *block, struct raw_stack *stack)
{
	struct agg key = { .table = table, .stack = stack, .min_ns = UINT64_MAX }, *g;
	uint64_t h;

	snprintf(key.key1, sizeof(key.key1), "%s", key1);
	snprintf(key.key2, sizeof(key.key2), "%s", key2);
	snprintf(key.grid, sizeof(key.grid), "%s", grid);
	snprintf(key.block, sizeof(key.block), "%s", block);
	h = hash64(HASH64_INIT, &table, sizeof(table));
	h = hash64(h, &stack, sizeof(stack));
	h = hash64(h, key.key1, strlen(key.key1));
	h = hash64(h, key.key2, strlen(key.key2) + 1);
	h = hash64(h, key.grid, strlen(key.grid) + 1);
	h = hash64(h, key.block, strlen(key.block));
	g = hashmap__find(&a->agg_index, h, agg_eq, &key);
	if (g)
		return g;
	if (grow_array((void **)&a->aggs, &a->cap_aggs, a->nr_aggs, sizeof(*a->aggs)) < 0)
		return NULL;
	g = hashmap_add_copy(&a->agg_index, h, &key, sizeof(key));
	if (!g)
		return NULL;
	a->aggs[a->nr_aggs++] = g;
	return g;
}

static void agg_time(struct agg *g, uint64_t ns, bool error)
{
	g->calls++;
	g->errors += error;
	g->total_ns += ns;
	if (ns < g->min_ns)
		g->min_ns = ns;
	if (ns > g->max_ns)
		g->max_ns = ns;
}

/* Demangle @mangled into @buf, or copy it as it is. */
static void demangle(const char *mangled, char *buf, size_t size)
{
	int status = -1;
	_cleanup_free_ char *d = mangled[0] == '_' && mangled[1] == 'Z'
				     ? __cxa_demangle(mangled, NULL, NULL, &status)
				     : NULL;

	snprintf(buf, size, "%s", d && status == 0 ? d : mangled);
}

/*
 * The kernel a `__device_stub__` frame launches: nvcc names the stub of
 * kernel _Z12scale_kernelPfi `_Z33__device_stub__Z12scale_kernelPfiPfi`,
 * whose demangled name is `__device_stub__Z12scale_kernelPfi(float*, int)`:
 * the kernel's mangled name is "_" + the identifier after "__device_stub_"
 * (an extern "C" kernel k has the stub __device_stub__k). False if
 * @function is not a stub.
 */
static bool stub_kernel_name(const char *function, char *buf, size_t size)
{
	const char *p = strstr(function, "__device_stub__");
	char id[NAME_BYTES];
	size_t n;

	if (!p)
		return false;
	p += strlen("__device_stub__");
	n = strcspn(p, "(");
	if (n == 0 || n + 2 > sizeof(id))
		return false;
	if (p[0] == 'Z') {
		id[0] = '_';
		memcpy(id + 1, p, n);
		id[n + 1] = '\0';
		demangle(id, buf, size);
	} else {
		snprintf(buf, size, "%.*s", (int)n, p);
	}
	return true;
}

static bool name_eq(const void *entry, const void *key)
{
	const struct name_cache *a = entry, *b = key;

	return a->key == b->key && a->by_stack == b->by_stack;
}

static uint64_t name_hash(const struct name_cache *k)
{
	return hash64(HASH64_INIT, &k->key, sizeof(k->key)) ^ k->by_stack;
}

static const char *name_cached(struct gpu_acc *a, uint64_t key, bool by_stack)
{
	struct name_cache k = {.key = key, .by_stack = by_stack}, *nc;

	nc = hashmap__find(&a->names, name_hash(&k), name_eq, &k);
	return nc ? nc->name : NULL;
}

static void name_remember(struct gpu_acc *a, uint64_t key, bool by_stack, const char *name)
{
	struct name_cache *nc;

	if (a->names.len >= NAMES_MAX)
		hashmap_clear_free(&a->names);
	nc = malloc(sizeof(*nc));
	if (!nc)
		return;
	nc->key = key;
	nc->by_stack = by_stack;
	snprintf(nc->name, sizeof(nc->name), "%s", name);
	if (hashmap__insert(&a->names, name_hash(nc), nc) < 0)
		free(nc);
}

/*
 * The name of the kernel launch @e: the host function it passes (a symbol of
 * the program: the kernel's host-side name, or its stub), else the nearest
 * `__device_stub__` frame of the launching stack (<<<>>> launches pass a
 * CUkernel handle). Works long after __cudaRegisterFunction ran. False if
 * neither is found.
 */
static bool kernel_name(struct gpu_acc *a, struct symbolizer *sym, const struct addrspace *as,
			const struct gpu_probe *p, const struct uprobe_event *e,
			const uint64_t *ips, unsigned n, char *buf, size_t size)
{
	struct frame_info fi;
	uint64_t by_stack;
	const char *c;

	if (p->api->fn_arg >= 0) {
		uint64_t fn = e->args[p->api->fn_arg];

		if ((c = name_cached(a, fn, false))) {
			snprintf(buf, size, "%s", c);
			return true;
		}
		if (as && symbolizer__user(sym, as, fn, false, &fi) == 0 && fi.function) {
			if (!stub_kernel_name(fi.function, buf, size))
				snprintf(buf, size, "%s", fi.function);
			name_remember(a, fn, false, buf);
			return true;
		}
	}
	/* by the stack's content: its address is freed and reused once it is evicted */
	by_stack = hash64(hash64(HASH64_INIT, &e->pid, sizeof(e->pid)), ips, n * sizeof(*ips));
	if (n && (c = name_cached(a, by_stack, true))) {
		snprintf(buf, size, "%s", c);
		return true;
	}
	for (unsigned i = 1; as && i < n && i < 12; i++) {
		if (symbolizer__user(sym, as, ips[i], true, &fi) < 0 || !fi.function)
			continue;
		if (stub_kernel_name(fi.function, buf, size)) {
			name_remember(a, by_stack, true, buf);
			return true;
		}
	}
	return false;
}

/* Grid and block of launch @e as "x,y,z" strings; "" if the API has none. */
static void launch_dims(const struct gpu_probe *p, const struct uprobe_event *e, char *grid,
			char *block, size_t size)
{
	const uint64_t *r = (const uint64_t *)e->args;
	uint32_t d[6];

	switch (p->api->dims) {
	case GPU_DIMS_DIM3_REGS:
		d[0] = (uint32_t)r[1], d[1] = (uint32_t)(r[1] >> 32), d[2] = (uint32_t)r[2];
		d[3] = (uint32_t)r[3], d[4] = (uint32_t)(r[3] >> 32), d[5] = (uint32_t)r[4];
		break;
	case GPU_DIMS_SCALARS:
		for (int i = 0; i < 6; i++)
			d[i] = (uint32_t)r[i + 1];
		break;
	case GPU_DIMS_CONFIG_DIM3: /* cudaLaunchConfig_t: dim3 gridDim, blockDim; copied as str */
	case GPU_DIMS_CONFIG_U32:  /* CUlaunchConfig: gridDimX..Z, blockDimX..Z */
		memcpy(d, e->str, sizeof(d));
		break;
	default:
		grid[0] = block[0] = '\0';
		return;
	}
	snprintf(grid, size, "%u,%u,%u", d[0], d[1], d[2]);
	snprintf(block, size, "%u,%u,%u", d[3], d[4], d[5]);
}

static int live_cmp(const void *x, const void *y)
{
	uint64_t a = ((const struct live_alloc *)x)->address,
		 b = ((const struct live_alloc *)y)->address;

	return a < b ? -1 : a > b;
}

static int open_cmp(const void *x, const void *y)
{
	uint64_t a = ((const struct nvtx_open *)x)->id, b = ((const struct nvtx_open *)y)->id;

	return a < b ? -1 : a > b;
}

static bool nvtx_thread_eq(const void *entry, const void *key)
{
	return ((const struct nvtx_thread *)entry)->tid == *(const int *)key;
}

/* The message of NVTX record @e as UTF-8-ish text: wide strings keep their ASCII characters. */
static void nvtx_message(const struct gpu_probe *p, const struct uprobe_event *e, char *buf,
			 size_t size)
{
	size_t n = 0;

	if (p->api->flags & UPROBE_F_WSTR0) {
		const uint32_t *w = (const uint32_t *)e->str;

		for (size_t i = 0; i < UPROBE_STR_BYTES / 4 && w[i] && n + 1 < size; i++)
			buf[n++] = w[i] < 0x80 ? (char)w[i] : '?';
		buf[n] = '\0';
	} else {
		snprintf(buf, size, "%.*s", UPROBE_STR_BYTES - 1, e->str);
	}
	if (!buf[0])
		snprintf(buf, size, "[unnamed]");
}

static void nvtx_add(struct gpu_acc *a, const char *kind, const char *path, const char *name,
		     int depth, uint64_t ns)
{
	struct agg *g = agg_get(a, AGG_NVTX, path, kind, "", "", NULL);

	if (!g) {
		a->c.lost++;
		return;
	}
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->depth = depth;
	agg_time(g, ns, false);
}

static void on_nvtx(struct gpu_acc *a, const struct gpu_probe *p, const struct uprobe_event *e)
{
	int tid = (int)e->tid;
	uint64_t h = hash64(HASH64_INIT, &tid, sizeof(tid));
	struct nvtx_thread *t = hashmap__find(&a->nvtx_threads, h, nvtx_thread_eq, &tid);
	char msg[UPROBE_STR_BYTES];

	switch (p->api->kind) {
	case GPU_KIND_NVTX_PUSH:
		if (!t) {
			t = calloc(1, sizeof(*t));
			if (!t || hashmap__insert(&a->nvtx_threads, h, t) < 0) {
				free(t);
				a->c.lost++;
				return;
			}
			t->tid = tid;
		}
		/* Deeper than NVTX_MAX_DEPTH: counted in n, not kept. */
		if (t->n < NVTX_MAX_DEPTH) {
			nvtx_message(p, e, t->name[t->n], sizeof(t->name[t->n]));
			t->start_ns[t->n] = e->entry_ns;
		}
		t->n++;
		break;
	case GPU_KIND_NVTX_POP: {
		char path[PATH_BYTES];
		size_t off = 0;

		if (!t || t->n == 0) {
			a->c.unmatched++; /* pushed before the attach */
			return;
		}
		t->n--;
		if (t->n >= NVTX_MAX_DEPTH) {
			a->c.lost++;
			return;
		}
		path[0] = '\0';
		for (unsigned i = 0; i <= t->n && off < sizeof(path); i++)
			off += snprintf(path + off, sizeof(path) - off, "%s%s", i ? " > " : "",
					t->name[i]);
		nvtx_add(a, "push", path, t->name[t->n], (int)t->n,
			 e->entry_ns - t->start_ns[t->n]);
		break;
	}
	case GPU_KIND_NVTX_START: {
		struct nvtx_open *o = calloc(1, sizeof(*o)), **found;

		if (!o) {
			a->c.lost++;
			return;
		}
		o->id = e->ret;
		o->start_ns = e->entry_ns;
		nvtx_message(p, e, o->name, sizeof(o->name));
		found = tsearch(o, &a->nvtx_open, open_cmp);
		if (!found || *found != o) {
			free(o);
			if (!found)
				a->c.lost++;
		}
		break;
	}
	case GPU_KIND_NVTX_END: {
		struct nvtx_open key = {.id = e->args[0]}, **found, *o;

		found = tfind(&key, &a->nvtx_open, open_cmp);
		if (!found) {
			a->c.unmatched++;
			return;
		}
		o = *found;
		tdelete(o, &a->nvtx_open, open_cmp);
		nvtx_add(a, "start", o->name, o->name, 0,
			 e->entry_ns > o->start_ns ? e->entry_ns - o->start_ns : 0);
		free(o);
		break;
	}
	case GPU_KIND_NVTX_MARK:
		nvtx_message(p, e, msg, sizeof(msg));
		nvtx_add(a, "mark", msg, msg, 0, 0);
		break;
	default:
		break;
	}
}

static void on_memory(struct gpu_acc *a, const struct gpu_probe *p, const struct uprobe_event *e,
		      bool ok, struct raw_stack *st)
{
	struct mem_row row = {.time_ns = e->exit_ns,
			      .api = p->api->symbol,
			      .space = p->api->space,
			      .ok = ok,
			      .stack = st};

	if (p->api->kind == GPU_KIND_ALLOC) {
		row.requested_bytes = e->args[p->api->size_arg];
		row.address = ok && (e->flags & UPROBE_EV_OUT_OK) ? e->out : 0;
		if (row.address) {
			struct live_alloc *la = malloc(sizeof(*la)), **found;

			if (la) {
				*la = (struct live_alloc){row.address, row.requested_bytes,
							  p->api->space, st};
				found = tsearch(la, &a->live, live_cmp);
				if (found && *found != la) {
					/* Reused without a free seen: the old one is gone. */
					**found = *la;
					free(la);
				} else if (!found) {
					free(la);
				}
			}
			row.live_delta_bytes = (int64_t)row.requested_bytes;
		}
	} else {
		struct live_alloc key = {.address = e->args[p->api->ptr_arg]}, **found;

		row.address = key.address;
		found = key.address ? tfind(&key, &a->live, live_cmp) : NULL;
		if (found && ok) {
			struct live_alloc *la = *found;

			row.requested_bytes = la->bytes;
			row.live_delta_bytes = -(int64_t)la->bytes;
			row.stack = la->stack;
			tdelete(la, &a->live, live_cmp);
			free(la);
		}
	}
	if (!row.stack ||
	    grow_array((void **)&a->mem, &a->cap_mem, a->nr_mem, sizeof(*a->mem)) < 0) {
		a->c.lost++;
		return;
	}
	a->mem[a->nr_mem++] = row;
}

/*
 * gpu_acc__on_event() - account call record @e of probe @p for the owning session.
 * @sym, @as: to name kernels (@as may be NULL: launches then go unnamed).
 * Allocates; on out-of-memory the call is counted as lost. Does not log.
 */
void gpu_acc__on_event(struct gpu_acc *a, struct symbolizer *sym,
		       const struct addrspace *as, const struct gpu_probe *p,
		       const struct uprobe_event *e)
{
	const struct gpu_api *api = p->api;
	uint64_t ns = e->exit_ns - e->entry_ns;
	bool error = api->error_if_nonzero && (uint32_t)e->ret != 0;
	uint64_t ips[UPROBE_MAX_FRAMES + 1];
	unsigned n = 0;
	struct raw_stack *st = NULL;
	struct agg *g;

	if (api->kind == GPU_KIND_UPROBE) {
		g = agg_get(a, AGG_UPROBE, p->label, "", "", "", NULL);
		if (g)
			agg_time(g, ns, false);
		else
			a->c.lost++;
		return;
	}
	if (api->nvtx) {
		on_nvtx(a, p, e);
		return;
	}
	g = agg_get(a, AGG_API, p->label, "", "", "", NULL);
	if (!g) {
		a->c.lost++;
		return;
	}
	agg_time(g, ns, error);
	/* Calls made inside another probed CUDA call (cudaMemcpy -> cuMemcpy) are
	 * the same work: only the outermost one counts as a launch, copy, ... */
	if (e->depth > 0)
		return;
	/* The user stack, with the direct caller put back: the walk from a
	 * function's first instruction skips it (uprobes.h). */
	if (e->ustack_len > 0) {
		ips[n++] = e->ips[0];
		if (e->ret_addr && (e->ustack_len < 2 || e->ips[1] != e->ret_addr))
			ips[n++] = e->ret_addr;
		for (unsigned i = 1; i < e->ustack_len && n < UPROBE_MAX_FRAMES; i++)
			ips[n++] = e->ips[i];
	}
	a->c.truncated += !!(e->flags & UPROBE_EV_TRUNCATED);
	a->c.no_stack += !!(e->flags & UPROBE_EV_NO_STACK);
	st = a->owner.intern(a->owner.ctx, (pid_t)e->pid, ips, n,
			     (e->flags & UPROBE_EV_TRUNCATED) ? SAMPLE_USER_TRUNCATED : 0);
	if (!st) {
		a->c.lost++;
		return;
	}
	switch (api->kind) {
	case GPU_KIND_LAUNCH:
	case GPU_KIND_GRAPH: {
		char name[NAME_BYTES], grid[48], block[48];

		if (api->kind == GPU_KIND_GRAPH) {
			snprintf(name, sizeof(name), "[CUDA graph]");
		} else if (!kernel_name(a, sym, as, p, e, ips, n, name, sizeof(name))) {
			snprintf(name, sizeof(name), "[unknown kernel]");
			a->c.unnamed++;
		}
		launch_dims(p, e, grid, block, sizeof(grid));
		g = agg_get(a, AGG_KERNEL, name, p->label, grid, block, st);
		if (!g) {
			a->c.lost++;
			return;
		}
		g->calls++;
		g->errors += error;
		break;
	}
	case GPU_KIND_ALLOC:
	case GPU_KIND_FREE:
		on_memory(a, p, e, !error, st);
		break;
	case GPU_KIND_COPY:
		g = agg_get(a, AGG_COPY, p->label, gpu_copy_direction(api, e), "", "", NULL);
		if (!g) {
			a->c.lost++;
			return;
		}
		g->calls++;
		g->errors += error;
		g->bytes += e->args[api->size_arg];
		break;
	case GPU_KIND_SYNC:
		g = agg_get(a, AGG_SYNC, p->label, "", "", "", st);
		if (!g) {
			a->c.lost++;
			return;
		}
		agg_time(g, ns, error);
		break;
	default:
		break;
	}
}

/*
 * gpu_acc__note_probe() - keep one attach outcome in process @pid (uprobes_note_fn) for the next
 * flush. Returns 0 or -ENOMEM. Strings are copied (cut to fit).
 */
int gpu_acc__note_probe(struct gpu_acc *a, pid_t pid, const char *what, const char *file,
			const char *status)
{
	struct note *n;

	if (grow_array((void **)&a->notes, &a->cap_notes, a->nr_notes, sizeof(*a->notes)) < 0)
		return -ENOMEM;
	n = &a->notes[a->nr_notes++];
	n->pid = pid;
	snprintf(n->what, sizeof(n->what), "%s", what);
	snprintf(n->file, sizeof(n->file), "%s", file);
	snprintf(n->status, sizeof(n->status), "%s", status);
	return 0;
}

/* gpu_acc__count_lost() - @n calls lost before they reached the session. */
void gpu_acc__count_lost(struct gpu_acc *a, uint64_t n)
{
	a->c.lost += n;
}

/*
 * gpu_acc__flush() - write the rows kept since the last flush, inside the
 * store transaction the session's flush opened; @env is passed on to the
 * owner's resolve() for the stacks. @refreshed: as for the owner's
 * resolve() (in/out). Rows stay kept until gpu_acc__flush_done(): after a
 * rollback the next flush writes them again. Returns 0, -EIO (SQLite
 * error) or -ENOMEM. Does not log.
 */
int gpu_acc__flush(struct gpu_acc *a, struct store *store, const struct session_env *env,
		   bool *refreshed)
{
	const struct gpu_acc_owner *o = &a->owner;
	uint64_t now_real = now_ns(CLOCK_REALTIME);
	int r = 0;

	for (size_t i = 0; i < a->nr_aggs && r == 0; i++) {
		struct agg *g = a->aggs[i];
		struct store_gpu_agg row = {
			.table = (enum store_gpu_table)g->table,
			.key1 = g->key1,
			.key2 = g->key2,
			.grid = g->grid,
			.block = g->block,
			.name = g->name,
			.depth = g->depth,
			.calls = g->calls,
			.errors = g->errors,
			.total_ns = g->total_ns,
			.min_ns = g->min_ns,
			.max_ns = g->max_ns,
			.bytes = g->bytes,
		};

		if (g->stack && (r = o->resolve(o->ctx, env, g->stack, refreshed, &row.stack_id)) < 0)
			break;
		r = store__gpu_agg_add(store, o->session_id, now_real, &row);
	}
	for (size_t i = 0; i < a->nr_mem && r == 0; i++) {
		struct mem_row *m = &a->mem[i];
		struct store_gpu_mem_event row = {
			.time_ns = o->started_real_ns + (m->time_ns - o->started_mono_ns),
			.api = m->api,
			.space = m->space,
			.requested_bytes = m->requested_bytes,
			.address = m->address,
			.live_delta_bytes = m->live_delta_bytes,
			.ok = m->ok,
		};

		if ((r = o->resolve(o->ctx, env, m->stack, refreshed, &row.stack_id)) < 0)
			break;
		r = store__gpu_mem_event_add(store, o->session_id, &row);
	}
	for (size_t i = 0; i < a->nr_notes && r == 0; i++)
		r = store__gpu_probe_add(store, o->session_id, a->notes[i].pid, a->notes[i].what,
					 a->notes[i].file, a->notes[i].status);
	if (r == 0 && memcmp(&a->c, &(struct gpu_counts){ 0 }, sizeof(a->c)) != 0) {
		struct store_gpu_counts c = {
			.lost_calls = a->c.lost,
			.nvtx_unmatched = a->c.unmatched,
			.unnamed_launches = a->c.unnamed,
			.truncated_stacks = a->c.truncated,
			.missing_stacks = a->c.no_stack,
		};

		r = store__session_gpu_counts_add(store, o->session_id, &c);
	}
	a->flushing = a->c;
	a->nr_notes_flushing = a->nr_notes;
	return r;
}

/* gpu_acc__flush_done() - the flush committed: forget what it wrote. */
void gpu_acc__flush_done(struct gpu_acc *a)
{
	free_pending(a);
	a->c.lost -= a->flushing.lost;
	a->c.unmatched -= a->flushing.unmatched;
	a->c.unnamed -= a->flushing.unnamed;
	a->c.truncated -= a->flushing.truncated;
	a->c.no_stack -= a->flushing.no_stack;
	memmove(a->notes, a->notes + a->nr_notes_flushing,
		(a->nr_notes - a->nr_notes_flushing) * sizeof(*a->notes));
	a->nr_notes -= a->nr_notes_flushing;
	a->flushing = (struct gpu_counts){ 0 };
	a->nr_notes_flushing = 0;
}
