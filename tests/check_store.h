/*
 * check_store.h - what the C tests that write through daemon/store/ share: a
 * test database in a temporary directory of its own, removed at the end,
 * and the session row most of them write.
 */
#pragma once

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "store/store.h"

/*
 * test_db_path() - a new temporary directory from @dir (a mkdtemp()
 * template, changed in place) and in @path (@size bytes) the database file
 * to create in it. A failure is a setup error (exit 99).
 */
static inline void test_db_path(char *dir, char *path, size_t size)
{
	if (!mkdtemp(dir) || snprintf(path, size, "%s/profd.db", dir) >= (int)size)
		SETUP_FAIL("cannot make a temporary directory from %s", dir);
}

/*
 * test_db_remove() - remove what test_db_path() made: the database @path,
 * the -wal and -shm files SQLite may leave beside it, and the directory
 * @dir. Call it after store__close(). Errors are ignored.
 */
static inline void test_db_remove(const char *dir, const char *path)
{
	static const char *const suffixes[] = {"", "-wal", "-shm"};
	char file[4096];

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
		if (snprintf(file, sizeof(file), "%s%s", path, suffixes[i]) < (int)sizeof(file))
			unlink(file);
	rmdir(dir);
}

/*
 * test_session_row() - the row of a session of @pid (@comm) sampling
 * @events from @started_ns (CLOCK_REALTIME, ns): cpu-clock at 99 Hz with
 * frame-pointer stacks, uid 0, pid_start_ticks 1. A test that needs another
 * value sets that field on the result. The strings are not copied.
 */
static inline struct store_session test_session_row(int pid, const char *comm, const char *events,
						    uint64_t started_ns)
{
	return (struct store_session){.pid = pid,
				      .pid_start_ticks = 1,
				      .comm = comm,
				      .uid = 0,
				      .event = "cpu-clock",
				      .events = events,
				      .freq_hz = 99,
				      .unwind = "fp",
				      .started_at_ns = started_ns};
}

/*
 * test_frame_id() - store__frame_id() of the user frame @function (NULL:
 * unsymbolized) at @rel_addr in @module, with no build ID and no line
 * info: 0 and its id in *@ret_id, or store__frame_id()'s error.
 */
static inline int test_frame_id(struct store *st, const char *module, uint64_t rel_addr,
				const char *function, int64_t *ret_id)
{
	struct frame_info f = {
	    .module = module, .build_id = "", .rel_addr = rel_addr, .function = function};

	return store__frame_id(st, &f, ret_id);
}
