/*
 * output-memory.c - the memory report: the diagnosis first, RSS series as
 * sparklines and by mapping kind, the stacks that grew the address space,
 * allocations, leak suspects.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/* @bytes as "9.3 MiB" (binary units), with a sign if @sign. */
static void format_bytes(char *buf, size_t size, double bytes, bool sign)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = fabs(bytes);
	size_t u = 0;

	while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, u == 0 ? "%s%.0f %s" : "%s%.1f %s",
		 bytes < 0 ? "-"
		 : sign	   ? "+"
			   : "",
		 v, units[u]);
}

/* Member @key of @o, a number of bytes, as format_bytes() writes it. */
static void format_member_bytes(char *buf, size_t size, const json_t *o, const char *key, bool sign)
{
	format_bytes(buf, size, json_number_value(json_object_get(o, key)), sign);
}

/*
 * A sparkline of the numbers of @values, at most @width characters (each
 * the largest value of its bucket), scaled from 0 to the largest value: 8
 * levels of block characters, or " .:-=+*#" with @ascii.
 */
static void print_sparkline(FILE *f, const json_t *values, const char *key, size_t width,
			    bool ascii)
{
	static const char *const blocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
					     "\u2585", "\u2586", "\u2587", "\u2588"};
	static const char levels[] = " .:-=+*#";
	size_t n = json_array_size(values), buckets = n < width ? n : width;
	double max = 0;

	for (size_t i = 0; i < n; i++) {
		const json_t *v = json_array_get(values, i);
		double x = json_number_value(key ? json_object_get(v, key) : v);

		max = x > max ? x : max;
	}
	for (size_t b = 0; b < buckets; b++) {
		double m = 0;
		int level;

		for (size_t i = b * n / buckets; i < (b + 1) * n / buckets; i++) {
			const json_t *v = json_array_get(values, i);
			double x = json_number_value(key ? json_object_get(v, key) : v);

			m = x > m ? x : m;
		}
		level = max > 0 ? (int)(m / max * 7.999) : 0;
		level = level < 0 ? 0 : level > 7 ? 7 : level;
		if (ascii)
			fputc(levels[level], f);
		else
			fputs(blocks[level], f);
	}
}

/*
 * One allocating stack of the memory report: a headline, then its frames,
 * unless a list above printed them already (@printed: the frames printed so
 * far, an array this appends to).
 */
static void print_alloc_stack(FILE *f, const json_t *x, bool ascii, json_t *printed)
{
	const json_t *frames = json_object_get(x, "frames"), *p;
	bool seen = false;
	size_t i;

	const char *fn = json_string_value(json_object_get(x, "function"));
	char live[32], growth[32], allocated[32];

	format_member_bytes(live, sizeof(live), x, "live_bytes", false);
	format_member_bytes(growth, sizeof(growth), x, "growth_bytes_per_s", true);
	format_member_bytes(allocated, sizeof(allocated), x, "allocated_bytes", false);
	fprintf(f, "\n  %s: %s live, %s/s, %s allocated (%lld samples, %lld live)  ", fn ? fn : "?",
		live, growth, allocated,
		(long long)json_integer_value(json_object_get(x, "samples")),
		(long long)json_integer_value(json_object_get(x, "live_samples")));
	print_sparkline(f, json_object_get(x, "live_series"), NULL, 20, ascii);
	fputc('\n', f);
	json_array_foreach(printed, i, p) seen |= json_equal((json_t *)p, (json_t *)frames);
	if (seen) {
		fprintf(f, "      (call stack above)\n");
		return;
	}
	print_frames(f, frames, "      ");
	json_array_append((json_t *)printed, (json_t *)frames);
}

/* The diagnosis: verdict, evidence, suggestion. */
static void print_diagnosis(FILE *f, const json_t *d)
{
	const json_t *e;
	size_t i;

	if (!json_is_object(d))
		return;
	fprintf(f, "\ndiagnosis: %s\n", json_string_value(json_object_get(d, "verdict")));
	json_array_foreach(json_object_get(d, "evidence"), i, e)
		fprintf(f, "  - %s\n", json_string_value(e));
	if (json_is_string(json_object_get(d, "suggestion")))
		fprintf(f, "  suggestion: %s\n", json_string_value(json_object_get(d, "suggestion")));
}

/* RSS by mapping kind: start, end and rate of each kind that holds anything. */
static void print_by_mapping(FILE *f, const json_t *rows, const char *indent)
{
	const json_t *row;
	char a[32], b[32], c[32];
	size_t i;

	json_array_foreach(rows, i, row)
	{
		double start = json_number_value(json_object_get(row, "start_bytes"));
		double end = json_number_value(json_object_get(row, "end_bytes"));

		if (start == 0 && end == 0)
			continue;
		format_bytes(a, sizeof(a), start, false);
		format_bytes(b, sizeof(b), end, false);
		format_member_bytes(c, sizeof(c), row, "growth_bytes_per_s", true);
		fprintf(f, "%s%-6s %10s -> %10s  %s/s\n", indent,
			json_string_value(json_object_get(row, "kind")), a, b, c);
	}
}

/*
 * The stacks that grew the address space (net bytes) and touched new pages.
 * @rss_on: the session had the rss event, so a missing growth part means
 * profd could not follow it (the tracepoints it needs, profd(8)).
 */
static void print_growth(FILE *f, const json_t *g, bool rss_on)
{
	static const char *const lists[] = { "top_growth", "top_touch" };
	static const char *const titles[] = {
	    "address space grown by (brk, mmap, mremap, minus munmap)",
	    "new pages touched by (sampled write faults)" };
	const json_t *x;
	char a[32];
	size_t i;

	if (!json_is_object(g)) {
		fprintf(f, "\naddress-space growth: not followed (%s)\n",
			rss_on ? "profd could not attach its tracepoints here, or the session is older "
				 "than them: see profd(8), REQUIREMENTS"
			       : "attach --events ...,rss");
		return;
	}
	for (size_t l = 0; l < ARRAY_SIZE(lists); l++) {
		const json_t *list = json_object_get(g, lists[l]);

		fprintf(f, "\n%s: %s\n", titles[l], json_array_size(list) ? "" : "none");
		json_array_foreach(list, i, x)
		{
			format_member_bytes(a, sizeof(a), x, "bytes", true);
			fprintf(f, "\n  %s: %s in pid %lld (%s, %lld events)\n",
				json_string_value(json_object_get(x, "function")) ?: "?", a,
				(long long)json_integer_value(json_object_get(x, "pid")),
				json_string_value(json_object_get(x, "mappings")) ?: "?",
				(long long)json_integer_value(json_object_get(x, "events")));
			print_frames(f, json_object_get(x, "frames"), "      ");
		}
	}
	fprintf(f, "  (%lld address-space changes, %lld of them without a stack of their own: "
		   "over the per-second stack budget, unmapping what was mapped before the session, "
		   "or over the rate cap)\n",
		(long long)json_integer_value(json_object_get(g, "events")),
		(long long)json_integer_value(json_object_get(g, "events_without_stack")));
}

int output__memory(FILE *f, const json_t *reply, bool ascii)
{
	const json_t *rss = json_object_get(reply, "rss"),
		     *al = json_object_get(reply, "allocations");
	long long session;
	double duration;
	char a[32], b[32], c[32], d[32];
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_num(reply, "duration_s", &duration)) < 0)
		return r;
	fprintf(f, "session %lld: memory over %.1f s\n", session, duration);
	print_diagnosis(f, json_object_get(reply, "diagnosis"));
	if (json_is_object(rss) && json_integer_value(json_object_get(rss, "readings")) > 0) {
		const json_t *series = json_object_get(rss, "series"), *procs, *p;
		const json_t *last = json_array_get(series, json_array_size(series) - 1);
		size_t i;

		format_member_bytes(a, sizeof(a), rss, "start_bytes", false);
		format_member_bytes(b, sizeof(b), rss, "end_bytes", false);
		format_member_bytes(c, sizeof(c), rss, "peak_bytes", false);
		format_member_bytes(d, sizeof(d), rss, "growth_bytes_per_s", true);
		fprintf(f,
			"\nRSS %s -> %s (peak %s), growth %s/s (least squares over %lld readings, "
			"every %.1f s)\n  ",
			a, b, c, d, (long long)json_integer_value(json_object_get(rss, "readings")),
			json_number_value(json_object_get(rss, "interval_s")));
		print_sparkline(f, series, "rss_bytes", 60, ascii);
		fprintf(f, "  0..%.1f s\n",
			json_number_value(json_object_get(rss, "last_reading_s")));
		format_member_bytes(a, sizeof(a), last, "anon_bytes", false);
		format_member_bytes(b, sizeof(b), last, "file_bytes", false);
		format_member_bytes(c, sizeof(c), last, "shmem_bytes", false);
		format_member_bytes(d, sizeof(d), last, "swap_bytes", false);
		fprintf(f, "  last reading: anon %s, file %s, shmem %s, swap %s", a, b, c, d);
		if (json_is_number(json_object_get(last, "pss_bytes"))) {
			format_member_bytes(a, sizeof(a), last, "pss_bytes", false);
			fprintf(f, ", PSS %s", a);
		}
		fputc('\n', f);
		if (json_array_size(json_object_get(rss, "by_mapping"))) {
			fprintf(f, "  by mapping (smaps):\n");
			print_by_mapping(f, json_object_get(rss, "by_mapping"), "    ");
		}
		procs = json_object_get(rss, "processes");
		if (json_array_size(procs) > 1)
			json_array_foreach(procs, i, p)
			{
				format_member_bytes(a, sizeof(a), p, "start_bytes", false);
				format_member_bytes(b, sizeof(b), p, "end_bytes", false);
				format_member_bytes(c, sizeof(c), p, "growth_bytes_per_s", true);
				fprintf(f, "  pid %lld: %s -> %s, %s/s, %.1f..%.1f s\n",
					(long long)json_integer_value(json_object_get(p, "pid")), a,
					b, c, json_number_value(json_object_get(p, "first_s")),
					json_number_value(json_object_get(p, "last_s")));
				print_by_mapping(f, json_object_get(p, "by_mapping"), "    ");
			}
	} else {
		fprintf(f, "\nRSS: %s\n",
			json_is_object(rss) ? "no reading (the process had exited?)"
					    : "not recorded (attach --events ...,rss)");
	}
	print_growth(f, json_object_get(reply, "growth"), json_is_object(rss));
	if (!json_is_object(al)) {
		fprintf(f, "\nallocations: not traced (attach --events cpu,malloc)\n");
		return 0;
	}
	{
		_cleanup_(json_decrefp) json_t *printed = json_array();
		const json_t *list, *x;
		size_t i;

		if (!printed)
			return -ENOMEM;
		format_member_bytes(a, sizeof(a), al, "sample_bytes", false);
		format_member_bytes(b, sizeof(b), al, "bytes_per_s", false);
		format_member_bytes(c, sizeof(c), al, "live_bytes", false);
		const char *sampler = json_string_value(json_object_get(al, "sampler"));
		bool by_process = sampler && strcmp(sampler, "process") == 0;

		if (by_process)
			fprintf(f, "\nallocations: sampled by the process itself; probes: %s\n",
				json_string_value(json_object_get(al, "probes")) ?: "?");
		else
			fprintf(f, "\nallocations: sampled every %s on average; probes: %s\n", a,
				json_string_value(json_object_get(al, "probes")) ?: "?");
		fprintf(f,
			by_process ? "  %lld sampled allocations (%.0f/s, standing for %s/s), %lld of "
				     "them freed; %lld samples, %lld lost, %lld untracked, %lld "
				     "truncated stacks\n"
				   : "  %lld allocating calls (%.0f/s, %s/s), %lld frees; %lld samples, "
				     "%lld lost, %lld untracked, %lld truncated stacks\n",
			(long long)json_integer_value(json_object_get(al, "calls")),
			json_number_value(json_object_get(al, "calls_per_s")), b,
			(long long)json_integer_value(json_object_get(al, "free_calls")),
			(long long)json_integer_value(json_object_get(al, "sampled")),
			(long long)json_integer_value(json_object_get(al, "lost")),
			(long long)json_integer_value(json_object_get(al, "untracked")),
			(long long)json_integer_value(json_object_get(al, "truncated_stacks")));
		fprintf(f, "  live at the end (estimated from samples): %s in %lld stacks\n", c,
			(long long)json_integer_value(json_object_get(al, "stacks")));
		if (json_is_number(json_object_get(al, "stopped_at_s")))
			fprintf(
			    f,
			    "  probes detached at %.1f s: they trapped more than %lld times a "
			    "second (attach --malloc-max-rate); the figures end there\n",
			    json_number_value(json_object_get(al, "stopped_at_s")),
			    (long long)json_integer_value(json_object_get(al, "max_hits_per_s")));
		list = json_object_get(al, "leak_suspects");
		fprintf(f, "\nleak suspects (live bytes rising over %lld windows of %.1f s): %s\n",
			(long long)json_integer_value(json_object_get(al, "windows")),
			json_number_value(json_object_get(al, "window_s")),
			json_array_size(list) ? "" : "none");
		json_array_foreach(list, i, x) print_alloc_stack(f, x, ascii, printed);
		list = json_object_get(al, "top_growth");
		fprintf(f, "\ntop stacks by growth: %s\n",
			json_array_size(list) ? "" : "none grew");
		json_array_foreach(list, i, x) print_alloc_stack(f, x, ascii, printed);
		list = json_object_get(al, "top_live");
		fprintf(f, "\ntop stacks by live bytes: %s\n",
			json_array_size(list) ? "" : "nothing live");
		json_array_foreach(list, i, x) print_alloc_stack(f, x, ascii, printed);
	}
	return 0;
}
