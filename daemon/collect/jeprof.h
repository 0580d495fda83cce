/*
 * jeprof.h - jemalloc's own allocation profiles, read from outside the
 * process: its MALLOC_CONF settings and the "heap_v2" heap profiles it dumps
 * (jemalloc(3), opt.prof, opt.prof_prefix, opt.lg_prof_interval; the format
 * jemalloc's jeprof script reads, jemalloc 4 and 5).
 *
 * A process running jemalloc with MALLOC_CONF=prof:true samples its
 * allocations itself (one every 2^lg_prof_sample bytes on average, 512 KiB
 * by default) and, with lg_prof_interval:N, writes the sampled objects still
 * live, per call stack, to PREFIX.PID.SEQ.iISEQ.heap every 2^N bytes it
 * allocates: no trap per call, and none per sample.
 */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The settings of jemalloc's profiler in a MALLOC_CONF string. */
struct jeprof_conf {
	bool prof;	       /* opt.prof (default false) */
	bool active;	       /* opt.prof_active (default true) */
	int lg_interval;       /* opt.lg_prof_interval: -1 (default): no interval dumps */
	unsigned lg_sample;    /* opt.lg_prof_sample (default 19: 512 KiB) */
	char prefix[PATH_MAX]; /* opt.prof_prefix (default "jeprof", the process's cwd) */
};

/*
 * jeprof__parse_conf() - the profiler settings of @malloc_conf ("key:value"
 * pairs separated by commas, jemalloc(3) "TUNING"; NULL or "" for none),
 * jemalloc's defaults for those it does not set. Unknown keys are ignored.
 * Returns 0, or -EINVAL for a profiler setting whose value is not one
 * jemalloc accepts (then *@ret holds the defaults and what came before).
 */
int jeprof__parse_conf(const char *malloc_conf, struct jeprof_conf *ret);

/* jeprof__dumps_periodically() - whether @c makes jemalloc sample and dump on its own. */
static inline bool jeprof__dumps_periodically(const struct jeprof_conf *c)
{
	return c->prof && c->active && c->lg_interval >= 0;
}

/* One call stack of a profile: its sampled objects live at the dump. */
struct jeprof_stack {
	uint64_t *ips;	  /* leaf first: the allocator's last frame, then its callers */
	unsigned n;	  /* 1 .. JEPROF_MAX_FRAMES */
	bool truncated;	  /* frames beyond JEPROF_MAX_FRAMES dropped */
	uint64_t objects; /* sampled objects live ("t*:" current objects) */
	uint64_t bytes;	  /* their bytes, as sampled (not scaled) */
};

#define JEPROF_MAX_FRAMES 127

/* A parsed heap profile. */
struct jeprof_profile {
	uint64_t period;	     /* mean bytes between samples (heap_v2/PERIOD) */
	struct jeprof_stack *stacks; /* those with live objects */
	size_t n;
	bool complete; /* the dump ends with its MAPPED_LIBRARIES section */
};

/*
 * jeprof__parse() - parse heap profile @text (@len bytes, need not end in
 * NUL). Each stack is cut down to the frames of its callers plus one frame
 * of the allocator (the leaf): frames inside the mappings whose path
 * contains @allocator ("libjemalloc") come from the profiler's own
 * backtrace. Stacks with no live object, or only allocator frames, are left
 * out. A dump jemalloc has not finished writing parses with complete false.
 * Returns 0 and *@ret (free with jeprof_profile__done()), -EBADMSG for text
 * that is not a heap_v2 profile or a malformed line, -ENOMEM. Does not log.
 */
int jeprof__parse(const char *text, size_t len, const char *allocator, struct jeprof_profile *ret);

/* jeprof_profile__done() - free what @p holds and zero it. Accepts a zeroed @p. */
void jeprof_profile__done(struct jeprof_profile *p);

/*
 * A reader of one process's heap profiles, turned into the allocation
 * records of the malloc probes (bpf/malloc.h): for each call stack, objects
 * that appear since the last profile become ALLOC + RETURN records (each
 * with the stack's mean size, weighed as jeprof unbiases a sample: size /
 * (1 - exp(-size / period))), objects that are gone become FREE records of
 * the oldest of them. The blocks' addresses are not in a profile: each is
 * given a number with bit 63 set, unique in the reader.
 */
struct jeprof_reader;

#include "collect/malloc_probes.h"

/*
 * jeprof_reader__new() - read the heap profiles @pid writes with settings
 * @conf (jeprof__dumps_periodically()): PREFIX.PID.SEQ.*.heap under
 * /proc/PID/cwd (a relative prefix) or /proc/PID/root, only files owned by
 * @pid's user. The first profile read (the newest at the first poll) is
 * the baseline: its objects were live before, and send nothing. Profiles
 * last written before @pid started (an earlier process of the same PID
 * left them) are not read. Returns 0 and *@ret,
 * -EINVAL, -ESRCH (@pid is gone), -ENOMEM.
 */
int jeprof_reader__new(pid_t pid, const struct jeprof_conf *conf, struct jeprof_reader **ret);
void jeprof_reader__free(struct jeprof_reader *r); /* accepts NULL */

/* What the reader has turned into records so far. */
struct jeprof_counts {
	uint64_t profiles; /* heap profiles read */
	uint64_t allocs;   /* ALLOC records (sampled objects that appeared) */
	uint64_t frees;	   /* FREE records */
	uint64_t bad;	   /* profiles that could not be read or parsed (-EBADMSG, too large) */
};

/*
 * jeprof_reader__poll() - read the newest complete heap profile written
 * since the last poll, if any, and send the changes since the profile
 * before it to @fn(@ctx) as records of session slot @slot. A profile still
 * being written is left for the next poll. Returns the number of records
 * sent, 0 if there was no new profile, -ENOMEM, or -EBADMSG (not a heap_v2
 * profile, a malformed line), -EFBIG (over 64 MiB), -EPERM (not a regular
 * file of the process's user) or open(2)'s -errno for a profile that could
 * not be read: it is counted (jeprof_reader__counts()'s
 * bad) and skipped, the next poll reads the next one. The process having
 * gone is not an error.
 * Blocks on reading the file; does not log.
 */
int jeprof_reader__poll(struct jeprof_reader *r, unsigned slot, malloc_probes_fn fn, void *ctx);
void jeprof_reader__counts(const struct jeprof_reader *r, struct jeprof_counts *ret);
