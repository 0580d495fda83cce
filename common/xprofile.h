/*
 * xprofile.h - a session's raw profile (profd's "profile" response) loaded
 * into arrays: what profctl's exporters and the daemon's Pyroscope push
 * read.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/*
 * xprofile__load() - load profd's "profile" response @profile (a reference
 * is taken: the strings point into it) and the SESSION object @session (pid,
 * comm, exe, elapsed_s; a reference is taken). Returns 0, -EBADMSG if a
 * field is missing or out of range, -ENOMEM; on failure @p is left empty.
 * Does not log.
 */
int xprofile__load(struct xprofile *p, json_t *profile, const json_t *session);
/* xprofile__free() - free what xprofile__load() allocated; @p is left empty. Accepts empty @p. */
void xprofile__free(struct xprofile *p);
/* The name of thread @tid, or "?" if profd has no threads row for it. */
const char *xprofile__thread_name(const struct xprofile *p, int64_t tid);
/* The process of thread @tid, or the session's PID if profd has no threads row for it. */
int64_t xprofile__thread_pid(const struct xprofile *p, int64_t tid);
