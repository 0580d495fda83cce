/* output-gpu.c - human renderings of the "gpu" and "ranges" responses (docs/protocol.md). */
#include <errno.h>
#include <string.h>

#include "output.h"

static long long num(const json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

static double real(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static const char *str(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

/* @bytes in B, KiB, MiB or GiB, 1 decimal above bytes. */
static const char *human_bytes(long long bytes, char *buf, size_t size)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
	double v = (double)(bytes < 0 ? -bytes : bytes);
	int u = -1;

	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, size, "%lld B", bytes);
	else
		snprintf(buf, size, "%s%.1f %s", bytes < 0 ? "-" : "", v, units[u]);
	return buf;
}

/* The innermost frames of a stack from the probed call outwards, up to @max, on one line. */
static void print_stack(FILE *f, const json_t *stack, size_t max)
{
	const json_t *fr;
	size_t i;

	json_array_foreach(stack, i, fr)
	{
		if (i == max) {
			fprintf(f, " < ...");
			break;
		}
		fprintf(f, "%s%s", i ? " < " : "",
			json_string_value(fr) ? json_string_value(fr) : "?");
	}
}

/*
 * output__gpu() - the "gpu" report: probes missing or failed, kernels by
 * launches, CUDA API times, copies by direction, synchronization waits by
 * stack, GPU memory growth and generic probe latencies.
 */
int output__gpu(FILE *f, const json_t *reply)
{
	const json_t *kernels = json_object_get(reply, "kernels"),
		     *api = json_object_get(reply, "api");
	const json_t *copies = json_object_get(reply, "copies"),
		     *syncs = json_object_get(reply, "syncs");
	const json_t *mem = json_object_get(reply, "memory"),
		     *probes = json_object_get(reply, "probes");
	const json_t *uprobes = json_object_get(reply, "uprobes"), *x;
	size_t i, attached = 0;
	char b1[32], b2[32], b3[32], b4[32], b5[32];

	if (!json_is_array(kernels) || !json_is_array(api) || !json_is_array(copies) ||
	    !json_is_array(syncs) || !json_is_object(mem) || !json_is_array(probes))
		return -EBADMSG;
	json_array_foreach(probes, i, x)
	{
		attached += strcmp(str(x, "status"), "attached") == 0;
	}
	fprintf(f,
		"session %lld (events %s): %zu probes attached; lost calls %lld, unnamed launches "
		"%lld, stacks truncated %lld, missing %lld\n",
		num(reply, "session"), str(reply, "events"), attached, num(reply, "lost_calls"),
		num(reply, "unnamed_launches"), num(reply, "truncated_stacks"),
		num(reply, "missing_stacks"));
	if (json_array_size(probes) == 0)
		fprintf(f, "  no probes: attach with --events cpu,cuda (or nvtx, or --uprobe)\n");
	json_array_foreach(probes, i, x)
	{
		if (strcmp(str(x, "status"), "attached") != 0 &&
		    strcmp(str(x, "status"), "missing") != 0)
			fprintf(f, "  %s%s%s: %s\n", str(x, "what"), str(x, "file")[0] ? " " : "",
				str(x, "file"), str(x, "status"));
	}

	fprintf(f, "\nKernel launches\n%10s %8s  %-12s %-12s  %s\n", "launches", "errors", "grid",
		"block", "kernel (launch API)");
	json_array_foreach(kernels, i, x)
	{
		fprintf(f, "%10lld %8lld  %-12s %-12s  %s (%s)\n      ", num(x, "launches"),
			num(x, "errors"), str(x, "grid"), str(x, "block"), str(x, "name"),
			str(x, "api"));
		print_stack(f, json_object_get(x, "stack"), 6);
		fputc('\n', f);
	}
	if (json_array_size(kernels) == 0)
		fprintf(f, "  none seen\n");

	fprintf(f, "\nCUDA API\n%-28s %8s %8s %12s %10s %10s %10s\n", "function", "calls", "errors",
		"total ms", "avg ms", "min ms", "max ms");
	json_array_foreach(api, i, x)
	{
		fprintf(f, "%-28s %8lld %8lld %12.3f %10.3f %10.3f %10.3f\n", str(x, "api"),
			num(x, "calls"), num(x, "errors"), real(x, "total_ms"), real(x, "avg_ms"),
			real(x, "min_ms"), real(x, "max_ms"));
	}
	if (json_array_size(api) == 0)
		fprintf(f, "  none seen\n");

	fprintf(f, "\nCopies\n%-8s %-22s %8s %14s %8s\n", "dir", "function", "calls", "bytes",
		"errors");
	json_array_foreach(copies, i, x)
	{
		fprintf(f, "%-8s %-22s %8lld %14lld %8lld\n", str(x, "direction"), str(x, "api"),
			num(x, "calls"), num(x, "bytes"), num(x, "errors"));
	}
	if (json_array_size(copies) == 0)
		fprintf(f, "  none seen\n");

	fprintf(f, "\nWaiting for the GPU (synchronization)\n");
	json_array_foreach(syncs, i, x)
	{
		fprintf(f, "%12.3f ms %6lld calls  %s  ", real(x, "total_ms"), num(x, "calls"),
			str(x, "api"));
		print_stack(f, json_object_get(x, "stack"), 6);
		fputc('\n', f);
	}
	if (json_array_size(syncs) == 0)
		fprintf(f, "  none seen\n");

	fprintf(f,
		"\nGPU memory: live %s (peak %s); %lld allocations (%lld failed) asking %s, "
		"%s allocated, %lld frees releasing %s\n",
		human_bytes(num(mem, "live_bytes"), b1, sizeof(b1)),
		human_bytes(num(mem, "peak_live_bytes"), b2, sizeof(b2)), num(mem, "allocations"),
		num(mem, "failed_allocations"),
		human_bytes(num(mem, "requested_bytes"), b3, sizeof(b3)),
		human_bytes(num(mem, "allocated_bytes"), b4, sizeof(b4)), num(mem, "frees"),
		human_bytes(num(mem, "freed_bytes"), b5, sizeof(b5)));
	if (num(mem, "failed_allocations") > 0)
		fprintf(f, "  (failed allocations returned no memory: they count in 'asking', not "
			   "in live)\n");
	json_array_foreach(json_object_get(mem, "by_stack"), i, x)
	{
		fprintf(f,
			"  live %10s  allocated %10s  asked %10s  %lld calls (%lld failed)  %s  ",
			human_bytes(num(x, "live_bytes"), b1, sizeof(b1)),
			human_bytes(num(x, "allocated_bytes"), b2, sizeof(b2)),
			human_bytes(num(x, "requested_bytes"), b3, sizeof(b3)),
			num(x, "allocations"), num(x, "failed"), str(x, "api"));
		print_stack(f, json_object_get(x, "stack"), 6);
		fputc('\n', f);
	}
	if (json_array_size(json_object_get(mem, "timeline")) > 1) {
		fprintf(f, "  live bytes over time:");
		json_array_foreach(json_object_get(mem, "timeline"), i, x)
		{
			fprintf(f, " %llds=%s", num(x, "t_s"),
				human_bytes(num(x, "live_bytes"), b1, sizeof(b1)));
		}
		fputc('\n', f);
	}

	if (json_array_size(uprobes) > 0) {
		fprintf(f, "\nUser probes\n%-40s %8s %12s %10s %10s %10s\n", "probe", "calls",
			"total ms", "avg ms", "min ms", "max ms");
		json_array_foreach(uprobes, i, x)
		{
			fprintf(f, "%-40s %8lld %12.3f %10.3f %10.3f %10.3f\n", str(x, "probe"),
				num(x, "calls"), real(x, "total_ms"), real(x, "avg_ms"),
				real(x, "min_ms"), real(x, "max_ms"));
		}
	}
	return 0;
}

/*
 * output__ranges() - the "ranges" report: NVTX ranges as a tree (nested
 * push/pop ranges indented under their parent), then start/end ranges and
 * marks, with calls, total, average, minimum, maximum and % of session time.
 */
int output__ranges(FILE *f, const json_t *reply)
{
	const json_t *ranges = json_object_get(reply, "ranges"), *x;
	size_t i;

	if (!json_is_array(ranges))
		return -EBADMSG;
	fprintf(f, "session %lld: %.3f s; NVTX ranges ended before they were seen opened: %lld\n\n",
		num(reply, "session"), real(reply, "session_s"), num(reply, "nvtx_unmatched"));
	fprintf(f, "%8s %12s %10s %10s %10s %7s  %s\n", "calls", "total ms", "avg ms", "min ms",
		"max ms", "%time", "range");
	json_array_foreach(ranges, i, x)
	{
		long long depth = num(x, "depth");
		const char *kind = str(x, "kind");

		fprintf(f, "%8lld %12.3f %10.3f %10.3f %10.3f %6.1f%%  %*s%s%s\n", num(x, "calls"),
			real(x, "total_ms"), real(x, "avg_ms"), real(x, "min_ms"),
			real(x, "max_ms"), real(x, "pct"), (int)(2 * (depth > 20 ? 20 : depth)), "",
			str(x, "name"),
			strcmp(kind, "push") == 0   ? ""
			: strcmp(kind, "mark") == 0 ? " (mark)"
						    : " (start/end)");
	}
	if (json_array_size(ranges) == 0)
		fprintf(f, "no NVTX ranges recorded (attached with --events cpu,nvtx? NVTX calls "
			   "inlined? see profctl gpu)\n");
	return 0;
}
