/*
 * store_internal.h - what the files of the store share: the connection and
 * its cached statements. Not for the rest of the daemon, which goes through
 * the store__*() calls of store.h.
 */
#pragma once

#include <sqlite3.h>
#include <stdint.h>

enum stmt_id {
	STMT_SESSION_INSERT,
	STMT_SESSION_COUNTS,
	STMT_SESSION_END,
	STMT_WINDOW_ADD,
	STMT_THREAD_UPSERT,
	STMT_MAPPING_INSERT,
	STMT_FRAME_FIND,
	STMT_FRAME_INSERT,
	STMT_STACK_FIND,
	STMT_STACK_INSERT,
	STMT_SAMPLE_ADD,
	STMT_EVENT_SAMPLE_ADD,
	STMT_OFFCPU_ADD,
	STMT_COUNTER_ADD,
	STMT_SESSION_COUNTER,
	STMT_SESSION_OFFCPU_LOST,
	STMT_MEMORY_ADD,
	STMT_VM_CHANGE_ADD,
	STMT_SESSION_VM,
	STMT_ALLOCATION_ADD,
	STMT_ALLOCATION_FREED,
	STMT_SESSION_MALLOC,
	STMT_SESSION_MEMORY_CONFIG,
	STMT_SESSION_PYTHON,
	STMT_SESSION_PYTHON_COUNTS,
	STMT_SESSION_TABLE_WALK,
	STMT_SESSION_OFFCPU_TABLE_WALK,
	_STMT_MAX,
};

/* Statements of the less common writes (GPU rows, resymbolize), prepared at their first use. */
enum {
	STORE_LAZY_GPU_API,
	STORE_LAZY_GPU_KERNEL,
	STORE_LAZY_GPU_COPY,
	STORE_LAZY_GPU_SYNC,
	STORE_LAZY_GPU_NVTX,
	STORE_LAZY_GPU_UPROBE,
	STORE_LAZY_GPU_MEM_EVENT,
	STORE_LAZY_GPU_PROBE,
	STORE_LAZY_GPU_COUNTS,
	STORE_LAZY_FRAME_NAME,
	STORE_LAZY_SESSION_NAMED,
	STORE_LAZY_MAX,
};

struct store {
	sqlite3 *db;
	sqlite3_stmt *stmt[_STMT_MAX];	    /* stmt_sql of store.c, prepared at open */
	sqlite3_stmt *lazy[STORE_LAZY_MAX]; /* prepared by store__lazy() */
	unsigned fleet_sinks;		    /* STORE_SINK_* set: store__set_fleet_sinks() */
	bool fk_off; /* in a store__begin_flush() transaction: foreign keys not enforced */
};

/* Documented where they are defined, in store.c. */
int store__step_done(sqlite3_stmt *stmt);
int store__exec(struct store *st, const char *sql);
int64_t store__query_int64(struct store *st, const char *sql);
/*
 * store__lazy() - statement @i of @sql, prepared at its first use and kept
 * until store__close(). NULL if it cannot be prepared (store__errmsg()).
 */
sqlite3_stmt *store__lazy(struct store *st, unsigned i, const char *sql);
