/*
 * drops.bpf.h - counting, per session slot, what a BPF program could not
 * record, in its 'drops' per-CPU array: a struct of __u64 counters per
 * slot, which user space sums over CPUs (percpu_sum()).
 */
#pragma once

/* The index of counter @field in @type, a struct of __u64 counters only. */
#define COUNTER_INDEX(type, field) (offsetof(type, field) / sizeof(__u64))

/*
 * count_drop() - add 1 to counter @index (a constant, COUNTER_INDEX()) of
 * @slot in the per-CPU array @drops; nothing if @slot is out of range. The
 * entry is this CPU's: no atomics needed.
 */
static __always_inline void count_drop(void *drops, __u32 slot, __u32 index)
{
	__u64 *c = bpf_map_lookup_elem(drops, &slot);

	if (c)
		c[index]++;
}
