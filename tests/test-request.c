/* test-request.c - the request parser on valid, malformed, hostile and oversized input. */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "protocol.h"
#include "service/request.h"

static int parse(const char *s, struct request *req, char *err, size_t errlen)
{
	return request__parse(s, strlen(s), req, err, errlen);
}

static void expect_error(const char *s, int want, const char *needle)
{
	struct request req;
	char err[256] = "";
	int r = parse(s, &req, err, sizeof(err));

	CHECK_INT_EQ(r, want);
	if (needle && !strstr(err, needle)) {
		fprintf(stderr, "input %s: message '%s' lacks '%s'\n", s, err, needle);
		check_failures++;
	}
}

int main(void)
{
	static struct request req; /* holds 16 KiB of SQL text */
	char err[256];
	char *big;

	/* Valid requests and their defaults. */
	CHECK_INT_EQ(parse("{\"v\":1,\"cmd\":\"attach\",\"pid\":42}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_ATTACH);
	CHECK_INT_EQ(req.pid, 42);
	CHECK_INT_EQ(req.freq_hz, 0); /* profd's default_freq_hz */
	CHECK_INT_EQ(req.duration_ns, 0);
	CHECK_STR_EQ(req.events_str, "cpu,offcpu,rss");
	CHECK_INT_EQ(req.memory_interval_ns, PROFD_DEFAULT_MEMORY_INTERVAL_NS);
	CHECK_INT_EQ(req.malloc_sample_bytes, PROFD_DEFAULT_MALLOC_SAMPLE_BYTES);

	/* Memory: the events, their settings, the report. */
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":7,\"events\":[\"cpu\",\"malloc\"],"
			   "\"memory_interval_s\":0.5,\"malloc_sample_bytes\":4096}",
			   &req, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(req.events, EVENT_CPU | EVENT_MALLOC);
	CHECK_INT_EQ(req.memory_interval_ns, 500000000LL);
	CHECK_INT_EQ(req.malloc_sample_bytes, 4096);
	CHECK_INT_EQ(req.malloc_max_hits_per_s, PROFD_DEFAULT_MALLOC_MAX_HITS_PER_S);
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":7,\"malloc_max_hits_per_s\":0}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.malloc_max_hits_per_s, 0);
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"malloc_max_hits_per_s\":-1}", -EINVAL,
		     "malloc_max_hits_per_s");
	CHECK_INT_EQ(parse("{\"cmd\":\"memory\",\"session\":3}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_MEMORY);
	CHECK_INT_EQ(req.limit, 10);
	expect_error("{\"cmd\":\"memory\"}", -EINVAL, "session");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"memory_interval_s\":0.01}", -EINVAL,
		     "memory_interval_s");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"memory_interval_s\":\"1\"}", -EINVAL,
		     "memory_interval_s");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"malloc_sample_bytes\":0}", -EINVAL,
		     "malloc_sample_bytes");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"malloc_sample_bytes\":2e30}", -EINVAL,
		     "malloc_sample_bytes");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"events\":[\"cpu\",\"heap\"]}", -EINVAL,
		     "malloc");

	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":7,\"duration_s\":1.5,\"freq_hz\":250,"
			   "\"events\":[\"cpu\"]}",
			   &req, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(req.duration_ns, 1500000000LL);
	CHECK_INT_EQ(req.freq_hz, 250);
	CHECK_STR_EQ(req.label, "");
	CHECK_INT_EQ(req.pid_start_ticks, 0);

	/* A snapshot's label and the start time of the process it means. */
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":7,\"label\":\"timer:trainer \u00e9\","
			   "\"pid_start_ticks\":123456789}",
			   &req, err, sizeof(err)),
		     0);
	CHECK_STR_EQ(req.label, "timer:trainer \xc3\xa9");
	CHECK_INT_EQ(req.pid_start_ticks, 123456789);
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"label\":5}", -EINVAL, "\"label\" must be a string");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"label\":\"a\\nb\"}", -EINVAL,
		     "control characters");
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"label\":\"a\\u0000b\"}", -EINVAL, NULL);
	expect_error("{\"cmd\":\"attach\",\"pid\":7,\"pid_start_ticks\":-1}", -EINVAL,
		     "pid_start_ticks");
	{
		char long_label[400];

		snprintf(long_label, sizeof(long_label), "{\"cmd\":\"attach\",\"pid\":7,\"label\":\"%0300d\"}", 0);
		expect_error(long_label, -EINVAL, "at most 256 bytes");
	}

	CHECK_INT_EQ(parse("{\"cmd\":\"top\",\"session\":3}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.limit, 20);
	CHECK_INT_EQ(parse("{\"cmd\":\"hotpaths\",\"session\":3,\"limit\":5}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.limit, 5);
	CHECK_INT_EQ(parse("  {\"cmd\":\"ping\"}  \r", &req, err, sizeof(err)), 0);

	/* Time ranges (top, hotpaths, profile), and the commands of exports and SQL. */
	CHECK_INT_EQ(parse("{\"cmd\":\"top\",\"session\":3,\"from_s\":1.5,\"to_s\":4}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.has_range, 1);
	CHECK_INT_EQ(req.from_ns, 1500000000LL);
	CHECK_INT_EQ(req.to_ns, 4000000000LL);
	CHECK_INT_EQ(parse("{\"cmd\":\"profile\",\"session\":3,\"from_s\":2}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.cmd, CMD_PROFILE);
	CHECK_INT_EQ(req.to_ns, INT64_MAX);
	CHECK_INT_EQ(req.per_window, 1);
	CHECK_INT_EQ(parse("{\"cmd\":\"profile\",\"session\":3,\"per_window\":false}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.per_window, 0);
	expect_error("{\"cmd\":\"profile\",\"session\":3,\"per_window\":1}", -EINVAL, "per_window");
	expect_error("{\"cmd\":\"top\",\"session\":3,\"per_window\":false}", -EINVAL, "per_window");
	CHECK_INT_EQ(parse("{\"cmd\":\"hotpaths\",\"session\":3}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.has_range, 0);
	expect_error("{\"cmd\":\"top\",\"session\":3,\"from_s\":5,\"to_s\":2}", -EINVAL, "less than");
	expect_error("{\"cmd\":\"top\",\"session\":3,\"from_s\":-1}", -EINVAL, "from_s");
	expect_error("{\"cmd\":\"profile\",\"session\":3,\"to_s\":\"x\"}", -EINVAL, "to_s");
	expect_error("{\"cmd\":\"profile\"}", -EINVAL, "session");
	CHECK_INT_EQ(parse("{\"cmd\":\"analyze\",\"session\":9}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_ANALYZE);
	CHECK_INT_EQ(parse("{\"cmd\":\"sql\",\"query\":\"SELECT 1\"}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_SQL);
	CHECK_STR_EQ(req.sql, "SELECT 1");
	CHECK_INT_EQ(req.max_rows, 10000);
	CHECK_INT_EQ(parse("{\"cmd\":\"sql\",\"query\":\"SELECT 1\",\"max_rows\":5}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.max_rows, 5);
	expect_error("{\"cmd\":\"sql\"}", -EINVAL, "query");
	expect_error("{\"cmd\":\"sql\",\"query\":\"\"}", -EINVAL, "query");
	expect_error("{\"cmd\":\"sql\",\"query\":7}", -EINVAL, "query");
	expect_error("{\"cmd\":\"sql\",\"query\":\"SELECT \\u0000 1\"}", -EINVAL, "NUL");
	expect_error("{\"cmd\":\"sql\",\"query\":\"SELECT 1\",\"max_rows\":0}", -EINVAL, "max_rows");

	/* Malformed JSON and wrong shapes. */
	expect_error("", -EINVAL, "invalid JSON");
	expect_error("{", -EINVAL, "invalid JSON");
	expect_error("{\"cmd\":\"ping\"} trailing", -EINVAL, "invalid JSON");
	expect_error("[1,2,3]", -EINVAL, "object");
	expect_error("\"attach\"", -EINVAL, NULL);
	expect_error("{\"cmd\":\"ping\",\"cmd\":\"ping\"}", -EINVAL, NULL); /* duplicate key */
	expect_error("{\"v\":2,\"cmd\":\"ping\"}", -EPROTONOSUPPORT, "version");
	expect_error("{\"v\":\"1\",\"cmd\":\"ping\"}", -EPROTONOSUPPORT, NULL);
	expect_error("{\"cmd\":42}", -EINVAL, "cmd");
	expect_error("{}", -EINVAL, "cmd");
	expect_error("{\"cmd\":\"format-disk\"}", -EINVAL, "unknown command");

	/* attach: PID 0, negative, string, float, huge; bad options. */
	expect_error("{\"cmd\":\"attach\"}", -EINVAL, "pid");
	expect_error("{\"cmd\":\"attach\",\"pid\":0}", -EINVAL, "pid");
	expect_error("{\"cmd\":\"attach\",\"pid\":-1}", -EINVAL, "pid");
	expect_error("{\"cmd\":\"attach\",\"pid\":\"abc\"}", -EINVAL, "integer");
	expect_error("{\"cmd\":\"attach\",\"pid\":1.5}", -EINVAL, "integer");
	expect_error("{\"cmd\":\"attach\",\"pid\":99999999999}", -EINVAL, "pid");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"freq_hz\":0}", -EINVAL, "freq_hz");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"freq_hz\":1000000}", -EINVAL, "freq_hz");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"duration_s\":-3}", -EINVAL, "duration_s");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"duration_s\":\"10\"}", -EINVAL, "duration_s");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cpu\",\"gpu-magic\"]}", -EINVAL,
		     "unknown event");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[]}", -EINVAL, "events");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":\"cpu\"}", -EINVAL, "events");

	/* attach: unwinding, children, events with a second sampled event. */
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":9,\"unwind\":\"dwarf\",\"stack_bytes\":8192,"
			   "\"children\":true,\"events\":[\"cpu\",\"page-faults\"]}",
			   &req, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(req.stack_bytes, 8192);
	CHECK(req.children);
	CHECK_STR_EQ(req.sampled_event, "page-faults");
	CHECK_STR_EQ(req.events_str, "cpu,page-faults");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"unwind\":\"magic\"}", -EINVAL, "unwind");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"unwind\":3}", -EINVAL, "unwind");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"stack_bytes\":100}", -EINVAL, "stack_bytes");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"stack_bytes\":1048576}", -EINVAL,
		     "stack_bytes");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"stack_bytes\":\"16k\"}", -EINVAL, "integer");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"children\":\"yes\"}", -EINVAL, "children");
	/* attach: Python frames, on unless "off". */
	CHECK(req.python);
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":9,\"python\":\"off\"}", &req, err,
			   sizeof(err)),
		     0);
	CHECK(!req.python);
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":9,\"python\":\"auto\"}", &req, err,
			   sizeof(err)),
		     0);
	CHECK(req.python);
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"python\":\"on\"}", -EINVAL, "python");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"python\":true}", -EINVAL, "python");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cpu\",\"page-faults\","
		     "\"cache-misses\"]}",
		     -EINVAL, "one event");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"offcpu\"]}", -EINVAL, "cpu");

	/* threads, offcpu, top --event, resymbolize options. */
	CHECK_INT_EQ(parse("{\"cmd\":\"threads\",\"session\":2,\"group_by\":\"name\",\"window_s\":0.5}",
			   &req, err, sizeof(err)),
		     0);
	CHECK(req.group_by_name);
	expect_error("{\"cmd\":\"threads\",\"session\":2,\"group_by\":\"pid\"}", -EINVAL, "group_by");
	expect_error("{\"cmd\":\"threads\",\"session\":2,\"window_s\":0}", -EINVAL, "window_s");
	expect_error("{\"cmd\":\"threads\",\"session\":2,\"window_s\":\"5\"}", -EINVAL, "window_s");
	expect_error("{\"cmd\":\"threads\",\"session\":2,\"window_s\":1e300}", -EINVAL, "window_s");
	CHECK_INT_EQ(parse("{\"cmd\":\"offcpu\",\"session\":2,\"limit\":3}", &req, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(req.limit, 3);
	expect_error("{\"cmd\":\"offcpu\",\"session\":2,\"limit\":-1}", -EINVAL, "limit");
	expect_error("{\"cmd\":\"offcpu\"}", -EINVAL, "session");
	CHECK_INT_EQ(parse("{\"cmd\":\"top\",\"session\":2,\"event\":\"page-faults\"}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_STR_EQ(req.sampled_event, "page-faults");
	expect_error("{\"cmd\":\"top\",\"session\":2,\"event\":\"bogus\"}", -EINVAL, "event");
	expect_error("{\"cmd\":\"hotpaths\",\"session\":2,\"event\":7}", -EINVAL, "event");
	CHECK_INT_EQ(parse("{\"cmd\":\"resymbolize\",\"session\":2,\"debuginfod\":true}", &req, err,
			   sizeof(err)),
		     0);
	CHECK(req.debuginfod);
	expect_error("{\"cmd\":\"resymbolize\",\"session\":2,\"debuginfod\":1}", -EINVAL,
		     "debuginfod");

	/* cuda, nvtx and generic uprobes. */
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cpu\",\"cuda\",\"nvtx\"],"
			   "\"uprobes\":\"libc.so.6:malloc,myprog:step\"}",
			   &req, err, sizeof(err)),
		     0);
	CHECK_INT_EQ(req.events, EVENT_CPU | EVENT_CUDA | EVENT_NVTX);
	CHECK_STR_EQ(req.events_str, "cpu,cuda,nvtx");
	CHECK_STR_EQ(req.uprobes, "libc.so.6:malloc,myprog:step");
	CHECK_INT_EQ(req.uprobe_max_calls_per_s, DEFAULT_UPROBE_MAX_CALLS_PER_S);
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":1,\"uprobe_max_calls_per_s\":0}", &req, err,
			   sizeof(err)),
		     0);
	CHECK_INT_EQ(req.uprobe_max_calls_per_s, 0);
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobe_max_calls_per_s\":-1}", -EINVAL,
		     "uprobe_max_calls_per_s");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobe_max_calls_per_s\":\"5\"}", -EINVAL,
		     "uprobe_max_calls_per_s");
	CHECK_INT_EQ(parse("{\"cmd\":\"attach\",\"pid\":1}", &req, err, sizeof(err)), 0);
	CHECK_STR_EQ(req.uprobes, "");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"malloc\"}", -EINVAL, "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\":malloc\"}", -EINVAL, "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"libc:\"}", -EINVAL, "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"a:b:c\"}", -EINVAL, "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"libc:malloc,\"}", -EINVAL, "comma");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"libc:malloc,,libc:free\"}", -EINVAL,
		     "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"libc:mal loc\"}", -EINVAL, "LIB:SYMBOL");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":7}", -EINVAL, "uprobes");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"\"}", -EINVAL, "uprobes");
	{
		char many[400] = "";

		for (int i = 0; i < 17; i++)
			strcat(many, i ? ",l:f" : "l:f");
		char line[512];

		snprintf(line, sizeof(line), "{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"%s\"}", many);
		expect_error(line, -EINVAL, "at most 16");
	}
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cuda\"]}", -EINVAL, "cpu");
	expect_error("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cpu\",\"gpu\"]}", -EINVAL, "cuda");
	CHECK_INT_EQ(parse("{\"cmd\":\"gpu\",\"session\":4}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_GPU);
	CHECK_INT_EQ(req.limit, 10);
	CHECK_INT_EQ(parse("{\"cmd\":\"gpu\",\"session\":4,\"limit\":2}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.limit, 2);
	expect_error("{\"cmd\":\"gpu\",\"session\":4,\"limit\":0}", -EINVAL, "limit");
	expect_error("{\"cmd\":\"gpu\"}", -EINVAL, "session");
	CHECK_INT_EQ(parse("{\"cmd\":\"ranges\",\"session\":4}", &req, err, sizeof(err)), 0);
	CHECK_INT_EQ(req.cmd, CMD_RANGES);
	expect_error("{\"cmd\":\"ranges\",\"session\":\"4\"}", -EINVAL, "session");

	/* Session-taking commands. */
	expect_error("{\"cmd\":\"top\"}", -EINVAL, "session");
	expect_error("{\"cmd\":\"top\",\"session\":0}", -EINVAL, "session");
	expect_error("{\"cmd\":\"top\",\"session\":1,\"limit\":0}", -EINVAL, "limit");
	expect_error("{\"cmd\":\"detach\",\"session\":null}", -EINVAL, "session");

	/* Invalid UTF-8 and embedded NUL. */
	expect_error("{\"cmd\":\"\xff\xfe\"}", -EINVAL, NULL);
	CHECK_INT_EQ(request__parse("{\"cmd\":\"ping\"}\0junk", 19, &req, err, sizeof(err)), -EINVAL);

	/* Oversized: refused before parsing. */
	big = malloc(PROFD_MAX_REQUEST_BYTES + 10);
	memset(big, ' ', PROFD_MAX_REQUEST_BYTES + 9);
	big[PROFD_MAX_REQUEST_BYTES + 9] = '\0';
	expect_error(big, -E2BIG, "larger");
	free(big);

	/* Deep nesting must not blow the stack (jansson limits depth). */
	big = malloc(200001);
	for (int i = 0; i < 100000; i++) {
		big[i] = '[';
		big[200000 - 1 - i] = ']';
	}
	big[200000] = '\0';
	CHECK(request__parse(big, 200000, &req, err, sizeof(err)) < 0);
	free(big);

	return check_exit("test-request");
}
