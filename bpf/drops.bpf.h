/*
 * drops.bpf.h - counting, per session slot, what a BPF program could not
 * record, in its 'drops' per-CPU array: a struct of __u64 counters per
 * slot, which user space sums over CPUs (percpu_sum()).
 *
 * The includer defines DROPS_SLOTS (its number of session slots) and
 * DROPS_COUNTERS (its struct of counters) first; the map is defined here,
 * once, so that every program's 'drops' has the same layout.
 */
#pragma once

#if !defined(DROPS_SLOTS) || !defined(DROPS_COUNTERS)
#error "define DROPS_SLOTS and DROPS_COUNTERS before including drops.bpf.h"
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROPS_SLOTS);
	__type(key, __u32);
	__type(value, DROPS_COUNTERS);
} drops SEC(".maps");

/* The index of counter @field in @type, a struct of __u64 counters only. */
#define COUNTER_INDEX(type, field) (offsetof(type, field) / sizeof(__u64))

/*
 * count_drop() - add 1 to counter @index (a constant, COUNTER_INDEX()) of
 * @slot in 'drops'; nothing if @slot is out of range. The entry is this
 * CPU's: no atomics needed.
 */
static __always_inline void count_drop(__u32 slot, __u32 index)
{
	__u64 *c = bpf_map_lookup_elem(&drops, &slot);

	if (c)
		c[index]++;
}
