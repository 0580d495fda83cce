/*
 * sqlite_util.h - the SQLite helpers every module that reads or writes the
 * database shares: cleanup attributes for statements and connections.
 */
#pragma once

#include <sqlite3.h>

#include "util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(sqlite3_stmt *, sqlite3_finalize)
DEFINE_TRIVIAL_CLEANUP_FUNC(sqlite3 *, sqlite3_close_v2)

/* A statement finalized when it goes out of scope (sqlite3_finalize() accepts NULL too). */
#define _cleanup_stmt_ _cleanup_(sqlite3_finalizep)
/* A connection closed when it goes out of scope. */
#define _cleanup_sqlite_ _cleanup_(sqlite3_close_v2p)
