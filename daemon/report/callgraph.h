/*
 * callgraph.h - the call graph of a session's samples (callgraph.c), as
 * the top and hotpaths reports use it. Not for the rest of the daemon.
 */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "report/query.h"

struct qframe {
	int64_t id;
	int64_t rel_addr;
	int64_t line;
	char *function; /* NULL if unsymbolized */
	char *module;
	char *file; /* NULL without line info, and always for unsymbolized frames */
	char *name; /* function, or "<module basename>+0x<rel_addr>" */
	bool kernel;
	bool inlined; /* frames.inline_depth > 0: a call the compiler inlined (schema 0003) */
	bool has_line;
	int64_t self; /* samples with this frame as leaf */
	size_t group;
};

/* A function: frames with the same (function, module), or one unsymbolized address. */
struct qgroup {
	size_t rep;    /* frame reported (name, file, line): the one with most self samples */
	int64_t self;  /* samples whose leaf is in the group */
	int64_t total; /* samples whose stack holds the group at least once */
	size_t stamp;  /* 1 + index of the last stack counted in total */
};

struct qstack {
	int64_t id;
	int64_t n;  /* samples of the session with this stack */
	size_t off; /* its frames, leaf first: profile.fidx[off .. off + len) */
	size_t len;
};

struct profile {
	struct qframe *frames;
	size_t n_frames, cap_frames;
	struct qgroup *groups;
	size_t n_groups;
	struct qstack *stacks;
	size_t n_stacks, cap_stacks;
	int64_t *fidx; /* frame ids as read, then indexes into frames */
	size_t n_fidx, cap_fidx;
	struct id_index index; /* frame id -> index into frames */
};

/* What top and hotpaths start from: callgraph__load() fills it, callgraph__done() frees it. */
struct callgraph {
	sqlite3 *snap;	  /* the read snapshot the report is read in (report__snapshot_begin()) */
	json_t *o;	  /* the report so far: its head, and the empty list arr */
	json_t *arr;	  /* the list the report fills, owned by o */
	int64_t total;	  /* the samples percentages are of (report__head()) */
	struct profile p; /* the session's stacks and functions */
};

/* Documented where they are defined, in callgraph.c. */
void profile__free(struct profile *p);
json_t *qframe_json(const struct qframe *f, bool with_kind);
void callgraph__done(struct callgraph *cg);
int callgraph__load(struct callgraph *cg, sqlite3 *db, int64_t session_id, const char *event,
		    const struct query_range *range, unsigned flags, const char *list);
