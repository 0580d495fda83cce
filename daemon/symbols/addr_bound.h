/* addr_bound.h - binary search of an array sorted by a 64-bit address field. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * addr_upper_bound() - how many of the @n elements of @base (@stride bytes
 * each, sorted ascending by the uint64_t at @key_offset in each, as
 * offsetof() gives it) have a key at most @addr: the element starting at or
 * below @addr, if any, is the one before the index returned. Returns 0..@n.
 * Does not allocate.
 */
static inline size_t addr_upper_bound(const void *base, size_t n, size_t stride, size_t key_offset,
				      uint64_t addr)
{
	const char *p = (const char *)base + key_offset;
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (*(const uint64_t *)(p + mid * stride) <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}
