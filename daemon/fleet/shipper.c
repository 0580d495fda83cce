/* shipper.c - the ClickHouse shipping thread: cursors, chunks, exactly once, backoff
 * (docs/fleet.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fleet/curl_load.h"
#include <sqlite3.h>

#include "fleet/clickhouse.h"
#include "store/fleet_cursor.h"
#include "fleet/shipper.h"
#include "hashmap.h"
#include "io.h"
#include "log.h"
#include "protocol.h"
#include "report/python_frames.h"
#include "store/sqlite_util.h"
#include "util.h"
#include "worker_thread.h"

/* Windows younger than profd's flush interval and this are not shipped from a
 * running session: samples reach their window up to the unwinder's queue and
 * a flush later. */
#define SETTLE_AFTER_FLUSH_NS (4 * NSEC_PER_SEC)
/* A chunk spans at most this much window time (a backlog goes in several). */
#define CHUNK_MAX_NS (10 * 60 * NSEC_PER_SEC)
/* The samples table's minute column: the session's start + k * 60 s. */
#define MINUTE_NS (60 * NSEC_PER_SEC)
/* At most this many rows in one INSERT: a chunk with more is sent in parts,
 * part k with chunk_ns = the chunk's start + k (ns), each counted once. */
#define ROWS_PER_INSERT 50000
/* fleet_cursors.sink of this thread's rows. */
#define SINK "clickhouse"

/* A frame as the reports name it, cached for the session being shipped. */
struct ship_frame {
	int64_t id;
	char *name; /* function, or "<module basename>+0x<rel_addr>" */
	char *module;
	bool kernel;
	uint8_t role; /* enum frame_role */
};

/* A stack already sent in this session, and its hash. */
struct ship_stack {
	int64_t id;
	uint64_t hash;
};

/* What a chunk needs of its session's row. */
struct ship_session {
	int64_t id, started_ns, ended_ns;	   /* ended_ns 0 while running */
	int64_t merged_until_ns, merged_window_ns; /* 0: not merged */
	int64_t shipped_until_ns;
	int64_t pending_until_ns; /* the chunk an earlier attempt began to send; 0: none */
	int pid;
	char *comm, *label, *user, *sampled_event;
};

struct shipper {
	struct worker_thread worker;	   /* kicked when a session ends */
	atomic_bool cancel;		   /* transfers stop at once */
	_Atomic uint64_t deadline_mono_ns; /* the last round is cancelled after this; 0: none */
	struct clickhouse *ch;
	sqlite3 *db;
	char *host, *q_host; /* host name, and quoted for SQL */
	unsigned interval_s;
	int64_t settle_ns; /* a running session's windows this recent wait */
	bool tables_ready;
	bool failing;	       /* the last attempt failed */
	int logged_err;	       /* ... with this -errno, logged once */
	int64_t cache_session; /* the session the caches below are of */
	struct hashmap frames, stacks;
	struct fleet_buf body;
	uint64_t chunk_rows; /* rows sent in the chunk being shipped */
};

static bool frame_eq(const void *e, const void *k)
{
	return ((const struct ship_frame *)e)->id == *(const int64_t *)k;
}

static bool stack_eq(const void *e, const void *k)
{
	return ((const struct ship_stack *)e)->id == *(const int64_t *)k;
}

static void caches_clear(struct shipper *sh)
{
	struct ship_frame *f;
	struct ship_stack *s;

	hashmap__for_each(&sh->frames, i, f)
	{
		free(f->name);
		free(f->module);
		free(f);
	}
	hashmap__for_each(&sh->stacks, i, s) free(s);
	hashmap__clear(&sh->frames);
	hashmap__clear(&sh->stacks);
	sh->cache_session = 0;
}

static void ship_session_done(struct ship_session *s)
{
	free(s->comm);
	free(s->label);
	free(s->user);
	free(s->sampled_event);
}

static bool on_cancel(void *arg)
{
	struct shipper *sh = arg;
	uint64_t deadline = atomic_load(&sh->deadline_mono_ns);

	return atomic_load(&sh->cancel) || (deadline && now_ns(CLOCK_MONOTONIC) > deadline);
}

/* --- JSONEachRow bodies ------------------------------------------------ */

static int buf_printf(struct fleet_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int buf_printf(struct fleet_buf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -EINVAL;
	return fleet_buf__append(b, tmp, (size_t)n);
}

/* @s (NULL: "") as a JSON string. */
static int buf_json_str(struct fleet_buf *b, const char *s)
{
	char esc[8];
	int r = fleet_buf__append(b, "\"", 1);

	for (const char *p = s ? s : "", *run = p; r >= 0; p++) {
		unsigned char c = (unsigned char)*p;

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		r = fleet_buf__append(b, run, (size_t)(p - run));
		if (r < 0 || !c)
			break;
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else
			snprintf(esc, sizeof(esc), "\\u%04x", c);
		r = fleet_buf__append(b, esc, strlen(esc));
		run = p + 1;
	}
	return r < 0 ? r : fleet_buf__append(b, "\"", 1);
}

/* ,"key":"value" (or {"key":... when @first). */
static int buf_field_str(struct fleet_buf *b, const char *key, const char *v, bool first)
{
	int r = buf_printf(b, "%s\"%s\":", first ? "{" : ",", key);

	return r < 0 ? r : buf_json_str(b, v);
}

static int buf_field_u64(struct fleet_buf *b, const char *key, uint64_t v, bool first)
{
	return buf_printf(b, "%s\"%s\":%" PRIu64, first ? "{" : ",", key, v);
}

static int buf_field_i64(struct fleet_buf *b, const char *key, int64_t v, bool first)
{
	return buf_printf(b, "%s\"%s\":%" PRId64, first ? "{" : ",", key, v);
}

static const char *col_text(sqlite3_stmt *st, int i)
{
	const char *s = (const char *)sqlite3_column_text(st, i);

	return s ? s : "";
}

static int col_strdup(sqlite3_stmt *st, int i, char **ret)
{
	*ret = strdup(col_text(st, i));
	return *ret ? 0 : -ENOMEM;
}

/* Starts a row of session @session_id in sh->body: {"host":...,"session_id":... */
static int row_head(struct shipper *sh, int64_t session_id)
{
	int r = buf_field_str(&sh->body, "host", sh->host, true);

	return r ?: buf_field_i64(&sh->body, "session_id", session_id, false);
}

/* Starts a row of chunk @chunk_ns: row_head() and "chunk_ns", which ClickHouse counts it by. */
static int chunk_row_head(struct shipper *sh, const struct ship_session *s, int64_t chunk_ns)
{
	int r = row_head(sh, s->id);

	return r ?: buf_field_i64(&sh->body, "chunk_ns", chunk_ns, false);
}

/* --- errors and cursors -------------------------------------------------- */

static int sql_failed(struct shipper *sh, const char *what)
{
	log_error("fleet: reading %s from the database failed: %s", what, sqlite3_errmsg(sh->db));
	return -EIO;
}

/* @sql prepared into *@ret. Returns 0, or -EIO logged as reading @table. */
static int prepare(struct shipper *sh, const char *sql, const char *table, sqlite3_stmt **ret)
{
	return sqlite3_prepare_v2(sh->db, sql, -1, ret, NULL) == SQLITE_OK ? 0
									   : sql_failed(sh, table);
}

/*
 * @sql, a statement about one session, prepared into *@ret with ?1 its id
 * @id. Returns 0, or -EIO logged as reading @table.
 */
static int prepare_session(struct shipper *sh, const char *sql, const char *table, int64_t id,
			   sqlite3_stmt **ret)
{
	if (prepare(sh, sql, table, ret) < 0)
		return -EIO;
	sqlite3_bind_int64(*ret, 1, id);
	return 0;
}

/* The windows of a chunk's span, as prepare_span() binds them. */
#define IN_SPAN "session_id = ?1 AND window_ns >= ?2 AND window_ns < ?3"

/*
 * @sql, a statement over a chunk's span, prepared into *@ret with ?1 the
 * session @s, ?2 @lo and ?3 @hi (ns, window or reading time). Returns 0,
 * or -EIO logged as reading @table.
 */
static int prepare_span(struct shipper *sh, const char *sql, const char *table,
			const struct ship_session *s, int64_t lo, int64_t hi, sqlite3_stmt **ret)
{
	if (prepare_session(sh, sql, table, s->id, ret) < 0)
		return -EIO;
	sqlite3_bind_int64(*ret, 2, lo);
	sqlite3_bind_int64(*ret, 3, hi);
	return 0;
}

/* A cursor call's result: -EIO logged with SQLite's message. */
static int cursor_result(struct shipper *sh, int r)
{
	return r == -EIO ? sql_failed(sh, "fleet_cursors") : r;
}

/* A failed attempt at @session_id (0: none in particular): counted, and logged if new. */
static void attempt_failed(struct shipper *sh, int64_t session_id, int r)
{
	const char *msg = clickhouse__errmsg(sh->ch);

	if (r == -ECANCELED)
		return;
	if (r == -EIO && !*msg)
		msg = "reading the local database failed";
	/* Counted where profctl session shows it: on @session_id, or when the
	 * round failed before any session (the tables), on every pending one. */
	(void)cursor_result(sh, fleet_cursor__failed(sh->db, SINK, session_id, msg));
	/* Once per kind of failure, not at every retry. */
	if (!sh->failing || sh->logged_err != r)
		log_warning("fleet: %s (retrying with backoff; sessions are kept until shipped)",
			    msg);
	sh->logged_err = r;
	sh->failing = true;
}

/* --- one session -------------------------------------------------------- */

static int session_load(struct shipper *sh, int64_t id, struct ship_session *s)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct passwd pw, *res = NULL;
	char pwbuf[1024];
	int rc;

	if (prepare_session(sh,
			    "SELECT s.pid, s.comm, coalesce(s.label, ''), s.uid, "
			    "s.started_at_ns, coalesce(s.ended_at_ns, 0), "
			    "coalesce(s.merged_until_ns, 0), coalesce(s.merged_window_ns, 0), "
			    "coalesce(s.sampled_event, ''), c.shipped_until_ns, "
			    "coalesce(c.pending_until_ns, 0) FROM sessions s LEFT JOIN "
			    "fleet_cursors c ON c.session_id = "
			    "s.id AND c.sink = 'clickhouse' WHERE s.id = ?1",
			    "sessions", id, &st) < 0)
		return -EIO;
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return sql_failed(sh, "sessions");
	*s = (struct ship_session){
	    .id = id,
	    .pid = sqlite3_column_int(st, 0),
	    .started_ns = sqlite3_column_int64(st, 4),
	    .ended_ns = sqlite3_column_int64(st, 5),
	    .merged_until_ns = sqlite3_column_int64(st, 6),
	    .merged_window_ns = sqlite3_column_int64(st, 7),
	};
	s->shipped_until_ns =
	    sqlite3_column_type(st, 9) == SQLITE_NULL ? s->started_ns : sqlite3_column_int64(st, 9);
	s->pending_until_ns = sqlite3_column_int64(st, 10);
	if (getpwuid_r((uid_t)sqlite3_column_int64(st, 3), &pw, pwbuf, sizeof(pwbuf), &res) != 0)
		res = NULL;
	s->user = strdup(res ? res->pw_name : "");
	if (col_strdup(st, 1, &s->comm) < 0 || col_strdup(st, 2, &s->label) < 0 ||
	    col_strdup(st, 8, &s->sampled_event) < 0 || !s->user)
		return -ENOMEM;
	return 0;
}

/* The sessions row of @s (state and counters as they are now; version: now). */
static int send_session_row(struct shipper *sh, const struct ship_session *s)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct fleet_buf *b = &sh->body;
	int r;

	if (prepare_session(sh,
			    "SELECT pid, comm, coalesce(exe, ''), coalesce(label, ''), uid, event, "
			    "events, freq_hz, started_at_ns, coalesce(ended_at_ns, 0), state, "
			    "coalesce(end_reason, ''), "
			    "samples, lost_samples, truncated_stacks, missing_user_stacks, "
			    "unsymbolized_frames, "
			    "limit_dropped_samples FROM sessions WHERE id = ?1",
			    "sessions", s->id, &st) < 0)
		return -EIO;
	if (sqlite3_step(st) != SQLITE_ROW)
		return sql_failed(sh, "sessions");
	fleet_buf__reset(b);
	r = row_head(sh, s->id);
	r = r ?: buf_field_i64(b, "pid", sqlite3_column_int64(st, 0), false);
	r = r ?: buf_field_str(b, "comm", col_text(st, 1), false);
	r = r ?: buf_field_str(b, "exe", col_text(st, 2), false);
	r = r ?: buf_field_str(b, "label", col_text(st, 3), false);
	r = r ?: buf_field_i64(b, "uid", sqlite3_column_int64(st, 4), false);
	r = r ?: buf_field_str(b, "user", s->user, false);
	r = r ?: buf_field_str(b, "event", col_text(st, 5), false);
	r = r ?: buf_field_str(b, "events", col_text(st, 6), false);
	r = r ?: buf_field_i64(b, "freq_hz", sqlite3_column_int64(st, 7), false);
	r = r
		?: buf_field_i64(b, "started_at",
				 sqlite3_column_int64(st, 8) / (int64_t)NSEC_PER_SEC, false);
	r = r ?: buf_field_i64(b, "started_at_ns", sqlite3_column_int64(st, 8), false);
	r = r ?: buf_field_i64(b, "ended_at_ns", sqlite3_column_int64(st, 9), false);
	r = r ?: buf_field_str(b, "state", col_text(st, 10), false);
	r = r ?: buf_field_str(b, "end_reason", col_text(st, 11), false);
	r = r ?: buf_field_i64(b, "samples", sqlite3_column_int64(st, 12), false);
	r = r ?: buf_field_i64(b, "lost_samples", sqlite3_column_int64(st, 13), false);
	r = r ?: buf_field_i64(b, "truncated_stacks", sqlite3_column_int64(st, 14), false);
	r = r ?: buf_field_i64(b, "missing_user_stacks", sqlite3_column_int64(st, 15), false);
	r = r ?: buf_field_i64(b, "unsymbolized_frames", sqlite3_column_int64(st, 16), false);
	r = r ?: buf_field_i64(b, "limit_dropped_samples", sqlite3_column_int64(st, 17), false);
	r = r ?: buf_field_u64(b, "version", now_ns(CLOCK_REALTIME), false);
	r = r ?: fleet_buf__append(b, "}\n", 2);
	if (r < 0)
		return r;
	sqlite3_finalize(TAKE_PTR(st));
	r = clickhouse__insert(sh->ch, "sessions", b->data, b->len);
	if (r < 0)
		return r;

	/* Its threads, idempotent too (ReplacingMergeTree(version)). */
	if (prepare_session(sh,
			    "SELECT tid, coalesce(pid, 0), name, samples FROM threads "
			    "WHERE session_id = ?1",
			    "threads", s->id, &st) < 0)
		return -EIO;
	fleet_buf__reset(b);
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		int q = row_head(sh, s->id);

		q = q ?: buf_field_i64(b, "tid", sqlite3_column_int64(st, 0), false);
		q = q ?: buf_field_i64(b, "pid", sqlite3_column_int64(st, 1), false);
		q = q ?: buf_field_str(b, "name", col_text(st, 2), false);
		q = q ?: buf_field_i64(b, "samples", sqlite3_column_int64(st, 3), false);
		q = q ?: buf_field_u64(b, "version", now_ns(CLOCK_REALTIME), false);
		q = q ?: fleet_buf__append(b, "}\n", 2);
		if (q < 0)
			return q;
	}
	if (r != SQLITE_DONE)
		return sql_failed(sh, "threads");
	if (!b->len)
		return 0;
	return clickhouse__insert(sh->ch, "threads", b->data, b->len);
}

/* The frame @id, from the cache or the frames table. NULL with *@ret_err set on failure. */
static struct ship_frame *frame_get(struct shipper *sh, sqlite3_stmt *st, int64_t id, int *ret_err)
{
	uint64_t h = hash64(HASH64_INIT, &id, sizeof(id));
	struct ship_frame *f = hashmap__find(&sh->frames, h, frame_eq, &id);
	const char *module, *function, *base;

	if (f)
		return f;
	sqlite3_reset(st);
	sqlite3_bind_int64(st, 1, id);
	if (sqlite3_step(st) != SQLITE_ROW) {
		*ret_err = sql_failed(sh, "frames");
		return NULL;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		goto oom;
	f->id = id;
	module = col_text(st, 1);
	function = (const char *)sqlite3_column_text(st, 3);
	f->kernel = strcmp(col_text(st, 0), "kernel") == 0;
	f->role = (uint8_t)python_frames__role(col_text(st, 0), module, col_text(st, 6), function,
					       (const char *)sqlite3_column_text(st, 4));
	f->module = strdup(module);
	if (function) {
		f->name = strdup(function);
	} else {
		/* As top names it: the module's basename and the address. */
		base = strrchr(module, '/');
		if (asprintf(&f->name, "%s+0x%" PRIx64, base ? base + 1 : module,
			     (uint64_t)sqlite3_column_int64(st, 2)) < 0)
			f->name = NULL;
	}
	if (!f->module || !f->name || hashmap__insert(&sh->frames, h, f) < 0)
		goto oom;
	return f;
oom:
	if (f) {
		free(f->name);
		free(f->module);
		free(f);
	}
	*ret_err = -ENOMEM;
	return NULL;
}

/*
 * The stacks of @s's samples in [@lo, @hi) that were not sent yet, in the
 * reports' Python view, hashed (FNV-1a of function "\0" module "\0" per
 * frame, leaf first) and inserted (ReplacingMergeTree: sending one twice
 * is harmless). Cached per session: each stack is sent once per profd run.
 */
static int send_stacks(struct shipper *sh, const struct ship_session *s, int64_t lo, int64_t hi)
{
	_cleanup_stmt_ sqlite3_stmt *ids = NULL, *fr = NULL;
	_cleanup_free_ struct ship_frame **frames = NULL;
	_cleanup_free_ int64_t *idx = NULL;
	_cleanup_free_ uint8_t *roles = NULL;
	size_t cap = 0, rows = 0;
	struct fleet_buf *b = &sh->body;
	int rc, r = 0;

	r = prepare_span(sh,
			 "SELECT x.stack_id, s.frame_ids, s.truncated FROM (SELECT stack_id FROM "
			 "samples WHERE " IN_SPAN " UNION SELECT stack_id FROM event_samples "
			 "WHERE " IN_SPAN ") x JOIN stacks s ON s.id = x.stack_id",
			 "stacks", s, lo, hi, &ids);
	if (r < 0)
		return r;
	if (prepare(sh,
		    "SELECT kind, module, rel_addr, function, file, line, build_id "
		    "FROM frames WHERE id = ?1",
		    "stacks", &fr) < 0)
		return -EIO;
	fleet_buf__reset(b);
	while ((rc = sqlite3_step(ids)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(ids, 0);
		uint64_t h = hash64(HASH64_INIT, &id, sizeof(id)), hash = HASH64_INIT;
		const unsigned char *blob = sqlite3_column_blob(ids, 1);
		size_t depth = (size_t)sqlite3_column_bytes(ids, 1) / 8, n;
		struct ship_stack *ss;

		if (hashmap__find(&sh->stacks, h, stack_eq, &id))
			continue;
		if (depth > cap) {
			cap = depth;
			free(frames);
			free(idx);
			free(roles);
			frames = calloc(cap, sizeof(*frames));
			idx = calloc(cap, sizeof(*idx));
			roles = calloc(cap, 1);
			if (!frames || !idx || !roles)
				return -ENOMEM;
		}
		for (size_t i = 0; i < depth; i++) {
			uint64_t v = 0;

			for (int k = 7; k >= 0; k--)
				v = (v << 8) | blob[i * 8 + (size_t)k];
			frames[i] = frame_get(sh, fr, (int64_t)v, &r);
			if (!frames[i])
				return r;
			idx[i] = (int64_t)i;
			roles[i] = frames[i]->role;
		}
		n = python_frames__fold(idx, depth, roles);
		for (size_t i = 0; i < n; i++) {
			const struct ship_frame *f = frames[idx[i]];

			hash = fnv1a64(hash, f->name, strlen(f->name) + 1);
			hash = fnv1a64(hash, f->module, strlen(f->module) + 1);
		}
		r = buf_field_u64(b, "stack_hash", hash, true);
		for (int col = 0; col < 3 && r >= 0; col++) {
			static const char *const names[] = {"functions", "modules", "kinds"};

			r = buf_printf(b, ",\"%s\":[", names[col]);
			for (size_t i = 0; i < n && r >= 0; i++) {
				const struct ship_frame *f = frames[idx[i]];

				if (i)
					r = fleet_buf__append(b, ",", 1);
				r = r
					?: buf_json_str(b, col == 0    ? f->name
							   : col == 1  ? f->module
							   : f->kernel ? "kernel"
								       : "user");
			}
			r = r ?: fleet_buf__append(b, "]", 1);
		}
		r = r ?: buf_field_u64(b, "depth", n, false);
		r = r ?: buf_field_i64(b, "truncated", sqlite3_column_int64(ids, 2) != 0, false);
		r = r ?: fleet_buf__append(b, "}\n", 2);
		if (r < 0)
			return r;
		ss = malloc(sizeof(*ss));
		if (!ss)
			return -ENOMEM;
		*ss = (struct ship_stack){.id = id, .hash = hash};
		if (hashmap__insert(&sh->stacks, h, ss) < 0) {
			free(ss);
			return -ENOMEM;
		}
		if (++rows >= ROWS_PER_INSERT) {
			r = clickhouse__insert(sh->ch, "stacks", b->data, b->len);
			if (r < 0)
				goto forget;
			fleet_buf__reset(b);
			rows = 0;
		}
	}
	if (rc != SQLITE_DONE)
		return sql_failed(sh, "stacks");
	if (!rows)
		return 0;
	r = clickhouse__insert(sh->ch, "stacks", b->data, b->len);
	if (r >= 0)
		return 0;
forget:
	/* Not sent: forget the session's stacks, so the retry sends them all. */
	caches_clear(sh);
	return r;
}

static uint64_t stack_hash_of(struct shipper *sh, int64_t id, bool *ret_found)
{
	uint64_t h = hash64(HASH64_INIT, &id, sizeof(id));
	struct ship_stack *ss = hashmap__find(&sh->stacks, h, stack_eq, &id);

	*ret_found = ss != NULL;
	return ss ? ss->hash : 0;
}

/*
 * Part @part of @table's rows of the chunk: sent unless ClickHouse already
 * has rows with its chunk_ns (an INSERT whose answer was lost).
 */
static int send_part(struct shipper *sh, const char *table, const struct ship_session *s,
		     int64_t chunk_ns, uint64_t rows)
{
	_cleanup_free_ char *sql = NULL;
	uint64_t there = 0;
	int r;

	if (asprintf(&sql,
		     "SELECT count() FROM %s WHERE host = %s AND session_id = %" PRId64
		     " AND chunk_ns = %" PRId64,
		     table, sh->q_host, s->id, chunk_ns) < 0) {
		sql = NULL;
		return -ENOMEM;
	}
	r = clickhouse__count(sh->ch, sql, &there);
	if (r < 0)
		return r;
	if (there) {
		log_info("fleet: session %" PRId64 ": %s of chunk %" PRId64
			 " already in ClickHouse (%" PRIu64
			 " rows; an earlier answer was lost): not sent again",
			 s->id, table, chunk_ns, there);
		return 0;
	}
	r = clickhouse__insert(sh->ch, table, sh->body.data, sh->body.len);
	if (r >= 0)
		sh->chunk_rows += rows;
	return r;
}

/* The samples (CPU and the sampled event) of [@lo, @hi), summed per minute, thread and stack. */
static int send_samples(struct shipper *sh, const struct ship_session *s, int64_t lo, int64_t hi,
			int64_t chunk_ns)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct fleet_buf *b = &sh->body;
	uint64_t rows = 0;
	int64_t part = 0;
	int rc, r;

	r = prepare_span(
	    sh,
	    "SELECT x.e, x.m, x.tid, x.stack_id, x.n, coalesce(t.name, ''), coalesce(t.pid, ?5) "
	    "FROM (SELECT 0 AS e, max(window_ns - ?4, 0) / 60000000000 AS m, tid, stack_id, "
	    "      sum(count) AS n FROM samples WHERE " IN_SPAN " GROUP BY m, tid, stack_id "
	    "      UNION ALL "
	    "      SELECT 1, max(window_ns - ?4, 0) / 60000000000 AS m, tid, stack_id, sum(count) "
	    "      FROM event_samples WHERE " IN_SPAN " GROUP BY m, tid, stack_id) x "
	    "LEFT JOIN threads t ON t.session_id = ?1 AND t.tid = x.tid "
	    "ORDER BY x.e, x.m, x.tid, x.stack_id",
	    "samples", s, lo, hi, &st);
	if (r < 0)
		return r;
	sqlite3_bind_int64(st, 4, s->started_ns);
	sqlite3_bind_int(st, 5, s->pid);
	fleet_buf__reset(b);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t minute_s =
		    (s->started_ns + sqlite3_column_int64(st, 1) * (int64_t)MINUTE_NS) /
		    (int64_t)NSEC_PER_SEC;
		bool found;
		uint64_t hash = stack_hash_of(sh, sqlite3_column_int64(st, 3), &found);

		if (!found) /* send_stacks() sent every stack of the span */
			return sql_failed(sh, "samples (a stack changed under the shipper)");
		r = chunk_row_head(sh, s, chunk_ns + part);
		r = r
			?: buf_field_str(b, "event",
					 sqlite3_column_int(st, 0) ? s->sampled_event : "cpu",
					 false);
		r = r ?: buf_field_i64(b, "minute", minute_s, false);
		r = r ?: buf_field_i64(b, "tid", sqlite3_column_int64(st, 2), false);
		r = r ?: buf_field_str(b, "thread", col_text(st, 5), false);
		r = r ?: buf_field_i64(b, "pid", sqlite3_column_int64(st, 6), false);
		r = r ?: buf_field_str(b, "comm", s->comm, false);
		r = r ?: buf_field_str(b, "label", s->label, false);
		r = r ?: buf_field_str(b, "user", s->user, false);
		r = r ?: buf_field_u64(b, "stack_hash", hash, false);
		r = r ?: buf_field_i64(b, "count", sqlite3_column_int64(st, 4), false);
		r = r ?: fleet_buf__append(b, "}\n", 2);
		if (r < 0)
			return r;
		if (++rows >= ROWS_PER_INSERT) {
			r = send_part(sh, "samples", s, chunk_ns + part, rows);
			if (r < 0)
				return r;
			fleet_buf__reset(b);
			rows = 0;
			part++;
		}
	}
	if (rc != SQLITE_DONE)
		return sql_failed(sh, "samples");
	return rows ? send_part(sh, "samples", s, chunk_ns + part, rows) : 0;
}

/* A column of a table shipped row for row: its JSON key, its result column, how it is written. */
struct ship_col {
	const char *key;
	int col;
	enum { COL_I64, COL_TEXT, COL_SECONDS } kind; /* COL_SECONDS: a ns column, in whole s */
};

/* A table whose chunk rows are the local rows of the chunk's span as they are read. */
struct ship_table {
	const char *name;	  /* in ClickHouse */
	const char *local;	  /* what the errors say was read */
	const char *sql;	  /* over ?1 the session, [?2, ?3) */
	struct ship_col cols[10]; /* up to a NULL key */
};

static const struct ship_table span_tables[] = {
    /* The memory readings of the span, by their time. */
    {"memory",
     "memory_samples",
     "SELECT pid, time_ns, rss_bytes, coalesce(pss_bytes, -1), anon_bytes, file_bytes, "
     "shmem_bytes, swap_bytes FROM memory_samples "
     "WHERE session_id = ?1 AND time_ns >= ?2 AND time_ns < ?3 "
     "ORDER BY time_ns, pid LIMIT 1000000",
     {{"pid", 0, COL_I64},
      {"time", 1, COL_SECONDS},
      {"time_ns", 1, COL_I64},
      {"rss_bytes", 2, COL_I64},
      {"pss_bytes", 3, COL_I64},
      {"anon_bytes", 4, COL_I64},
      {"file_bytes", 5, COL_I64},
      {"shmem_bytes", 6, COL_I64},
      {"swap_bytes", 7, COL_I64}}},
    /* CUDA kernel launches of the span, per kernel name. */
    {"gpu_kernels",
     "gpu_kernels",
     "SELECT name, sum(launches), sum(errors) FROM gpu_kernels WHERE " IN_SPAN
     " GROUP BY name ORDER BY name",
     {{"name", 0, COL_TEXT}, {"launches", 1, COL_I64}, {"errors", 2, COL_I64}}},
};

/* The rows of @t in [@lo, @hi), sent as one part of chunk @chunk_ns. */
static int send_span_table(struct shipper *sh, const struct ship_table *t,
			   const struct ship_session *s, int64_t lo, int64_t hi, int64_t chunk_ns)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct fleet_buf *b = &sh->body;
	uint64_t rows = 0;
	int rc, r;

	r = prepare_span(sh, t->sql, t->local, s, lo, hi, &st);
	if (r < 0)
		return r;
	fleet_buf__reset(b);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		r = chunk_row_head(sh, s, chunk_ns);
		for (const struct ship_col *c = t->cols; c->key && r >= 0; c++) {
			if (c->kind == COL_TEXT) {
				r = buf_field_str(b, c->key, col_text(st, c->col), false);
				continue;
			}
			r = buf_field_i64(b, c->key,
					  sqlite3_column_int64(st, c->col) /
					      (c->kind == COL_SECONDS ? (int64_t)NSEC_PER_SEC : 1),
					  false);
		}
		r = r ?: fleet_buf__append(b, "}\n", 2);
		if (r < 0)
			return r;
		rows++;
	}
	if (rc != SQLITE_DONE)
		return sql_failed(sh, t->local);
	return rows ? send_part(sh, t->name, s, chunk_ns, rows) : 0;
}

/*
 * The end of the next chunk of @s from @from: whole windows (merged ones
 * where the session's windows were merged), at most CHUNK_MAX_NS, not past
 * now - @settle_ns while it runs. *@ret_last: the chunk ends the session.
 * Returns @from when there is nothing to ship yet.
 */
static int64_t chunk_end(const struct ship_session *s, int64_t from, int64_t settle_ns,
			 bool *ret_last)
{
	int64_t grid = (int64_t)PROFD_WINDOW_NS, limit, to;

	*ret_last = false;
	if (s->merged_until_ns > from && s->merged_window_ns > 0)
		grid = s->merged_window_ns;
	if (s->ended_ns && s->ended_ns - from <= (int64_t)CHUNK_MAX_NS &&
	    (grid == (int64_t)PROFD_WINDOW_NS || s->merged_until_ns >= s->ended_ns)) {
		*ret_last = true;
		return INT64_MAX;
	}
	limit = from + (int64_t)CHUNK_MAX_NS;
	if (!s->ended_ns)
		limit = MIN(limit, (int64_t)now_ns(CLOCK_REALTIME) - settle_ns);
	if (grid != (int64_t)PROFD_WINDOW_NS)
		limit = MIN(limit, s->merged_until_ns);
	if (limit <= s->started_ns)
		return from;
	to = s->started_ns + (limit - s->started_ns) / grid * grid;
	return MAX(to, from);
}

/*
 * Ship what is new of session @id: its row and threads, then its chunks
 * one by one, each followed by its cursor. Returns 0 when caught up, or
 * -errno (ClickHouse's, with its message; -EIO for the local database;
 * -ENOENT if the session is gone).
 */
static int ship_session(struct shipper *sh, int64_t id)
{
	struct ship_session s = {0};
	int r;

	r = session_load(sh, id, &s);
	if (r < 0)
		goto out;
	if (sh->cache_session != id) {
		caches_clear(sh);
		sh->cache_session = id;
	}
	r = cursor_result(sh, fleet_cursor__begin(sh->db, SINK, id, s.started_ns));
	if (r < 0)
		goto out;
	r = send_session_row(sh, &s);
	while (r >= 0 && !on_cancel(sh)) {
		int64_t from = s.shipped_until_ns, to, lo, chunk_ns = from;
		uint64_t t0 = now_ns(CLOCK_MONOTONIC), sent0 = clickhouse__bytes_sent(sh->ch);
		bool last;

		to = chunk_end(&s, from, sh->settle_ns, &last);
		if (s.pending_until_ns > from) {
			/* The same chunk as the attempt that failed: ClickHouse may
			 * have some of its tables, and must see the same rows. */
			to = s.pending_until_ns;
			last = to == INT64_MAX;
		} else if (to > from) {
			r = cursor_result(sh, fleet_cursor__set_pending(sh->db, SINK, id, to));
			if (r < 0)
				break;
			s.pending_until_ns = to;
		}
		if (to <= from)
			break;
		/* The first chunk takes a window that began before the session did. */
		lo = from == s.started_ns ? 0 : from;
		sh->chunk_rows = 0;
		r = send_stacks(sh, &s, lo, to);
		r = r ?: send_samples(sh, &s, lo, to, chunk_ns);
		for (size_t i = 0; i < ARRAY_SIZE(span_tables) && r >= 0; i++)
			r = send_span_table(sh, &span_tables[i], &s, lo, to, chunk_ns);
		if (r < 0)
			break;
		s.shipped_until_ns = last ? MAX(from, s.ended_ns) : to;
		r = cursor_result(sh, fleet_cursor__advance(sh->db, SINK, id, s.shipped_until_ns, 1,
							    (int64_t)sh->chunk_rows, last));
		log_debug("fleet: session %" PRId64 ": chunk %" PRId64 " shipped, %" PRIu64
			  " rows, %" PRIu64 " bytes in %.1f ms%s",
			  id, chunk_ns, sh->chunk_rows, clickhouse__bytes_sent(sh->ch) - sent0,
			  (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e6, last ? " (the last)" : "");
		s.pending_until_ns = 0;
		if (last)
			break;
	}
out:
	if (r < 0 && r != -ENOENT)
		attempt_failed(sh, s.id, r);
	ship_session_done(&s);
	return r == -ENOENT ? 0 : r;
}

/* One round: the tables if not made yet, then every session not shipped whole. */
static int ship_round(struct shipper *sh)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	_cleanup_free_ int64_t *ids = NULL;
	size_t n = 0, cap = 0;
	int rc, r;

	if (!sh->tables_ready) {
		r = clickhouse__create_tables(sh->ch);
		if (r < 0) {
			attempt_failed(sh, 0, r);
			return r;
		}
		sh->tables_ready = true;
	}
	if (prepare(sh,
		    "SELECT s.id FROM sessions s LEFT JOIN fleet_cursors c ON "
		    "c.session_id = s.id AND c.sink = 'clickhouse' "
		    "WHERE coalesce(c.done, 0) = 0 ORDER BY s.id",
		    "sessions", &st) < 0)
		return -EIO;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		r = grow_array((void **)&ids, &cap, n, sizeof(*ids));
		if (r < 0)
			return r;
		ids[n++] = sqlite3_column_int64(st, 0);
	}
	if (rc != SQLITE_DONE)
		return sql_failed(sh, "sessions");
	sqlite3_finalize(TAKE_PTR(st));
	for (size_t i = 0; i < n; i++) {
		r = ship_session(sh, ids[i]);
		if (r < 0)
			return r; /* the server is likely down for the next ones too */
		if (on_cancel(sh))
			return -ECANCELED;
	}
	if (sh->failing)
		log_info("fleet: ClickHouse at %s: shipping again", clickhouse__url(sh->ch));
	sh->failing = false;
	return 0;
}

static void *shipper_main(void *arg)
{
	struct shipper *sh = arg;
	uint64_t backoff_ns = 0, interval_ns = (uint64_t)sh->interval_s * NSEC_PER_SEC;
	bool last = false;

	for (;;) {
		uint64_t wait_ns;
		int r = ship_round(sh);

		if (last)
			break;
		backoff_ns =
		    r < 0 ? MIN(backoff_ns ? backoff_ns * 2 : NSEC_PER_SEC, interval_ns) : 0;
		wait_ns = r < 0 ? backoff_ns : interval_ns;
		pthread_mutex_lock(&sh->worker.lock);
		worker_thread__wait(&sh->worker, now_ns(CLOCK_MONOTONIC) + wait_ns);
		/* A kick during a backoff waits for the backoff: the server was down. */
		sh->worker.kicked = false;
		last = sh->worker.stop;
		pthread_mutex_unlock(&sh->worker.lock);
	}
	return NULL;
}

int shipper__new(const struct shipper_settings *set, struct shipper **ret)
{
	_cleanup_free_ char *password = NULL;
	struct shipper *sh;
	char host[256];
	int r;

	if (!set->password && set->password_file && *set->password_file) {
		r = read_first_line(set->password_file, &password);
		if (r < 0)
			return r;
	}
	r = curl_load();
	if (r < 0) {
		log_error("Cannot load libcurl for ClickHouse: %s", curl_load_error());
		return r;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -ENOMEM;
	sh = calloc(1, sizeof(*sh));
	if (!sh)
		return -ENOMEM;
	worker_thread__init(&sh->worker);
	sh->interval_s = MAX(set->interval_s, 1u);
	sh->settle_ns =
	    (int64_t)MAX(set->flush_interval_s, 1u) * NSEC_PER_SEC + (int64_t)SETTLE_AFTER_FLUSH_NS;
	if (set->host_name && *set->host_name) {
		snprintf(host, sizeof(host), "%s", set->host_name);
	} else if (gethostname(host, sizeof(host)) < 0) {
		snprintf(host, sizeof(host), "localhost");
	}
	host[sizeof(host) - 1] = '\0';
	sh->host = strdup(host);
	sh->q_host = sh->host ? clickhouse__quote(sh->host) : NULL;
	if (!sh->host || !sh->q_host) {
		r = -ENOMEM;
		goto fail;
	}
	r = clickhouse__new(set->url, set->database && *set->database ? set->database : "profd",
			    set->user, set->password ? set->password : password, on_cancel, sh,
			    &sh->ch);
	if (r >= 0)
		r = clickhouse__set_ca_file(sh->ch, set->ca_file);
	if (r < 0)
		goto fail;
	if (password)
		explicit_bzero(password, strlen(password));
	r = fleet_cursor__open_db(set->db_path, &sh->db);
	if (r < 0)
		goto fail;
	r = worker_thread__start(&sh->worker, shipper_main, sh);
	if (r < 0)
		goto fail;
	*ret = sh;
	return 0;
fail:
	shipper__free(sh);
	return r;
}

void shipper__kick(struct shipper *sh)
{
	if (sh)
		worker_thread__kick(&sh->worker);
}

void shipper__free(struct shipper *sh)
{
	if (!sh)
		return;
	atomic_store(&sh->deadline_mono_ns, now_ns(CLOCK_MONOTONIC) + SHIPPER_STOP_NS);
	worker_thread__stop(&sh->worker);
	caches_clear(sh);
	hashmap__free(&sh->frames);
	hashmap__free(&sh->stacks);
	fleet_buf__done(&sh->body);
	clickhouse__free(sh->ch);
	sqlite3_close_v2(sh->db);
	free(sh->host);
	free(sh->q_host);
	worker_thread__destroy(&sh->worker);
	free(sh);
}
