/* profile.c - the profile report: frames, stacks and samples per window and thread, for exporters.
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
#include "report/python_frames.h"
#include "report/report.h"
#include "service/request.h"
#include "store/sqlite_util.h"
#include "util.h"

/*
 * Sorted distinct int64s, for id -> index lookups. Ids of one session's
 * stacks and frames are near each other (rows numbered as they were
 * written), so when their span is small next to their count the set is
 * sealed by marking ids in a table over the span (linear, and lookups are
 * one load); else by sorting, with lookups by binary search. The table
 * costs 4 bytes per id of the span, at most IDSET_SPAN_PER_ID times the
 * ids added.
 */
#define IDSET_SPAN_PER_ID 4

struct idset {
	int64_t *v;
	size_t n, cap;
	int64_t min, max; /* of the ids added */
	uint32_t *pos;	  /* sealed by the table: pos[id - min] = index + 1, 0 if absent */
};

static int idset__add(struct idset *s, int64_t id)
{
	int r = grow_array_to((void **)&s->v, &s->cap, s->n + 1, sizeof(*s->v));

	if (r < 0)
		return r;
	if (s->n == 0 || id < s->min)
		s->min = id;
	if (s->n == 0 || id > s->max)
		s->max = id;
	s->v[s->n++] = id;
	return 0;
}

static int int64_cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* idset__seal() - sort and deduplicate what was added; 0 or -ENOMEM. */
static int idset__seal(struct idset *s)
{
	uint64_t span = (uint64_t)s->max - (uint64_t)s->min + 1;
	size_t k = 0;

	if (s->n == 0)
		return 0;
	if (span <= (uint64_t)s->n * IDSET_SPAN_PER_ID && span < UINT32_MAX) {
		s->pos = calloc(span, sizeof(*s->pos));
		if (!s->pos)
			return -ENOMEM;
		for (size_t i = 0; i < s->n; i++)
			s->pos[s->v[i] - s->min] = 1;
		for (uint64_t d = 0; d < span; d++)
			if (s->pos[d]) {
				s->v[k++] = s->min + (int64_t)d;
				s->pos[d] = (uint32_t)k;
			}
		s->n = k;
		return 0;
	}
	qsort(s->v, s->n, sizeof(*s->v), int64_cmp);
	for (size_t i = 0; i < s->n; i++)
		if (k == 0 || s->v[k - 1] != s->v[i])
			s->v[k++] = s->v[i];
	s->n = k;
	return 0;
}

/* Index of @id in the sealed @s; -1 if absent. */
static ssize_t idset__index(const struct idset *s, int64_t id)
{
	const int64_t *p;

	if (s->pos)
		return id < s->min || id > s->max ? -1 : (ssize_t)s->pos[id - s->min] - 1;
	p = s->n ? bsearch(&id, s->v, s->n, sizeof(*s->v), int64_cmp) : NULL;
	return p ? p - s->v : -1;
}

static void idset__free(struct idset *s)
{
	free(s->v);
	free(s->pos);
	*s = (struct idset){};
}

/* Decodes a stacks.frame_ids blob (little-endian int64s) into @ids. -EIO if malformed. */
static int frame_ids_decode(const unsigned char *blob, size_t len, struct idset *ids)
{
	if (len % 8 != 0 || (len > 0 && !blob))
		return -EIO;
	for (size_t i = 0; i < len / 8; i++) {
		uint64_t v = 0;
		int r;

		for (int b = 7; b >= 0; b--)
			v = (v << 8) | blob[i * 8 + (size_t)b];
		r = idset__add(ids, (int64_t)v);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Runs @sql (?1 = @session_id) and appends one object per row to @arr, keyed by @keys. */
static int rows_json(sqlite3 *db, const char *sql, int64_t session_id, const char *const *keys,
		     json_t *arr)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int r;

	r = report__prepare(db, sql, &st);
	if (r < 0)
		return r;
	r = report__bind_int64(st, 1, session_id);
	if (r < 0)
		return r;
	while ((r = report__step(st)) > 0) {
		json_t *o = json_object();

		if (json_array_append_new(arr, o) < 0)
			return -ENOMEM;
		for (int i = 0; keys[i]; i++) {
			json_t *v = sqlite3_column_type(st, i) == SQLITE_TEXT
					? report__col_text(st, i)
					: report__col_int(st, i);

			if (json_object_set_new(o, keys[i], v) < 0)
				return -ENOMEM;
		}
	}
	return r;
}

/* A samples row of the profile: [stack index, tid, window start - session start (ns), count]. */
struct sample_row {
	int64_t stack, tid, window, count;
};

/* The order of the "samples" rows: by window, then thread, then stack. */
static int sample_row_cmp(const void *a, const void *b)
{
	const struct sample_row *x = a, *y = b;

	if (x->window != y->window)
		return x->window < y->window ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return (x->stack > y->stack) - (x->stack < y->stack);
}

/*
 * rows_by_stack() - sum @rows (@n of them, each stack index < @n_stacks,
 * every index present) over threads, in place: one row per stack, tid 0,
 * its first window, ordered by window then stack. Returns the number of
 * rows (@n_stacks) or -ENOMEM.
 */
static ssize_t rows_by_stack(struct sample_row *rows, size_t n, size_t n_stacks)
{
	_cleanup_free_ struct sample_row *sum = calloc(n_stacks + 1, sizeof(*sum));

	if (!sum)
		return -ENOMEM;
	for (size_t k = 0; k < n_stacks; k++)
		sum[k] = (struct sample_row){.stack = (int64_t)k, .window = INT64_MAX};
	for (size_t i = 0; i < n; i++) {
		struct sample_row *t = &sum[rows[i].stack];

		t->count += rows[i].count;
		t->window = MIN(t->window, rows[i].window);
	}
	qsort(sum, n_stacks, sizeof(*sum), sample_row_cmp);
	memcpy(rows, sum, n_stacks * sizeof(*rows));
	return (ssize_t)n_stacks;
}

/*
 * Adds @rows to @o: as "samples", an array of 4-integer arrays, or with
 * @packed as "samples_packed", one string of "STACK,TID,WINDOW,COUNT" rows
 * separated by ';': a few bytes a row where jansson takes about 300 (a
 * profile of 64 threads and 5,000 stacks has 320,000 rows).
 */
static int samples_json(json_t *o, const struct sample_row *rows, size_t n, bool packed)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	json_t *arr;
	FILE *f;

	if (!packed) {
		if (json_object_set_new(o, "samples", arr = json_array()) < 0)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			if (json_array_append_new(
				arr, json_pack("[I,I,I,I]", (json_int_t)rows[i].stack,
					       (json_int_t)rows[i].tid, (json_int_t)rows[i].window,
					       (json_int_t)rows[i].count)) < 0)
				return -ENOMEM;
		return 0;
	}
	f = open_memstream(&text, &len);
	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64, i ? ";" : "",
			rows[i].stack, rows[i].tid, rows[i].window, rows[i].count);
	if (fclose(f) != 0)
		return -ENOMEM;
	return json_object_set_new(o, "samples_packed", json_stringn(text ?: "", len)) < 0 ? -ENOMEM
											   : 0;
}

/*
 * Appends to @arr one object per frame id of @frame_ids (function, module,
 * build_id, address, file, line, kind, inlined), and sets @roles[i] to
 * frame i's role in the Python view (python_frames__role()). -EIO for a
 * missing frame, -ENOMEM.
 */
static int frames_json(sqlite3 *db, const struct idset *frame_ids, json_t *arr, uint8_t *roles)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int fail = 0, r;

	r = report__prepare(db,
			    "SELECT kind, module, build_id, rel_addr, inline_depth, function, file,"
			    " line FROM frames WHERE id = ?1",
			    &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < frame_ids->n; i++) {
		json_t *f = json_object();
		char addr[32];

		if (json_array_append_new(arr, f) < 0)
			return -ENOMEM;
		r = report__lookup(st, frame_ids->v[i]); /* -EIO: a stack names a missing frame */
		if (r < 0)
			return r;
		/* A hex string: kernel addresses do not fit a signed JSON integer. */
		snprintf(addr, sizeof(addr), "0x%" PRIx64, (uint64_t)sqlite3_column_int64(st, 3));
		fail |= json_object_set_new(f, "function", report__col_text(st, 5));
		fail |= json_object_set_new(f, "module", report__col_text(st, 1));
		fail |= json_object_set_new(f, "build_id", report__col_text(st, 2));
		fail |= json_object_set_new(f, "address", json_string(addr));
		fail |= json_object_set_new(f, "file", report__col_text(st, 6));
		fail |= json_object_set_new(f, "line", report__col_int(st, 7));
		fail |= json_object_set_new(f, "kind", report__col_text(st, 0));
		fail |= json_object_set_new(f, "inlined",
					    json_boolean(sqlite3_column_int64(st, 4) > 0));
		if (fail)
			return -ENOMEM;
		roles[i] = python_frames__role((const char *)sqlite3_column_text(st, 0),
					       (const char *)sqlite3_column_text(st, 1),
					       (const char *)sqlite3_column_text(st, 2),
					       (const char *)sqlite3_column_text(st, 5),
					       (const char *)sqlite3_column_text(st, 6));
	}
	return 0;
}

/*
 * Fills @stacks with @n lists of frame numbers and @frames with the frames
 * they show: stack i's frames are the indexes into @all (@n_all frame
 * objects) in @flat->v[@span[i] .. @span[i + 1]), folded first when @roles
 * is not NULL (python_frames__fold()). @frames gets the frames some stack
 * still shows, in @all's order, and the lists number them by their place
 * there. -ENOMEM.
 */
static int stacks_json(json_t *stacks, json_t *frames, struct idset *flat, const size_t *span,
		       size_t n, json_t *all, size_t n_all, const uint8_t *roles)
{
	_cleanup_free_ size_t *lens = reallocarray(NULL, n + 1, sizeof(*lens));
	_cleanup_free_ int64_t *number = calloc(n_all + 1, sizeof(*number));
	size_t k = 0;

	if (!lens || !number)
		return -ENOMEM;
	/* number[f] > 0: some stack still shows frame f. */
	for (size_t i = 0; i < n; i++) {
		lens[i] = span[i + 1] - span[i];
		if (roles)
			lens[i] = python_frames__fold(flat->v + span[i], lens[i], roles);
		for (size_t j = 0; j < lens[i]; j++)
			number[flat->v[span[i] + j]] = 1;
	}
	/* Renumber the frames shown, in @all's order, and leave out the others. */
	for (size_t f = 0; f < n_all; f++) {
		if (!number[f])
			continue;
		if (json_array_append(frames, json_array_get(all, f)) < 0)
			return -ENOMEM;
		number[f] = (int64_t)k++;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *list = json_array();

		if (json_array_append_new(stacks, list) < 0)
			return -ENOMEM;
		for (size_t j = 0; j < lens[i]; j++) {
			json_int_t index = number[flat->v[span[i] + j]];

			if (json_array_append_new(list, json_integer(index)) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}

/*
 * query__profile() - the raw profile of @session_id for exporters: the
 * "profile" response of docs/protocol.md. Its frames (each once, with
 * module, build ID, ELF address, inline flag, function, file, line), its
 * call stacks as lists of frame indexes (leaf first), and the samples as
 * [stack index, tid, window start in ns from the session start, count]
 * rows, with the threads, the mappings, the sample period and the report
 * head of top (loss counters, total_samples). @flags: PROFILE_PER_WINDOW,
 * else each stack's samples per thread are summed over the windows (the
 * window is then the first one it was seen in; a whole session reads the
 * rollup); PROFILE_PACKED: the rows as one string (samples_json());
 * QUERY_PYTHON_ALL: every frame, else the stacks in the Python view
 * (python_frames__fold(): "frames" then lists only the frames shown, and
 * two stacks may list the same frames).
 * @event: NULL for the CPU samples, else the second sampled event's name.
 * @range: NULL for the whole session, else the windows it overlaps.
 * @ret: on success a new object, owned by the caller; untouched on failure.
 *
 * Returns 0, -ENOENT for an unknown session, -ENODATA/-EOPNOTSUPP as
 * query__top() for @event, -EIO on an SQLite error or an inconsistent store,
 * -ENOMEM. Allocates memory linear in the session's rows; does not log.
 */
int query__profile(sqlite3 *db, int64_t session_id, const char *event,
		   const struct query_range *range, unsigned flags, json_t **ret)
{
	bool per_window = flags & PROFILE_PER_WINDOW;
	static const char *const thread_keys[] = {"tid", "pid", "name", NULL};
	static const char *const mapping_keys[] = {"pid",  "start",    "end", "file_offset",
						   "path", "build_id", NULL};
	_cleanup_(report__snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	_cleanup_(idset__free) struct idset stack_ids = {}, frame_ids = {}, flat = {};
	_cleanup_free_ size_t *span = NULL;
	_cleanup_free_ uint8_t *roles = NULL;
	_cleanup_json_ json_t *all = NULL;
	_cleanup_free_ char *sql = NULL;
	_cleanup_free_ struct sample_row *rows = NULL;
	size_t n_rows = 0, cap_rows = 0;
	struct window_bounds wb;
	json_t *stacks, *frames, *arr;
	const char *table;
	int64_t total, start = 0;
	uint64_t period = 0;
	int fail = 0, r;

	r = report__snapshot_begin(db, &snap);
	if (r >= 0)
		r = window_bounds__get(db, session_id, range, &wb);
	if (r >= 0)
		r = report__samples_table(db, session_id, event, &table);
	if (r >= 0)
		r = report__head(db, session_id, table, &wb, &o, &total);
	if (r >= 0)
		r = report__python_frames(o, flags);
	if (r < 0)
		return r;

	/* The period of one sample: ns of CPU time for cpu-clock, events for the others. */
	r = report__row(db, "SELECT started_at_ns, freq_hz FROM sessions WHERE id = ?1", session_id,
			&st);
	if (r < 0)
		return r;
	start = sqlite3_column_int64(st, 0);
	if (!event && sqlite3_column_int64(st, 1) > 0)
		period = NSEC_PER_SEC / (uint64_t)sqlite3_column_int64(st, 1);
	else if (event)
		sampled_event_lookup(event, NULL, NULL, &period);
	fail |= json_object_set_new(o, "period", json_integer((json_int_t)period));
	fail |=
	    json_object_set_new(o, "period_unit", json_string(event ? "events" : "nanoseconds"));
	fail |= json_object_set_new(o, "started_at_ns", json_integer(start));
	fail |= json_object_set_new(o, "stacks", stacks = json_array());
	fail |= json_object_set_new(o, "frames", frames = json_array());
	fail |= json_object_set_new(o, "threads", json_array());
	fail |= json_object_set_new(o, "mappings", json_array());
	if (fail)
		return -ENOMEM;
	sqlite3_finalize(TAKE_PTR(st));

	/*
	 * @table is one of two constant names (report__samples_table()), never
	 * user input. A whole session reads its rollup, already one row per
	 * (thread, stack) with the first window: its rows are sorted here, not
	 * by SQLite (a quarter of a second for the 320,000 rows of a 10-hour,
	 * 64-thread session, against a few tens of ms).
	 */
	if (asprintf(&sql,
		     per_window || !wb.range
			 ? "SELECT stack_id, tid, window_ns - ?4, count FROM %s"
			   " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3%s"
			 /* Summed over the windows: far fewer rows for a long session. */
			 : "SELECT stack_id, tid, min(window_ns) - ?4, sum(count) FROM %s"
			   " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3"
			   " GROUP BY tid, stack_id ORDER BY 3, tid, stack_id%s",
		     per_window ? table : report__rows(table, &wb),
		     per_window ? " ORDER BY window_ns, tid, stack_id" : "") < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = report__prepare_range(db, sql, session_id, &wb, &st);
	if (r >= 0)
		r = report__bind_int64(st, 4, start);
	if (r < 0)
		return r;
	/* Rows first (32 bytes each), with the stack id: its index is known once all are read. */
	while ((r = report__step(st)) > 0) {
		r = grow_array_to((void **)&rows, &cap_rows, n_rows + 1, sizeof(*rows));
		if (r < 0)
			return r;
		rows[n_rows++] =
		    (struct sample_row){sqlite3_column_int64(st, 0), sqlite3_column_int64(st, 1),
					sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3)};
		r = idset__add(&stack_ids, sqlite3_column_int64(st, 0));
		if (r < 0)
			return r;
	}
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));
	if (!per_window && !wb.range && n_rows && !(flags & PROFILE_BY_STACK))
		qsort(rows, n_rows, sizeof(*rows), sample_row_cmp);
	r = idset__seal(&stack_ids);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n_rows; i++)
		rows[i].stack = idset__index(&stack_ids, rows[i].stack);
	if ((flags & PROFILE_BY_STACK) && !per_window) {
		ssize_t n = rows_by_stack(rows, n_rows, stack_ids.n);

		if (n < 0)
			return (int)n;
		n_rows = (size_t)n;
	}
	r = samples_json(o, rows, n_rows, flags & PROFILE_PACKED);
	if (r < 0)
		return r;
	free(TAKE_PTR(rows));

	/* Each stack's frame ids, leaf first: stack i is flat.v[span[i] .. span[i + 1]). */
	span = reallocarray(NULL, stack_ids.n + 1, sizeof(*span));
	if (!span)
		return -ENOMEM;
	r = report__prepare(db, "SELECT frame_ids FROM stacks WHERE id = ?1", &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < stack_ids.n; i++) {
		span[i] = flat.n;
		r = report__lookup(st, stack_ids.v[i]); /* -EIO: a sample of a missing stack */
		if (r < 0)
			return r;
		r = frame_ids_decode(sqlite3_column_blob(st, 0),
				     (size_t)sqlite3_column_bytes(st, 0), &flat);
		if (r < 0)
			return r;
	}
	span[stack_ids.n] = flat.n;
	sqlite3_finalize(TAKE_PTR(st));
	for (size_t j = 0; j < flat.n; j++) {
		r = idset__add(&frame_ids, flat.v[j]);
		if (r < 0)
			return r;
	}
	r = idset__seal(&frame_ids);
	if (r < 0)
		return r;
	for (size_t j = 0; j < flat.n; j++)
		flat.v[j] = idset__index(&frame_ids, flat.v[j]);
	/* Every frame once, then only those the stacks show (the Python view folds some away). */
	all = json_array();
	roles = malloc(frame_ids.n + 1);
	if (!all || !roles)
		return -ENOMEM;
	r = frames_json(db, &frame_ids, all, roles);
	if (r < 0)
		return r;
	r = stacks_json(stacks, frames, &flat, span, stack_ids.n, all, frame_ids.n,
			flags & QUERY_PYTHON_ALL ? NULL : roles);
	if (r < 0)
		return r;

	arr = json_object_get(o, "threads");
	r = rows_json(db, "SELECT tid, pid, name FROM threads WHERE session_id = ?1 ORDER BY tid",
		      session_id, thread_keys, arr);
	if (r < 0)
		return r;
	arr = json_object_get(o, "mappings");
	r = rows_json(db,
		      "SELECT pid, start_addr, end_addr, file_offset, path, build_id FROM mappings"
		      " WHERE session_id = ?1 ORDER BY pid, start_addr",
		      session_id, mapping_keys, arr);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(o);
	return 0;
}
