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
	_cleanup_stmt_ sqlite3_stmt *list = NULL;
	_cleanup_(symbolizer__freep) struct symbolizer *sym = NULL;
	sqlite3 *db = store__db(st);
	int64_t checked = 0, named = 0, remaining = 0;
	uid_t owner;
	int rc, r;

	r = store__session_uid(st, session_id, &owner);
	if (r < 0)
		return r;

	sym = symbolizer__new_with(debuginfod, getenv("PROFD_DEBUG_PATH"));
	if (!sym)
		return -ENOMEM;
	if (sqlite3_prepare_v2(
		db,
		"SELECT DISTINCT f.id, f.module, f.build_id, f.rel_addr FROM samples sa "
		"JOIN stack_frames sf ON sf.stack_id = sa.stack_id "
		"JOIN frames f ON f.id = sf.frame_id "
		"WHERE sa.session_id = ?1 AND f.function IS NULL AND f.kind = 'user' "
		"AND f.inline_depth = 0",
		-1, &list, NULL) != SQLITE_OK)
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
		if (store__frame_name(st, sqlite3_column_int64(list, 0), fi[n - 1].function,
				      fi[n - 1].file, fi[n - 1].line) < 0) {
			rc = SQLITE_ERROR;
			break;
		}
		named++;
	}
	if (rc != SQLITE_DONE) {
		store__rollback(st);
		return -EIO;
	}
	remaining = checked - named;
	if (store__session_frames_named(st, session_id, (uint64_t)named) < 0 ||
	    store__commit(st) < 0) {
		store__rollback(st);
		return -EIO;
	}
	*ret = json_pack("{s:I, s:I, s:I, s:I}", "session", (json_int_t)session_id,
			 "frames_checked", (json_int_t)checked, "frames_named", (json_int_t)named,
			 "unsymbolized_frames", (json_int_t)remaining);
	return *ret ? 0 : -ENOMEM;
}
