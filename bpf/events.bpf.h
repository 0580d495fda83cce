/*
 * events.bpf.h - the ring buffer map 'events' through which every BPF
 * program sends its records to user space, and when the reader is woken.
 * One definition, so that collector__load() (daemon/collect/bpf_util.c)
 * finds the same map in each object.
 */
#pragma once

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024); /* resized by user space before load */
} events SEC(".maps");

/*
 * Wake the reader only once this many bytes wait in the ring buffer (0: at
 * every record, once the reader has caught up); user space then polls on a
 * timer too. Set by user space before load, for every object (profile,
 * offcpu, uprobes, malloc). A wakeup per record feeds itself off the CPU: the woken
 * reader preempts a target thread, whose switch back in is a new record,
 * which wakes the reader... (measured: ~37000 records/s of sub-10-us
 * RUNNABLE intervals from offcpu-mix's sleeper alone). With uprobes, it
 * makes a call-heavy target pay for a context switch to profd per call:
 * a uprobe's program runs preemptible, so the woken reader can run inside
 * it (bpf_stats counted ~25 us per otel_memory:free record, a map delete
 * and one 64-byte record, on a PyTorch loop using both CPUs).
 */
const volatile __u64 wakeup_bytes = 0;

/*
 * events_wakeup() - the flags for a record of @size bytes sent to 'events'
 * (bpf_ringbuf_output() or bpf_ringbuf_submit_dynptr()), waking the reader
 * as wakeup_bytes says.
 */
static __always_inline long events_wakeup(__u64 size)
{
	if (!wakeup_bytes)
		return 0; /* the default: wake the reader if it has caught up */
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + size < wakeup_bytes
		   ? BPF_RB_NO_WAKEUP
		   : BPF_RB_FORCE_WAKEUP;
}

/*
 * events_output() - send the @size bytes at @data to 'events'. The caller
 * bounds @size for the verifier. Returns 0, or a negative error if the ring
 * buffer had no room.
 */
static __always_inline long events_output(void *data, __u64 size)
{
	return bpf_ringbuf_output(&events, data, size, events_wakeup(size));
}
