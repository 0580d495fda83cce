/*
 * link_closer.h - a thread that destroys BPF links off the event loop.
 * Closing a uprobe's perf event is slow: the kernel unregisters the probe
 * and then waits for an RCU tasks-trace and an SRCU grace period
 * (uprobe_unregister_sync(), kernel/events/uprobes.c, Linux 6.12+), about
 * 75 ms a link on this machine, once per link. A CUDA session has ~60
 * links, so ending it on the loop stopped every other session for ~4 s.
 */
#pragma once

#include <stddef.h>

#include <bpf/libbpf.h>

struct link_closer;

/* Called on the closer's thread once every link of a job is destroyed. */
typedef void (*link_closer_done_fn)(void *ctx);

/*
 * link_closer__new() - start the thread (it waits for jobs).
 * Returns 0 and *@ret (owned by the caller, link_closer__free()), -ENOMEM,
 * or pthread_create()'s -errno. Does not log.
 */
int link_closer__new(struct link_closer **ret);

/*
 * link_closer__free() - destroy the links still queued (this blocks, ~75 ms
 * a uprobe link), run their jobs' @done, stop the thread. Accepts NULL.
 */
void link_closer__free(struct link_closer *c);

/*
 * link_closer__close() - destroy @links[0..@n-1] (NULL entries allowed),
 * then call @done(@ctx) if @done is set, then free(@links). Takes the array
 * and the links in every case. Jobs run in the order they were given.
 * With @c, the work runs on the closer's thread and this returns at once:
 * the probes may still fire meanwhile (their records must be told apart by
 * the caller), and @done must only touch what the thread may (BPF map
 * fds, @ctx). With @c NULL, or when a job cannot be allocated, it runs on
 * the caller's thread before this returns. Never fails; does not log.
 */
void link_closer__close(struct link_closer *c, struct bpf_link **links, size_t n,
			link_closer_done_fn done, void *ctx);

/*
 * link_closer__wait_idle() - block until every job given so far is done
 * (for tests and for an orderly shutdown). Accepts NULL.
 */
void link_closer__wait_idle(struct link_closer *c);
