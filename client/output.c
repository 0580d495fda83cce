/*
 * output.c - human renderings of profd's responses (the shapes of
 * docs/protocol.md) shared by every report, then attach, session, sessions
 * and top; the other reports have a file each (output-*.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/* What the last -EBADMSG was about; profctl is single-threaded. */
static char field_error[192];

/* bad_message() - a malformed response: keep the printf-style reason for output__error(). */
int bad_message(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(field_error, sizeof(field_error), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

/* output__error() - names the field behind the last -EBADMSG ("" if none). */
const char *output__error(void)
{
	return field_error;
}

int bad_field(const char *key, const char *expected)
{
	snprintf(field_error, sizeof(field_error), "field \"%s\" is missing or not %s", key,
		 expected);
	return -EBADMSG;
}

/* The JSON types a field reader takes, as bits of 1 << json_typeof(). */
enum {
	FIELD_INTEGER = 1u << JSON_INTEGER,
	FIELD_NUMBER = 1u << JSON_INTEGER | 1u << JSON_REAL,
	FIELD_STRING = 1u << JSON_STRING,
	FIELD_ARRAY = 1u << JSON_ARRAY,
};

/*
 * get_field() - @o's member @key in *@ret if its type is one of @types. With
 * @ret_set (an optional field), an absent or null member is 0 with *@ret
 * NULL and *@ret_set false. Otherwise -EBADMSG, *@ret NULL, and the reason
 * recorded: @key is missing or not @expected (" or null" if optional).
 */
static int get_field(const json_t *o, const char *key, unsigned types, const char *expected,
		     bool *ret_set, const json_t **ret)
{
	const json_t *v = json_object_get(o, key);

	*ret = NULL;
	if (ret_set)
		*ret_set = false;
	if (ret_set && (!v || json_is_null(v)))
		return 0;
	if (!v || !(types & 1u << json_typeof(v)))
		return bad_message("field \"%s\" is missing or not %s%s", key, expected,
				   ret_set ? " or null" : "");
	*ret = v;
	if (ret_set)
		*ret_set = true;
	return 0;
}

/*
 * Field readers: each returns 0 with the value in *ret, or -EBADMSG (and
 * records why) when @key is absent or of another type; *ret is then
 * unchanged. The get_opt_*() forms also accept an absent key or null,
 * reported as *ret_set false (*ret unchanged) or, for strings, NULL; given
 * a NULL @ret_set they are the get_*() forms. Strings are borrowed from @o.
 */
int get_opt_int(const json_t *o, const char *key, long long *ret, bool *ret_set)
{
	const json_t *v;
	int r = get_field(o, key, FIELD_INTEGER, "an integer", ret_set, &v);

	if (v)
		*ret = json_integer_value(v);
	return r;
}

int get_int(const json_t *o, const char *key, long long *ret)
{
	return get_opt_int(o, key, ret, NULL);
}

int get_opt_num(const json_t *o, const char *key, double *ret, bool *ret_set)
{
	const json_t *v;
	int r = get_field(o, key, FIELD_NUMBER, "a number", ret_set, &v);

	if (v)
		*ret = json_number_value(v);
	return r;
}

int get_num(const json_t *o, const char *key, double *ret)
{
	return get_opt_num(o, key, ret, NULL);
}

static int get_string(const json_t *o, const char *key, const char **ret, bool *ret_set)
{
	const json_t *v;
	int r = get_field(o, key, FIELD_STRING, "a string", ret_set, &v);

	if (v)
		*ret = json_string_value(v);
	return r;
}

int get_str(const json_t *o, const char *key, const char **ret)
{
	return get_string(o, key, ret, NULL);
}

int get_opt_str(const json_t *o, const char *key, const char **ret)
{
	bool set;

	*ret = NULL;
	return get_string(o, key, ret, &set);
}

int get_array(const json_t *o, const char *key, const json_t **ret)
{
	const json_t *v;
	int r = get_field(o, key, FIELD_ARRAY, "an array", NULL, &v);

	if (v)
		*ret = v;
	return r;
}

int check_object(const json_t *v, const char *what)
{
	if (!json_is_object(v))
		return bad_field(what, "an object");
	return 0;
}

/*
 * table_of_rows() - a new table of @columns (@n_columns, borrowed: they must
 * outlive it) with a row from @add_row for each element of the JSON array
 * @rows, in order. Returns 0 with the table in *@ret_t (the caller frees it),
 * -ENOMEM, or the first error of @add_row (-EBADMSG for a malformed element,
 * recorded for output__error()); then *@ret_t is unchanged.
 */
int table_of_rows(const json_t *rows, const struct table_column *columns, size_t n_columns,
		  int (*add_row)(struct table *t, const json_t *row), struct table **ret_t)
{
	_cleanup_(table__freep) struct table *t = table__new(columns, n_columns);
	const json_t *row;
	size_t i;
	int r;

	if (!t)
		return -ENOMEM;
	json_array_foreach(rows, i, row)
	{
		if ((r = add_row(t, row)) < 0)
			return r;
	}
	*ret_t = TAKE_PTR(t);
	return 0;
}

/* module_name() - the base name of a module path; "[kernel.kallsyms]" stays as it is. */
const char *module_name(const char *module)
{
	const char *slash;

	if (!module || !*module)
		return "?";
	slash = strrchr(module, '/');
	return slash && slash[1] ? slash + 1 : module;
}

/* file_name() - the base name of a source path, for display (--json has the whole path). */
const char *file_name(const char *file)
{
	const char *slash = strrchr(file, '/');

	return slash && slash[1] ? slash + 1 : file;
}

/* format_local_time() - @ns since the epoch as local "YYYY-MM-DD HH:MM:SS[ ZONE]". */
void format_local_time(char *buf, size_t size, long long ns, bool zone)
{
	time_t t = (time_t)(ns / (long long)NSEC_PER_SEC);
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    strftime(buf, size, zone ? "%Y-%m-%d %H:%M:%S %Z" : "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, size, "%lld", ns);
}

/* format_elapsed() - seconds as "3.2 s", "12m05s" or "3h02m". */
void format_elapsed(char *buf, size_t size, double s)
{
	long long whole = (long long)s;

	if (s < 60)
		snprintf(buf, size, "%.1f s", s);
	else if (s < 3600)
		snprintf(buf, size, "%lldm%02llds", whole / 60, whole % 60);
	else
		snprintf(buf, size, "%lldh%02lldm", whole / 3600, whole % 3600 / 60);
}

/*
 * The "python" object of a session or report as one line, if Python frames
 * were asked for: "python: 3.11.7, 1181 samples with Python frames (0 unmerged)";
 * a process without CPython is said so only with @say_not_found (the
 * session summary, not every report of a C program).
 */
void print_python(FILE *f, const json_t *o, const char *label, bool say_not_found)
{
	const json_t *py = json_object_get(o, "python");
	const char *status = json_string_value(json_object_get(py, "status"));
	const char *version = json_string_value(json_object_get(py, "version"));
	json_int_t merged = json_integer_value(json_object_get(py, "samples"));
	json_int_t unmerged = json_integer_value(json_object_get(py, "unmerged"));

	if (!status || strcmp(status, "off") == 0)
		return;
	if (strcmp(status, "ok") == 0) {
		const char *view = json_string_value(json_object_get(o, "python_frames"));

		fprintf(f, "%s%s, %lld samples with Python frames (%lld unmerged)", label,
			version ? version : "?", (long long)merged, (long long)unmerged);
		if (view && strcmp(view, "clean") == 0)
			fputs("; interpreter frames hidden (--python-frames all shows them)", f);
		else if (view)
			fputs("; every interpreter frame shown", f);
		fputc('\n', f);
	}
	else if (strcmp(status, "unsupported") == 0)
		fprintf(f, "%s%s seen, not supported by this build (native frames only)\n", label,
			version ? version : "?");
	else if (say_not_found)
		fprintf(f, "%sno CPython 3.11+ found in the process (native frames only)\n", label);
}

/*
 * One object of "unwind_tables" (@t: the CPU samples', or its "offcpu") as
 * one line: "unwind tables:       27333 samples walked in BPF (99.7%), 90
 * fell back to the stack copy (no_table 78, no_process 12)". @what:
 * "samples" or "off-CPU intervals"; @fell_key: the member that counts the
 * fallbacks.
 */
static void print_walk_counts(FILE *f, const char *label, const json_t *t, const char *what,
			      const char *fell_key)
{
	const json_t *pct = json_object_get(t, "walked_pct");
	const json_t *fallbacks = json_object_get(t, "fallbacks"), *v;
	const char *k, *sep = " (";

	fprintf(f, "%-21s%lld %s walked in BPF", label,
		(long long)json_integer_value(json_object_get(t, "walked")), what);
	if (json_is_number(pct))
		fprintf(f, " (%.1f%%)", json_number_value(pct));
	fprintf(f, ", %lld fell back to the stack copy",
		(long long)json_integer_value(json_object_get(t, fell_key)));
	json_object_foreach((json_t *)fallbacks, k, v) {
		if (json_integer_value(v) == 0)
			continue;
		fprintf(f, "%s%s %lld", sep, k, (long long)json_integer_value(v));
		sep = ", ";
	}
	fputs(*sep == ',' ? ")\n" : "\n", f);
}

/* The "unwind_tables" object of a session (unwind "tables" or "auto"); nothing for the others. */
static void print_unwind_tables(FILE *f, const json_t *s)
{
	const json_t *t = json_object_get(s, "unwind_tables");

	if (!json_is_object(t))
		return;
	print_walk_counts(f, "unwind tables:", t, "samples", "fallback_samples");
	if (json_is_object(json_object_get(t, "offcpu")))
		print_walk_counts(f, "", json_object_get(t, "offcpu"), "off-CPU intervals",
				  "fallback_intervals");
}

int print_counters(FILE *f, const json_t *o)
{
	long long lost, truncated, missing, unsymbolized;
	int r;

	if ((r = get_int(o, "lost_samples", &lost)) < 0 ||
	    (r = get_int(o, "truncated_stacks", &truncated)) < 0 ||
	    (r = get_int(o, "missing_user_stacks", &missing)) < 0 ||
	    (r = get_int(o, "unsymbolized_frames", &unsymbolized)) < 0)
		return r;
	fprintf(f,
		"lost samples: %lld, truncated stacks: %lld, missing user stacks: %lld, "
		"unsymbolized frames: %lld",
		lost, truncated, missing, unsymbolized);
	/* Shares, where the daemon sent them (null: nothing to divide by). */
	{
		const json_t *pct = json_object_get(o, "unsymbolized_pct");
		const json_t *root = json_object_get(o, "root_pct");
		const char *unwind = json_string_value(json_object_get(o, "unwind"));

		if (json_is_number(pct))
			fprintf(f, " (%.1f%%)", json_number_value(pct));
		fputc('\n', f);
		if (json_is_number(root))
			fprintf(
			    f,
			    "complete stacks (reaching the thread's root): %.1f%% of samples%s%s\n",
			    json_number_value(root), unwind ? ", unwind " : "",
			    unwind ? unwind : "");
	}
	print_python(f, o, "python: ", false);
	/* A time range that reached windows merged as they aged (profd(8)). */
	{
		const json_t *res = json_object_get(o, "resolution_s");
		const json_t *to = json_object_get(o, "covered_to_s");

		if (json_is_number(res) && json_number_value(res) > 1) {
			fprintf(f, "time range read at %g s windows (merged as they aged): %g s to ",
				json_number_value(res),
				json_number_value(json_object_get(o, "covered_from_s")));
			if (json_is_number(to))
				fprintf(f, "%g s\n", json_number_value(to));
			else
				fprintf(f, "the end\n");
		}
	}
	return 0;
}

/*
 * output__attach() - one line for the response to "attach":
 * "session 7: attached to PID 1234 (python3), event cpu-clock at 99 Hz, 10 s".
 */
int output__attach(FILE *f, const json_t *reply)
{
	long long session, pid, freq_hz;
	const char *comm, *event;
	double duration_s;
	bool has_duration;
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_int(reply, "pid", &pid)) < 0 || (r = get_str(reply, "comm", &comm)) < 0 ||
	    (r = get_str(reply, "event", &event)) < 0 ||
	    (r = get_int(reply, "freq_hz", &freq_hz)) < 0 ||
	    (r = get_opt_num(reply, "duration_s", &duration_s, &has_duration)) < 0)
		return r;

	fprintf(f, "session %lld: attached to PID %lld (%s), event %s at %lld Hz, ", session, pid,
		comm, event, freq_hz);
	if (has_duration)
		fprintf(f, "%g s\n", duration_s);
	else
		fprintf(f, "until detached or the process exits\n");
	return 0;
}

/*
 * The "fleet" object's sinks that shipped the session, a line each:
 * "clickhouse:          shipped 120 s (done), 3 chunks, 4120 rows, 2 failures"
 * "pyroscope:           pushed 120 s (done), 58 pieces, 47030 samples, 0 failures"
 * and the last error on its own line.
 */
static void print_fleet(FILE *f, const json_t *fleet)
{
	const char *sink;
	const json_t *c;

	if (!json_is_object(fleet))
		return;
	json_object_foreach((json_t *)fleet, sink, c) {
		const json_t *err = json_object_get(c, "last_error");
		char label[32];

		if (!json_is_object(c))
			continue;
		/* Pyroscope's chunks are pushes of pprof, its rows the samples in them. */
		bool push = strcmp(sink, "pyroscope") == 0;

		snprintf(label, sizeof(label), "%s:", sink);
		fprintf(f, "%-21s%s %.0f s%s, %lld %s, %lld %s, %lld failures\n", label,
			push ? "pushed" : "shipped",
			json_number_value(json_object_get(c, "shipped_until_s")),
			json_is_true(json_object_get(c, "done")) ? " (done)" : "",
			(long long)json_integer_value(json_object_get(c, "chunks")),
			push ? "pieces" : "chunks",
			(long long)json_integer_value(json_object_get(c, "rows")),
			push ? "samples" : "rows",
			(long long)json_integer_value(json_object_get(c, "failures")));
		if (json_is_string(err))
			fprintf(f, "%-21s%s\n", "  last error:", json_string_value(err));
	}
}

/* output__session() - "key: value" lines for one SESSION object. */
int output__session(FILE *f, const json_t *s)
{
	long long id, pid, uid, freq_hz, started_ns, ended_ns, samples, threads;
	const char *comm, *exe, *state, *end_reason, *event, *unwind;
	double duration_s, elapsed_s;
	bool has_duration, has_ended;
	const json_t *events;
	char buf[64];
	size_t i;
	int r;

	if ((r = check_object(s, "session")) < 0 || (r = get_int(s, "id", &id)) < 0 ||
	    (r = get_int(s, "pid", &pid)) < 0 || (r = get_str(s, "comm", &comm)) < 0 ||
	    (r = get_opt_str(s, "exe", &exe)) < 0 || (r = get_int(s, "uid", &uid)) < 0 ||
	    (r = get_str(s, "state", &state)) < 0 ||
	    (r = get_opt_str(s, "end_reason", &end_reason)) < 0 ||
	    (r = get_str(s, "event", &event)) < 0 || (r = get_array(s, "events", &events)) < 0 ||
	    (r = get_int(s, "freq_hz", &freq_hz)) < 0 || (r = get_str(s, "unwind", &unwind)) < 0 ||
	    (r = get_opt_num(s, "duration_s", &duration_s, &has_duration)) < 0 ||
	    (r = get_int(s, "started_at_ns", &started_ns)) < 0 ||
	    (r = get_opt_int(s, "ended_at_ns", &ended_ns, &has_ended)) < 0 ||
	    (r = get_num(s, "elapsed_s", &elapsed_s)) < 0 ||
	    (r = get_int(s, "samples", &samples)) < 0 || (r = get_int(s, "threads", &threads)) < 0)
		return r;

	fprintf(f, "%-21s%lld\n", "session:", id);
	fprintf(f, "%-21s%lld\n", "pid:", pid);
	fprintf(f, "%-21s%s\n", "comm:", comm);
	fprintf(f, "%-21s%s\n", "exe:", exe ? exe : "-");
	fprintf(f, "%-21s%lld\n", "uid:", uid);
	fprintf(f, "%-21s%s\n", "state:", state);
	fprintf(f, "%-21s%s\n", "end reason:", end_reason ? end_reason : "-");
	fprintf(f, "%-21s%s (asked for:", "event:", event);
	for (i = 0; i < json_array_size(events); i++) {
		const json_t *name = json_array_get(events, i);

		fprintf(f, "%s%s", i ? ", " : " ",
			json_is_string(name) ? json_string_value(name) : "?");
	}
	fprintf(f, ")\n");
	fprintf(f, "%-21s%lld Hz\n", "frequency:", freq_hz);
	fprintf(f, "%-21s%s\n", "unwind:", unwind);
	if (has_duration)
		fprintf(f, "%-21s%g s\n", "duration:", duration_s);
	else
		fprintf(f, "%-21s%s\n", "duration:", "until detached or the process exits");
	format_local_time(buf, sizeof(buf), started_ns, true);
	fprintf(f, "%-21s%s\n", "started:", buf);
	if (has_ended)
		format_local_time(buf, sizeof(buf), ended_ns, true);
	fprintf(f, "%-21s%s\n", "ended:", has_ended ? buf : "-");
	format_elapsed(buf, sizeof(buf), elapsed_s);
	fprintf(f, "%-21s%s\n", "elapsed:", buf);
	fprintf(f, "%-21s%lld\n", "samples:", samples);
	fprintf(f, "%-21s%lld\n", "threads:", threads);
	print_python(f, s, "python:              ", true);
	print_unwind_tables(f, s);

	/* The same four counters, one per line, for grep. */
	{
		static const char *const keys[] = {"lost_samples", "truncated_stacks",
						   "missing_user_stacks", "unsymbolized_frames"};
		static const char *const labels[] = {
		    "lost samples:", "truncated stacks:", "missing user stacks:",
		    "unsymbolized frames:"};

		for (i = 0; i < ARRAY_SIZE(keys); i++) {
			long long n;

			if ((r = get_int(s, keys[i], &n)) < 0)
				return r;
			fprintf(f, "%-21s%lld\n", labels[i], n);
		}
	}
	/* Newer fields, shown when profd sends them. */
	{
		const json_t *label = json_object_get(s, "label");
		const json_t *dropped = json_object_get(s, "limit_dropped_samples");

		if (json_is_integer(dropped))
			fprintf(f, "%-21s%lld%s\n",
				"limit dropped:", (long long)json_integer_value(dropped),
				json_integer_value(dropped) ? " (samples past a session limit of "
							      "profd.conf: max stacks or threads)"
							    : "");
		if (json_is_string(label))
			fprintf(f, "%-21s%s\n", "label:", json_string_value(label));
	}
	print_fleet(f, json_object_get(s, "fleet"));
	return 0;
}

/*
 * output__progress() - the --wait progress text for a running SESSION, no
 * newline: "session 7: 3.2 s / 10 s, 812 samples".
 */
int output__progress(FILE *f, const json_t *s)
{
	long long id, samples;
	double elapsed_s, duration_s;
	bool has_duration;
	int r;

	if ((r = check_object(s, "session")) < 0 || (r = get_int(s, "id", &id)) < 0 ||
	    (r = get_num(s, "elapsed_s", &elapsed_s)) < 0 ||
	    (r = get_opt_num(s, "duration_s", &duration_s, &has_duration)) < 0 ||
	    (r = get_int(s, "samples", &samples)) < 0)
		return r;
	fprintf(f, "session %lld: %.1f s", id, elapsed_s);
	if (has_duration)
		fprintf(f, " / %g s", duration_s);
	fprintf(f, ", %lld samples", samples);
	return 0;
}

/* A row of output__sessions()'s table: one of the reply's "sessions". */
static int session_row(struct table *t, const json_t *s)
{
	long long id, pid, started_ns, samples, lost;
	const char *comm, *state, *end_reason, *event;
	char started[32], elapsed[32];
	double elapsed_s;
	int r;

	if ((r = check_object(s, "sessions[]")) < 0 || (r = get_int(s, "id", &id)) < 0 ||
	    (r = get_int(s, "pid", &pid)) < 0 || (r = get_str(s, "comm", &comm)) < 0 ||
	    (r = get_str(s, "state", &state)) < 0 ||
	    (r = get_opt_str(s, "end_reason", &end_reason)) < 0 ||
	    (r = get_str(s, "event", &event)) < 0 ||
	    (r = get_int(s, "started_at_ns", &started_ns)) < 0 ||
	    (r = get_num(s, "elapsed_s", &elapsed_s)) < 0 ||
	    (r = get_int(s, "samples", &samples)) < 0 ||
	    (r = get_int(s, "lost_samples", &lost)) < 0)
		return r;
	format_local_time(started, sizeof(started), started_ns, false);
	format_elapsed(elapsed, sizeof(elapsed), elapsed_s);
	if (table__cellf(t, "%lld", id) < 0 || table__cellf(t, "%lld", pid) < 0 ||
	    table__cellf(t, "%s", comm) < 0 || table__cellf(t, "%s", state) < 0 ||
	    table__cellf(t, "%s", end_reason ? end_reason : "-") < 0 ||
	    table__cellf(t, "%s", event) < 0 || table__cellf(t, "%s", started) < 0 ||
	    table__cellf(t, "%s", elapsed) < 0 || table__cellf(t, "%lld", samples) < 0 ||
	    table__cellf(t, "%lld", lost) < 0)
		return -ENOMEM;
	return 0;
}

/* output__sessions() - the table of a "sessions" response, newest first as profd sends it. */
int output__sessions(FILE *f, const json_t *reply)
{
	static const struct table_column columns[] = {
	    {"ID", TABLE_RIGHT, 0},	{"PID", TABLE_RIGHT, 0},      {"COMM", TABLE_LEFT, 16},
	    {"STATE", TABLE_LEFT, 0},	{"END", TABLE_LEFT, 0},	      {"EVENT", TABLE_LEFT, 0},
	    {"STARTED", TABLE_LEFT, 0}, {"DURATION", TABLE_RIGHT, 0}, {"SAMPLES", TABLE_RIGHT, 0},
	    {"LOST", TABLE_RIGHT, 0},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	const json_t *sessions = NULL;
	int r;

	if ((r = get_array(reply, "sessions", &sessions)) < 0)
		return r;
	if (json_array_size(sessions) == 0) {
		fprintf(f, "no sessions\n");
		return 0;
	}
	if ((r = table_of_rows(sessions, columns, ARRAY_SIZE(columns), session_row, &t)) < 0)
		return r;
	table__print(t, f);
	return 0;
}

/* format_location() - "file:line", "file" or "-" for a frame or function. */
void format_location(char *buf, size_t size, const char *file, long long line, bool has_line)
{
	if (!file)
		snprintf(buf, size, "-");
	else if (!has_line || line <= 0)
		snprintf(buf, size, "%s", file_name(file));
	else
		snprintf(buf, size, "%s:%lld", file_name(file), line);
}

/* format_since() - a --since duration as the user would write it: "90s", "15m", "2h", "7d". */
static void format_since(char *buf, size_t size, double s)
{
	if (s >= 86400 && fmod(s, 86400) == 0)
		snprintf(buf, size, "%gd", s / 86400);
	else if (s >= 3600 && fmod(s, 3600) == 0)
		snprintf(buf, size, "%gh", s / 3600);
	else if (s >= 60 && fmod(s, 60) == 0)
		snprintf(buf, size, "%gm", s / 60);
	else
		snprintf(buf, size, "%gs", s);
}

/*
 * print_subject() - what a top or hotpaths answer is of, to start its first
 * line: "session 7", or for profctl fleet's answer (which has "hosts" and
 * "sessions" counts instead of one session) "fleet: 2 hosts, 4 sessions,
 * last 1h". Returns 0 or -EBADMSG.
 */
int print_subject(FILE *f, const json_t *reply)
{
	long long session, hosts, sessions;
	bool fleet, has_since;
	double since_s;
	char since[32];
	int r;

	if ((r = get_opt_int(reply, "hosts", &hosts, &fleet)) < 0)
		return r;
	if (!fleet) {
		if ((r = get_int(reply, "session", &session)) < 0)
			return r;
		fprintf(f, "session %lld", session);
		return 0;
	}
	if ((r = get_int(reply, "sessions", &sessions)) < 0 ||
	    (r = get_opt_num(reply, "since_s", &since_s, &has_since)) < 0)
		return r;
	fprintf(f, "fleet: %lld host%s, %lld session%s", hosts, hosts == 1 ? "" : "s", sessions,
		sessions == 1 ? "" : "s");
	if (has_since) {
		format_since(since, sizeof(since), since_s);
		fprintf(f, ", last %s", since);
	}
	return 0;
}

/* A row of output__top()'s table: one of the reply's "functions". */
static int top_row(struct table *t, const json_t *fn)
{
	long long self, incl, line;
	double self_pct, total_pct;
	const char *function, *module, *file;
	char location[4096];
	bool has_line;
	int r;

	if ((r = check_object(fn, "functions[]")) < 0 ||
	    (r = get_str(fn, "function", &function)) < 0 ||
	    (r = get_opt_str(fn, "module", &module)) < 0 ||
	    (r = get_opt_str(fn, "file", &file)) < 0 ||
	    (r = get_opt_int(fn, "line", &line, &has_line)) < 0 ||
	    (r = get_int(fn, "self_samples", &self)) < 0 ||
	    (r = get_int(fn, "total_samples", &incl)) < 0 ||
	    (r = get_num(fn, "self_pct", &self_pct)) < 0 ||
	    (r = get_num(fn, "total_pct", &total_pct)) < 0)
		return r;
	format_location(location, sizeof(location), file, line, has_line);
	if (table__cellf(t, "%.1f", self_pct) < 0 || table__cellf(t, "%lld", self) < 0 ||
	    table__cellf(t, "%.1f", total_pct) < 0 || table__cellf(t, "%lld", incl) < 0 ||
	    table__cellf(t, "%s", function) < 0 || table__cellf(t, "%s", module_name(module)) < 0 ||
	    table__cellf(t, "%s", location) < 0)
		return -ENOMEM;
	return 0;
}

/* output__top() - the hottest functions as a table, with the sample counters above it. */
int output__top(FILE *f, const json_t *reply)
{
	static const struct table_column columns[] = {
	    {"SELF%", TABLE_RIGHT, 0},	  {"SELF", TABLE_RIGHT, 0},	{"TOTAL%", TABLE_RIGHT, 0},
	    {"TOTAL", TABLE_RIGHT, 0},	  {"FUNCTION", TABLE_LEFT, 60}, {"MODULE", TABLE_LEFT, 24},
	    {"FILE:LINE", TABLE_LEFT, 0},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	const json_t *functions;
	const char *event;
	long long total;
	int r;

	if ((r = get_str(reply, "event", &event)) < 0 ||
	    (r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "functions", &functions)) < 0 ||
	    (r = table_of_rows(functions, columns, ARRAY_SIZE(columns), top_row, &t)) < 0 ||
	    (r = print_subject(f, reply)) < 0)
		return r;

	fprintf(f, ": %lld samples (%s)", total, event);
	if (json_array_size(functions) == 1)
		fprintf(f, "; the hottest function by self samples");
	else if (json_array_size(functions) > 1)
		fprintf(f, "; the %zu hottest functions by self samples",
			json_array_size(functions));
	fputc('\n', f);
	if ((r = print_counters(f, reply)) < 0)
		return r;
	fputc('\n', f);
	if (json_array_size(functions) == 0)
		fprintf(f, "no samples\n");
	else
		table__print(t, f);
	return 0;
}
