/*
 * test-hashmap.c - common/hashmap.c's removal against a plain array: entries
 * with colliding and wrapping hashes are inserted and removed at random,
 * and after each step every entry still in is found, every one taken out
 * is not, and the count agrees; hashmap__remove_if() takes out every entry
 * of a kind (the same hashes) and no other. Needs nothing.
 */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "hashmap.h"

#define N 4000

static bool id_eq(const void *entry, const void *key)
{
	return *(const int *)entry == *(const int *)key;
}

/* Few distinct hashes (long runs), some near the table's end (runs that wrap). */
static uint64_t hash_of(int id)
{
	return id % 3 == 0 ? (uint64_t)(id % 5) : id % 3 == 1 ? UINT64_MAX - (uint64_t)(id % 4)
							      : hash64(HASH64_INIT, &id, sizeof(id));
}

static size_t dropped;

static bool multiple_3_or_7(const void *entry, const void *ctx)
{
	int id = *(const int *)entry;

	(void)ctx;
	return id % 3 == 0 || id % 7 == 0;
}

static void count_drop(void *entry)
{
	(void)entry;
	dropped++;
}

int main(void)
{
	static int ids[N];
	static bool in[N];
	struct hashmap m = {0};
	unsigned seed = 7;
	size_t len = 0;

	for (int i = 0; i < N; i++)
		ids[i] = i;
	for (int step = 0; step < 6 * N; step++) {
		int i = rand_r(&seed) % N;

		if (in[i]) {
			CHECK(hashmap__remove(&m, hash_of(i), id_eq, &ids[i]) == &ids[i]);
			in[i] = false;
			len--;
		} else {
			CHECK(hashmap__remove(&m, hash_of(i), id_eq, &ids[i]) == NULL);
			CHECK_INT_EQ(hashmap__insert(&m, hash_of(i), &ids[i]), 0);
			in[i] = true;
			len++;
		}
		if (step % 97 == 0)
			for (int k = 0; k < N; k++)
				CHECK((hashmap__find(&m, hash_of(k), id_eq, &ids[k]) != NULL) == in[k]);
	}
	CHECK_INT_EQ(m.len, len);
	for (int k = 0; k < N; k++)
		CHECK((hashmap__find(&m, hash_of(k), id_eq, &ids[k]) != NULL) == in[k]);

	/* Every entry whose id is a multiple of 3 or 7, in one pass. */
	{
		size_t want = 0, dropped_before = dropped;

		for (int k = 0; k < N; k++)
			want += in[k] && (k % 3 == 0 || k % 7 == 0);
		CHECK_INT_EQ(hashmap__remove_if(&m, multiple_3_or_7, NULL, count_drop), want);
		CHECK_INT_EQ(dropped - dropped_before, want);
		CHECK_INT_EQ(m.len, len - want);
		for (int k = 0; k < N; k++)
			CHECK((hashmap__find(&m, hash_of(k), id_eq, &ids[k]) != NULL) ==
			      (in[k] && k % 3 != 0 && k % 7 != 0));
	}
	hashmap__free(&m);

	/* id_index: dense indexes in first-added order, the same index for an id added again. */
	{
		struct id_index x = {};
		bool added;

		CHECK_INT_EQ(id_index__find(&x, 7), -1);
		for (int64_t k = 0; k < 5000; k++) {
			int64_t id = (k * 7919) % 5003 - 2500; /* distinct, negative ones too */

			CHECK_INT_EQ(id_index__add(&x, id, &added), k);
			CHECK(added);
		}
		for (int64_t k = 0; k < 5000; k++) {
			int64_t id = (k * 7919) % 5003 - 2500;

			CHECK_INT_EQ(id_index__add(&x, id, &added), k);
			CHECK(!added);
			CHECK_INT_EQ(id_index__find(&x, id), k);
			CHECK_INT_EQ(x.ids[k], id);
		}
		CHECK_INT_EQ(x.n, 5000);
		CHECK_INT_EQ(id_index__find(&x, 1 << 20), -1);
		id_index__free(&x);
		CHECK_INT_EQ(x.n, 0);
	}
	return check_exit("hashmap");
}
