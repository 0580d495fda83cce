/*
 * callgraph.c - a session's samples as the top and hotpaths reports read
 * them: every stack with its sample count, its frames leaf first, and the
 * frames grouped into functions with self and total samples.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sqlite3.h>

#include "hashmap.h"
#include "report/callgraph.h"
#include "report/python_frames.h"
#include "report/report.h"
#include "store/sqlite_util.h"
#include "util.h"

/* profile__free() - free what @p holds; @p is left empty. */
void profile__free(struct profile *p)
{
	for (size_t i = 0; i < p->n_frames; i++) {
		free(p->frames[i].function);
		free(p->frames[i].module);
		free(p->frames[i].file);
		free(p->frames[i].name);
	}
	free(p->frames);
	free(p->groups);
	free(p->stacks);
	free(p->fidx);
	id_index__free(&p->index);
	*p = (struct profile){};
}

/* Index into p->frames of frame @id, adding an empty entry if new. Returns >= 0 or -ENOMEM. */
static int64_t profile__frame_index(struct profile *p, int64_t id)
{
	bool added;
	long i = report__index_add(&p->index, id, (void **)&p->frames, &p->cap_frames, p->n_frames,
				   sizeof(*p->frames), &added);

	if (i >= 0 && added)
		p->frames[p->n_frames++] = (struct qframe){.id = id};
	return i;
}

/* strdup() of column @i, NULL for SQL NULL. Returns 0 or -ENOMEM. */
static int col_strdup(sqlite3_stmt *st, int i, char **ret)
{
	const char *s;

	*ret = NULL;
	if (sqlite3_column_type(st, i) == SQLITE_NULL)
		return 0;
	s = (const char *)sqlite3_column_text(st, i);
	if (!s)
		return -ENOMEM;
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/*
 * Fills @f (its id set) from the frames table, and *@ret_role with its role
 * in the Python view; -EIO if the row is missing.
 */
static int qframe_load(sqlite3_stmt *st, struct qframe *f, uint8_t *ret_role)
{
	const char *base;
	int r;

	r = report__lookup(st, f->id); /* -EIO: a stack names a frame that does not exist */
	if (r < 0)
		return r;
	f->kernel = sqlite3_column_bytes(st, 0) == 6 &&
		    memcmp(sqlite3_column_text(st, 0), "kernel", 6) == 0;
	f->rel_addr = sqlite3_column_int64(st, 2);
	f->inlined = sqlite3_column_int64(st, 6) > 0;
	r = col_strdup(st, 1, &f->module);
	if (r >= 0)
		r = col_strdup(st, 3, &f->function);
	if (r < 0)
		return r;
	if (!f->module) {
		f->module = strdup(""); /* NOT NULL in the schema; be safe anyway */
		if (!f->module)
			return -ENOMEM;
	}
	if (f->function) {
		r = col_strdup(st, 4, &f->file);
		if (r < 0)
			return r;
		*ret_role = python_frames__role((const char *)sqlite3_column_text(st, 0), f->module,
						(const char *)sqlite3_column_text(st, 7),
						f->function, f->file);
		f->has_line = sqlite3_column_type(st, 5) != SQLITE_NULL;
		f->line = sqlite3_column_int64(st, 5);
		f->name = strdup(f->function);
		return f->name ? 0 : -ENOMEM;
	}
	*ret_role = python_frames__role((const char *)sqlite3_column_text(st, 0), f->module, NULL,
					NULL, NULL);
	base = strrchr(f->module, '/');
	base = base ? base + 1 : f->module;
	/* Kernel addresses are stored as int64 and print as the unsigned address. */
	if (asprintf(&f->name, "%s+0x%" PRIx64, base, (uint64_t)f->rel_addr) < 0) {
		f->name = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Grouping order: symbolized frames by (function, module), unsymbolized by (module, rel_addr). */
static int qframe_cmp_group(const void *a, const void *b, void *arg)
{
	const struct qframe *frames = arg;
	const struct qframe *x = &frames[*(const size_t *)a], *y = &frames[*(const size_t *)b];
	int c;

	if (!x->function != !y->function)
		return x->function ? -1 : 1;
	if (x->function) {
		c = strcmp(x->function, y->function);
		if (c)
			return c;
	}
	c = strcmp(x->module, y->module);
	if (c || x->function)
		return c;
	return (x->rel_addr > y->rel_addr) - (x->rel_addr < y->rel_addr);
}

/* Whether frame @a should be a group's representative rather than @b. */
static bool qframe_better_rep(const struct qframe *a, const struct qframe *b)
{
	if (a->self != b->self)
		return a->self > b->self;
	if (!a->file != !b->file)
		return a->file != NULL;
	return a->id < b->id;
}

static int qstack_cmp_id(const void *a, const void *b)
{
	const struct qstack *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

/*
 * Reads @table's rows of @session_id over @wb (report__rows()) once, and
 * sums them per stack into p->stacks (id and n; ordered by id), and into
 * @sums->total. The rows are summed here, not by a GROUP BY: SQLite sorts
 * the 320,000 rollup rows of a 10-hour session of 64 threads in a temporary
 * B-tree (60-100 ms), a hash lookup per row takes a few ms. Returns 0,
 * -EIO, -ENOMEM.
 */
static int profile__sum_stacks(struct profile *p, sqlite3 *db, int64_t session_id,
			       const char *table, const struct window_bounds *wb,
			       struct report_sums *sums)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ char *sql = NULL;
	struct id_index by_id = {};
	int r;

	if (asprintf(&sql,
		     "SELECT stack_id, count FROM %s"
		     " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3",
		     report__rows(table, wb)) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = report__prepare_range(db, sql, session_id, wb, &st);
	if (r < 0)
		return r;
	while ((r = report__step(st)) > 0) {
		int64_t id = sqlite3_column_int64(st, 0), n = sqlite3_column_int64(st, 1);
		bool added;
		long i;

		sums->total += n;
		i = report__index_add(&by_id, id, (void **)&p->stacks, &p->cap_stacks, p->n_stacks,
				      sizeof(*p->stacks), &added);
		if (i < 0) {
			r = (int)i;
			break;
		}
		if (added)
			p->stacks[p->n_stacks++] = (struct qstack){.id = id};
		p->stacks[i].n += n;
	}
	id_index__free(&by_id);
	if (r < 0)
		return r;
	if (p->n_stacks > 0)
		qsort(p->stacks, p->n_stacks, sizeof(*p->stacks), qstack_cmp_id);
	return 0;
}

/*
 * Loads the stacks of @session_id that have samples, their frames, and the
 * functions (groups) with self and total samples, and fills @sums (for
 * report__head()). Unless @python_all, the stacks are in the Python view
 * (python_frames__fold()): a folded frame is in no stack, and its group has
 * no samples. -EIO on an SQLite error or an inconsistent store (a sample of
 * a missing stack, a frame_ids blob whose length is not a multiple of 8, a
 * missing frame).
 */
static int profile__load(struct profile *p, sqlite3 *db, int64_t session_id, const char *table,
			 const struct window_bounds *wb, bool python_all, struct report_sums *sums)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ size_t *order = NULL;
	_cleanup_free_ uint8_t *roles = NULL;
	int r;

	r = profile__sum_stacks(p, db, session_id, table, wb, sums);
	if (r < 0)
		return r;
	r = report__prepare(db, "SELECT frame_ids, reached_root FROM stacks WHERE id = ?1", &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < p->n_stacks; i++) {
		struct qstack *s = &p->stacks[i];
		const unsigned char *blob;
		size_t len, depth;

		r = report__lookup(st, s->id); /* -EIO: a sample of a missing stack */
		if (r < 0)
			return r;
		blob = sqlite3_column_blob(st, 0);
		len = (size_t)sqlite3_column_bytes(st, 0);
		if (len % 8 != 0 || (len > 0 && !blob))
			return len % 8 ? -EIO : -ENOMEM;
		if (sqlite3_column_int64(st, 1))
			sums->root += s->n;
		depth = len / 8;
		r = grow_array_to((void **)&p->fidx, &p->cap_fidx, p->n_fidx + depth,
				  sizeof(*p->fidx));
		if (r < 0)
			return r;
		s->off = p->n_fidx;
		s->len = depth;
		for (size_t j = 0; j < depth; j++) {
			uint64_t v = 0;

			/* Little-endian int64s, whatever the host's byte order. */
			for (int b = 7; b >= 0; b--)
				v = (v << 8) | blob[j * 8 + (size_t)b];
			p->fidx[p->n_fidx++] = (int64_t)v;
		}
	}
	sqlite3_finalize(TAKE_PTR(st));

	/* Frame ids to frame indexes. */
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct qstack *s = &p->stacks[i];

		for (size_t j = 0; j < s->len; j++) {
			int64_t k = profile__frame_index(p, p->fidx[s->off + j]);

			if (k < 0)
				return (int)k;
			p->fidx[s->off + j] = k;
		}
	}

	r = report__prepare(db,
			    "SELECT kind, module, rel_addr, function, file, line, inline_depth, "
			    "build_id FROM frames WHERE id = ?1",
			    &st);
	if (r < 0)
		return r;
	if (p->n_frames > 0) {
		roles = malloc(p->n_frames);
		if (!roles)
			return -ENOMEM;
	}
	for (size_t i = 0; i < p->n_frames; i++) {
		r = qframe_load(st, &p->frames[i], &roles[i]);
		if (r < 0)
			return r;
	}

	/* The Python view, then each frame's self samples from the stacks as shown. */
	for (size_t i = 0; i < p->n_stacks; i++) {
		struct qstack *s = &p->stacks[i];

		if (!python_all)
			s->len = python_frames__fold(p->fidx + s->off, s->len, roles);
		if (s->len > 0)
			p->frames[p->fidx[s->off]].self += s->n;
	}

	/* Groups: sort frame indexes by the grouping key; runs of equal keys are one group. */
	if (p->n_frames == 0)
		return 0;
	order = reallocarray(NULL, p->n_frames, sizeof(*order));
	p->groups = reallocarray(NULL, p->n_frames, sizeof(*p->groups));
	if (!order || !p->groups)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_frames; i++)
		order[i] = i;
	qsort_r(order, p->n_frames, sizeof(*order), qframe_cmp_group, p->frames);
	for (size_t i = 0; i < p->n_frames; i++) {
		struct qframe *f = &p->frames[order[i]];
		struct qgroup *g;

		if (i == 0 || qframe_cmp_group(&order[i - 1], &order[i], p->frames) != 0)
			p->groups[p->n_groups++] = (struct qgroup){.rep = order[i]};
		g = &p->groups[p->n_groups - 1];
		f->group = p->n_groups - 1;
		g->self += f->self;
		if (qframe_better_rep(f, &p->frames[g->rep]))
			g->rep = order[i];
	}

	/* Totals: each stack counts once per group it holds, however often (recursion). */
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct qstack *s = &p->stacks[i];

		for (size_t j = 0; j < s->len; j++) {
			struct qgroup *g = &p->groups[p->frames[p->fidx[s->off + j]].group];

			if (g->stamp != i + 1) {
				g->stamp = i + 1;
				g->total += s->n;
			}
		}
	}
	return 0;
}

/* A frame as JSON: function (display name), module, file, line, and kind if @with_kind. */
json_t *qframe_json(const struct qframe *f, bool with_kind)
{
	_cleanup_json_ json_t *o = json_object();
	int fail = 0;

	if (!o)
		return NULL;
	fail |= json_object_set_new(o, "function", report__json_text(f->name, strlen(f->name)));
	fail |= json_object_set_new(o, "module", report__json_text(f->module, strlen(f->module)));
	fail |= json_object_set_new(
	    o, "file", f->file ? report__json_text(f->file, strlen(f->file)) : json_null());
	fail |= json_object_set_new(o, "line", f->has_line ? json_integer(f->line) : json_null());
	if (with_kind) {
		fail |= json_object_set_new(o, "kind", json_string(f->kernel ? "kernel" : "user"));
		fail |= json_object_set_new(o, "inlined", json_boolean(f->inlined));
	}
	return fail ? NULL : TAKE_PTR(o);
}

/*
 * callgraph__done() - free what @cg holds (the report too, unless taken
 * from cg->o) and end its read snapshot; @cg is left empty. Accepts an
 * empty @cg and one callgraph__load() failed to fill.
 */
void callgraph__done(struct callgraph *cg)
{
	json_decref(cg->o);
	profile__free(&cg->p);
	report__snapshot_endp(&cg->snap);
	*cg = (struct callgraph){};
}

/*
 * callgraph__load() - fill @cg (empty) with what top and hotpaths both start
 * with, in one read snapshot: the report head of @event's samples
 * (report__head()) and their total, its "python_frames" view (@flags:
 * QUERY_PYTHON_ALL or 0), with an empty array @list in it (cg->arr), and
 * the session's stacks loaded into cg->p. The caller takes the report from
 * cg->o and frees @cg with callgraph__done(), also on failure.
 * Returns 0, or the -errno of report__samples_table(), report__head() or
 * profile__load().
 */
int callgraph__load(struct callgraph *cg, sqlite3 *db, int64_t session_id, const char *event,
		    const struct query_range *range, unsigned flags, const char *list)
{
	struct report_sums sums = {};
	struct window_bounds wb;
	const char *table;
	int r;

	/* One read transaction for all of the report (report__snapshot_begin()). */
	r = report__snapshot_begin(db, &cg->snap);
	if (r < 0)
		return r;
	r = window_bounds__get(db, session_id, range, &wb);
	if (r < 0)
		return r;
	r = report__samples_table(db, session_id, event, &table);
	if (r < 0)
		return r;
	r = profile__load(&cg->p, db, session_id, table, &wb, flags & QUERY_PYTHON_ALL, &sums);
	if (r < 0)
		return r;
	r = report__head(db, session_id, table, &wb, &sums, &cg->o, &cg->total);
	if (r < 0)
		return r;
	r = report__python_frames(cg->o, flags);
	if (r < 0 || json_object_set_new(cg->o, list, json_array()) < 0)
		return -ENOMEM;
	cg->arr = json_object_get(cg->o, list);
	return 0;
}
