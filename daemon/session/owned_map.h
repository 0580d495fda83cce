/*
 * owned_map.h - hash maps that own their entries, each one heap block: an
 * entry made from a copy of its key, and every entry freed with the map.
 * For the session's accumulators and caches.
 */
#pragma once

#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

/*
 * hashmap_add_copy() - insert under @hash a heap copy of the @size bytes at
 * @key into @m (which must not hold an equal entry yet: hashmap__find()
 * first). Returns the copy, owned by whoever frees the entries of @m, or
 * NULL on out-of-memory with @m unchanged. Allocates; does not log.
 */
static inline void *hashmap_add_copy(struct hashmap *m, uint64_t hash, const void *key, size_t size)
{
	void *copy = malloc(size);

	if (!copy)
		return NULL;
	memcpy(copy, key, size);
	if (hashmap__insert(m, hash, copy) < 0) {
		free(copy);
		return NULL;
	}
	return copy;
}

/*
 * hashmap_find_or_add_copy() - the entry of @m under @hash that @eq finds
 * equal to @key, or, if there is none, a new one copied from the @size
 * bytes at @key (hashmap_add_copy()). NULL on out-of-memory, @m unchanged.
 */
static inline void *hashmap_find_or_add_copy(struct hashmap *m, uint64_t hash, hashmap_eq_fn eq,
					     const void *key, size_t size)
{
	void *entry = hashmap__find(m, hash, eq, key);

	return entry ? entry : hashmap_add_copy(m, hash, key, size);
}

/* hashmap_clear_free() - free every entry of @m and forget them; keeps the table for reuse. */
static inline void hashmap_clear_free(struct hashmap *m)
{
	void *v;

	hashmap__for_each(m, i, v) free(v);
	hashmap__clear(m);
}

/* hashmap_free_all() - free every entry of @m and its table; @m is then empty. */
static inline void hashmap_free_all(struct hashmap *m)
{
	void *v;

	hashmap__for_each(m, i, v) free(v);
	hashmap__free(m);
}
