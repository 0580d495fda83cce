/*
 * gen-session.c - write a synthetic CPU profile session into a profd
 * database through profd's own store code (daemon/store/), as a long
 * session would have been stored: 1 s windows, rows per (window, thread,
 * call stack). For bench/query and for tests of deep stacks; nothing it
 * writes is checked in.
 *
 *   gen-session DB [--seconds S] [--threads T] [--stacks N] [--min-depth D]
 *                  [--max-depth D] [--samples N] [--seed N]
 *
 * Stacks: N distinct call stacks, depth uniform in min..max (at least 2):
 * the leaf "leaf_K", callers drawn from a pool of 4 * max-depth functions
 * ("fn_J" in /usr/lib/libgen.so), the outermost "main"; stack k is chosen with
 * weight 1/(k+1) (Zipf-like, s = 1) and a thread uniformly. Samples are
 * spread evenly over the windows. Prints the session id and totals.
 * Exit 0, 1 on a store error, 2 on bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "symbols/symbolize.h"
#include "util.h"

struct opts {
	uint64_t seconds, threads, stacks, min_depth, max_depth, samples, seed;
};

static uint64_t rng_state;

/* xorshift64*: reproducible for a seed, fast enough for 10^7 draws. */
static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ULL;
}

static double uniform(void)
{
	return (double)(rng() >> 11) / 9007199254740992.0;
}

static int parse_opts(int argc, char **argv, struct opts *o, const char **db)
{
	static const struct option longopts[] = {
	    {"seconds", required_argument, NULL, 's'},
	    {"threads", required_argument, NULL, 't'},
	    {"stacks", required_argument, NULL, 'k'},
	    {"min-depth", required_argument, NULL, 'a'},
	    {"max-depth", required_argument, NULL, 'b'},
	    {"samples", required_argument, NULL, 'n'},
	    {"seed", required_argument, NULL, 'r'},
	    {},
	};
	int c;

	*o = (struct opts){.seconds = 60,
			   .threads = 4,
			   .stacks = 100,
			   .min_depth = 20,
			   .max_depth = 60,
			   .samples = 10000,
			   .seed = 1};
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		uint64_t *v = c == 's'	 ? &o->seconds
			      : c == 't' ? &o->threads
			      : c == 'k' ? &o->stacks
			      : c == 'a' ? &o->min_depth
			      : c == 'b' ? &o->max_depth
			      : c == 'n' ? &o->samples
			      : c == 'r' ? &o->seed
					 : NULL;
		char *end;

		if (!v)
			return -EINVAL;
		*v = strtoull(optarg, &end, 10);
		if (*end)
			return -EINVAL;
	}
	if (optind + 1 != argc || !o->seconds || !o->threads || !o->stacks || !o->min_depth ||
	    o->min_depth < 2 || o->max_depth < o->min_depth || !o->samples)
		return -EINVAL;
	*db = argv[optind];
	return 0;
}

/*
 * The ids of @o->stacks stacks, inserted in the store. Stack k: leaf_K,
 * then callers fn_* drawn from k (a pool of 4 * max-depth), then main.
 */
static int make_stacks(struct store *st, const struct opts *o, int64_t *ret)
{
	size_t pool = 4 * o->max_depth, nfn = pool + o->stacks + 1;
	_cleanup_free_ int64_t *fn = calloc(nfn, sizeof(*fn));
	_cleanup_free_ int64_t *frames = calloc(o->max_depth, sizeof(*frames));
	int r;

	if (!fn || !frames)
		return -ENOMEM;
	for (size_t i = 0; i < nfn; i++) {
		char name[32];
		struct frame_info f = {.module = "/usr/lib/libgen.so",
				       .build_id = "",
				       .rel_addr = 0x1000 + 0x40 * i,
				       .function = name};

		if (i < pool)
			snprintf(name, sizeof(name), "fn_%zu", i);
		else if (i < nfn - 1)
			snprintf(name, sizeof(name), "leaf_%zu", i - pool);
		else
			snprintf(name, sizeof(name), "main");
		r = store__frame_id(st, &f, &fn[i]);
		if (r < 0)
			return r;
	}
	for (uint64_t k = 0; k < o->stacks; k++) {
		size_t depth = o->min_depth + rng() % (o->max_depth - o->min_depth + 1);

		frames[0] = fn[pool + k];
		for (size_t j = 1; j + 1 < depth; j++)
			frames[j] = fn[(k * 7 + j * 13) % pool];
		frames[depth - 1] = fn[nfn - 1];
		r = store__stack_id(st, frames, depth, false, true, &ret[k]);
		if (r < 0)
			return r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct store *st = NULL;
	struct opts o;
	const char *db;
	_cleanup_free_ int64_t *stacks = NULL;
	_cleanup_free_ double *cdf = NULL;
	_cleanup_free_ uint64_t *counts = NULL;
	uint64_t start_ns = 1700000000ULL * NSEC_PER_SEC, done = 0, rows = 0;
	int64_t sid;
	double sum = 0;
	int r;

	if (parse_opts(argc, argv, &o, &db) < 0) {
		fprintf(stderr, "usage: gen-session DB [--seconds S] [--threads T] [--stacks N] "
				"[--min-depth D] [--max-depth D] [--samples N] [--seed N]\n");
		return 2;
	}
	rng_state = o.seed * 0x9E3779B97F4A7C15ULL + 1;
	stacks = calloc(o.stacks, sizeof(*stacks));
	cdf = calloc(o.stacks, sizeof(*cdf));
	counts = calloc(o.threads * o.stacks, sizeof(*counts));
	if (!stacks || !cdf || !counts)
		return 1;
	for (uint64_t k = 0; k < o.stacks; k++)
		cdf[k] = (sum += 1.0 / (double)(k + 1));

	r = store__open(db, &st);
	if (r < 0)
		goto fail;
	r = store__begin(st);
	if (r < 0)
		goto fail;
	{
		struct store_session s = {.pid = 4242,
					  .comm = "gen",
					  .exe = "/usr/bin/gen",
					  .event = "cpu-clock",
					  .events = "cpu",
					  .freq_hz = 999,
					  .unwind = "fp",
					  .started_at_ns = start_ns};

		r = store__session_insert(st, &s, &sid);
	}
	for (uint64_t t = 0; r == 0 && t < o.threads; t++)
		r = store__thread_upsert(st, sid, 4242, (int)(4242 + t), "worker", start_ns, 0, 0);
	if (r == 0)
		r = make_stacks(st, &o, stacks);
	for (uint64_t w = 0; r == 0 && w < o.seconds; w++) {
		uint64_t want = o.samples * (w + 1) / o.seconds - done, n = 0;
		struct store_counts c = {.samples = want};

		memset(counts, 0, o.threads * o.stacks * sizeof(*counts));
		for (uint64_t i = 0; i < want; i++) {
			double x = uniform() * sum;
			uint64_t lo = 0, hi = o.stacks - 1;

			while (lo < hi) {
				uint64_t mid = (lo + hi) / 2;

				if (cdf[mid] < x)
					lo = mid + 1;
				else
					hi = mid;
			}
			counts[(rng() % o.threads) * o.stacks + lo]++;
		}
		for (uint64_t i = 0; r == 0 && i < o.threads * o.stacks; i++)
			if (counts[i]) {
				r = store__sample_add(st, sid, start_ns + w * NSEC_PER_SEC,
						      (int)(4242 + i / o.stacks),
						      stacks[i % o.stacks], counts[i], 0);
				n++;
			}
		if (r == 0)
			r = store__window_add(st, sid, start_ns + w * NSEC_PER_SEC, &c);
		done += want;
		rows += n;
		if (r == 0 && w % 600 == 599) {
			r = store__commit(st);
			if (r == 0)
				r = store__begin(st);
		}
	}
	if (r == 0) {
		struct store_counts c = {.samples = done};

		r = store__session_add_counts(st, sid, &c);
	}
	if (r == 0)
		r = store__session_end(st, sid, "duration", start_ns + o.seconds * NSEC_PER_SEC);
	if (r == 0)
		r = store__commit(st);
	if (r < 0)
		goto fail;
	printf("session %" PRId64 ": %" PRIu64 " samples, %" PRIu64 " rows, %" PRIu64
	       " stacks of depth %" PRIu64 "..%" PRIu64 ", %" PRIu64 " threads, %" PRIu64 " s\n",
	       sid, done, rows, o.stacks, o.min_depth, o.max_depth, o.threads, o.seconds);
	store__close(st);
	return 0;
fail:
	fprintf(stderr, "gen-session: %s: %s\n", db, st ? store__errmsg(st) : strerror(-r));
	store__close(st);
	return 1;
}
