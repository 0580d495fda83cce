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

#include "hashmap.h"
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

/* A distinct window of a profile's rows: its start, and first its row count, then its next slot. */
struct row_window {
	int64_t window;
	size_t n;
};

static int row_window_cmp(const void *a, const void *b)
{
	const struct row_window *x = a, *y = b;

	return (x->window > y->window) - (x->window < y->window);
}

/*
 * rows_by_window() - reorder @rows (@n of them, in (tid, stack) order) by
 * window, keeping that order within a window: the order sample_row_cmp()
 * gives. A sort of all the rows needs a merge buffer as large as they are
 * (10 MB for the 320,000 of a 10-hour session of 64 threads); here each
 * row's window is found in a hash table of the distinct windows (at most
 * one per second), which are sorted, and the rows are placed by a counting
 * sort on their window's rank, then moved in place along the permutation's
 * cycles: 8 bytes a row besides @rows. Returns 0 or -ENOMEM (@rows then
 * unchanged).
 */
static int rows_by_window(struct sample_row *rows, size_t n)
{
	_cleanup_free_ uint32_t *slot = NULL, *src = NULL;
	_cleanup_free_ struct row_window *w = NULL;
	_cleanup_free_ size_t *rank = NULL;
	struct id_index index = {}; /* window start -> index into w */
	size_t n_w = 0, cap_w = 0;
	int r = -ENOMEM;

	if (n < 2)
		return 0;
	if (n > UINT32_MAX)
		return -ENOMEM;
	slot = reallocarray(NULL, n, sizeof(*slot));
	src = reallocarray(NULL, n, sizeof(*src));
	if (!slot || !src)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		bool added;
		long k;

		k = report__index_add(&index, rows[i].window, (void **)&w, &cap_w, n_w, sizeof(*w),
				      &added);
		if (k < 0)
			goto out;
		if (added)
			w[n_w++] = (struct row_window){.window = rows[i].window};
		slot[i] = (uint32_t)k;
		w[k].n++;
	}
	/* The windows in order; rank[k]: where window k (by first sight) went. */
	rank = reallocarray(NULL, n_w, sizeof(*rank));
	if (!rank)
		goto out;
	for (size_t k = 0; k < n_w; k++)
		w[k].n =
		    w[k].n << 32 | k; /* count, and the window's first-sight index to find it */
	qsort(w, n_w, sizeof(*w), row_window_cmp);
	for (size_t k = 0, at = 0; k < n_w; k++) {
		size_t count = w[k].n >> 32;

		rank[w[k].n & 0xffffffff] = k;
		w[k].n = at; /* the next slot of this window's rows */
		at += count;
	}
	/* src[j]: the row that goes to place j. */
	for (size_t i = 0; i < n; i++)
		src[w[rank[slot[i]]].n++] = (uint32_t)i;
	for (size_t j = 0; j < n; j++) {
		struct sample_row t;
		size_t k = j;

		if (src[j] == j)
			continue;
		t = rows[j];
		while (src[k] != j) {
			size_t from = src[k];

			rows[k] = rows[from];
			src[k] = (uint32_t)k;
			k = from;
		}
		rows[k] = t;
		src[k] = (uint32_t)k;
	}
	r = 0;
out:
	id_index__free(&index);
	return r;
}

/* A stack of the profile's rows: its id and the sum of its rows, while they are read. */
struct row_stack {
	int64_t id;
	int64_t count;
	int64_t window; /* the first window of its rows (with PROFILE_BY_STACK) */
};

/*
 * The stacks of a profile's rows, as they are read: each distinct stack
 * once, found by id in a hash table. Memory: 24 bytes and a hash slot a
 * distinct stack (5,000 in a 10-hour session), not a slot a row.
 */
struct row_stacks {
	struct row_stack *v;
	size_t n, cap;
	struct id_index index; /* stack id -> index into v */
};

/* Index in @s of stack @id, added (count 0, window INT64_MAX) if new; >= 0 or -ENOMEM. */
static ssize_t row_stacks__index(struct row_stacks *s, int64_t id)
{
	bool added;
	long i =
	    report__index_add(&s->index, id, (void **)&s->v, &s->cap, s->n, sizeof(*s->v), &added);

	if (i >= 0 && added)
		s->v[s->n++] = (struct row_stack){.id = id, .window = INT64_MAX};
	return i;
}

static void row_stacks__free(struct row_stacks *s)
{
	free(s->v);
	id_index__free(&s->index);
	*s = (struct row_stacks){};
}

/* Orders indexes into @arg (a struct row_stacks) by stack id. */
static int row_stack_cmp_id(const void *a, const void *b, void *arg)
{
	const struct row_stacks *s = arg;
	int64_t x = s->v[*(const size_t *)a].id, y = s->v[*(const size_t *)b].id;

	return (x > y) - (x < y);
}

/* Decimal digits of @u. */
static size_t u64_len(uint64_t u)
{
	size_t n = 1;

	for (; u >= 10; u /= 10)
		n++;
	return n;
}

/* Characters of @v in decimal, with its sign. */
static size_t i64_len(int64_t v)
{
	return (v < 0) + u64_len(v < 0 ? -(uint64_t)v : (uint64_t)v);
}

/* Writes @v in decimal at @p (i64_len(@v) bytes, no NUL); returns the end. */
static char *i64_put(char *p, int64_t v)
{
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
	char *end;

	if (v < 0)
		*p++ = '-';
	end = p + u64_len(u);
	for (char *q = end; q > p; u /= 10)
		*--q = (char)('0' + u % 10);
	return end;
}

/*
 * Adds *@rows (freed here, *@rows NULL) to @o: as "samples", an array of
 * 4-integer arrays, or with @packed as "samples_packed", one string of
 * "STACK,TID,WINDOW,COUNT" rows separated by ';': a few bytes a row where
 * jansson takes about 300 (a profile of 64 threads and 5,000 stacks has
 * 320,000 rows). The text is sized first and written in one pass (printf
 * took a tenth of the profile's time), and the rows are freed before
 * jansson copies it, so that no more than two of rows, text and copy are
 * held at once.
 */
static int samples_json(json_t *o, struct sample_row **rows, size_t n, bool packed)
{
	_cleanup_free_ char *text = NULL;
	struct sample_row *v = *rows;
	size_t len = 0;
	json_t *arr;
	char *p;

	if (!packed) {
		if (json_object_set_new(o, "samples", arr = json_array()) < 0)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++)
			if (json_array_append_new(
				arr, json_pack("[I,I,I,I]", (json_int_t)v[i].stack,
					       (json_int_t)v[i].tid, (json_int_t)v[i].window,
					       (json_int_t)v[i].count)) < 0)
				return -ENOMEM;
		free(TAKE_PTR(*rows));
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		len += (i > 0) + i64_len(v[i].stack) + 1 + i64_len(v[i].tid) + 1 +
		       i64_len(v[i].window) + 1 + i64_len(v[i].count);
	text = malloc(len + 1);
	if (!text)
		return -ENOMEM;
	p = text;
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			*p++ = ';';
		p = i64_put(p, v[i].stack);
		*p++ = ',';
		p = i64_put(p, v[i].tid);
		*p++ = ',';
		p = i64_put(p, v[i].window);
		*p++ = ',';
		p = i64_put(p, v[i].count);
	}
	*p = '\0';
	free(TAKE_PTR(*rows));
	/* Digits, '-', ',' and ';': ASCII, no UTF-8 check needed. */
	return json_object_set_new(o, "samples_packed", json_stringn_nocheck(text, len)) < 0
		   ? -ENOMEM
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
	json_t **ints;
	size_t k = 0;
	int r = -ENOMEM;

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
	/*
	 * One integer object per frame number, shared by every stack that
	 * lists it (jansson counts references): a frame is in many stacks, and
	 * an integer object takes 32 bytes where a reference takes 8 (6 MB of
	 * the 200,000 frames of a 10-hour session's 5,000 stacks).
	 */
	ints = calloc(k + 1, sizeof(*ints));
	if (!ints)
		return -ENOMEM;
	for (size_t f = 0; f < k; f++)
		if (!(ints[f] = json_integer((json_int_t)f)))
			goto fail;
	for (size_t i = 0; i < n; i++) {
		json_t *list = json_array();

		if (json_array_append_new(stacks, list) < 0)
			goto fail;
		for (size_t j = 0; j < lens[i]; j++)
			if (json_array_append(list, ints[number[flat->v[span[i] + j]]]) < 0)
				goto fail;
	}
	r = 0;
fail:
	for (size_t f = 0; f < k; f++)
		json_decref(ints[f]);
	free(ints);
	return r;
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
	bool by_stack = (flags & PROFILE_BY_STACK) && !per_window;
	static const char *const thread_keys[] = {"tid", "pid", "name", NULL};
	static const char *const mapping_keys[] = {"pid",  "start",    "end", "file_offset",
						   "path", "build_id", NULL};
	_cleanup_(report__snapshot_endp) sqlite3 *snap = NULL;
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_json_ json_t *o = NULL;
	_cleanup_(idset__free) struct idset frame_ids = {}, flat = {};
	_cleanup_(row_stacks__free) struct row_stacks rs = {};
	_cleanup_free_ size_t *span = NULL, *by_id = NULL, *pos = NULL;
	_cleanup_free_ uint8_t *roles = NULL;
	_cleanup_json_ json_t *all = NULL;
	_cleanup_free_ char *sql = NULL;
	_cleanup_free_ struct sample_row *rows = NULL;
	size_t n_rows = 0, cap_rows = 0;
	struct report_sums sums = {};
	struct window_bounds wb;
	json_t *stacks, *frames, *arr;
	const char *table;
	int64_t total, start = 0, freq_hz;
	uint64_t period = 0;
	int fail = 0, r;

	r = report__snapshot_begin(db, &snap);
	if (r >= 0)
		r = window_bounds__get(db, session_id, range, &wb);
	if (r >= 0)
		r = report__samples_table(db, session_id, event, &table);
	if (r >= 0)
		r = report__row(db, "SELECT started_at_ns, freq_hz FROM sessions WHERE id = ?1",
				session_id, &st);
	if (r < 0)
		return r;
	start = sqlite3_column_int64(st, 0);
	freq_hz = sqlite3_column_int64(st, 1);
	sqlite3_finalize(TAKE_PTR(st));

	/*
	 * @table is one of two constant names (report__samples_table()), never
	 * user input. A whole session reads its rollup, already one row per
	 * (thread, stack) with the first window: its rows are ordered by window
	 * here (rows_by_window()), not by SQLite (a quarter of a second for the
	 * 320,000 rows of a 10-hour, 64-thread session, against a few ms). Summed over the threads
	 * too (@by_stack), the rows are summed per stack as they are read, and
	 * only the stacks are kept.
	 */
	if (asprintf(&sql,
		     per_window || by_stack || !wb.range
			 ? "SELECT stack_id, tid, window_ns - ?4, count FROM %s"
			   " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3%s"
			 /* Summed over the windows: far fewer rows for a long session. */
			 : "SELECT stack_id, tid, min(window_ns) - ?4, sum(count) FROM %s"
			   " WHERE session_id = ?1 AND window_ns BETWEEN ?2 AND ?3"
			   " GROUP BY tid, stack_id ORDER BY 3, tid, stack_id%s",
		     per_window ? table : report__rows(table, &wb),
		     /* The rollup's own key order, no sort: rows_by_window() needs it. */
		     per_window		      ? " ORDER BY window_ns, tid, stack_id"
		     : !wb.range && !by_stack ? " ORDER BY tid, stack_id"
					      : "") < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = report__prepare_range(db, sql, session_id, &wb, &st);
	if (r >= 0)
		r = report__bind_int64(st, 4, start);
	if (r < 0)
		return r;
	/* Rows (32 bytes each) with their index in rs: the stacks' order is known once all are read. */
	while ((r = report__step(st)) > 0) {
		ssize_t k = row_stacks__index(&rs, sqlite3_column_int64(st, 0));
		struct sample_row row = {0, sqlite3_column_int64(st, 1), sqlite3_column_int64(st, 2),
					 sqlite3_column_int64(st, 3)};

		if (k < 0)
			return (int)k;
		sums.total += row.count;
		rs.v[k].count += row.count;
		if (by_stack) {
			rs.v[k].window = MIN(rs.v[k].window, row.window);
			continue;
		}
		r = grow_array_to((void **)&rows, &cap_rows, n_rows + 1, sizeof(*rows));
		if (r < 0)
			return r;
		row.stack = k;
		rows[n_rows++] = row;
	}
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));

	/* Stack indexes in the profile: by stack id. */
	by_id = reallocarray(NULL, rs.n + 1, sizeof(*by_id));
	pos = reallocarray(NULL, rs.n + 1, sizeof(*pos));
	if (!by_id || !pos)
		return -ENOMEM;
	for (size_t k = 0; k < rs.n; k++)
		by_id[k] = k;
	if (rs.n)
		qsort_r(by_id, rs.n, sizeof(*by_id), row_stack_cmp_id, &rs);
	for (size_t i = 0; i < rs.n; i++)
		pos[by_id[i]] = i;
	if (by_stack) {
		/* One row per stack, tid 0, its first window: ordered by window, then stack. */
		rows = reallocarray(NULL, rs.n + 1, sizeof(*rows));
		if (!rows)
			return -ENOMEM;
		for (size_t i = 0; i < rs.n; i++)
			rows[i] = (struct sample_row){.stack = (int64_t)i,
						      .window = rs.v[by_id[i]].window,
						      .count = rs.v[by_id[i]].count};
		n_rows = rs.n;
	} else {
		for (size_t i = 0; i < n_rows; i++)
			rows[i].stack = (int64_t)pos[rows[i].stack];
	}
	if (by_stack && n_rows)
		qsort(rows, n_rows, sizeof(*rows), sample_row_cmp);
	if (!by_stack && !per_window && !wb.range) {
		r = rows_by_window(rows, n_rows);
		if (r < 0)
			return r;
	}

	/* Each stack's frame ids, leaf first: stack i is flat.v[span[i] .. span[i + 1]). */
	span = reallocarray(NULL, rs.n + 1, sizeof(*span));
	if (!span)
		return -ENOMEM;
	r = report__prepare(db, "SELECT frame_ids, reached_root FROM stacks WHERE id = ?1", &st);
	if (r < 0)
		return r;
	for (size_t i = 0; i < rs.n; i++) {
		span[i] = flat.n;
		r = report__lookup(st, rs.v[by_id[i]].id); /* -EIO: a sample of a missing stack */
		if (r < 0)
			return r;
		if (sqlite3_column_int64(st, 1))
			sums.root += rs.v[by_id[i]].count;
		r = frame_ids_decode(sqlite3_column_blob(st, 0),
				     (size_t)sqlite3_column_bytes(st, 0), &flat);
		if (r < 0)
			return r;
	}
	span[rs.n] = flat.n;
	sqlite3_finalize(TAKE_PTR(st));

	r = report__head(db, session_id, table, &wb, &sums, &o, &total);
	if (r >= 0)
		r = report__python_frames(o, flags);
	if (r < 0)
		return r;
	/* The period of one sample: ns of CPU time for cpu-clock, events for the others. */
	if (!event && freq_hz > 0)
		period = NSEC_PER_SEC / (uint64_t)freq_hz;
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
	r = samples_json(o, &rows, n_rows, flags & PROFILE_PACKED);
	if (r < 0)
		return r;

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
	r = stacks_json(stacks, frames, &flat, span, rs.n, all, frame_ids.n,
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
