/*
 * hashmap.h - open-addressing hash table of pointers, keyed by a 64-bit hash
 * plus a caller-supplied equality test. Used to intern call stacks and to
 * aggregate samples; entries are owned by the caller.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hashmap {
	size_t cap; /* slots, a power of two; 0 until the first insert */
	size_t len; /* entries */
	uint64_t *hashes;
	void **vals;
};

/* Equality of a stored entry and the key being looked up. */
typedef bool (*hashmap_eq_fn)(const void *entry, const void *key);

/* hashmap__find() - the entry with @hash for which @eq(entry, @key), or NULL. */
void *hashmap__find(const struct hashmap *m, uint64_t hash, hashmap_eq_fn eq, const void *key);
/* hashmap__insert() - add @val (not already present). Returns 0 or -ENOMEM. */
int hashmap__insert(struct hashmap *m, uint64_t hash, void *val);
/*
 * hashmap__remove() - take out the entry with @hash for which @eq(entry,
 * @key) and return it (NULL if none; the caller owns it). The entries after
 * it in its probe run move back (backward-shift deletion), so no tombstone
 * is left and lookups stay as short as if it had never been inserted.
 */
void *hashmap__remove(struct hashmap *m, uint64_t hash, hashmap_eq_fn eq, const void *key);
/*
 * hashmap__remove_if() - take out every entry for which @match(entry, @ctx)
 * is true, handing each to @drop (NULL: the caller keeps them elsewhere).
 * Returns how many. O(capacity); @match must not change @m.
 */
size_t hashmap__remove_if(struct hashmap *m, bool (*match)(const void *entry, const void *ctx),
			  const void *ctx, void (*drop)(void *entry));
/* hashmap__clear() - forget all entries (does not free them); keeps capacity. */
void hashmap__clear(struct hashmap *m);
void hashmap__free(struct hashmap *m); /* frees the table, not the entries */

#define hashmap__for_each(m, i, v)                                                                 \
	for (size_t i = 0; i < (m)->cap; i++)                                                      \
		if (((v) = (m)->vals[i]) != NULL)

/*
 * id_index - 64-bit ids (stack ids, frame ids, window starts) to dense
 * indexes 0, 1, 2, ... in the order they were first added: the index of an
 * entry in an array the caller keeps beside it. ids[i] is entry i's id.
 * Zero-initialized is empty.
 */
struct id_index {
	struct hashmap map; /* hash of an id -> 1 + its index, as a pointer */
	int64_t *ids;
	size_t n, cap;
};

/* id_index__find() - the index of @id, or -1 if it was never added. */
long id_index__find(const struct id_index *x, int64_t id);
/*
 * id_index__add() - the index of @id, which is x->n (then incremented) if
 * it is new. *@ret_added (may be NULL) tells which. Returns >= 0, or
 * -ENOMEM (nothing added).
 */
long id_index__add(struct id_index *x, int64_t id, bool *ret_added);
void id_index__free(struct id_index *x);

#define HASH64_INIT 0xcbf29ce484222325ULL

/*
 * hash64() - a hash of @len bytes at @data, continuing from @h (start with
 * HASH64_INIT): xxHash's XXH3 64-bit with @h as its seed (libxxhash, Debian's
 * libxxhash-dev; xxhash.h). For keys of in-memory tables only: its values
 * may change with the library's version, so nothing stored or sent may
 * hold one (those use fnv1a64()). Reads 8 bytes a step, where FNV-1a reads
 * one: a 60-frame call stack hashes in ~40 ns instead of ~590 ns (-O2, here).
 */
uint64_t hash64(uint64_t h, const void *data, size_t len);

/*
 * fnv1a64() - FNV-1a 64 of @len bytes at @data, continuing from @h (start
 * with HASH64_INIT). The hash of what is stored or sent, and must not
 * change: stacks.hash (schema/0018-stack-hash.sql), a Python frame's
 * rel_addr (symbols/python.c), the fleet's stack_hash (docs/fleet.md).
 */
static inline uint64_t fnv1a64(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}
