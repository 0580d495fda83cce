/*
 * strpool.h - string storage for the symbolizer's long-lived names: an
 * arena of chunks that never move (strings stay valid until it is freed),
 * and an intern set over it, so that equal names share one copy and
 * compare by address.
 */
#pragma once

#include <stddef.h>

#include "hashmap.h"

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, size;
	char data[];
};

struct arena {
	struct arena_chunk *head;
};

/* A set of strings; the strings live in @arena. */
struct strpool {
	struct arena arena;
	struct hashmap set;
};

/* Documented where they are defined, in strpool.c. */
char *arena_strndup(struct arena *a, const char *s, size_t len);
void arena_done(struct arena *a);
const char *strpool_intern(struct strpool *p, const char *s);
size_t strpool_bytes(const struct strpool *p);
void strpool_done(struct strpool *p);
