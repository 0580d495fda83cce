/* request.c - parse and validate protocol requests (untrusted input). */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <linux/perf_event.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "collect/uprobes.h"
#include "protocol.h"
#include "service/request.h"
#include "collect/unwind_worker.h"
#include "util.h"

static const struct {
	const char *name;
	enum request_cmd cmd;
	bool needs_session;
} commands[] = {
	{ "ping", CMD_PING, false },	     { "attach", CMD_ATTACH, false },
	{ "detach", CMD_DETACH, true },	     { "session", CMD_SESSION, true },
	{ "sessions", CMD_SESSIONS, false }, { "top", CMD_TOP, true },
	{ "hotpaths", CMD_HOTPATHS, true },  { "threads", CMD_THREADS, true },
	{ "resymbolize", CMD_RESYMBOLIZE, true }, { "offcpu", CMD_OFFCPU, true },
	{ "memory", CMD_MEMORY, true },
	{ "profile", CMD_PROFILE, true },   { "sql", CMD_SQL, false },
	{ "analyze", CMD_ANALYZE, true },
	{ "gpu", CMD_GPU, true },		     { "ranges", CMD_RANGES, true },
};

static const char *const event_names[] = { "cpu", "offcpu", "counters", "rss", "malloc", "cuda", "nvtx" };

/*
 * Events that can be sampled with stacks beside the CPU event, each with a
 * fixed sample period (one sample every @period events, as perf record -c):
 * frequency mode adapts the period once per tick, and for bursty events (a
 * loop of page faults) it overshoots and leaves a few samples in a second.
 */
static const struct {
	const char *name;
	uint32_t type;
	uint64_t config;
	uint64_t period;
} sampled_events[] = {
	{ "page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, 512 },
	{ "context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, 16 },
	{ "cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, 1 },
	{ "instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, 10000000 },
	{ "cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, 100000 },
	{ "cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, 10000 },
	{ "branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, 10000 },
};

const char *sampled_event_lookup(const char *name, uint32_t *ret_type, uint64_t *ret_config,
				 uint64_t *ret_period)
{
	for (size_t i = 0; i < ARRAY_SIZE(sampled_events); i++)
		if (strcmp(name, sampled_events[i].name) == 0) {
			if (ret_type)
				*ret_type = sampled_events[i].type;
			if (ret_config)
				*ret_config = sampled_events[i].config;
			if (ret_period)
				*ret_period = sampled_events[i].period;
			return sampled_events[i].name;
		}
	return NULL;
}

static int fail(char *errbuf, size_t errlen, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return err;
}

/* An integer field in [@min, @max] into *@ret; -ENOENT if absent or null (*@ret untouched). */
static int get_int(json_t *obj, const char *key, int64_t min, int64_t max, int64_t *ret,
		   char *errbuf, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!v || json_is_null(v))
		return -ENOENT;
	if (!json_is_integer(v))
		return fail(errbuf, errlen, -EINVAL, "\"%s\" must be an integer", key);
	if (json_integer_value(v) < min || json_integer_value(v) > max)
		return fail(errbuf, errlen, -EINVAL, "\"%s\" must be between %lld and %lld", key,
			    (long long)min, (long long)max);
	*ret = json_integer_value(v);
	return 0;
}

/* An optional integer field in [min, max] into *@ret; absent or null leaves *@ret as it is. */
static int get_u64(json_t *obj, const char *key, int64_t min, int64_t max, uint64_t *ret,
		   char *errbuf, size_t errlen)
{
	int64_t n;
	int r = get_int(obj, key, min, max, &n, errbuf, errlen);

	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	*ret = (uint64_t)n;
	return 0;
}

/* get_u64() for an unsigned field: [min, max] must fit in unsigned. */
static int get_uint(json_t *obj, const char *key, int64_t min, int64_t max, unsigned *ret,
		    char *errbuf, size_t errlen)
{
	uint64_t n = *ret;
	int r = get_u64(obj, key, min, max, &n, errbuf, errlen);

	*ret = (unsigned)n;
	return r;
}

/*
 * An optional number of seconds in [min, max] into *@ret; absent or null
 * leaves *@ret as it is. Otherwise -EINVAL with @errmsg for the client.
 */
static int get_seconds(json_t *obj, const char *key, double min, double max, const char *errmsg,
		       double *ret, char *errbuf, size_t errlen)
{
	json_t *v = json_object_get(obj, key);
	double d = json_number_value(v);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || !isfinite(d) || d < min || d > max)
		return fail(errbuf, errlen, -EINVAL, "%s", errmsg);
	*ret = d;
	return 0;
}

static int parse_events(json_t *v, struct request *req, char *errbuf, size_t errlen)
{
	size_t i;
	json_t *item;

	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 16)
		return fail(errbuf, errlen, -EINVAL,
			    "\"events\" must be a non-empty array of event names");
	req->events = 0;
	req->sampled_event = NULL;
	json_array_foreach(v, i, item)
	{
		const char *name = json_string_value(item);
		bool known = false;

		if (!name)
			return fail(errbuf, errlen, -EINVAL, "\"events\" must hold strings");
		for (size_t e = 0; e < ARRAY_SIZE(event_names); e++)
			if (event_names[e] && strcmp(name, event_names[e]) == 0) {
				req->events |= 1u << e;
				known = true;
			}
		if (!known && sampled_event_lookup(name, NULL, NULL, NULL)) {
			if (req->sampled_event && strcmp(req->sampled_event, name) != 0)
				return fail(errbuf, errlen, -EINVAL,
					    "one event besides cpu can be sampled with stacks, "
					    "not both '%s' and '%.32s'",
					    req->sampled_event, name);
			req->sampled_event = sampled_event_lookup(name, NULL, NULL, NULL);
			known = true;
		}
		if (!known)
			return fail(errbuf, errlen, -EINVAL,
				    "unknown event '%.32s' (known: cpu, offcpu, counters, rss, malloc, cuda, nvtx, and one of "
				    "page-faults, context-switches, cpu-migrations, instructions, "
				    "cache-references, cache-misses, branch-misses sampled with stacks)",
				    name);
	}
	if (!(req->events & EVENT_CPU))
		return fail(errbuf, errlen, -EINVAL, "\"events\" must include \"cpu\"");
	return 0;
}

/* "from_s"/"to_s": seconds from the session's start, 0 <= from < to. */
static int parse_range(json_t *root, struct request *req, char *errbuf, size_t errlen)
{
	static const char *const keys[] = { "from_s", "to_s" };
	double v[2] = { 0, INFINITY };

	for (int i = 0; i < 2; i++) {
		json_t *j = json_object_get(root, keys[i]);

		if (!j || json_is_null(j))
			continue;
		if (!json_is_number(j) || !isfinite(json_number_value(j)) ||
		    json_number_value(j) < 0 || json_number_value(j) > 366 * 86400.0)
			return fail(errbuf, errlen, -EINVAL,
				    "\"%s\" must be a number of seconds from the session's start, >= 0",
				    keys[i]);
		v[i] = json_number_value(j);
		req->has_range = true;
	}
	if (v[0] >= v[1])
		return fail(errbuf, errlen, -EINVAL, "\"from_s\" must be less than \"to_s\"");
	req->from_ns = (int64_t)(v[0] * NSEC_PER_SEC);
	req->to_ns = isinf(v[1]) ? INT64_MAX : (int64_t)(v[1] * NSEC_PER_SEC);
	return 0;
}

/*
 * "python_frames": "clean" (the default: the Python view) or "all" (every
 * frame), for a command that shows call stacks (@allowed). 0 or -EINVAL.
 */
static int parse_python_frames(json_t *root, bool allowed, struct request *req, char *errbuf,
			       size_t errlen)
{
	json_t *v = json_object_get(root, "python_frames");
	const char *s = json_string_value(v);

	if (!v || json_is_null(v))
		return 0;
	if (!allowed || !s || (strcmp(s, "clean") != 0 && strcmp(s, "all") != 0))
		return fail(errbuf, errlen, -EINVAL,
			    "\"python_frames\" must be \"clean\" or \"all\" (top, hotpaths,"
			    " profile and analyze only)");
	req->python_all = strcmp(s, "all") == 0;
	return 0;
}

void request__set_events(struct request *req, unsigned events)
{
	size_t off = 0;

	req->events = events;
	req->events_str[0] = '\0';
	for (size_t e = 0; e < ARRAY_SIZE(event_names); e++)
		if ((req->events & (1u << e)) && event_names[e])
			off += snprintf(req->events_str + off, sizeof(req->events_str) - off,
					"%s%s", off ? "," : "", event_names[e]);
	if (req->sampled_event && off < sizeof(req->events_str))
		snprintf(req->events_str + off, sizeof(req->events_str) - off, ",%s",
			 req->sampled_event);
}

int request__parse(const char *line, size_t len, struct request *ret, char *errbuf,
		   size_t errlen)
{
	_cleanup_(json_decrefp) json_t *root = NULL;
	struct request req = { .freq_hz = 0,
			       .events = EVENT_DEFAULT,
			       .unwind = UNWIND_MODE_AUTO,
			       .python = true,
			       .stack_bytes = PROFD_DEFAULT_STACK_BYTES,
			       .memory_interval_ns = PROFD_DEFAULT_MEMORY_INTERVAL_NS,
			       .malloc_sample_bytes = PROFD_DEFAULT_MALLOC_SAMPLE_BYTES,
			       .malloc_max_hits_per_s = PROFD_DEFAULT_MALLOC_MAX_HITS_PER_S,
			       .uprobe_max_calls_per_s = DEFAULT_UPROBE_MAX_CALLS_PER_S };
	json_error_t jerr;
	const char *cmd;
	json_t *v;
	int64_t n;
	double d;
	size_t i;
	int r;

	if (len >= PROFD_MAX_REQUEST_BYTES)
		return fail(errbuf, errlen, -E2BIG, "request larger than %d bytes",
			    PROFD_MAX_REQUEST_BYTES);
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return fail(errbuf, errlen, -EINVAL, "invalid JSON at byte %d: %s", jerr.position,
			    jerr.text);
	if (!json_is_object(root))
		return fail(errbuf, errlen, -EINVAL, "a request must be a JSON object");

	v = json_object_get(root, "v");
	if (v && !(json_is_integer(v) && json_integer_value(v) == PROFD_PROTOCOL_VERSION))
		return fail(errbuf, errlen, -EPROTONOSUPPORT,
			    "unsupported protocol version (this profd speaks %d)",
			    PROFD_PROTOCOL_VERSION);

	cmd = json_string_value(json_object_get(root, "cmd"));
	if (!cmd)
		return fail(errbuf, errlen, -EINVAL, "missing \"cmd\" string");
	for (i = 0; i < ARRAY_SIZE(commands); i++)
		if (strcmp(cmd, commands[i].name) == 0)
			break;
	if (i == ARRAY_SIZE(commands))
		return fail(errbuf, errlen, -EINVAL, "unknown command '%.32s'", cmd);
	req.cmd = commands[i].cmd;

	if (commands[i].needs_session) {
		r = get_int(root, "session", 1, INT64_MAX, &req.session, errbuf, errlen);
		if (r == -ENOENT)
			return fail(errbuf, errlen, -EINVAL, "missing \"session\"");
		if (r < 0)
			return r;
	}

	switch (req.cmd) {
	case CMD_ATTACH:
		r = get_int(root, "pid", 1, INT32_MAX, &req.pid, errbuf, errlen);
		if (r == -ENOENT)
			return fail(errbuf, errlen, -EINVAL, "missing \"pid\"");
		if (r < 0)
			return r;
		r = get_uint(root, "freq_hz", 1, PROFD_MAX_FREQ_HZ, &req.freq_hz, errbuf, errlen);
		if (r < 0)
			return r;
		/* > 0 (the least double above it) and at most a year: a bound that keeps
		 * the nanoseconds in range. */
		d = 0;
		r = get_seconds(root, "duration_s", DBL_TRUE_MIN, 366 * 86400.0,
				"\"duration_s\" must be a number of seconds > 0", &d, errbuf,
				errlen);
		if (r < 0)
			return r;
		if (d > 0)
			req.duration_ns = MAX((uint64_t)(d * NSEC_PER_SEC), 1);
		v = json_object_get(root, "unwind");
		if (v && !json_is_null(v)) {
			r = json_is_string(v) ? unwind_mode_parse(json_string_value(v)) : -EINVAL;
			if (r < 0)
				return fail(errbuf, errlen, -EINVAL,
					    "\"unwind\" must be \"fp\", \"dwarf\", \"auto\" or \"tables\"");
			req.unwind = r;
		}
		v = json_object_get(root, "children");
		if (v && !json_is_boolean(v))
			return fail(errbuf, errlen, -EINVAL, "\"children\" must be true or false");
		req.children = json_is_true(v);
		v = json_object_get(root, "python");
		if (v && !json_is_null(v)) {
			const char *mode = json_string_value(v);

			if (!mode || (strcmp(mode, "auto") != 0 && strcmp(mode, "off") != 0))
				return fail(errbuf, errlen, -EINVAL,
					    "\"python\" must be \"auto\" or \"off\"");
			req.python = strcmp(mode, "auto") == 0;
		}
		r = get_uint(root, "stack_bytes", 512, PROFILE_MAX_STACK_BYTES, &req.stack_bytes,
			     errbuf, errlen);
		if (r < 0)
			return r;
		d = 0;
		r = get_seconds(root, "memory_interval_s", 0.1, 3600,
				"\"memory_interval_s\" must be a number of seconds, 0.1..3600", &d,
				errbuf, errlen);
		if (r < 0)
			return r;
		if (d > 0)
			req.memory_interval_ns = (uint64_t)(d * NSEC_PER_SEC);
		r = get_u64(root, "malloc_sample_bytes", 1, 1LL << 40, &req.malloc_sample_bytes,
			    errbuf, errlen);
		if (r >= 0)
			r = get_u64(root, "malloc_max_hits_per_s", 0, 1000000000,
				    &req.malloc_max_hits_per_s, errbuf, errlen);
		if (r < 0)
			return r;
		v = json_object_get(root, "uprobes");
		if (v && !json_is_null(v)) {
			if (!json_is_string(v))
				return fail(errbuf, errlen, -EINVAL,
					    "\"uprobes\" must be a string LIB:SYMBOL[,LIB:SYMBOL]");
			r = uprobes__check_list(json_string_value(v), errbuf, errlen);
			if (r < 0)
				return r;
			snprintf(req.uprobes, sizeof(req.uprobes), "%s", json_string_value(v));
		}
		r = get_u64(root, "uprobe_max_calls_per_s", 0, 1000000000,
			    &req.uprobe_max_calls_per_s, errbuf, errlen);
		if (r < 0)
			return r;
		v = json_object_get(root, "events");
		if (v && !json_is_null(v)) {
			r = parse_events(v, &req, errbuf, errlen);
			if (r < 0)
				return r;
			req.events_given = true;
		}
		request__set_events(&req, req.events);
		r = get_u64(root, "pid_start_ticks", 0, INT64_MAX, &req.pid_start_ticks, errbuf,
			    errlen);
		if (r < 0)
			return r;
		v = json_object_get(root, "label");
		if (v && !json_is_null(v)) {
			const char *label = json_string_value(v);

			if (!label || json_string_length(v) >= sizeof(req.label) ||
			    strlen(label) != json_string_length(v))
				return fail(errbuf, errlen, -EINVAL,
					    "\"label\" must be a string of at most %zu bytes",
					    sizeof(req.label) - 1);
			for (const char *c = label; *c; c++)
				if ((unsigned char)*c < 0x20 || *c == 0x7f)
					return fail(errbuf, errlen, -EINVAL,
						    "\"label\" must not hold control characters");
			memcpy(req.label, label, json_string_length(v) + 1);
		}
		break;
	case CMD_TOP:
	case CMD_HOTPATHS:
	case CMD_OFFCPU:
	case CMD_MEMORY:
	case CMD_PROFILE:
	case CMD_GPU:
		req.limit = req.cmd == CMD_TOP ? 20 : 10;
		if (req.cmd != CMD_OFFCPU && req.cmd != CMD_MEMORY && req.cmd != CMD_GPU) {
			r = parse_range(root, &req, errbuf, errlen);
			if (r < 0)
				return r;
		}
		v = json_object_get(root, "event");
		if (v && !json_is_null(v) && req.cmd != CMD_OFFCPU && req.cmd != CMD_MEMORY &&
		    req.cmd != CMD_GPU) {
			const char *name = json_string_value(v);

			if (name && strcmp(name, "cpu") == 0)
				; /* the CPU samples, the default */
			else if (!name || !(req.sampled_event = sampled_event_lookup(name, NULL, NULL, NULL)))
				return fail(errbuf, errlen, -EINVAL,
					    "\"event\" must be cpu or a sampled event name");
		}
		v = json_object_get(root, "per_window");
		if (v && !json_is_null(v) && (!json_is_boolean(v) || req.cmd != CMD_PROFILE))
			return fail(errbuf, errlen, -EINVAL,
				    "\"per_window\" must be true or false (profile only)");
		req.per_window = !json_is_false(v);
		v = json_object_get(root, "packed");
		if (v && !json_is_null(v) && (!json_is_boolean(v) || req.cmd != CMD_PROFILE))
			return fail(errbuf, errlen, -EINVAL,
				    "\"packed\" must be true or false (profile only)");
		req.packed = json_is_true(v);
		v = json_object_get(root, "per_thread");
		if (v && !json_is_null(v) && (!json_is_boolean(v) || req.cmd != CMD_PROFILE))
			return fail(errbuf, errlen, -EINVAL,
				    "\"per_thread\" must be true or false (profile only)");
		req.per_thread = !json_is_false(v);
		r = parse_python_frames(root,
					req.cmd != CMD_OFFCPU && req.cmd != CMD_MEMORY &&
					    req.cmd != CMD_GPU,
					&req, errbuf, errlen);
		if (r < 0)
			return r;
		r = get_int(root, "limit", 1, 10000, &n, errbuf, errlen);
		if (r == 0)
			req.limit = (int)n;
		else if (r != -ENOENT)
			return r;
		break;
	case CMD_THREADS:
		v = json_object_get(root, "group_by");
		if (v && !json_is_null(v)) {
			if (!json_is_string(v) || strcmp(json_string_value(v), "name") != 0)
				return fail(errbuf, errlen, -EINVAL, "\"group_by\" must be \"name\"");
			req.group_by_name = true;
		}
		r = get_seconds(root, "window_s", 0.001, 366 * 86400.0,
				"\"window_s\" must be a number of seconds >= 0.001", &req.window_s,
				errbuf, errlen);
		if (r < 0)
			return r;
		v = json_object_get(root, "all");
		if (v && !json_is_null(v) && !json_is_boolean(v))
			return fail(errbuf, errlen, -EINVAL, "\"all\" must be true or false");
		req.all_threads = json_is_true(v);
		break;
	case CMD_ANALYZE:
		r = parse_python_frames(root, true, &req, errbuf, errlen);
		if (r < 0)
			return r;
		break;
	case CMD_SQL:
		v = json_object_get(root, "query");
		if (!json_is_string(v) || json_string_length(v) == 0)
			return fail(errbuf, errlen, -EINVAL, "missing \"query\" string");
		if (json_string_length(v) >= sizeof(req.sql) ||
		    strlen(json_string_value(v)) != json_string_length(v))
			return fail(errbuf, errlen, -EINVAL,
				    "\"query\" must be at most %zu bytes, without NUL bytes",
				    sizeof(req.sql) - 1);
		memcpy(req.sql, json_string_value(v), json_string_length(v) + 1);
		req.max_rows = 10000;
		r = get_int(root, "max_rows", 1, 1000000, &req.max_rows, errbuf, errlen);
		if (r < 0 && r != -ENOENT)
			return r;
		break;
	case CMD_RESYMBOLIZE:
		v = json_object_get(root, "debuginfod");
		if (v && !json_is_boolean(v))
			return fail(errbuf, errlen, -EINVAL, "\"debuginfod\" must be true or false");
		req.debuginfod = json_is_true(v);
		break;
	default:
		break;
	}
	*ret = req;
	return 0;
}
