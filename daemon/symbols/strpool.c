/* strpool.c - string storage: an arena of chunks that never move, and an intern set over it. */
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "symbols/strpool.h"
#include "util.h"

/* ---------------------------------------------------------------------- */
/* String storage: an arena of chunks that never move, and an intern set. */

#define ARENA_CHUNK_BYTES (64 * 1024)

char *arena_strndup(struct arena *a, const char *s, size_t len)
{
	struct arena_chunk *c = a->head;
	char *p;

	if (len >= SIZE_MAX / 2)
		return NULL;
	if (!c || c->size - c->used < len + 1) {
		size_t size = MAX((size_t)ARENA_CHUNK_BYTES, len + 1);

		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->used = 0;
		c->size = size;
		c->next = a->head;
		a->head = c;
	}
	p = c->data + c->used;
	memcpy(p, s, len);
	p[len] = '\0';
	c->used += len + 1;
	return p;
}

void arena_done(struct arena *a)
{
	while (a->head) {
		struct arena_chunk *next = a->head->next;

		free(a->head);
		a->head = next;
	}
}

static bool str_eq(const void *entry, const void *key)
{
	return strcmp(entry, key) == 0;
}

/* strpool_intern() - the pooled copy of @s (valid until strpool_done()), NULL on OOM. */
const char *strpool_intern(struct strpool *p, const char *s)
{
	size_t len = strlen(s);
	uint64_t h = hash64(HASH64_INIT, s, len);
	char *copy = hashmap__find(&p->set, h, str_eq, s);

	if (copy)
		return copy;
	copy = arena_strndup(&p->arena, s, len);
	if (!copy || hashmap__insert(&p->set, h, copy) < 0)
		return NULL; /* an orphan copy stays in the arena until strpool_done() */
	return copy;
}

/* strpool_bytes() - the bytes @p's arena holds (its chunks, used or not). */
size_t strpool_bytes(const struct strpool *p)
{
	size_t n = 0;

	for (const struct arena_chunk *c = p->arena.head; c; c = c->next)
		n += sizeof(*c) + c->size;
	return n;
}

void strpool_done(struct strpool *p)
{
	hashmap__free(&p->set);
	arena_done(&p->arena);
}
