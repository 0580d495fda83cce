/*
 * top.c - the top and hotpaths reports: hottest functions by self and total
 * samples, and the hottest call stacks as paths of functions.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>
#include <sqlite3.h>

#include "report/query.h"
#include "report/report.h"
#include "store/sqlite_util.h"
#include "util.h"
#include "report/callgraph.h"

/* Top order: self desc, total desc, then name, module and address for a stable result. */
static int qgroup_cmp_top(const void *a, const void *b, void *arg)
{
	const struct qframe *frames = arg;
	const struct qgroup *x = a, *y = b;
	const struct qframe *fx = &frames[x->rep], *fy = &frames[y->rep];
	int c;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	c = strcmp(fx->name, fy->name);
	if (c)
		return c;
	c = strcmp(fx->module, fy->module);
	if (c)
		return c;
	return (fx->rel_addr > fy->rel_addr) - (fx->rel_addr < fy->rel_addr);
}

/*
 * query__top() - the hottest functions of @session_id by self samples, as
 * the "top" response of docs/protocol.md.
 * @limit: number of functions, >= 1 (the protocol allows 1..10000).
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * A function is (function, module); each unsymbolized address is its own
 * entry named "<module basename>+0x<hex>", with file and line null. Self
 * samples: samples whose leaf frame is in the function; total: samples whose
 * stack holds it at least once (recursion counts once). Ties in self samples
 * go by total samples, then name. file/line are those of the function's
 * address with the most self samples. Percentages are of total_samples (the
 * sum of the session's samples rows), one decimal.
 * Returns 0, -ENOENT for an unknown session, -EINVAL if @limit < 1, -EIO on
 * an SQLite error or an inconsistent store, -ENOMEM. Allocates memory linear
 * in the frames of all the session's stacks (about 0.5 s and 60 MB for 1e5
 * stacks of depth 30); does not log.
 */
int query__top(sqlite3 *db, int64_t session_id, int limit, const char *event,
	       const struct query_range *range, unsigned flags, json_t **ret)
{
	_cleanup_(callgraph__done) struct callgraph cg = {};
	struct profile *p = &cg.p;
	int r;

	if (limit < 1)
		return -EINVAL;
	r = callgraph__load(&cg, db, session_id, event, range, flags, "functions");
	if (r < 0)
		return r;
	if (p->n_groups > 0)
		qsort_r(p->groups, p->n_groups, sizeof(*p->groups), qgroup_cmp_top, p->frames);
	for (size_t i = 0; i < p->n_groups && i < (size_t)limit; i++) {
		const struct qgroup *g = &p->groups[i];
		json_t *f;
		int fail = 0;

		if (g->total == 0)
			break; /* only folded frames (the Python view) from here on */
		f = qframe_json(&p->frames[g->rep], false);
		if (json_array_append_new(cg.arr, f) < 0)
			return -ENOMEM;
		fail |= json_object_set_new(
		    f, "kind", json_string(p->frames[g->rep].kernel ? "kernel" : "user"));
		fail |= json_object_set_new(f, "self_samples", json_integer(g->self));
		fail |= json_object_set_new(f, "total_samples", json_integer(g->total));
		fail |=
		    json_object_set_new(f, "self_pct", json_real(report__pct1(g->self, cg.total)));
		fail |= json_object_set_new(f, "total_pct",
					    json_real(report__pct1(g->total, cg.total)));
		if (fail)
			return -ENOMEM;
	}
	*ret = TAKE_PTR(cg.o);
	return 0;
}

/* A run of stacks with the same sequence of groups. */
struct path {
	uint64_t hash;	 /* of the group sequence */
	size_t stack;	 /* first stack of the run, whose sequence is compared */
	int64_t samples; /* sum over the merged stacks */
	size_t best;	 /* heaviest merged stack: its frames are reported */
};

static uint64_t hash_mix(uint64_t h, uint64_t v)
{
	/* splitmix64's finalizer over the running hash. */
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
}

/* Orders paths so that equal group sequences are adjacent. @arg: the profile. */
static int path_cmp_seq(const void *a, const void *b, void *arg)
{
	const struct profile *p = arg;
	const struct path *x = a, *y = b;
	const struct qstack *sx = &p->stacks[x->stack], *sy = &p->stacks[y->stack];

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	if (sx->len != sy->len)
		return sx->len < sy->len ? -1 : 1;
	for (size_t i = 0; i < sx->len; i++) {
		size_t gx = p->frames[p->fidx[sx->off + i]].group;
		size_t gy = p->frames[p->fidx[sy->off + i]].group;

		if (gx != gy)
			return gx < gy ? -1 : 1;
	}
	return 0;
}

/* Hottest first; ties by the lowest stack id of the reported stack, so output is stable. */
static int path_cmp_samples(const void *a, const void *b, void *arg)
{
	const struct profile *p = arg;
	const struct path *x = a, *y = b;
	int64_t ix = p->stacks[x->best].id, iy = p->stacks[y->best].id;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return (ix > iy) - (ix < iy);
}

/*
 * query__hotpaths() - the hottest call stacks of @session_id, as the
 * "hotpaths" response of docs/protocol.md.
 * @limit: number of paths, >= 1 (the protocol allows 1..10000).
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Stacks whose frames map to the same sequence of functions (as top groups
 * them: function and module, or one unsymbolized address) are one path; its
 * frames, leaf first, are those of its heaviest stack (so file/line are that
 * stack's call sites). A stack with no frames at all is an empty path. Ties
 * go to the lowest stack id. Besides the protocol's fields, "event" is
 * included as in top. Returns 0, -ENOENT for an unknown session, -EINVAL if
 * @limit < 1, -EIO on an SQLite error or an inconsistent store, -ENOMEM.
 * Allocates memory linear in the frames of all the session's stacks; does
 * not log.
 */
int query__hotpaths(sqlite3 *db, int64_t session_id, int limit, const char *event,
		    const struct query_range *range, unsigned flags, json_t **ret)
{
	_cleanup_(callgraph__done) struct callgraph cg = {};
	_cleanup_free_ struct path *paths = NULL;
	struct profile *p = &cg.p;
	size_t n_paths = 0;
	int r;

	if (limit < 1)
		return -EINVAL;
	r = callgraph__load(&cg, db, session_id, event, range, flags, "paths");
	if (r < 0)
		return r;
	if (p->n_stacks > 0) {
		paths = reallocarray(NULL, p->n_stacks, sizeof(*paths));
		if (!paths)
			return -ENOMEM;
	}
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct qstack *s = &p->stacks[i];
		uint64_t h = 0;

		for (size_t j = 0; j < s->len; j++)
			h = hash_mix(h, p->frames[p->fidx[s->off + j]].group);
		paths[i] = (struct path){.hash = h, .stack = i, .samples = s->n, .best = i};
	}

	/* Merge equal sequences: sort them together, then fold each run into its first. */
	if (p->n_stacks > 0)
		qsort_r(paths, p->n_stacks, sizeof(*paths), path_cmp_seq, p);
	for (size_t i = 0; i < p->n_stacks; i++) {
		struct path *into = n_paths > 0 ? &paths[n_paths - 1] : NULL;
		const struct qstack *s = &p->stacks[paths[i].stack], *b;

		if (!into || path_cmp_seq(into, &paths[i], p) != 0) {
			paths[n_paths++] = paths[i];
			continue;
		}
		into->samples += s->n;
		b = &p->stacks[into->best];
		if (s->n > b->n || (s->n == b->n && s->id < b->id))
			into->best = paths[i].stack;
	}
	if (n_paths > 0)
		qsort_r(paths, n_paths, sizeof(*paths), path_cmp_samples, p);

	for (size_t i = 0; i < n_paths && i < (size_t)limit; i++) {
		const struct qstack *s = &p->stacks[paths[i].best];
		json_t *path = json_object(), *frames = json_array();
		int fail = 0;

		if (json_array_append_new(cg.arr, path) < 0) {
			json_decref(frames);
			return -ENOMEM;
		}
		fail |= json_object_set_new(path, "samples", json_integer(paths[i].samples));
		fail |= json_object_set_new(path, "pct",
					    json_real(report__pct1(paths[i].samples, cg.total)));
		fail |= json_object_set_new(path, "frames", frames);
		if (fail)
			return -ENOMEM;
		for (size_t j = 0; j < s->len; j++)
			if (json_array_append_new(
				frames, qframe_json(&p->frames[p->fidx[s->off + j]], true)) < 0)
				return -ENOMEM;
	}
	*ret = TAKE_PTR(cg.o);
	return 0;
}
