/*
 * cmdline.c - profctl's command options: one table of every option a
 * command may take, with what its value must be and the field of struct
 * args it sets. A command names the options it takes (struct command's
 * .options); getopt_long() tables are built from those names, so a
 * command's options, their checks and their error messages are written
 * once.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"

/* What an option's value is. */
enum arg_kind {
	ARG_FLAG,     /* no value: sets a bool */
	ARG_TEXT,     /* a string, kept as given once .check accepts it */
	ARG_INTEGER,  /* a decimal integer in .min..max: a long long */
	ARG_SECONDS,  /* a plain decimal number of seconds > 0: a double */
	ARG_OFFSET,   /* seconds from the session's start, >= 0: a double */
	ARG_DURATION, /* 30s, 15m, 2h, 7d or plain seconds, > 0: a double of seconds */
};

struct option_spec {
	const char *name; /* long name, without "--" */
	char short_name;  /* 0: none */
	enum arg_kind kind;
	size_t field;	    /* offsetof(struct args, ...): bool, const char *, long long, double */
	size_t given;	    /* offsetof a bool set when the option is given; 0: none */
	long long min, max; /* ARG_INTEGER's range */
	/* After the kind's own check: logs and returns -EINVAL if @value will not do. */
	int (*check)(const char *opt, const char *value);
};

static int invalid(const char *opt, const char *value, const char *why)
{
	log_error("invalid --%s '%s': %s", opt, value, why);
	return -EINVAL;
}

static int check_events(const char *opt, const char *value)
{
	const char *name;
	size_t pos = 0, len;

	while (events_next(value, &pos, &name, &len))
		if (len == 0)
			return invalid(opt, value, "empty event name");
	return 0;
}

static int check_unwind(const char *opt, const char *value)
{
	if (strcmp(value, "fp") != 0 && strcmp(value, "dwarf") != 0 && strcmp(value, "auto") != 0 &&
	    strcmp(value, "tables") != 0)
		return invalid(opt, value, "fp, dwarf, auto or tables");
	return 0;
}

static int check_python(const char *opt, const char *value)
{
	if (strcmp(value, "auto") != 0 && strcmp(value, "off") != 0)
		return invalid(opt, value, "auto or off");
	return 0;
}

static int check_uprobe(const char *opt, const char *value)
{
	return strchr(value, ':') ? 0 : invalid(opt, value, "expected LIB:SYMBOL[,LIB:SYMBOL]");
}

static int check_python_frames(const char *opt, const char *value)
{
	if (strcmp(value, "clean") != 0 && strcmp(value, "all") != 0)
		return invalid(opt, value, "clean or all");
	return 0;
}

static int check_group_by(const char *opt, const char *value)
{
	return strcmp(value, "name") == 0 ? 0 : invalid(opt, value, "only 'name' is known");
}

static int check_format(const char *opt, const char *value)
{
	if (!export_format_find(value))
		return invalid(opt, value, "folded, pprof, chrome-trace or speedscope");
	return 0;
}

static int check_not_empty(const char *opt, const char *value)
{
	return *value
		   ? 0
		   : invalid(opt, value, strcmp(opt, "cgroup") == 0 ? "empty path" : "empty name");
}

static int check_url(const char *opt, const char *value)
{
	if (strncmp(value, "http://", 7) != 0 && strncmp(value, "https://", 8) != 0)
		return invalid(opt, value, "expected http://HOST:PORT or https://HOST:PORT");
	return 0;
}

static int check_label(const char *opt, const char *value)
{
	if (strlen(value) > 256) {
		log_error("invalid --%s: longer than 256 bytes", opt);
		return -EINVAL;
	}
	return 0;
}

static int check_memory_interval(const char *opt, const char *value)
{
	double v = strtod(value, NULL);

	return v >= 0.1 && v <= 3600 ? 0 : invalid(opt, value, "0.1..3600 seconds");
}

#define FIELD(f) offsetof(struct args, f)
#define FLAG(n, c, f)                                                                              \
	{                                                                                          \
		.name = n, .short_name = c, .kind = ARG_FLAG, .field = FIELD(f)                    \
	}
#define TEXT(n, c, f, chk)                                                                         \
	{                                                                                          \
		.name = n, .short_name = c, .kind = ARG_TEXT, .field = FIELD(f), .check = chk      \
	}
#define INTEGER(n, c, f, lo, hi)                                                                   \
	{                                                                                          \
		.name = n, .short_name = c, .kind = ARG_INTEGER, .field = FIELD(f), .min = lo,     \
		.max = hi                                                                          \
	}
#define SECONDS(n, c, f, g, chk)                                                                   \
	{                                                                                          \
		.name = n, .short_name = c, .kind = ARG_SECONDS, .field = FIELD(f), .given = g,    \
		.check = chk                                                                       \
	}
#define DURATION(n, f)                                                                             \
	{                                                                                          \
		.name = n, .kind = ARG_DURATION, .field = FIELD(f)                                 \
	}
#define OFFSET(n, f, g)                                                                            \
	{                                                                                          \
		.name = n, .kind = ARG_OFFSET, .field = FIELD(f), .given = FIELD(g)                \
	}

static const struct option_spec specs[] = {
    SECONDS("duration", 'd', duration_s, FIELD(has_duration), NULL),
    INTEGER("freq", 'f', freq_hz, 1, PROFD_MAX_FREQ_HZ),
    TEXT("events", 'e', events, check_events),
    FLAG("wait", 'w', wait),
    TEXT("unwind", 0, unwind, check_unwind),
    INTEGER("stack-bytes", 0, stack_bytes, 512, 32768),
    FLAG("children", 0, children),
    SECONDS("memory-interval", 0, memory_interval_s, 0, check_memory_interval),
    INTEGER("malloc-sample-bytes", 0, malloc_sample_bytes, 1, 1LL << 40),
    INTEGER("malloc-max-rate", 0, malloc_max_rate, 0, 1000000000),
    TEXT("python", 0, python, check_python),
    TEXT("uprobe", 0, uprobes, check_uprobe),
    INTEGER("uprobe-max-rate", 0, uprobe_max_rate, 0, 1000000000),
    TEXT("comm", 0, comm, check_not_empty),
    TEXT("cgroup", 0, cgroup, check_not_empty),
    TEXT("label", 0, label, check_label),
    INTEGER("limit", 'n', limit, 1, LIMIT_MAX),
    FLAG("ascii", 0, ascii),
    TEXT("event", 0, event, NULL),
    OFFSET("from", from_s, has_from),
    OFFSET("to", to_s, has_to),
    TEXT("python-frames", 0, python_frames, check_python_frames),
    FLAG("all", 0, all),
    TEXT("group-by", 0, group_by, check_group_by),
    SECONDS("window", 0, window_s, 0, NULL),
    FLAG("debuginfod", 0, debuginfod),
    TEXT("format", 0, format, check_format),
    TEXT("output", 'o', output, NULL),
    INTEGER("thread", 0, thread, 1, INT_MAX),
    FLAG("inverted", 0, inverted),
    FLAG("csv", 0, csv),
    INTEGER("max-rows", 0, max_rows, 1, 1000000),
    TEXT("clickhouse-url", 0, clickhouse_url, check_url),
    TEXT("database", 0, database, check_not_empty),
    TEXT("user", 0, user, check_not_empty),
    TEXT("password-file", 0, password_file, check_not_empty),
    TEXT("ca-file", 0, ca_file, check_not_empty),
    DURATION("since", since_s),
    TEXT("host", 0, host, check_not_empty),
};

/* getopt_long()'s value for specs[i] when it has no short name. */
#define SPEC_VAL(i) (0x100 + (int)(i))

int parse_integer(const char *s, const char *what, long long min, long long max, long long *ret)
{
	char *end;
	long long v;

	if (!isdigit((unsigned char)s[0]) && !(s[0] == '-' && isdigit((unsigned char)s[1]))) {
		log_error("invalid %s '%s': not an integer", what, s);
		return -EINVAL;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0') {
		log_error("invalid %s '%s': not an integer", what, s);
		return -EINVAL;
	}
	if (errno == ERANGE || v < min || v > max) {
		if (errno == ERANGE)
			log_error("invalid %s '%s': out of range", what, s);
		else if (max == LLONG_MAX)
			log_error("invalid %s '%s': must be at least %lld", what, s, min);
		else
			log_error("invalid %s '%s': must be %lld..%lld", what, s, min, max);
		return -EINVAL;
	}
	*ret = v;
	return 0;
}

/*
 * parse_seconds() - @s as a plain decimal number of seconds > 0 ("10",
 * "0.5"); no signs, exponents, hex, inf or nan. Logs and returns -EINVAL
 * otherwise.
 */
static int parse_seconds(const char *opt, const char *s, double *ret)
{
	size_t digits = 0, dots = 0;
	char *end;
	double v;

	for (const char *p = s; *p; p++) {
		if (isdigit((unsigned char)*p))
			digits++;
		else if (*p == '.')
			dots++;
		else
			digits = 0, dots = 2; /* anything else: reject below */
		if (dots > 1)
			break;
	}
	if (digits == 0 || dots > 1)
		return invalid(opt, s, "not a number of seconds");
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || errno == ERANGE || !(v > 0))
		return invalid(opt, s, "must be more than 0 seconds");
	*ret = v;
	return 0;
}

/* parse_offset() - --from/--to: seconds from the session's start, >= 0 ("0", "2.5"). */
static int parse_offset(const char *opt, const char *s, double *ret)
{
	char *end;

	errno = 0;
	if (!isdigit((unsigned char)s[0]))
		return invalid(opt, s, "seconds from the session's start, >= 0");
	*ret = strtod(s, &end);
	if (*end != '\0' || errno == ERANGE || *ret > 366 * 86400.0)
		return invalid(opt, s, "seconds from the session's start, >= 0");
	return 0;
}

/*
 * parse_duration() - --since: a number and a unit, "30s", "15m", "2h", "7d"
 * (a plain number is seconds), more than 0 and at most 10 years; "1.5h"
 * is 5400 s. Logs and returns -EINVAL otherwise.
 */
static int parse_duration(const char *opt, const char *s, double *ret)
{
	static const struct {
		char unit;
		double s;
	} units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
	size_t len = strlen(s), digits = 0, dots = 0;
	double scale = 1, v;
	char *end;

	for (size_t i = 0; len > 0 && i < ARRAY_SIZE(units); i++)
		if (s[len - 1] == units[i].unit) {
			scale = units[i].s;
			len--;
		}
	for (size_t i = 0; i < len; i++) {
		if (isdigit((unsigned char)s[i]))
			digits++;
		else if (s[i] == '.')
			dots++;
		else
			dots = 2; /* anything else: rejected below */
	}
	errno = 0;
	v = digits && dots <= 1 ? strtod(s, &end) : 0;
	if (!digits || dots > 1 || end != s + len || errno == ERANGE || !(v > 0) ||
	    v * scale > 3650 * 86400.0)
		return invalid(opt, s, "expected a duration such as 30s, 15m, 2h or 7d");
	*ret = v * scale;
	return 0;
}

/* The spec named by the @len bytes at @name, or NULL. */
static const struct option_spec *spec_find(const char *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(specs); i++)
		if (strlen(specs[i].name) == len && memcmp(specs[i].name, name, len) == 0)
			return &specs[i];
	return NULL;
}

int options__build(const char *names, struct option *ret, size_t n, char *shortopts, size_t len)
{
	size_t k = 0, used;

	used = (size_t)snprintf(shortopts, len, "-s:jh");
	ret[k++] = (struct option){"socket", required_argument, NULL, 's'};
	ret[k++] = (struct option){"json", no_argument, NULL, 'j'};
	ret[k++] = (struct option){"help", no_argument, NULL, 'h'};
	for (const char *p = names ? names : ""; *p;) {
		size_t w = strcspn(p, " ");
		const struct option_spec *s = spec_find(p, w);

		if (!s || k + 1 >= n || used + 3 > len)
			return -EINVAL;
		ret[k++] =
		    (struct option){s->name, s->kind == ARG_FLAG ? no_argument : required_argument,
				    NULL, s->short_name ? s->short_name : SPEC_VAL(s - specs)};
		if (s->short_name)
			used += (size_t)snprintf(shortopts + used, len - used, "%c%s",
						 s->short_name, s->kind == ARG_FLAG ? "" : ":");
		p += w + (p[w] == ' ');
	}
	ret[k] = (struct option){};
	return 0;
}

int options__apply(int c, const char *value, struct args *a)
{
	const struct option_spec *s = NULL;
	char *field;
	int r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(specs) && !s; i++)
		if (c == SPEC_VAL(i) || (specs[i].short_name && c == specs[i].short_name))
			s = &specs[i];
	if (!s)
		return -ENOENT;
	field = (char *)a + s->field;
	switch (s->kind) {
	case ARG_FLAG:
		*(bool *)field = true;
		break;
	case ARG_TEXT:
		r = s->check ? s->check(s->name, value) : 0;
		if (r == 0)
			*(const char **)field = value;
		break;
	case ARG_INTEGER: {
		char what[32];

		snprintf(what, sizeof(what), "--%s", s->name);
		r = parse_integer(value, what, s->min, s->max, (long long *)field);
		break;
	}
	case ARG_SECONDS:
		r = parse_seconds(s->name, value, (double *)field);
		break;
	case ARG_OFFSET:
		r = parse_offset(s->name, value, (double *)field);
		break;
	case ARG_DURATION:
		r = parse_duration(s->name, value, (double *)field);
		break;
	}
	if (r == 0 && s->check && s->kind != ARG_TEXT)
		r = s->check(s->name, value);
	if (r < 0)
		return -EINVAL;
	if (s->given)
		*(bool *)((char *)a + s->given) = true;
	return 0;
}
