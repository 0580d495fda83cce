/* test-request.c - the request parser on valid, malformed, hostile and oversized input. */
#include <errno.h>
#include <stdlib.h>

#include "check.h"
#include "protocol.h"
#include "service/request.h"
#include "util.h"

static int parse(const char *s, struct request *req, char *err, size_t errlen)
{
	return request__parse(s, strlen(s), req, err, errlen);
}

/* parse() of @s into @req, expected to succeed: 0, or the error, with its message on stderr. */
static int parse_ok(const char *s, struct request *req)
{
	char err[256] = "";
	int r = parse(s, req, err, sizeof(err));

	if (r < 0)
		fprintf(stderr, "input %s: %s\n", s, err);
	return r;
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

/*
 * expect_errors() - expect_error() for each line of @path (bad-requests.txt:
 * "ERRNO<tab>NEEDLE<tab>JSON", NEEDLE "-" for any message; '#' comments).
 * Returns the number of requests checked.
 */
static int expect_errors(const char *path)
{
	FILE *f = fopen(path, "re");
	char line[4096];
	int n = 0;

	if (!f)
		SETUP_FAIL("cannot open %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *err = strtok(line, "\t"), *needle = strtok(NULL, "\t"),
		     *json = strtok(NULL, "\n");

		if (line[0] == '#' || !json)
			continue;
		if (strcmp(err, "EINVAL") != 0 && strcmp(err, "EPROTONOSUPPORT") != 0)
			SETUP_FAIL("%s: unknown error name %s", path, err);
		expect_error(json, err[1] == 'I' ? -EINVAL : -EPROTONOSUPPORT,
			     strcmp(needle, "-") == 0 ? NULL : needle);
		n++;
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	static struct request req; /* holds 16 KiB of SQL text */
	char err[256];
	char *big;

	CHECK(expect_errors(argv[1]) > 80);
	expect_error("{\"cmd\":\"\xff\xfe\"}", -EINVAL, NULL); /* invalid UTF-8 */

	/* Valid requests and their defaults. */
	CHECK_INT_EQ(parse_ok("{\"v\":1,\"cmd\":\"attach\",\"pid\":42}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_ATTACH);
	CHECK_INT_EQ(req.pid, 42);
	CHECK_INT_EQ(req.freq_hz, 0); /* profd's default_freq_hz */
	CHECK_INT_EQ(req.duration_ns, 0);
	CHECK_STR_EQ(req.events_str, "cpu,offcpu,rss");
	CHECK_INT_EQ(req.memory_interval_ns, PROFD_DEFAULT_MEMORY_INTERVAL_NS);
	CHECK_INT_EQ(req.malloc_sample_bytes, PROFD_DEFAULT_MALLOC_SAMPLE_BYTES);

	/* Memory: the events, their settings, the report. */
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":7,\"events\":[\"cpu\",\"malloc\"],"
			      "\"memory_interval_s\":0.5,\"malloc_sample_bytes\":4096}",
			      &req),
		     0);
	CHECK_INT_EQ(req.events, EVENT_CPU | EVENT_MALLOC);
	CHECK_INT_EQ(req.memory_interval_ns, 500000000LL);
	CHECK_INT_EQ(req.malloc_sample_bytes, 4096);
	CHECK_INT_EQ(req.malloc_max_hits_per_s, PROFD_DEFAULT_MALLOC_MAX_HITS_PER_S);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":7,\"malloc_max_hits_per_s\":0}", &req),
		     0);
	CHECK_INT_EQ(req.malloc_max_hits_per_s, 0);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"memory\",\"session\":3}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_MEMORY);
	CHECK_INT_EQ(req.limit, 10);

	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":7,\"duration_s\":1.5,\"freq_hz\":250,"
			      "\"events\":[\"cpu\"]}",
			      &req),
		     0);
	CHECK_INT_EQ(req.duration_ns, 1500000000LL);
	CHECK_INT_EQ(req.freq_hz, 250);
	CHECK_STR_EQ(req.label, "");
	CHECK_INT_EQ(req.pid_start_ticks, 0);

	/* A snapshot's label and the start time of the process it means. */
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":7,\"label\":\"timer:trainer \u00e9\","
			      "\"pid_start_ticks\":123456789}",
			      &req),
		     0);
	CHECK_STR_EQ(req.label, "timer:trainer \xc3\xa9");
	CHECK_INT_EQ(req.pid_start_ticks, 123456789);
	{
		char long_label[400];

		snprintf(long_label, sizeof(long_label),
			 "{\"cmd\":\"attach\",\"pid\":7,\"label\":\"%0300d\"}", 0);
		expect_error(long_label, -EINVAL, "at most 256 bytes");
	}

	CHECK_INT_EQ(parse_ok("{\"cmd\":\"top\",\"session\":3}", &req), 0);
	CHECK_INT_EQ(req.limit, 20);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"hotpaths\",\"session\":3,\"limit\":5}", &req), 0);
	CHECK_INT_EQ(req.limit, 5);
	CHECK_INT_EQ(parse_ok("  {\"cmd\":\"ping\"}  \r", &req), 0);

	/* Time ranges (top, hotpaths, profile), and the commands of exports and SQL. */
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"top\",\"session\":3,\"from_s\":1.5,\"to_s\":4}", &req),
		     0);
	CHECK_INT_EQ(req.has_range, 1);
	CHECK_INT_EQ(req.from_ns, 1500000000LL);
	CHECK_INT_EQ(req.to_ns, 4000000000LL);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"profile\",\"session\":3,\"from_s\":2}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_PROFILE);
	CHECK_INT_EQ(req.to_ns, INT64_MAX);
	CHECK_INT_EQ(req.per_window, 1);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"profile\",\"session\":3,\"per_window\":false}", &req), 0);
	CHECK_INT_EQ(req.per_window, 0);
	CHECK_INT_EQ(req.per_thread, 1);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"profile\",\"session\":3,\"per_thread\":false}", &req), 0);
	CHECK_INT_EQ(req.per_thread, 0);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"hotpaths\",\"session\":3}", &req), 0);
	CHECK_INT_EQ(req.has_range, 0);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"analyze\",\"session\":9}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_ANALYZE);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"sql\",\"query\":\"SELECT 1\"}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_SQL);
	CHECK_STR_EQ(req.sql, "SELECT 1");
	CHECK_INT_EQ(req.max_rows, 10000);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"sql\",\"query\":\"SELECT 1\",\"max_rows\":5}", &req), 0);
	CHECK_INT_EQ(req.max_rows, 5);

	/* attach: unwinding, children, events with a second sampled event. */
	CHECK_INT_EQ(
	    parse_ok("{\"cmd\":\"attach\",\"pid\":9,\"unwind\":\"dwarf\",\"stack_bytes\":8192,"
		     "\"children\":true,\"events\":[\"cpu\",\"page-faults\"]}",
		     &req),
	    0);
	CHECK_INT_EQ(req.stack_bytes, 8192);
	CHECK(req.children);
	CHECK_STR_EQ(req.sampled_event, "page-faults");
	CHECK_STR_EQ(req.events_str, "cpu,page-faults");
	/* attach: Python frames, on unless "off". */
	CHECK(req.python);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":9,\"python\":\"off\"}", &req), 0);
	CHECK(!req.python);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":9,\"python\":\"auto\"}", &req), 0);
	CHECK(req.python);

	/* threads, offcpu, top --event, resymbolize options. */
	CHECK_INT_EQ(
	    parse_ok("{\"cmd\":\"threads\",\"session\":2,\"group_by\":\"name\",\"window_s\":0.5}",
		     &req),
	    0);
	CHECK(req.group_by_name);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"offcpu\",\"session\":2,\"limit\":3}", &req), 0);
	CHECK_INT_EQ(req.limit, 3);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"top\",\"session\":2,\"event\":\"page-faults\"}", &req),
		     0);
	CHECK_STR_EQ(req.sampled_event, "page-faults");
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"resymbolize\",\"session\":2,\"debuginfod\":true}", &req),
		     0);
	CHECK(req.debuginfod);

	/* cuda, nvtx and generic uprobes. */
	CHECK_INT_EQ(
	    parse_ok("{\"cmd\":\"attach\",\"pid\":1,\"events\":[\"cpu\",\"cuda\",\"nvtx\"],"
		     "\"uprobes\":\"libc.so.6:malloc,myprog:step\"}",
		     &req),
	    0);
	CHECK_INT_EQ(req.events, EVENT_CPU | EVENT_CUDA | EVENT_NVTX);
	CHECK_STR_EQ(req.events_str, "cpu,cuda,nvtx");
	CHECK_STR_EQ(req.uprobes, "libc.so.6:malloc,myprog:step");
	CHECK_INT_EQ(req.uprobe_max_calls_per_s, DEFAULT_UPROBE_MAX_CALLS_PER_S);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":1,\"uprobe_max_calls_per_s\":0}", &req),
		     0);
	CHECK_INT_EQ(req.uprobe_max_calls_per_s, 0);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"attach\",\"pid\":1}", &req), 0);
	CHECK_STR_EQ(req.uprobes, "");
	{
		char many[400] = "";

		for (int i = 0; i < 17; i++)
			strcat(many, i ? ",l:f" : "l:f");
		char line[512];

		snprintf(line, sizeof(line), "{\"cmd\":\"attach\",\"pid\":1,\"uprobes\":\"%s\"}",
			 many);
		expect_error(line, -EINVAL, "at most 16");
	}
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"gpu\",\"session\":4}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_GPU);
	CHECK_INT_EQ(req.limit, 10);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"gpu\",\"session\":4,\"limit\":2}", &req), 0);
	CHECK_INT_EQ(req.limit, 2);
	CHECK_INT_EQ(parse_ok("{\"cmd\":\"ranges\",\"session\":4}", &req), 0);
	CHECK_INT_EQ(req.cmd, CMD_RANGES);

	/* Invalid UTF-8 and embedded NUL. */
	CHECK_INT_EQ(request__parse("{\"cmd\":\"ping\"}\0junk", 19, &req, err, sizeof(err)),
		     -EINVAL);

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
