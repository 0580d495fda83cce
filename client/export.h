/*
 * export.h - a session's raw profile (profd's "profile" response) loaded
 * into arrays, and its renderings in the formats other tools read: folded
 * stacks, pprof, Chrome trace event JSON, speedscope JSON, SVG flame graph.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct xframe {
	const char *name;     /* function, or "<module basename>+0x<address>" (owned) */
	const char *function; /* NULL if unsymbolized */
	const char *module;
	const char *build_id; /* "" if none */
	const char *file;     /* NULL without line info */
	int64_t line;	      /* 0 without line info */
	uint64_t address;     /* ELF virtual address in the module; kernel: absolute */
	bool kernel;
	bool inlined;
	size_t func; /* index of its function: frames with the same (name, module) */
};

struct xstack {
	size_t *frames; /* indexes into xprofile.frames, leaf first */
	size_t len;
};

struct xsample {
	size_t stack;
	int64_t tid;
	int64_t window_ns; /* start of its 1-second window, ns from the session start */
	int64_t count;
};

struct xthread {
	int64_t tid, pid;
	const char *name;
};

struct xprofile {
	json_t *json;	      /* the response; the strings above point into it */
	json_t *session_json; /* the SESSION object; comm and exe point into it */
	int64_t session, pid, started_at_ns, elapsed_ns;
	const char *comm, *exe, *event, *period_unit;
	int64_t period; /* ns (cpu-clock) or events per sample */
	int64_t total_samples, lost_samples, truncated_stacks, unsymbolized_frames;
	struct xframe *frames;
	size_t n_frames, n_funcs;
	struct xstack *stacks;
	size_t n_stacks;
	struct xsample *samples;
	size_t n_samples;
	struct xthread *threads;
	size_t n_threads;
};

int xprofile__load(struct xprofile *p, json_t *profile, const json_t *session);
void xprofile__free(struct xprofile *p);
const char *xprofile__thread_name(const struct xprofile *p, int64_t tid);

/* @tid: only this thread's samples; 0: all. */
int export__folded(FILE *f, const struct xprofile *p, int64_t tid);
int export__pprof(FILE *f, const struct xprofile *p, int64_t tid);
int export__chrome_trace(FILE *f, const struct xprofile *p, int64_t tid);
int export__speedscope(FILE *f, const struct xprofile *p, int64_t tid);
int flamegraph__svg(FILE *f, const struct xprofile *p, int64_t tid, bool inverted);
