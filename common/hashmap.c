/* hashmap.c - open-addressing (linear probing) pointer hash table. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

/* xxHash compiled in here (XXH_INLINE_ALL, xxhash.h): the header alone, no call into libxxhash. */
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t hash64(uint64_t h, const void *data, size_t len)
{
	return XXH3_64bits_withSeed(data, len, h);
}

void *hashmap__find(const struct hashmap *m, uint64_t hash, hashmap_eq_fn eq, const void *key)
{
	if (m->cap == 0)
		return NULL;
	for (size_t i = hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->vals[i])
			return NULL;
		if (m->hashes[i] == hash && eq(m->vals[i], key))
			return m->vals[i];
	}
}

static void place(uint64_t *hashes, void **vals, size_t cap, uint64_t hash, void *val)
{
	size_t i = hash & (cap - 1);

	while (vals[i])
		i = (i + 1) & (cap - 1);
	hashes[i] = hash;
	vals[i] = val;
}

int hashmap__insert(struct hashmap *m, uint64_t hash, void *val)
{
	/* Keep the load factor under 1/2 so probes stay short. */
	if ((m->len + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		uint64_t *hashes = calloc(cap, sizeof(*hashes));
		void **vals = calloc(cap, sizeof(*vals));

		if (!hashes || !vals) {
			free(hashes);
			free(vals);
			return -ENOMEM;
		}
		for (size_t i = 0; i < m->cap; i++)
			if (m->vals[i])
				place(hashes, vals, cap, m->hashes[i], m->vals[i]);
		free(m->hashes);
		free(m->vals);
		m->hashes = hashes;
		m->vals = vals;
		m->cap = cap;
	}
	place(m->hashes, m->vals, m->cap, hash, val);
	m->len++;
	return 0;
}

void *hashmap__remove(struct hashmap *m, uint64_t hash, hashmap_eq_fn eq, const void *key)
{
	size_t mask = m->cap - 1, i, j;
	void *val;

	if (m->cap == 0)
		return NULL;
	for (i = hash & mask;; i = (i + 1) & mask) {
		if (!m->vals[i])
			return NULL;
		if (m->hashes[i] == hash && eq(m->vals[i], key))
			break;
	}
	val = m->vals[i];
	m->vals[i] = NULL;
	m->len--;
	/* An entry after the hole moves into it if the hole is on its probe path: its
	 * home slot is at least as far back from it as the hole is. */
	for (j = (i + 1) & mask; m->vals[j]; j = (j + 1) & mask) {
		if (((j - (m->hashes[j] & mask)) & mask) >= ((j - i) & mask)) {
			m->hashes[i] = m->hashes[j];
			m->vals[i] = m->vals[j];
			m->vals[j] = NULL;
			i = j;
		}
	}
	return val;
}

static bool same_entry(const void *entry, const void *key)
{
	return entry == key;
}

size_t hashmap__remove_if(struct hashmap *m, bool (*match)(const void *entry, const void *ctx),
			  const void *ctx, void (*drop)(void *entry))
{
	size_t removed = 0;

	for (size_t i = 0; i < m->cap;) {
		void *v = m->vals[i];

		if (!v || !match(v, ctx)) {
			i++;
			continue;
		}
		/* Slot i is looked at again: the backward shift may have moved an
		 * entry not seen yet into it (an entry it moves elsewhere goes to a
		 * later slot, or to one already passed, whose entries were seen). */
		hashmap__remove(m, m->hashes[i], same_entry, v);
		if (drop)
			drop(v);
		removed++;
	}
	return removed;
}

void hashmap__clear(struct hashmap *m)
{
	if (m->cap)
		memset(m->vals, 0, m->cap * sizeof(*m->vals));
	m->len = 0;
}

void hashmap__free(struct hashmap *m)
{
	free(m->hashes);
	free(m->vals);
	*m = (struct hashmap){ 0 };
}

/* An id looked up in an id_index: the index its entries point into. */
struct id_key {
	const struct id_index *x;
	int64_t id;
};

static bool id_eq(const void *entry, const void *key)
{
	const struct id_key *k = key;

	return k->x->ids[(uintptr_t)entry - 1] == k->id;
}

long id_index__find(const struct id_index *x, int64_t id)
{
	struct id_key key = {x, id};
	void *found = hashmap__find(&x->map, hash64(HASH64_INIT, &id, sizeof(id)), id_eq, &key);

	return found ? (long)((uintptr_t)found - 1) : -1;
}

long id_index__add(struct id_index *x, int64_t id, bool *ret_added)
{
	long i = id_index__find(x, id);

	if (ret_added)
		*ret_added = i < 0;
	if (i >= 0)
		return i;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 64;
		int64_t *ids = realloc(x->ids, cap * sizeof(*ids));

		if (!ids)
			return -ENOMEM;
		x->ids = ids;
		x->cap = cap;
	}
	if (hashmap__insert(&x->map, hash64(HASH64_INIT, &id, sizeof(id)),
			    (void *)(uintptr_t)(x->n + 1)) < 0)
		return -ENOMEM;
	x->ids[x->n] = id;
	return (long)x->n++;
}

void id_index__free(struct id_index *x)
{
	hashmap__free(&x->map);
	free(x->ids);
	*x = (struct id_index){ 0 };
}
