/* store.c - the SQLite database: open, migrate, transactions, and the daemon's writes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store.h"
#include "collect/cfi_maps.h"
#include "store/store_internal.h"
#include "store/sqlite_util.h"
#include "hashmap.h"
#include "util.h"

extern const char *const store_migrations[];
extern const size_t store_migrations_count;

static const char *const stmt_sql[_STMT_MAX] = {
    [STMT_SESSION_INSERT] =
	"INSERT INTO sessions (pid, pid_start_ticks, comm, exe, uid, event, events, freq_hz, "
	"unwind, duration_ns, started_at_ns, stack_bytes, follow_children, sampled_event, "
	"sampled_event_status, label, offcpu_period_ns, state) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
	"'running')",
    [STMT_SESSION_COUNTS] = "UPDATE sessions SET samples = samples + ?2, "
			    "lost_samples = lost_samples + ?3, "
			    "truncated_stacks = truncated_stacks + ?4, "
			    "missing_user_stacks = missing_user_stacks + ?5, "
			    "unsymbolized_frames = unsymbolized_frames + ?6, "
			    "unwind_dropped = unwind_dropped + ?7, "
			    "frames = frames + ?8, "
			    "limit_dropped_samples = limit_dropped_samples + ?9 WHERE id = ?1",
    [STMT_SESSION_PYTHON] = "UPDATE sessions SET python = ?2, python_version = ?3 WHERE id = ?1",
    [STMT_SESSION_PYTHON_COUNTS] = "UPDATE sessions SET python_samples = python_samples + ?2, "
				   "python_unmerged = python_unmerged + ?3 WHERE id = ?1",
    [STMT_SESSION_TABLE_WALK] = "UPDATE sessions SET table_walked = ?2, table_fallbacks = ?3 "
				"WHERE id = ?1",
    [STMT_SESSION_OFFCPU_TABLE_WALK] = "UPDATE sessions SET offcpu_table_walked = ?2, "
				       "offcpu_table_fallbacks = ?3 WHERE id = ?1",
    [STMT_SESSION_END] = "UPDATE sessions SET state = 'ended', end_reason = ?2, "
			 "ended_at_ns = ?3 WHERE id = ?1",
    [STMT_WINDOW_ADD] = "INSERT INTO windows (session_id, window_ns, samples, lost_samples, "
			"truncated_stacks, missing_user_stacks) VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
			"ON CONFLICT (session_id, window_ns) DO UPDATE SET "
			"samples = samples + excluded.samples, "
			"lost_samples = lost_samples + excluded.lost_samples, "
			"truncated_stacks = truncated_stacks + excluded.truncated_stacks, "
			"missing_user_stacks = missing_user_stacks + excluded.missing_user_stacks",
    [STMT_THREAD_UPSERT] =
	"INSERT INTO threads (session_id, tid, name, first_seen_ns, last_seen_ns, samples, pid, "
	"exited_at_ns) VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7) "
	"ON CONFLICT (session_id, tid) DO UPDATE SET "
	"name = excluded.name, last_seen_ns = MAX(last_seen_ns, excluded.last_seen_ns), "
	"samples = samples + excluded.samples, "
	"exited_at_ns = coalesce(excluded.exited_at_ns, exited_at_ns)",
    [STMT_MAPPING_INSERT] = "INSERT INTO mappings (session_id, start_addr, end_addr, "
			    "file_offset, path, build_id, pid) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [STMT_FRAME_FIND] = "SELECT id FROM frames WHERE kind = ?1 AND module = ?2 AND "
			"build_id = ?3 AND rel_addr = ?4 AND inline_depth = ?8",
    [STMT_FRAME_INSERT] = "INSERT INTO frames (kind, module, build_id, rel_addr, function, "
			  "file, line, inline_depth) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [STMT_STACK_FIND] = "SELECT id FROM stacks WHERE hash = ?2 AND frame_ids = ?1",
    [STMT_STACK_INSERT] = "INSERT INTO stacks (frame_ids, hash, depth, truncated, reached_root, "
			  "frame_ids_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [STMT_SAMPLE_ADD] = "INSERT INTO samples (session_id, window_ns, tid, stack_id, count) "
			"VALUES (?1, ?2, ?3, ?4, ?5) "
			"ON CONFLICT (session_id, window_ns, tid, stack_id) DO UPDATE SET "
			"count = count + excluded.count",
    [STMT_EVENT_SAMPLE_ADD] =
	"INSERT INTO event_samples (session_id, window_ns, tid, stack_id, count) "
	"VALUES (?1, ?2, ?3, ?4, ?5) "
	"ON CONFLICT (session_id, window_ns, tid, stack_id) DO UPDATE SET "
	"count = count + excluded.count",
    [STMT_OFFCPU_ADD] =
	"INSERT INTO offcpu (session_id, window_ns, pid, tid, stack_id, state, count, "
	"total_ns) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
	"ON CONFLICT (session_id, window_ns, tid, stack_id, state) DO UPDATE SET "
	"count = count + excluded.count, total_ns = total_ns + excluded.total_ns",
    [STMT_COUNTER_ADD] =
	"INSERT INTO thread_counters (session_id, window_ns, tid, counter, value, status) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
	"ON CONFLICT (session_id, window_ns, tid, counter) DO UPDATE SET "
	"value = CASE WHEN excluded.status = 'ok' THEN coalesce(value, 0) + excluded.value "
	"ELSE value END, status = excluded.status",
    [STMT_SESSION_COUNTER] = "INSERT OR REPLACE INTO session_counters (session_id, counter, "
			     "status) VALUES (?1, ?2, ?3)",
    [STMT_SESSION_OFFCPU_LOST] = "UPDATE sessions SET offcpu_lost = offcpu_lost + ?2 WHERE id = ?1",
    [STMT_MEMORY_ADD] = "INSERT OR REPLACE INTO memory_samples (session_id, time_ns, pid, "
			"rss_bytes, pss_bytes, anon_bytes, file_bytes, shmem_bytes, swap_bytes, "
			"map_heap_bytes, map_anon_bytes, map_stack_bytes, map_shmem_bytes, "
			"map_file_bytes, map_other_bytes) "
			"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
    [STMT_VM_CHANGE_ADD] =
	"INSERT INTO vm_changes (session_id, pid, stack_id, change, mapping, events, bytes) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
	"ON CONFLICT (session_id, pid, stack_id, change, mapping) DO UPDATE SET "
	"events = events + excluded.events, bytes = bytes + excluded.bytes",
    [STMT_SESSION_VM] = "UPDATE sessions SET vm_events = ?2, vm_unsent = ?3, "
			"vm_fault_period = ?4 WHERE id = ?1",
    [STMT_ALLOCATION_ADD] =
	"INSERT INTO allocations (session_id, pid, tid, stack_id, func, size_bytes, "
	"weight_bytes, address, alloc_ns, free_ns, untracked) "
	"VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    [STMT_ALLOCATION_FREED] = "UPDATE allocations SET free_ns = ?2 WHERE id = ?1",
    [STMT_SESSION_MALLOC] = "UPDATE sessions SET malloc_calls = ?2, free_calls = ?3, "
			    "malloc_bytes = ?4, malloc_sampled = ?5, malloc_lost = ?6, "
			    "malloc_stopped_ns = ?7 WHERE id = ?1",
    [STMT_SESSION_MEMORY_CONFIG] = "UPDATE sessions SET memory_interval_ns = ?2, "
				   "malloc_sample_bytes = ?3, malloc_probes = ?4, "
				   "malloc_max_hits_per_s = ?5 WHERE id = ?1",
};

sqlite3 *store__db(struct store *st)
{
	return st->db;
}

const char *store__errmsg(struct store *st)
{
	return st && st->db ? sqlite3_errmsg(st->db) : "out of memory";
}

int store__latest_version(void)
{
	return (int)store_migrations_count;
}

/*
 * store__exec() - run @sql (one or more statements, no rows wanted) on the
 * store's connection. Returns 0 or -EIO (store__errmsg()).
 */
int store__exec(struct store *st, const char *sql)
{
	return sqlite3_exec(st->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -EIO;
}

/* Rows that break a foreign key (PRAGMA foreign_key_check): 0, > 0, or -EIO. */
static int foreign_key_violations(struct store *st)
{
	sqlite3_stmt *stmt;
	int n = 0, rc;

	if (sqlite3_prepare_v2(st->db, "PRAGMA foreign_key_check", -1, &stmt, NULL) != SQLITE_OK)
		return -EIO;
	while ((rc = sqlite3_step(stmt)) == SQLITE_ROW)
		n++;
	sqlite3_finalize(stmt);
	return rc == SQLITE_DONE ? n : -EIO;
}

/*
 * store__query_int64() - the one integer @sql (a PRAGMA, a count) returns;
 * -EIO if it returns none or fails.
 */
int64_t store__query_int64(struct store *st, const char *sql)
{
	sqlite3_stmt *stmt;
	int64_t v = -EIO;

	if (sqlite3_prepare_v2(st->db, sql, -1, &stmt, NULL) != SQLITE_OK)
		return -EIO;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

int store__schema_version(struct store *st)
{
	return (int)store__query_int64(st, "PRAGMA user_version");
}

/*
 * stack_hash() - stacks.hash of a frame_ids blob: FNV-1a 64 over its bytes,
 * as a signed 64-bit integer (schema/0018-stack-hash.sql).
 */
static int64_t stack_hash(const void *blob, size_t bytes)
{
	return (int64_t)fnv1a64(HASH64_INIT, blob, bytes);
}

/* profd_stack_hash(frame_ids): stack_hash() in SQL, for fill_stack_hashes().
 * NULL for a NULL argument. */
static void sql_stack_hash(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void)argc;
	if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
		sqlite3_result_null(ctx);
		return;
	}
	sqlite3_result_int64(ctx, stack_hash(sqlite3_value_blob(argv[0]),
					     (size_t)sqlite3_value_bytes(argv[0])));
}

/*
 * The stacks whose hash is NULL (copied by schema/0018, or inserted by
 * another program) get it, so that store__stack_id() finds them. Uses the
 * index on hash: next to nothing when every row has one. 0 or -EIO.
 */
static int fill_stack_hashes(struct store *st)
{
	return store__exec(st, "UPDATE stacks SET hash = profd_stack_hash(frame_ids) "
			       "WHERE hash IS NULL");
}

/*
 * Apply migrations user_version+1 .. latest, each atomically with its version
 * bump. Foreign keys are off meanwhile, since a migration may rebuild a
 * table others refer to (schema/0003), and checked before each COMMIT.
 */
static int migrate(struct store *st)
{
	int version = store__schema_version(st), r = 0;
	char pragma[64];

	if (version < 0)
		return version;
	if (version > (int)store_migrations_count)
		return -EPROTO;
	if (version == (int)store_migrations_count)
		return 0;
	/* A no-op inside a transaction, so before BEGIN. */
	if (store__exec(st, "PRAGMA foreign_keys = OFF") < 0)
		return -EIO;
	for (int v = version; v < (int)store_migrations_count && r == 0; v++) {
		if (store__exec(st, "BEGIN IMMEDIATE") < 0) {
			r = -EIO;
			break;
		}
		snprintf(pragma, sizeof(pragma), "PRAGMA user_version = %d", v + 1);
		if (store__exec(st, store_migrations[v]) < 0 || store__exec(st, pragma) < 0 ||
		    foreign_key_violations(st) != 0) {
			store__rollback(st);
			r = -EIO;
			break;
		}
		if (store__exec(st, "COMMIT") < 0)
			r = -EIO;
	}
	if (store__exec(st, "PRAGMA foreign_keys = ON") < 0 && r == 0)
		r = -EIO;
	return r;
}

int store__init_library(void)
{
	/* sqlite.org/c3ref/c_config_covering_index_scan.html#sqliteconfigmemstatus */
	return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK ? 0 : -EBUSY;
}

int store__open(const char *path, struct store **ret_store)
{
	struct store *st;
	int r, fd;

	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	*ret_store = st;

	/* Create the file ourselves so that it is never world-readable. */
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	/* Each user's sessions are private (authz.h): a database made readable
	 * by others (copied, restored from a backup) is closed to them again. */
	{
		struct stat stbuf;

		if (fstat(fd, &stbuf) == 0 && (stbuf.st_mode & 0077) && fchmod(fd, 0600) < 0) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	close(fd);

	if (sqlite3_open_v2(path, &st->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			    NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_busy_timeout(st->db, 5000);
	sqlite3_extended_result_codes(st->db, 1);
	if (sqlite3_create_function(st->db, "profd_stack_hash", 1,
				    SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY, NULL,
				    sql_stack_hash, NULL, NULL) != SQLITE_OK)
		return -EIO;
	/* WAL: readers do not block the writer; synchronous=NORMAL is durable
	 * against application crashes, and may lose the last commit only on a
	 * power loss (sqlite.org/pragma.html#pragma_synchronous). */
	/* A new database gives deleted data back (retention). Effective only
	 * before the file has a header (so before journal_mode): a no-op on an
	 * existing database, which store__enable_incremental_vacuum() converts. */
	if (store__exec(st, "PRAGMA auto_vacuum = INCREMENTAL") < 0)
		return -EIO;
	if (store__exec(st, "PRAGMA journal_mode = WAL") < 0 ||
	    store__exec(st, "PRAGMA synchronous = NORMAL") < 0 ||
	    store__exec(st, "PRAGMA foreign_keys = ON") < 0)
		return -EIO;
	r = migrate(st);
	if (r < 0)
		return r;
	if (fill_stack_hashes(st) < 0)
		return -EIO;
	for (int i = 0; i < _STMT_MAX; i++)
		if (sqlite3_prepare_v3(st->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
				       &st->stmt[i], NULL) != SQLITE_OK)
			return -EIO;
	return 0;
}

void store__close(struct store *st)
{
	if (!st)
		return;
	for (int i = 0; i < _STMT_MAX; i++)
		sqlite3_finalize(st->stmt[i]);
	for (int i = 0; i < STORE_LAZY_MAX; i++)
		sqlite3_finalize(st->lazy[i]);
	sqlite3_close(st->db);
	free(st);
}

int store__begin(struct store *st)
{
	return store__exec(st, "BEGIN IMMEDIATE");
}

/* fk_on() - enforce foreign keys again after store__begin_flush(). */
static void fk_on(struct store *st)
{
	if (st->fk_off && store__exec(st, "PRAGMA foreign_keys = ON") == 0)
		st->fk_off = false;
}

/*
 * store__begin_flush() - begin the transaction of a flush, with foreign keys
 * not enforced until store__commit() or store__rollback() ends it.
 *
 * A flush only inserts and adds to rows (no DELETE, so no cascade), and
 * every id it writes came from this store: the session's row (committed at
 * attach), and stack and frame ids from store__stack_id()/store__frame_id()
 * in this transaction or a committed one (a failed flush forgets those of
 * its own: session__flush_failed()). SQLite would check each reference
 * with a lookup of the parent row, four per sample row with the
 * sample_totals trigger: on deep-nofp at 999 Hz (~1,200 sample rows a
 * second) not checking them took the daemon from 6.2 to 5.6 us per sample
 * (mean of five 20 s runs each). foreign_keys is a no-op inside a
 * transaction (sqlite.org/pragma.html#pragma_foreign_keys), so it is set
 * before BEGIN and set back after the end.
 * Setting a flag pragma expires every prepared statement of the connection
 * (OP_Expire, SQLite's pragma.c), so each flush prepares again the
 * statements it runs, their triggers included: ~15 a flush, 4.3% of the
 * daemon's CPU on a PyTorch loop at 999 Hz (perf record -g; counted with a
 * uprobe on sqlite3Reprepare). Leaving foreign keys off between flushes,
 * on again only for other transactions, was within noise in an A/B (three
 * 20 s runs each, 17.9-20.1 against 15.7-18.4 us/sample) and would leave
 * writes outside transactions unchecked: not done.
 * Returns 0 or -EIO (foreign keys then on again).
 */
int store__begin_flush(struct store *st)
{
	if (store__exec(st, "PRAGMA foreign_keys = OFF") < 0)
		return -EIO;
	st->fk_off = true;
	if (store__begin(st) < 0) {
		fk_on(st);
		return -EIO;
	}
	return 0;
}

int store__commit(struct store *st)
{
	if (store__exec(st, "COMMIT") < 0)
		return -EIO;
	fk_on(st);
	return 0;
}

void store__rollback(struct store *st)
{
	if (!sqlite3_get_autocommit(st->db))
		(void)store__exec(st, "ROLLBACK");
	fk_on(st);
}

/* Run a prepared statement to completion (no rows expected) and reset it. */
/*
 * store__step_done() - run @stmt, a statement that returns no row, and make
 * it ready for the next bindings. Returns 0 or -EIO.
 */
int store__step_done(sqlite3_stmt *stmt)
{
	int rc = sqlite3_step(stmt);

	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	return rc == SQLITE_DONE ? 0 : -EIO;
}

/* Run a statement expected to return at most one integer; -ENOENT if none. */
static int step_id(sqlite3_stmt *stmt, int64_t *ret_id)
{
	int rc = sqlite3_step(stmt), r = -EIO;

	if (rc == SQLITE_ROW) {
		*ret_id = sqlite3_column_int64(stmt, 0);
		r = 0;
	} else if (rc == SQLITE_DONE) {
		r = -ENOENT;
	}
	sqlite3_reset(stmt);
	sqlite3_clear_bindings(stmt);
	return r;
}

/*
 * Bind the counts a window keeps (samples, lost, truncated, missing user
 * stacks: the first four of @c) to parameters @first.. of @stmt, in that
 * order: a window's row and the session's totals add them the same way.
 */
static void bind_window_counts(sqlite3_stmt *stmt, int first, const struct store_counts *c)
{
	sqlite3_bind_int64(stmt, first, (int64_t)c->samples);
	sqlite3_bind_int64(stmt, first + 1, (int64_t)c->lost_samples);
	sqlite3_bind_int64(stmt, first + 2, (int64_t)c->truncated_stacks);
	sqlite3_bind_int64(stmt, first + 3, (int64_t)c->missing_user_stacks);
}

static void bind_text_or_null(sqlite3_stmt *stmt, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(stmt, i);
}

int store__mark_interrupted(struct store *st)
{
	const char *sql =
	    "UPDATE sessions SET state = 'ended', end_reason = 'interrupted', ended_at_ns = "
	    "COALESCE((SELECT MAX(window_ns) + 1000000000 FROM windows "
	    "WHERE session_id = sessions.id), started_at_ns) WHERE state = 'running'";

	if (store__exec(st, sql) < 0)
		return -EIO;
	return sqlite3_changes(st->db);
}

void store__set_fleet_sinks(struct store *st, unsigned sinks)
{
	st->fleet_sinks = sinks;
}

int store__session_insert(struct store *st, const struct store_session *s, int64_t *ret_id)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_INSERT];
	int r;

	sqlite3_bind_int(stmt, 1, s->pid);
	sqlite3_bind_int64(stmt, 2, (int64_t)s->pid_start_ticks);
	bind_text_or_null(stmt, 3, s->comm);
	bind_text_or_null(stmt, 4, s->exe);
	sqlite3_bind_int64(stmt, 5, s->uid);
	bind_text_or_null(stmt, 6, s->event);
	bind_text_or_null(stmt, 7, s->events);
	sqlite3_bind_int(stmt, 8, (int)s->freq_hz);
	bind_text_or_null(stmt, 9, s->unwind);
	if (s->duration_ns)
		sqlite3_bind_int64(stmt, 10, (int64_t)s->duration_ns);
	sqlite3_bind_int64(stmt, 11, (int64_t)s->started_at_ns);
	sqlite3_bind_int(stmt, 12, (int)s->stack_bytes);
	sqlite3_bind_int(stmt, 13, s->follow_children);
	bind_text_or_null(stmt, 14, s->sampled_event);
	bind_text_or_null(stmt, 15, s->sampled_event_status);
	bind_text_or_null(stmt, 16, s->label && *s->label ? s->label : NULL);
	if (s->offcpu_period_ns)
		sqlite3_bind_int64(stmt, 17, (int64_t)s->offcpu_period_ns);
	r = store__step_done(stmt);
	if (r < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(st->db);
	return 0;
}

int store__session_add_counts(struct store *st, int64_t id, const struct store_counts *c)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_COUNTS];

	sqlite3_bind_int64(stmt, 1, id);
	bind_window_counts(stmt, 2, c);
	sqlite3_bind_int64(stmt, 6, (int64_t)c->unsymbolized_frames);
	sqlite3_bind_int64(stmt, 7, (int64_t)c->unwind_dropped);
	sqlite3_bind_int64(stmt, 8, (int64_t)c->frames);
	sqlite3_bind_int64(stmt, 9, (int64_t)c->limit_dropped);
	return store__step_done(stmt);
}

int store__session_python(struct store *st, int64_t id, const char *status, const char *version)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_PYTHON];

	sqlite3_bind_int64(stmt, 1, id);
	bind_text_or_null(stmt, 2, status);
	bind_text_or_null(stmt, 3, version);
	return store__step_done(stmt);
}

int store__session_add_python(struct store *st, int64_t id, uint64_t samples, uint64_t unmerged)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_PYTHON_COUNTS];

	sqlite3_bind_int64(stmt, 1, id);
	sqlite3_bind_int64(stmt, 2, (int64_t)samples);
	sqlite3_bind_int64(stmt, 3, (int64_t)unmerged);
	return store__step_done(stmt);
}

int store__session_table_walk(struct store *st, int64_t id, bool offcpu,
			      const struct store_table_walk *w)
{
	sqlite3_stmt *stmt =
	    st->stmt[offcpu ? STMT_SESSION_OFFCPU_TABLE_WALK : STMT_SESSION_TABLE_WALK];
	_cleanup_(json_decrefp) json_t *o = json_object();
	_cleanup_free_ char *text = NULL;

	if (!o)
		return -ENOMEM;
	for (unsigned i = 0; i < CFI_STOP_NR; i++) {
		/* walked samples stopped at end or max_frames: those are not fallbacks */
		if (i == CFI_STOP_END || i == CFI_STOP_MAX_FRAMES)
			continue;
		if (json_object_set_new(o, cfi_walk_stop_name(i),
					json_integer((json_int_t)w->fallbacks[i])) < 0)
			return -ENOMEM;
	}
	text = json_dumps(o, JSON_COMPACT);
	if (!text)
		return -ENOMEM;
	sqlite3_bind_int64(stmt, 1, id);
	sqlite3_bind_int64(stmt, 2, (int64_t)w->walked);
	sqlite3_bind_text(stmt, 3, text, -1, SQLITE_TRANSIENT);
	return store__step_done(stmt);
}

int store__session_end(struct store *st, int64_t id, const char *reason, uint64_t ended_at_ns)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_END];

	sqlite3_bind_int64(stmt, 1, id);
	sqlite3_bind_text(stmt, 2, reason, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 3, (int64_t)ended_at_ns);
	return store__step_done(stmt);
}

sqlite3_stmt *store__lazy(struct store *st, unsigned i, const char *sql)
{
	if (i >= STORE_LAZY_MAX)
		return NULL;
	if (!st->lazy[i] && sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT,
					       &st->lazy[i], NULL) != SQLITE_OK)
		return NULL;
	return st->lazy[i];
}

int store__session_uid(struct store *st, int64_t id, uid_t *ret_uid)
{
	_cleanup_stmt_ sqlite3_stmt *stmt = NULL;
	int64_t uid;
	int r;

	if (sqlite3_prepare_v2(st->db, "SELECT uid FROM sessions WHERE id = ?1", -1, &stmt, NULL) !=
	    SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(stmt, 1, id);
	r = step_id(stmt, &uid);
	if (r < 0)
		return r;
	*ret_uid = (uid_t)uid;
	return 0;
}

/*
 * store__frame_name() - name frame @frame_id after the fact (resymbolize):
 * @function, and @file and @line (NULL and 0 when unknown). Returns 0 or
 * -EIO. Does not log.
 */
int store__frame_name(struct store *st, int64_t frame_id, const char *function, const char *file,
		      int line)
{
	sqlite3_stmt *q =
	    store__lazy(st, STORE_LAZY_FRAME_NAME,
			"UPDATE frames SET function = ?2, file = ?3, line = ?4 WHERE id = ?1");

	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, frame_id);
	sqlite3_bind_text(q, 2, function, -1, SQLITE_STATIC);
	if (file)
		sqlite3_bind_text(q, 3, file, -1, SQLITE_STATIC);
	if (line > 0)
		sqlite3_bind_int(q, 4, line);
	return store__step_done(q);
}

/*
 * store__session_frames_named() - @named frames of session @id that had no
 * name got one (resymbolize): they leave its unsymbolized count. Returns 0
 * or -EIO.
 */
int store__session_frames_named(struct store *st, int64_t id, uint64_t named)
{
	sqlite3_stmt *q = store__lazy(st, STORE_LAZY_SESSION_NAMED,
				      "UPDATE sessions SET unsymbolized_frames = "
				      "MAX(0, unsymbolized_frames - ?2) WHERE id = ?1");

	if (!q)
		return -EIO;
	sqlite3_bind_int64(q, 1, id);
	sqlite3_bind_int64(q, 2, (int64_t)named);
	return store__step_done(q);
}

int store__window_add(struct store *st, int64_t session_id, uint64_t window_ns,
		      const struct store_counts *c)
{
	sqlite3_stmt *stmt = st->stmt[STMT_WINDOW_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)window_ns);
	bind_window_counts(stmt, 3, c);
	return store__step_done(stmt);
}

int store__thread_upsert(struct store *st, int64_t session_id, int pid, int tid, const char *name,
			 uint64_t seen_ns, uint64_t samples, uint64_t exited_ns)
{
	sqlite3_stmt *stmt = st->stmt[STMT_THREAD_UPSERT];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int(stmt, 2, tid);
	sqlite3_bind_text(stmt, 3, name, -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(stmt, 4, (int64_t)seen_ns);
	sqlite3_bind_int64(stmt, 5, (int64_t)samples);
	sqlite3_bind_int(stmt, 6, pid);
	if (exited_ns)
		sqlite3_bind_int64(stmt, 7, (int64_t)exited_ns);
	return store__step_done(stmt);
}

int store__mapping_insert(struct store *st, int64_t session_id, int pid, const struct mapping *m)
{
	sqlite3_stmt *stmt = st->stmt[STMT_MAPPING_INSERT];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)m->start);
	sqlite3_bind_int64(stmt, 3, (int64_t)m->end);
	sqlite3_bind_int64(stmt, 4, (int64_t)m->file_offset);
	sqlite3_bind_text(stmt, 5, m->path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 6, m->build_id ? m->build_id : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_int(stmt, 7, pid);
	return store__step_done(stmt);
}

static void bind_frame_key(sqlite3_stmt *stmt, const struct frame_info *f)
{
	sqlite3_bind_text(stmt, 1, f->kernel ? "kernel" : "user", -1, SQLITE_STATIC);
	/* frames.module is NOT NULL: a frame some lookup left without one is
	 * stored as unknown rather than failing the flush of every session */
	sqlite3_bind_text(stmt, 2, f->module ? f->module : "[unknown]", -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(stmt, 3, f->build_id ? f->build_id : "", -1, SQLITE_TRANSIENT);
	sqlite3_bind_int64(stmt, 4, (int64_t)f->rel_addr);
	sqlite3_bind_int(stmt, 8, f->inline_depth);
}

int store__frame_id(struct store *st, const struct frame_info *f, int64_t *ret_id)
{
	sqlite3_stmt *stmt = st->stmt[STMT_FRAME_FIND];
	int r;

	bind_frame_key(stmt, f);
	r = step_id(stmt, ret_id);
	if (r != -ENOENT)
		return r;

	stmt = st->stmt[STMT_FRAME_INSERT];
	bind_frame_key(stmt, f);
	bind_text_or_null(stmt, 5, f->function);
	bind_text_or_null(stmt, 6, f->file);
	if (f->line > 0)
		sqlite3_bind_int(stmt, 7, f->line);
	r = store__step_done(stmt);
	if (r < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(st->db);
	return 0;
}

/*
 * frame_ids_json() - @frame_ids[0..@n) as the JSON array of stacks.frame_ids_json
 * ("[12,7,3]"), what the stack_frames view reads (schema/0020). Malloc'd,
 * NUL-terminated; NULL for out of memory. Frame ids are rowids: >= 1.
 */
static char *frame_ids_json(const int64_t *frame_ids, size_t n)
{
	/* "[" + up to 20 digits and a separator a frame + "]" + NUL. */
	char *json = malloc(n * 21 + 3), *p;

	if (!json)
		return NULL;
	p = json;
	*p++ = '[';
	for (size_t i = 0; i < n; i++) {
		char digits[20];
		uint64_t v = (uint64_t)frame_ids[i];
		int k = 0;

		if (i)
			*p++ = ',';
		do
			digits[k++] = (char)('0' + v % 10);
		while ((v /= 10) != 0);
		while (k)
			*p++ = digits[--k];
	}
	*p++ = ']';
	*p = '\0';
	return json;
}

int store__stack_id(struct store *st, const int64_t *frame_ids, size_t n, bool truncated,
		    bool reached_root, int64_t *ret_id)
{
	sqlite3_stmt *stmt = st->stmt[STMT_STACK_FIND];
	_cleanup_free_ unsigned char *blob = NULL;
	_cleanup_free_ char *json = NULL;
	int64_t hash;
	int r;

	/* Little-endian int64s, whatever the host: the blob is part of the schema. */
	blob = malloc(n * 8 + 1);
	if (!blob)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 8; b++)
			blob[i * 8 + b] = (unsigned char)((uint64_t)frame_ids[i] >> (8 * b));
	hash = stack_hash(blob, n * 8);

	sqlite3_bind_blob(stmt, 1, blob, (int)(n * 8), SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 2, hash);
	r = step_id(stmt, ret_id);
	if (r != -ENOENT)
		return r;

	json = frame_ids_json(frame_ids, n);
	if (!json)
		return -ENOMEM;
	stmt = st->stmt[STMT_STACK_INSERT];
	sqlite3_bind_blob(stmt, 1, blob, (int)(n * 8), SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 2, hash);
	sqlite3_bind_int64(stmt, 3, (int64_t)n);
	sqlite3_bind_int(stmt, 4, truncated);
	sqlite3_bind_int(stmt, 5, reached_root);
	sqlite3_bind_text(stmt, 6, json, -1, SQLITE_STATIC);
	r = store__step_done(stmt);
	if (r < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(st->db);
	return 0;
}

int store__sample_add(struct store *st, int64_t session_id, uint64_t window_ns, int tid,
		      int64_t stack_id, uint64_t count, int event)
{
	sqlite3_stmt *stmt = st->stmt[event ? STMT_EVENT_SAMPLE_ADD : STMT_SAMPLE_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)window_ns);
	sqlite3_bind_int(stmt, 3, tid);
	sqlite3_bind_int64(stmt, 4, stack_id);
	sqlite3_bind_int64(stmt, 5, (int64_t)count);
	return store__step_done(stmt);
}

int store__offcpu_add(struct store *st, int64_t session_id, uint64_t window_ns, int pid, int tid,
		      int64_t stack_id, const char *state, uint64_t count, uint64_t total_ns)
{
	sqlite3_stmt *stmt = st->stmt[STMT_OFFCPU_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)window_ns);
	sqlite3_bind_int(stmt, 3, pid);
	sqlite3_bind_int(stmt, 4, tid);
	sqlite3_bind_int64(stmt, 5, stack_id);
	sqlite3_bind_text(stmt, 6, state, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 7, (int64_t)count);
	sqlite3_bind_int64(stmt, 8, (int64_t)total_ns);
	return store__step_done(stmt);
}

int store__counter_add(struct store *st, int64_t session_id, uint64_t window_ns, int tid,
		       const char *name, const char *status, uint64_t value)
{
	sqlite3_stmt *stmt = st->stmt[STMT_COUNTER_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)window_ns);
	sqlite3_bind_int(stmt, 3, tid);
	sqlite3_bind_text(stmt, 4, name, -1, SQLITE_STATIC);
	if (strcmp(status, "ok") == 0)
		sqlite3_bind_int64(stmt, 5, (int64_t)value);
	sqlite3_bind_text(stmt, 6, status, -1, SQLITE_STATIC);
	return store__step_done(stmt);
}

int store__session_counter(struct store *st, int64_t session_id, const char *name,
			   const char *status)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_COUNTER];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_text(stmt, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 3, status, -1, SQLITE_STATIC);
	return store__step_done(stmt);
}

int store__session_add_offcpu_lost(struct store *st, int64_t session_id, uint64_t lost)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_OFFCPU_LOST];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)lost);
	return store__step_done(stmt);
}

/* Bind @v at @i, or NULL unless @set. */
static void bind_int64_if(sqlite3_stmt *stmt, int i, bool set, uint64_t v)
{
	if (set)
		sqlite3_bind_int64(stmt, i, (int64_t)v);
	else
		sqlite3_bind_null(stmt, i);
}

int store__memory_add(struct store *st, int64_t session_id, const struct store_memory *m)
{
	sqlite3_stmt *stmt = st->stmt[STMT_MEMORY_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)m->time_ns);
	sqlite3_bind_int(stmt, 3, m->pid);
	sqlite3_bind_int64(stmt, 4, (int64_t)m->rss_bytes);
	bind_int64_if(stmt, 5, m->has_pss, m->pss_bytes);
	sqlite3_bind_int64(stmt, 6, (int64_t)m->anon_bytes);
	sqlite3_bind_int64(stmt, 7, (int64_t)m->file_bytes);
	sqlite3_bind_int64(stmt, 8, (int64_t)m->shmem_bytes);
	sqlite3_bind_int64(stmt, 9, (int64_t)m->swap_bytes);
	for (int k = 0; k < MEMORY_MAP_NR_KINDS; k++)
		bind_int64_if(stmt, 10 + k, m->has_maps, (int64_t)m->map_bytes[k]);
	return store__step_done(stmt);
}

int store__vm_change_add(struct store *st, int64_t session_id, const struct store_vm_change *c)
{
	sqlite3_stmt *stmt = st->stmt[STMT_VM_CHANGE_ADD];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int(stmt, 2, c->pid);
	sqlite3_bind_int64(stmt, 3, c->stack_id);
	sqlite3_bind_text(stmt, 4, c->change, -1, SQLITE_STATIC);
	sqlite3_bind_text(stmt, 5, c->mapping, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 6, (int64_t)c->events);
	sqlite3_bind_int64(stmt, 7, c->bytes);
	return store__step_done(stmt);
}

int store__session_vm(struct store *st, int64_t session_id, uint64_t events, uint64_t unsent,
		      unsigned fault_period)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_VM];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)events);
	sqlite3_bind_int64(stmt, 3, (int64_t)unsent);
	sqlite3_bind_int(stmt, 4, (int)fault_period);
	return store__step_done(stmt);
}

int store__allocation_add(struct store *st, int64_t session_id, const struct store_allocation *a,
			  int64_t *ret_id)
{
	sqlite3_stmt *stmt = st->stmt[STMT_ALLOCATION_ADD];
	int r;

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int(stmt, 2, a->pid);
	sqlite3_bind_int(stmt, 3, a->tid);
	sqlite3_bind_int64(stmt, 4, a->stack_id);
	sqlite3_bind_text(stmt, 5, a->func, -1, SQLITE_STATIC);
	sqlite3_bind_int64(stmt, 6, (int64_t)a->size_bytes);
	sqlite3_bind_double(stmt, 7, a->weight_bytes);
	sqlite3_bind_int64(stmt, 8, (int64_t)a->address);
	sqlite3_bind_int64(stmt, 9, (int64_t)a->alloc_ns);
	bind_int64_if(stmt, 10, a->free_ns != 0, a->free_ns);
	sqlite3_bind_int(stmt, 11, a->untracked);
	r = store__step_done(stmt);
	if (r < 0)
		return r;
	*ret_id = sqlite3_last_insert_rowid(st->db);
	return 0;
}

int store__allocation_freed(struct store *st, int64_t id, uint64_t free_ns)
{
	sqlite3_stmt *stmt = st->stmt[STMT_ALLOCATION_FREED];

	sqlite3_bind_int64(stmt, 1, id);
	sqlite3_bind_int64(stmt, 2, (int64_t)free_ns);
	return store__step_done(stmt);
}

int store__session_malloc(struct store *st, int64_t session_id, const struct store_malloc *m)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_MALLOC];

	sqlite3_bind_int64(stmt, 1, session_id);
	sqlite3_bind_int64(stmt, 2, (int64_t)m->malloc_calls);
	sqlite3_bind_int64(stmt, 3, (int64_t)m->free_calls);
	sqlite3_bind_int64(stmt, 4, (int64_t)m->malloc_bytes);
	sqlite3_bind_int64(stmt, 5, (int64_t)m->sampled);
	sqlite3_bind_int64(stmt, 6, (int64_t)m->lost);
	bind_int64_if(stmt, 7, m->stopped_ns != 0, m->stopped_ns);
	return store__step_done(stmt);
}

int store__session_memory_config(struct store *st, int64_t session_id, uint64_t interval_ns,
				 uint64_t sample_bytes, const char *probes, uint64_t max_hits_per_s)
{
	sqlite3_stmt *stmt = st->stmt[STMT_SESSION_MEMORY_CONFIG];

	sqlite3_bind_int64(stmt, 1, session_id);
	bind_int64_if(stmt, 2, interval_ns != 0, interval_ns);
	bind_int64_if(stmt, 3, sample_bytes != 0, sample_bytes);
	bind_text_or_null(stmt, 4, probes);
	bind_int64_if(stmt, 5, sample_bytes != 0, max_hits_per_s);
	return store__step_done(stmt);
}
