/* resymbolize.c - fill in names of stored frames from debug info found later. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "symbols/resymbolize.h"
#include "symbols/symbolize.h"
#include "util.h"
#include "store/sqlite_util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct symbolizer *, symbolizer__free)

#define MAX_INLINE 8

int resymbolize__session(struct store *st, int64_t session_id, bool debuginfod, json_t **ret)
{
	_cleanup_stmt_ sqlite3_stmt *list = NULL, *update = NULL, *count = NULL;
	_cleanup_(symbolizer__freep) struct symbolizer *sym = NULL;
	sqlite3 *db = store__db(st);
	int64_t checked = 0, named = 0, remaining = 0;
	int rc, r;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM sessions WHERE id = ?1", -1, &count, NULL) !=
	    SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(count, 1, session_id);
	rc = sqlite3_step(count);
	if (rc == SQLITE_DONE)
		return -ENOENT;
	if (rc != SQLITE_ROW)
		return -EIO;
	sqlite3_finalize(TAKE_PTR(count));

	sym = symbolizer__new_with(debuginfod, getenv("PROFD_DEBUG_PATH"));
	if (!sym)
		return -ENOMEM;
	if (sqlite3_prepare_v2(db,
			       "SELECT DISTINCT f.id, f.module, f.build_id, f.rel_addr FROM samples sa "
			       "JOIN stack_frames sf ON sf.stack_id = sa.stack_id "
			       "JOIN frames f ON f.id = sf.frame_id "
			       "WHERE sa.session_id = ?1 AND f.function IS NULL AND f.kind = 'user' "
			       "AND f.inline_depth = 0",
			       -1, &list, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db,
			       "UPDATE frames SET function = ?2, file = ?3, line = ?4 WHERE id = ?1",
			       -1, &update, NULL) != SQLITE_OK)
		return -EIO;
	sqlite3_bind_int64(list, 1, session_id);

	r = store__begin(st);
	if (r < 0)
		return r;
	while ((rc = sqlite3_step(list)) == SQLITE_ROW) {
		struct frame_info fi[MAX_INLINE];
		const char *module = (const char *)sqlite3_column_text(list, 1);
		const char *build_id = (const char *)sqlite3_column_text(list, 2);
		int n;

		checked++;
		if (!module || module[0] != '/')
			continue; /* [unknown], JIT maps, [vdso]: no file to read */
		n = symbolizer__file(sym, module, build_id ? build_id : "",
				     (uint64_t)sqlite3_column_int64(list, 3), fi, MAX_INLINE);
		if (n == -ENOMEM) {
			store__rollback(st);
			return n;
		}
		if (n <= 0 || !fi[n - 1].function)
			continue;
		/* The frame row is the depth-0 one: the function the symbol table names. */
		sqlite3_bind_int64(update, 1, sqlite3_column_int64(list, 0));
		sqlite3_bind_text(update, 2, fi[n - 1].function, -1, SQLITE_TRANSIENT);
		if (fi[n - 1].file)
			sqlite3_bind_text(update, 3, fi[n - 1].file, -1, SQLITE_TRANSIENT);
		else
			sqlite3_bind_null(update, 3);
		if (fi[n - 1].line > 0)
			sqlite3_bind_int(update, 4, fi[n - 1].line);
		else
			sqlite3_bind_null(update, 4);
		rc = sqlite3_step(update);
		sqlite3_reset(update);
		sqlite3_clear_bindings(update);
		if (rc != SQLITE_DONE)
			break;
		named++;
	}
	if (rc != SQLITE_DONE) {
		store__rollback(st);
		return -EIO;
	}
	remaining = checked - named;
	if (sqlite3_prepare_v2(db,
			       "UPDATE sessions SET unsymbolized_frames = MAX(0, unsymbolized_frames - ?2) "
			       "WHERE id = ?1",
			       -1, &count, NULL) != SQLITE_OK) {
		store__rollback(st);
		return -EIO;
	}
	sqlite3_bind_int64(count, 1, session_id);
	sqlite3_bind_int64(count, 2, named);
	if (sqlite3_step(count) != SQLITE_DONE || store__commit(st) < 0) {
		store__rollback(st);
		return -EIO;
	}
	*ret = json_pack("{s:I, s:I, s:I, s:I}", "session", (json_int_t)session_id, "frames_checked",
			 (json_int_t)checked, "frames_named", (json_int_t)named,
			 "unsymbolized_frames", (json_int_t)remaining);
	return *ret ? 0 : -ENOMEM;
}
