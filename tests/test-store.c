/* test-store.c - migrations on empty, existing, newer and corrupt databases; write paths. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "store.h"

extern const char *const store_migrations[];

static long long query_int(struct store *st, const char *sql)
{
	sqlite3_stmt *stmt;
	long long v = -1;

	if (sqlite3_prepare_v2(store__db(st), sql, -1, &stmt, NULL) != SQLITE_OK)
		return -2;
	if (sqlite3_step(stmt) == SQLITE_ROW)
		v = sqlite3_column_int64(stmt, 0);
	sqlite3_finalize(stmt);
	return v;
}

int main(void)
{
	char dir[] = "/tmp/test-store-XXXXXX", path[128], bad[128];
	struct store *st = NULL;
	struct stat sb;
	int64_t sid, f1, f2, f3, s1, s2;
	int fd;

	if (!mkdtemp(dir))
		return 99;
	snprintf(path, sizeof(path), "%s/profd.db", dir);

	/* Empty database: every migration applied, WAL, not world-readable. */
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(store__schema_version(st), store__latest_version());
	CHECK(store__latest_version() >= 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sqlite_master WHERE name IN "
				   "('sessions','threads','mappings','frames','stacks',"
				   "'stack_frames','samples','windows')"),
		     8);
	CHECK_INT_EQ(stat(path, &sb), 0);
	CHECK_INT_EQ(sb.st_mode & 0077, 0);

	/* Writes: a session, deduplicated frames and stacks, samples that add up. */
	struct store_session row = { .pid = 1234, .pid_start_ticks = 99, .comm = "spin",
				     .uid = 0, .event = "cpu-clock", .events = "cpu",
				     .freq_hz = 99, .unwind = "fp", .started_at_ns = 1000 };
	struct frame_info a = { .module = "/bin/a", .build_id = "ab", .rel_addr = 0x10,
				.function = "main", .file = "a.c", .line = 3 };
	struct frame_info b = { .module = "/bin/a", .build_id = "ab", .rel_addr = 0x20 };
	struct frame_info k = { .kernel = true, .module = "[kernel.kallsyms]", .build_id = "",
				.rel_addr = 0xffffffff81000000ULL, .function = "schedule" };
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(store__frame_id(st, &a, &f1), 0);
	CHECK_INT_EQ(store__frame_id(st, &b, &f2), 0);
	CHECK_INT_EQ(store__frame_id(st, &k, &f3), 0);
	CHECK(f1 != f2 && f2 != f3);
	CHECK_INT_EQ(store__frame_id(st, &a, &s1), 0);
	CHECK_INT_EQ(s1, f1);
	int64_t ids1[] = { f3, f2, f1 }, ids2[] = { f2, f1 };
	CHECK_INT_EQ(store__stack_id(st, ids1, 3, false, true, &s1), 0);
	CHECK_INT_EQ(store__stack_id(st, ids2, 2, false, false, &s2), 0);
	CHECK(s1 != s2);
	CHECK_INT_EQ(store__stack_id(st, ids1, 3, false, true, &f1), 0);
	CHECK_INT_EQ(f1, s1);
	CHECK_INT_EQ(store__sample_add(st, sid, 1000, 7, s1, 5, 0), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 1000, 7, s1, 2, 0), 0);
	struct store_counts c = { .samples = 7 };
	CHECK_INT_EQ(store__window_add(st, sid, 1000, &c), 0);
	CHECK_INT_EQ(store__session_add_counts(st, sid, &c), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	CHECK_INT_EQ(query_int(st, "SELECT count FROM samples"), 7);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM stack_frames"), 5);
	CHECK_INT_EQ(query_int(st, "SELECT frame_id FROM stack_frames WHERE pos = 0 AND "
				   "stack_id = (SELECT MIN(id) FROM stacks)"),
		     f3);
	CHECK_INT_EQ(query_int(st, "SELECT samples FROM sessions"), 7);
	CHECK_INT_EQ(query_int(st, "SELECT sum(reached_root) FROM stacks"), 1);

	/* A rolled-back transaction leaves nothing behind. */
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__sample_add(st, sid, 2000, 7, s1, 100, 0), 0);
	store__rollback(st);
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM samples"), 7);
	store__close(st);

	/* Existing database: reopened, migrations not re-applied, data kept;
	 * the session left 'running' is marked interrupted. */
	CHECK_INT_EQ(store__open(path, &st), 0);
	CHECK_INT_EQ(store__schema_version(st), store__latest_version());
	CHECK_INT_EQ(query_int(st, "SELECT sum(count) FROM samples"), 7);
	CHECK_INT_EQ(store__mark_interrupted(st), 1);
	CHECK_INT_EQ(query_int(st, "SELECT count(*) FROM sessions WHERE state = 'ended' AND "
				   "end_reason = 'interrupted' AND ended_at_ns = 1000001000"),
		     1);
	CHECK_INT_EQ(store__mark_interrupted(st), 0);

	/* A database at schema 1 with data, as the first release left it: migrated
	 * in place, data kept, new columns at their defaults. */
	{
		char old[160];
		sqlite3 *db;

		store__close(st);
		snprintf(old, sizeof(old), "%s/v1.db", dir);
		CHECK_INT_EQ(sqlite3_open(old, &db), SQLITE_OK);
		CHECK_INT_EQ(sqlite3_exec(db, store_migrations[0], NULL, NULL, NULL), SQLITE_OK);
		CHECK_INT_EQ(sqlite3_exec(db,
					  "PRAGMA user_version = 1;"
					  "INSERT INTO sessions (pid, pid_start_ticks, comm, uid, event, "
					  "events, freq_hz, started_at_ns, state, samples) VALUES "
					  "(9, 1, 'old', 0, 'cpu-clock', 'cpu', 99, 5, 'ended', 42);"
					  "INSERT INTO stacks (frame_ids, depth) VALUES (x'01', 1);",
					  NULL, NULL, NULL),
			     SQLITE_OK);
		sqlite3_close(db);
		CHECK_INT_EQ(store__open(old, &st), 0);
		CHECK_INT_EQ(store__schema_version(st), store__latest_version());
		CHECK_INT_EQ(query_int(st, "SELECT samples FROM sessions WHERE comm = 'old'"), 42);
		CHECK_INT_EQ(query_int(st, "SELECT stack_bytes + unwind_dropped FROM sessions"), 0);
		CHECK_INT_EQ(query_int(st, "SELECT reached_root FROM stacks"), 0);
		store__close(st);
		CHECK_INT_EQ(store__open(path, &st), 0);
	}

	/* A database from a newer profd is refused, not downgraded. */
	CHECK_INT_EQ(sqlite3_exec(store__db(st), "PRAGMA user_version = 999", NULL, NULL, NULL),
		     SQLITE_OK);
	store__close(st);
	CHECK_INT_EQ(store__open(path, &st), -EPROTO);
	store__close(st);

	/* A file that is not a database: an error, and the file is left alone. */
	snprintf(bad, sizeof(bad), "%s/not-a-db", dir);
	fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(write(fd, "this is not an SQLite database, just text that must stay\n", 58) == 58);
	close(fd);
	CHECK_INT_EQ(store__open(bad, &st), -EIO);
	store__close(st);
	CHECK_INT_EQ(stat(bad, &sb), 0);
	CHECK_INT_EQ(sb.st_size, 58);

	/* A directory that does not exist. */
	CHECK(store__open("/nonexistent-dir/x/profd.db", &st) == -ENOENT);
	store__close(st);

	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path) != 0)
		return 99;
	return check_exit("test-store");
}
