/*
 * session_internal.h - what session.c shares with the other files of the
 * session (memory.c): interned stacks and their resolution into the
 * store. Not for the rest of the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "session/session.h"

/* A call stack as the BPF program saw it: raw addresses, kernel frames first. */
struct raw_stack {
	uint64_t hash;
	pid_t pid;        /* user addresses are the process's */
	int64_t stack_id; /* row in the store, 0 until the first flush that needs it */
	uint16_t klen, ulen;
	uint32_t flags;   /* SAMPLE_* bits that matter for the stack's identity */
	uint64_t ips[];
};

/* Documented where they are defined, in session.c. */
struct raw_stack *session__stack_intern(struct session *s, pid_t pid, const uint64_t *ips,
					unsigned klen, unsigned ulen, uint32_t flags,
					bool *ret_limited);
int session__resolve_stack(struct session *s, const struct session_env *env, struct raw_stack *st,
			   bool *refreshed);

/* Documented where they are defined, in memory.c. */
int session__flush_memory(struct session *s, const struct session_env *env, bool *refreshed);
void session__flush_memory_done(struct session *s);
void session__flush_memory_failed(struct session *s);
void session__free_memory(struct session *s);
