/*
 * output.c - human renderings of profd's responses (the shapes of
 * docs/protocol.md): session summaries, tables and the hot-path call tree.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "table.h"

/*
 * Deepest path output__hotpaths() draws: the tree is walked recursively, so
 * an absurd depth from a broken daemon must not overflow the stack. Kernel
 * stacks stop at perf_event_max_stack (127 by default), user stacks at the
 * unwinder's limit; this leaves room for both many times over.
 */
#define MAX_PATH_FRAMES 8192

/* What the last -EBADMSG was about; profctl is single-threaded. */
static char field_error[192];

/* output__error() - names the field behind the last -EBADMSG ("" if none). */
const char *output__error(void)
{
	return field_error;
}

static int bad_field(const char *key, const char *expected)
{
	snprintf(field_error, sizeof(field_error), "field \"%s\" is missing or not %s", key,
		 expected);
	return -EBADMSG;
}

/*
 * Field readers: each returns 0 with the value in *ret, or -EBADMSG (and
 * records why) when @key is absent or of another type. The get_opt_*()
 * forms also accept an absent key or null, reported as NULL / *ret_set false.
 * Strings are borrowed from @o.
 */
static int get_int(const json_t *o, const char *key, long long *ret)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		return bad_field(key, "an integer");
	*ret = json_integer_value(v);
	return 0;
}

static int get_opt_int(const json_t *o, const char *key, long long *ret, bool *ret_set)
{
	const json_t *v = json_object_get(o, key);

	*ret_set = false;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v))
		return bad_field(key, "an integer or null");
	*ret = json_integer_value(v);
	*ret_set = true;
	return 0;
}

static int get_num(const json_t *o, const char *key, double *ret)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_number(v))
		return bad_field(key, "a number");
	*ret = json_number_value(v);
	return 0;
}

static int get_opt_num(const json_t *o, const char *key, double *ret, bool *ret_set)
{
	const json_t *v = json_object_get(o, key);

	*ret_set = false;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return bad_field(key, "a number or null");
	*ret = json_number_value(v);
	*ret_set = true;
	return 0;
}

static int get_str(const json_t *o, const char *key, const char **ret)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_string(v))
		return bad_field(key, "a string");
	*ret = json_string_value(v);
	return 0;
}

static int get_opt_str(const json_t *o, const char *key, const char **ret)
{
	const json_t *v = json_object_get(o, key);

	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return bad_field(key, "a string or null");
	*ret = json_string_value(v);
	return 0;
}

static int get_array(const json_t *o, const char *key, const json_t **ret)
{
	const json_t *v = json_object_get(o, key);

	if (!json_is_array(v))
		return bad_field(key, "an array");
	*ret = v;
	return 0;
}

static int check_object(const json_t *v, const char *what)
{
	if (!json_is_object(v))
		return bad_field(what, "an object");
	return 0;
}

/* module_name() - the base name of a module path; "[kernel.kallsyms]" stays as it is. */
static const char *module_name(const char *module)
{
	const char *slash;

	if (!module || !*module)
		return "?";
	slash = strrchr(module, '/');
	return slash && slash[1] ? slash + 1 : module;
}

/* file_name() - the base name of a source path, for display (--json has the whole path). */
static const char *file_name(const char *file)
{
	const char *slash = strrchr(file, '/');

	return slash && slash[1] ? slash + 1 : file;
}

/* format_local_time() - @ns since the epoch as local "YYYY-MM-DD HH:MM:SS[ ZONE]". */
static void format_local_time(char *buf, size_t size, long long ns, bool zone)
{
	time_t t = (time_t)(ns / (long long)NSEC_PER_SEC);
	struct tm tm;

	if (!localtime_r(&t, &tm) ||
	    strftime(buf, size, zone ? "%Y-%m-%d %H:%M:%S %Z" : "%Y-%m-%d %H:%M:%S", &tm) == 0)
		snprintf(buf, size, "%lld", ns);
}

/* format_elapsed() - seconds as "3.2 s", "12m05s" or "3h02m". */
static void format_elapsed(char *buf, size_t size, double s)
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
static void print_python(FILE *f, const json_t *o, const char *label, bool say_not_found)
{
	const json_t *py = json_object_get(o, "python");
	const char *status = json_string_value(json_object_get(py, "status"));
	const char *version = json_string_value(json_object_get(py, "version"));
	json_int_t merged = json_integer_value(json_object_get(py, "samples"));
	json_int_t unmerged = json_integer_value(json_object_get(py, "unmerged"));

	if (!status || strcmp(status, "off") == 0)
		return;
	if (strcmp(status, "ok") == 0)
		fprintf(f, "%s%s, %lld samples with Python frames (%lld unmerged)\n", label,
			version ? version : "?", (long long)merged, (long long)unmerged);
	else if (strcmp(status, "unsupported") == 0)
		fprintf(f, "%s%s seen, not supported by this build (native frames only)\n", label,
			version ? version : "?");
	else if (say_not_found)
		fprintf(f, "%sno CPython 3.11+ found in the process (native frames only)\n", label);
}

static int print_counters(FILE *f, const json_t *o)
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
			fprintf(f, "complete stacks (reaching the thread's root): %.1f%% of samples%s%s\n",
				json_number_value(root), unwind ? ", unwind " : "",
				unwind ? unwind : "");
	}
	print_python(f, o, "python: ", false);
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
			fprintf(f, "%-21s%lld%s\n", "limit dropped:",
				(long long)json_integer_value(dropped),
				json_integer_value(dropped) ? " (samples past a session limit of "
							      "profd.conf: max stacks or threads)"
							    : "");
		if (json_is_string(label))
			fprintf(f, "%-21s%s\n", "label:", json_string_value(label));
	}
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
	const json_t *sessions;
	size_t i;
	int r;

	if ((r = get_array(reply, "sessions", &sessions)) < 0)
		return r;
	if (json_array_size(sessions) == 0) {
		fprintf(f, "no sessions\n");
		return 0;
	}
	t = table__new(columns, ARRAY_SIZE(columns));
	if (!t)
		return -ENOMEM;

	for (i = 0; i < json_array_size(sessions); i++) {
		const json_t *s = json_array_get(sessions, i);
		long long id, pid, started_ns, samples, lost;
		const char *comm, *state, *end_reason, *event;
		char started[32], elapsed[32];
		double elapsed_s;

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
	}
	table__print(t, f);
	return 0;
}

/* format_location() - "file:line", "file" or "-" for a frame or function. */
static void format_location(char *buf, size_t size, const char *file, long long line, bool has_line)
{
	if (!file)
		snprintf(buf, size, "-");
	else if (!has_line || line <= 0)
		snprintf(buf, size, "%s", file_name(file));
	else
		snprintf(buf, size, "%s:%lld", file_name(file), line);
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
	long long session, total;
	const json_t *functions;
	const char *event;
	size_t i;
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_str(reply, "event", &event)) < 0 ||
	    (r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "functions", &functions)) < 0)
		return r;

	t = table__new(columns, ARRAY_SIZE(columns));
	if (!t)
		return -ENOMEM;
	for (i = 0; i < json_array_size(functions); i++) {
		const json_t *fn = json_array_get(functions, i);
		long long self, incl, line;
		double self_pct, total_pct;
		const char *function, *module, *file;
		char location[4096];
		bool has_line;

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
		    table__cellf(t, "%s", function) < 0 ||
		    table__cellf(t, "%s", module_name(module)) < 0 ||
		    table__cellf(t, "%s", location) < 0)
			return -ENOMEM;
	}

	fprintf(f, "session %lld: %lld samples (%s)", session, total, event);
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

/*
 * The hot-path call tree. The paths profd returns (leaf first) are merged
 * root first; a node is one function (function name + module) under a given
 * chain of callers. Strings are borrowed from the response.
 */
struct node {
	const char *function;
	const char *module;
	const char *kind;
	const char *file; /* NULL if unknown or if merged frames disagree */
	long long line;	  /* 0 if unknown or if merged frames disagree */
	long long samples;
	size_t order; /* creation order, to break ties between equally hot siblings */
	struct node **children;
	size_t n_children;
	size_t cap_children;
};

static void node__free(struct node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n_children; i++)
		node__free(n->children[i]);
	free(n->children);
	free(n);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct node *, node__free);

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/*
 * node__child() - the child of @parent for this frame, created if new.
 * Returns NULL only when out of memory.
 */
static struct node *node__child(struct node *parent, const char *function, const char *module,
				const char *kind, const char *file, long long line, size_t *order)
{
	struct node *n;

	for (size_t i = 0; i < parent->n_children; i++) {
		n = parent->children[i];
		if (str_eq(n->function, function) && str_eq(n->module, module)) {
			/* Same function reached by another path: keep only what all agree on. */
			if (!str_eq(n->file, file)) {
				n->file = NULL;
				n->line = 0;
			} else if (n->line != line) {
				n->line = 0;
			}
			return n;
		}
	}

	if (parent->n_children == parent->cap_children) {
		size_t cap = parent->cap_children ? parent->cap_children * 2 : 4;
		struct node **children = realloc(parent->children, cap * sizeof(*children));

		if (!children)
			return NULL;
		parent->children = children;
		parent->cap_children = cap;
	}
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	*n = (struct node){.function = function,
			   .module = module,
			   .kind = kind,
			   .file = file,
			   .line = line,
			   .order = (*order)++};
	parent->children[parent->n_children++] = n;
	return n;
}

static int node_cmp(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static void node__sort(struct node *n)
{
	if (n->n_children > 1)
		qsort(n->children, n->n_children, sizeof(*n->children), node_cmp);
	for (size_t i = 0; i < n->n_children; i++)
		node__sort(n->children[i]);
}

/* Tree-drawing strings; each is one column wide per character, three columns in all. */
struct glyphs {
	const char *branch; /* a child with siblings after it */
	const char *last;   /* the last child */
	const char *vert;   /* continues a branch past a child's subtree */
	const char *space;  /* below a last child */
};

static const struct glyphs glyphs_utf8 = {"\u251c\u2500 ", "\u2514\u2500 ", "\u2502  ", "   "};
static const struct glyphs glyphs_ascii = {"|- ", "`- ", "|  ", "   "};

struct tree_printer {
	FILE *f;
	const struct glyphs *g;
	long long total; /* the session's samples: percentages are of this */
	int width;	 /* of the SAMPLES column */
	char *prefix;	 /* drawing to the left of the current node */
	size_t prefix_cap;
};

static void tree_print_children(struct tree_printer *p, const struct node *n, size_t prefix_len);

static void tree_print_node(struct tree_printer *p, const struct node *n, size_t prefix_len,
			    const char *glyph, const char *continuation)
{
	double pct = p->total > 0 ? 100.0 * (double)n->samples / (double)p->total : 0;
	const char *module = n->module;
	size_t len = prefix_len;

	fprintf(p->f, "%*lld  %5.1f%%  %.*s%s%s%s", p->width, n->samples, pct, (int)prefix_len,
		p->prefix, glyph, n->function, str_eq(n->kind, "inline") ? " (inlined)" : "");
	if (module && module[0] == '[')
		fprintf(p->f, " %s", module);
	else if (module)
		fprintf(p->f, " [%s]", module_name(module));
	else if (str_eq(n->kind, "kernel"))
		fprintf(p->f, " [kernel]");
	if (n->file && n->line > 0)
		fprintf(p->f, " %s:%lld", file_name(n->file), n->line);
	else if (n->file)
		fprintf(p->f, " %s", file_name(n->file));
	fputc('\n', p->f);

	/* The prefix buffer holds enough for the deepest path (see output__hotpaths()). */
	memcpy(p->prefix + len, continuation, strlen(continuation));
	len += strlen(continuation);
	tree_print_children(p, n, len);
}

/*
 * tree_print_children() - a child that carries all of its parent's samples
 * (the only callee, and the parent ran none itself on these paths) is drawn
 * straight below the parent at the same indentation, so that deep stacks
 * stay narrow; indentation grows only where paths diverge, as in perf
 * report's call graphs.
 */
static void tree_print_children(struct tree_printer *p, const struct node *n, size_t prefix_len)
{
	if (n->n_children == 1 && n->children[0]->samples == n->samples) {
		tree_print_node(p, n->children[0], prefix_len, "", "");
		return;
	}
	for (size_t i = 0; i < n->n_children; i++) {
		bool last = i + 1 == n->n_children;

		tree_print_node(p, n->children[i], prefix_len, last ? p->g->last : p->g->branch,
				last ? p->g->space : p->g->vert);
	}
}

/*
 * output__hotpaths() - the hottest paths merged into one call tree, callers
 * first, with the sample counters above it.
 * @ascii: draw with |- `- instead of the Unicode box-drawing characters.
 */
int output__hotpaths(FILE *f, const json_t *reply, bool ascii)
{
	_cleanup_(node__freep) struct node *root = NULL;
	const json_t *paths, *frames;
	long long session, total, covered = 0;
	size_t i, max_depth = 0, order = 0;
	struct tree_printer p = {.f = f, .g = ascii ? &glyphs_ascii : &glyphs_utf8};
	_cleanup_free_ char *prefix = NULL;
	char digits[32];
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "paths", &paths)) < 0)
		return r;

	root = calloc(1, sizeof(*root));
	if (!root)
		return -ENOMEM;

	for (i = 0; i < json_array_size(paths); i++) {
		const json_t *path = json_array_get(paths, i);
		struct node *n = root;
		long long samples;
		size_t depth;

		if ((r = check_object(path, "paths[]")) < 0 ||
		    (r = get_int(path, "samples", &samples)) < 0 ||
		    (r = get_array(path, "frames", &frames)) < 0)
			return r;
		covered += samples;
		root->samples += samples;
		depth = json_array_size(frames);
		if (depth > MAX_PATH_FRAMES) {
			snprintf(field_error, sizeof(field_error),
				 "a path has %zu frames, more than %d", depth, MAX_PATH_FRAMES);
			return -EBADMSG;
		}
		max_depth = MAX(max_depth, depth);
		/* Frames come leaf first; walk them from the outermost caller in. */
		for (size_t k = depth; k-- > 0;) {
			const json_t *fr = json_array_get(frames, k);
			const char *function, *module, *kind, *file;
			long long line = 0;
			bool has_line;

			if ((r = check_object(fr, "frames[]")) < 0 ||
			    (r = get_str(fr, "function", &function)) < 0 ||
			    (r = get_opt_str(fr, "module", &module)) < 0 ||
			    (r = get_opt_str(fr, "kind", &kind)) < 0 ||
			    (r = get_opt_str(fr, "file", &file)) < 0 ||
			    (r = get_opt_int(fr, "line", &line, &has_line)) < 0)
				return r;
			/* An inlined call is a node of its own, marked when printed. */
			if (json_is_true(json_object_get(fr, "inlined")))
				kind = "inline";
			n = node__child(n, function, module, kind, file, has_line ? line : 0,
					&order);
			if (!n)
				return -ENOMEM;
			n->samples += samples;
		}
	}
	node__sort(root);

	fprintf(f, "session %lld: %lld samples", session, total);
	if (json_array_size(paths) == 1)
		fprintf(f, "; the hottest path holds");
	else if (json_array_size(paths) > 1)
		fprintf(f, "; the %zu hottest paths hold", json_array_size(paths));
	if (json_array_size(paths) > 0)
		fprintf(f, " %lld (%.1f%%)", covered,
			total > 0 ? 100.0 * (double)covered / (double)total : 0.0);
	fputc('\n', f);
	if ((r = print_counters(f, reply)) < 0)
		return r;
	fputc('\n', f);
	if (root->n_children == 0) {
		fprintf(f, "no samples\n");
		return 0;
	}

	/* Each level adds at most one glyph of at most 3 characters of 3 bytes. */
	p.prefix_cap = (max_depth + 1) * 9 + 1;
	prefix = malloc(p.prefix_cap);
	if (!prefix)
		return -ENOMEM;
	p.prefix = prefix;
	p.total = total;
	snprintf(digits, sizeof(digits), "%lld", root->samples);
	p.width = (int)MAX(strlen(digits), strlen("SAMPLES"));
	fprintf(f, "%*s  %6s  %s\n", p.width, "SAMPLES", "TOTAL%", "CALL TREE (callers first)");
	tree_print_children(&p, root, 0);
	return 0;
}

/* output__threads() - samples per thread and the imbalance line; @session (may be NULL) adds the
 * counters. */
/* A number, or "-" for null/absent, into a table cell. */
static int cell_num(struct table *t, const json_t *v, const char *fmt)
{
	if (json_is_number(v))
		return table__cellf(t, fmt, json_number_value(v));
	return table__cellf(t, "-");
}

/*
 * A derived figure's cell: its value; else "unsupported" when an input
 * counter is unsupported on this machine (never 0), else "-".
 */
static int cell_derived(struct table *t, const json_t *v, const json_t *counters,
			const char *in1, const char *in2, const char *fmt)
{
	const char *s1 = json_string_value(json_object_get(json_object_get(counters, in1), "status"));
	const char *s2 = json_string_value(json_object_get(json_object_get(counters, in2), "status"));

	if (json_is_number(v))
		return table__cellf(t, fmt, json_number_value(v));
	if ((s1 && strcmp(s1, "ok") != 0) || (s2 && strcmp(s2, "ok") != 0))
		return table__cellf(t, "%s", s1 && strcmp(s1, "ok") != 0 ? s1 : s2);
	return table__cellf(t, "-");
}

/* A counter's cell: its value, or its status when it has none ("unsupported" is never 0). */
static int cell_counter(struct table *t, const json_t *counters, const char *name)
{
	const json_t *c = json_object_get(counters, name);
	const json_t *v = json_object_get(c, "value");

	if (json_is_integer(v))
		return table__cellf(t, "%lld", (long long)json_integer_value(v));
	if (json_string_value(json_object_get(c, "status")))
		return table__cellf(t, "%s", json_string_value(json_object_get(c, "status")));
	return table__cellf(t, "-");
}

static void print_stragglers(FILE *f, const json_t *imbalance)
{
	const json_t *list = json_object_get(imbalance, "stragglers"), *x;
	size_t i;

	if (json_array_size(list) == 0)
		return;
	fprintf(f, "stragglers (over 1.2x the mean):");
	json_array_foreach(list, i, x)
	{
		const char *name = json_string_value(json_object_get(x, "name"));

		fprintf(f, "%s %s (TID %lld, %lld samples)", i ? "," : "", name ? name : "?",
			(long long)json_integer_value(json_object_get(x, "tid")),
			(long long)json_integer_value(json_object_get(x, "samples")));
	}
	fputc('\n', f);
}

/*
 * threads_details() - what newer daemons add to "threads": stragglers, time
 * on and off the CPU and counters per thread, groups, windows. Each part only
 * when present in @reply.
 */
static int threads_details(FILE *f, const json_t *reply)
{
	static const struct table_column time_columns[] = {
	    {"TID", TABLE_RIGHT, 0},	    {"NAME", TABLE_LEFT, 0},
	    {"ON-CPU s", TABLE_RIGHT, 0},   {"SLEEP s", TABLE_RIGHT, 0},
	    {"IO s", TABLE_RIGHT, 0},	    {"RUNQ s", TABLE_RIGHT, 0},
	    {"VOL-CS", TABLE_RIGHT, 0},	    {"INVOL-CS", TABLE_RIGHT, 0},
	    {"FAULTS", TABLE_RIGHT, 0},	    {"IPC", TABLE_RIGHT, 0},
	    {"MISS%", TABLE_RIGHT, 0},
	};
	static const struct table_column group_columns[] = {
	    {"GROUP", TABLE_LEFT, 0},	 {"THREADS", TABLE_RIGHT, 0}, {"SAMPLES", TABLE_RIGHT, 0},
	    {"SHARE%", TABLE_RIGHT, 0},	 {"MAX/MEAN", TABLE_RIGHT, 0}, {"CV", TABLE_RIGHT, 0},
	    {"STRAGGLER", TABLE_LEFT, 0},
	};
	static const struct table_column window_columns[] = {
	    {"FROM s", TABLE_RIGHT, 0},	  {"TO s", TABLE_RIGHT, 0}, {"SAMPLES", TABLE_RIGHT, 0},
	    {"MAX/MEAN", TABLE_RIGHT, 0}, {"CV", TABLE_RIGHT, 0},   {"STRAGGLER", TABLE_LEFT, 0},
	};
	const json_t *threads = json_object_get(reply, "threads"), *x;
	const json_t *groups = json_object_get(reply, "groups");
	const json_t *windows = json_object_get(reply, "windows");
	size_t i;

	print_stragglers(f, json_object_get(reply, "imbalance"));
	if (json_object_get(json_array_get(threads, 0), "on_cpu_s")) {
		_cleanup_(table__freep) struct table *t =
		    table__new(time_columns, ARRAY_SIZE(time_columns));
		const char *source = json_string_value(
		    json_object_get(json_array_get(threads, 0), "on_cpu_source"));

		if (!t)
			return -ENOMEM;
		json_array_foreach(threads, i, x)
		{
			const json_t *off = json_object_get(x, "off_cpu_s");
			const json_t *c = json_object_get(x, "counters");
			const json_t *d = json_object_get(x, "derived");
			const char *name = json_string_value(json_object_get(x, "name"));

			if (table__cellf(t, "%lld",
					 (long long)json_integer_value(json_object_get(x, "tid"))) < 0 ||
			    table__cellf(t, "%s", name ? name : "?") < 0 ||
			    cell_num(t, json_object_get(x, "on_cpu_s"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "sleeping"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "io"), "%.3f") < 0 ||
			    cell_num(t, json_object_get(off, "runnable"), "%.3f") < 0 ||
			    cell_counter(t, c, "voluntary-context-switches") < 0 ||
			    cell_counter(t, c, "involuntary-context-switches") < 0 ||
			    cell_counter(t, c, "page-faults") < 0 ||
			    cell_derived(t, json_object_get(d, "ipc"), c, "instructions", "cycles",
					 "%.2f") < 0 ||
			    cell_derived(t, json_object_get(d, "cache_miss_pct"), c, "cache-misses",
					 "cache-references", "%.1f") < 0)
				return -ENOMEM;
		}
		fprintf(f, "\ntime and counters per thread (on-CPU from %s; - = not measured):\n",
			source ? source : "?");
		table__print(t, f);
	}
	if (json_is_array(groups)) {
		_cleanup_(table__freep) struct table *t =
		    table__new(group_columns, ARRAY_SIZE(group_columns));

		if (!t)
			return -ENOMEM;
		json_array_foreach(groups, i, x)
		{
			const json_t *imb = json_object_get(x, "imbalance");
			const char *sn = json_string_value(json_object_get(imb, "straggler_name"));

			if (table__cellf(t, "%s", json_string_value(json_object_get(x, "group"))) < 0 ||
			    cell_num(t, json_object_get(x, "threads"), "%.0f") < 0 ||
			    cell_num(t, json_object_get(x, "samples"), "%.0f") < 0 ||
			    cell_num(t, json_object_get(x, "share_pct"), "%.1f") < 0 ||
			    cell_num(t, json_object_get(imb, "max_over_mean"), "%.2f") < 0 ||
			    cell_num(t, json_object_get(imb, "cv"), "%.2f") < 0 ||
			    table__cellf(t, "%s", sn ? sn : "-") < 0)
				return -ENOMEM;
		}
		fprintf(f, "\nby thread name (digits as *):\n");
		table__print(t, f);
	}
	if (json_is_array(windows)) {
		_cleanup_(table__freep) struct table *t =
		    table__new(window_columns, ARRAY_SIZE(window_columns));

		if (!t)
			return -ENOMEM;
		json_array_foreach(windows, i, x)
		{
			const json_t *imb = json_object_get(x, "imbalance");
			const char *sn = json_string_value(json_object_get(imb, "straggler_name"));

			if (cell_num(t, json_object_get(x, "start_s"), "%.1f") < 0 ||
			    cell_num(t, json_object_get(x, "end_s"), "%.1f") < 0 ||
			    cell_num(t, json_object_get(x, "samples"), "%.0f") < 0 ||
			    cell_num(t, json_object_get(imb, "max_over_mean"), "%.2f") < 0 ||
			    cell_num(t, json_object_get(imb, "cv"), "%.2f") < 0 ||
			    table__cellf(t, "%s", sn ? sn : "-") < 0)
				return -ENOMEM;
		}
		fprintf(f, "\nimbalance per window:\n");
		table__print(t, f);
	}
	return 0;
}

int output__threads(FILE *f, const json_t *reply, const json_t *session)
{
	static const struct table_column columns[] = {
	    {"TID", TABLE_RIGHT, 0},
	    {"NAME", TABLE_LEFT, 0},
	    {"SAMPLES", TABLE_RIGHT, 0},
	    {"SHARE%", TABLE_RIGHT, 0},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	const json_t *threads, *imbalance;
	long long id, total;
	size_t i;
	int r;

	if ((r = get_int(reply, "session", &id)) < 0 ||
	    (r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "threads", &threads)) < 0)
		return r;
	imbalance = json_object_get(reply, "imbalance");
	if ((r = check_object(imbalance, "imbalance")) < 0)
		return r;

	t = table__new(columns, ARRAY_SIZE(columns));
	if (!t)
		return -ENOMEM;
	for (i = 0; i < json_array_size(threads); i++) {
		const json_t *th = json_array_get(threads, i);
		long long tid, samples;
		const char *name;
		double share_pct;

		if ((r = check_object(th, "threads[]")) < 0 || (r = get_int(th, "tid", &tid)) < 0 ||
		    (r = get_opt_str(th, "name", &name)) < 0 ||
		    (r = get_int(th, "samples", &samples)) < 0 ||
		    (r = get_num(th, "share_pct", &share_pct)) < 0)
			return r;
		if (table__cellf(t, "%lld", tid) < 0 ||
		    table__cellf(t, "%s", name ? name : "?") < 0 ||
		    table__cellf(t, "%lld", samples) < 0 || table__cellf(t, "%.1f", share_pct) < 0)
			return -ENOMEM;
	}

	fprintf(f, "session %lld: %lld samples in %zu threads\n", id, total,
		json_array_size(threads));
	if (session && (r = print_counters(f, session)) < 0)
		return r;
	fputc('\n', f);
	if (json_array_size(threads) == 0) {
		fprintf(f, "no samples\n");
		return 0;
	}
	table__print(t, f);

	{
		double max_over_mean, cv, mean;
		bool has_ratio, has_cv, has_mean;
		long long straggler_tid;
		bool has_straggler;
		const char *straggler_name;

		if ((r = get_opt_num(imbalance, "max_over_mean", &max_over_mean, &has_ratio)) < 0 ||
		    (r = get_opt_num(imbalance, "cv", &cv, &has_cv)) < 0 ||
		    (r = get_opt_num(imbalance, "mean_samples", &mean, &has_mean)) < 0 ||
		    (r = get_opt_int(imbalance, "straggler_tid", &straggler_tid, &has_straggler)) <
			0 ||
		    (r = get_opt_str(imbalance, "straggler_name", &straggler_name)) < 0)
			return r;
		fputc('\n', f);
		if (!has_ratio || !has_cv) {
			fprintf(f, "imbalance: none to measure (no samples)\n");
			return 0;
		}
		fprintf(f, "imbalance: max/mean %.2f (1.00 = even)", max_over_mean);
		if (has_mean)
			fprintf(f, ", mean %.1f samples", mean);
		fprintf(f, ", CV %.2f", cv);
		if (has_straggler)
			fprintf(f, ", straggler TID %lld (%s)", straggler_tid,
				straggler_name ? straggler_name : "?");
		fputc('\n', f);
	}
	return threads_details(f, reply);
}

/*
 * output__offcpu() - the blocking stacks of an "offcpu" response, longest
 * first: state, time, share, then the frames from the blocking call down.
 */
/* The frames of a stack, leaf first, one a line after @indent: function [module] file:line. */
static void print_frames(FILE *f, const json_t *frames, const char *indent)
{
	const json_t *fr;
	size_t k;

	json_array_foreach(frames, k, fr)
	{
		const char *fn = json_string_value(json_object_get(fr, "function"));
		const char *module = json_string_value(json_object_get(fr, "module"));
		const char *file = json_string_value(json_object_get(fr, "file"));
		const json_t *line = json_object_get(fr, "line");

		module = module ? module_name(module) : "?";
		fprintf(f, module[0] == '[' ? "%s%s%s %s" : "%s%s%s [%s]", indent, fn ? fn : "?",
			json_is_true(json_object_get(fr, "inlined")) ? " (inlined)" : "", module);
		if (file && json_is_integer(line))
			fprintf(f, " %s:%lld", file_name(file), (long long)json_integer_value(line));
		fputc('\n', f);
	}
}

int output__offcpu(FILE *f, const json_t *reply)
{
	const json_t *stacks = json_object_get(reply, "stacks"), *by = json_object_get(reply, "by_state");
	const json_t *x, *v;
	const char *state;
	size_t i;

	if (!json_is_array(stacks) || !json_is_number(json_object_get(reply, "total_off_cpu_s")))
		return -EBADMSG;
	fprintf(f, "session %lld: %.3f s off-CPU",
		(long long)json_integer_value(json_object_get(reply, "session")),
		json_number_value(json_object_get(reply, "total_off_cpu_s")));
	json_object_foreach((json_t *)by, state, v)
		fprintf(f, ", %s %.3f s", state, json_number_value(v));
	fprintf(f, "\nlost off-CPU intervals: %lld\n",
		(long long)json_integer_value(json_object_get(reply, "offcpu_lost")));
	json_array_foreach(stacks, i, x)
	{
		const json_t *frames = json_object_get(x, "frames");

		fprintf(f, "\n%.3f s  %5.1f%%  %s, %lld intervals, %lld thread%s\n",
			json_number_value(json_object_get(x, "total_s")),
			json_number_value(json_object_get(x, "pct")),
			json_string_value(json_object_get(x, "state")),
			(long long)json_integer_value(json_object_get(x, "count")),
			(long long)json_integer_value(json_object_get(x, "threads")),
			json_integer_value(json_object_get(x, "threads")) == 1 ? "" : "s");
		print_frames(f, frames, "    ");
	}
	if (json_array_size(stacks) == 0)
		fprintf(f, "\nno off-CPU time recorded (was the session attached with the offcpu event?)\n");
	return 0;
}

/* @bytes as "9.3 MiB" (binary units), with a sign if @sign. */
static void format_bytes(char *buf, size_t size, double bytes, bool sign)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = fabs(bytes);
	size_t u = 0;

	while (v >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		v /= 1024;
		u++;
	}
	snprintf(buf, size, u == 0 ? "%s%.0f %s" : "%s%.1f %s",
		 bytes < 0 ? "-" : sign ? "+" : "", v, units[u]);
}

/*
 * A sparkline of the numbers of @values, at most @width characters (each
 * the largest value of its bucket), scaled from 0 to the largest value: 8
 * levels of block characters, or " .:-=+*#" with @ascii.
 */
static void print_sparkline(FILE *f, const json_t *values, const char *key, size_t width,
			    bool ascii)
{
	static const char *const blocks[] = { "\u2581", "\u2582", "\u2583", "\u2584",
					      "\u2585", "\u2586", "\u2587", "\u2588" };
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

	format_bytes(live, sizeof(live), json_number_value(json_object_get(x, "live_bytes")), false);
	format_bytes(growth, sizeof(growth),
		     json_number_value(json_object_get(x, "growth_bytes_per_s")), true);
	format_bytes(allocated, sizeof(allocated),
		     json_number_value(json_object_get(x, "allocated_bytes")), false);
	fprintf(f, "\n  %s: %s live, %s/s, %s allocated (%lld samples, %lld live)  ",
		fn ? fn : "?", live, growth, allocated,
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

int output__memory(FILE *f, const json_t *reply, bool ascii)
{
	const json_t *rss = json_object_get(reply, "rss"), *al = json_object_get(reply, "allocations");
	long long session;
	double duration;
	char a[32], b[32], c[32], d[32];
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_num(reply, "duration_s", &duration)) < 0)
		return r;
	fprintf(f, "session %lld: memory over %.1f s\n", session, duration);
	if (json_is_object(rss) && json_integer_value(json_object_get(rss, "readings")) > 0) {
		const json_t *series = json_object_get(rss, "series"), *procs, *p;
		const json_t *last = json_array_get(series, json_array_size(series) - 1);
		size_t i;

		format_bytes(a, sizeof(a), json_number_value(json_object_get(rss, "start_bytes")), false);
		format_bytes(b, sizeof(b), json_number_value(json_object_get(rss, "end_bytes")), false);
		format_bytes(c, sizeof(c), json_number_value(json_object_get(rss, "peak_bytes")), false);
		format_bytes(d, sizeof(d),
			     json_number_value(json_object_get(rss, "growth_bytes_per_s")), true);
		fprintf(f, "\nRSS %s -> %s (peak %s), growth %s/s (least squares over %lld readings, every %.1f s)\n  ",
			a, b, c, d, (long long)json_integer_value(json_object_get(rss, "readings")),
			json_number_value(json_object_get(rss, "interval_s")));
		print_sparkline(f, series, "rss_bytes", 60, ascii);
		fprintf(f, "  0..%.1f s\n", json_number_value(json_object_get(rss, "last_reading_s")));
		format_bytes(a, sizeof(a), json_number_value(json_object_get(last, "anon_bytes")), false);
		format_bytes(b, sizeof(b), json_number_value(json_object_get(last, "file_bytes")), false);
		format_bytes(c, sizeof(c), json_number_value(json_object_get(last, "shmem_bytes")), false);
		format_bytes(d, sizeof(d), json_number_value(json_object_get(last, "swap_bytes")), false);
		fprintf(f, "  last reading: anon %s, file %s, shmem %s, swap %s", a, b, c, d);
		if (json_is_number(json_object_get(last, "pss_bytes"))) {
			format_bytes(a, sizeof(a), json_number_value(json_object_get(last, "pss_bytes")),
				     false);
			fprintf(f, ", PSS %s", a);
		}
		fputc('\n', f);
		procs = json_object_get(rss, "processes");
		if (json_array_size(procs) > 1)
			json_array_foreach(procs, i, p)
			{
				format_bytes(a, sizeof(a), json_number_value(json_object_get(p, "start_bytes")), false);
				format_bytes(b, sizeof(b), json_number_value(json_object_get(p, "end_bytes")), false);
				format_bytes(c, sizeof(c), json_number_value(json_object_get(p, "growth_bytes_per_s")), true);
				fprintf(f, "  pid %lld: %s -> %s, %s/s, %.1f..%.1f s\n",
					(long long)json_integer_value(json_object_get(p, "pid")), a, b, c,
					json_number_value(json_object_get(p, "first_s")),
					json_number_value(json_object_get(p, "last_s")));
			}
	} else {
		fprintf(f, "\nRSS: %s\n", json_is_object(rss) ? "no reading (the process had exited?)"
							     : "not recorded (attach --events ...,rss)");
	}
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
		format_bytes(a, sizeof(a), json_number_value(json_object_get(al, "sample_bytes")), false);
		format_bytes(b, sizeof(b), json_number_value(json_object_get(al, "bytes_per_s")), false);
		format_bytes(c, sizeof(c), json_number_value(json_object_get(al, "live_bytes")), false);
		fprintf(f, "\nallocations: sampled every %s on average; probes: %s\n", a,
			json_string_value(json_object_get(al, "probes")) ?: "?");
		fprintf(f, "  %lld allocating calls (%.0f/s, %s/s), %lld frees; %lld samples, %lld lost, %lld untracked\n",
			(long long)json_integer_value(json_object_get(al, "calls")),
			json_number_value(json_object_get(al, "calls_per_s")), b,
			(long long)json_integer_value(json_object_get(al, "free_calls")),
			(long long)json_integer_value(json_object_get(al, "sampled")),
			(long long)json_integer_value(json_object_get(al, "lost")),
			(long long)json_integer_value(json_object_get(al, "untracked")));
		fprintf(f, "  live at the end (estimated from samples): %s in %lld stacks\n", c,
			(long long)json_integer_value(json_object_get(al, "stacks")));
		if (json_is_number(json_object_get(al, "stopped_at_s")))
			fprintf(f, "  probes detached at %.1f s: they trapped more than %lld times a "
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
		fprintf(f, "\ntop stacks by growth: %s\n", json_array_size(list) ? "" : "none grew");
		json_array_foreach(list, i, x) print_alloc_stack(f, x, ascii, printed);
		list = json_object_get(al, "top_live");
		fprintf(f, "\ntop stacks by live bytes: %s\n", json_array_size(list) ? "" : "nothing live");
		json_array_foreach(list, i, x) print_alloc_stack(f, x, ascii, printed);
	}
	return 0;
}

/* @v (a JSON scalar) as text for a cell: integers, reals as given, strings, NULL as "NULL". */
static void scalar_text(FILE *f, const json_t *v)
{
	if (json_is_integer(v))
		fprintf(f, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		fprintf(f, "%.15g", json_real_value(v));
	else if (json_is_string(v))
		fputs(json_string_value(v), f);
	else if (json_is_null(v))
		fputs("NULL", f);
	else
		fputs("?", f);
}

/* The "sql" response as an aligned table, then the row count. */
int output__sql(FILE *f, const json_t *reply)
{
	_cleanup_(table__freep) struct table *t = NULL;
	_cleanup_free_ struct table_column *columns = NULL;
	const json_t *cols, *rows, *row;
	size_t i, n;
	int r;

	if ((r = get_array(reply, "columns", &cols)) < 0 || (r = get_array(reply, "rows", &rows)) < 0)
		return r;
	n = json_array_size(cols);
	columns = calloc(n ?: 1, sizeof(*columns));
	if (!columns)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		columns[i] = (struct table_column){json_string_value(json_array_get(cols, i)) ?: "?",
						   TABLE_LEFT, 80};
	t = table__new(columns, n);
	if (!t)
		return -ENOMEM;
	json_array_foreach(rows, i, row)
	{
		for (size_t j = 0; j < n; j++) {
			_cleanup_free_ char *text = NULL;
			size_t size = 0;
			FILE *m = open_memstream(&text, &size);

			if (!m)
				return -ENOMEM;
			scalar_text(m, json_array_get(row, j));
			if (fclose(m) != 0 || table__cellf(t, "%s", text) < 0)
				return -ENOMEM;
		}
	}
	if (n)
		table__print(t, f);
	fprintf(f, "(%zu row%s%s)\n", json_array_size(rows), json_array_size(rows) == 1 ? "" : "s",
		json_is_true(json_object_get(reply, "truncated")) ? ", truncated" : "");
	return 0;
}

/* One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const json_t *v)
{
	_cleanup_free_ char *text = NULL;
	size_t size = 0;
	FILE *m = open_memstream(&text, &size);

	if (!m)
		return;
	if (!json_is_null(v))
		scalar_text(m, v); /* NULL is an empty field */
	if (fclose(m) != 0)
		return;
	if (!strpbrk(text, ",\"\r\n")) {
		fputs(text, f);
		return;
	}
	fputc('"', f);
	for (const char *c = text; *c; c++) {
		if (*c == '"')
			fputc('"', f);
		fputc(*c, f);
	}
	fputc('"', f);
}

/* The "sql" response as CSV: a header row, then the rows; CRLF line ends as RFC 4180 says. */
int output__sql_csv(FILE *f, const json_t *reply)
{
	const json_t *cols, *rows, *row;
	size_t i;
	int r;

	if ((r = get_array(reply, "columns", &cols)) < 0 || (r = get_array(reply, "rows", &rows)) < 0)
		return r;
	for (i = 0; i < json_array_size(cols); i++) {
		if (i)
			fputc(',', f);
		csv_field(f, json_array_get(cols, i));
	}
	fputs("\r\n", f);
	json_array_foreach(rows, i, row)
	{
		for (size_t j = 0; j < json_array_size(row); j++) {
			if (j)
				fputc(',', f);
			csv_field(f, json_array_get(row, j));
		}
		fputs("\r\n", f);
	}
	return 0;
}

/* The diff of two sessions (built by profctl from two "top" responses). */
int output__diff(FILE *f, const json_t *diff)
{
	static const struct table_column columns[] = {
	    {"SELF A%", TABLE_RIGHT, 0},  {"SELF B%", TABLE_RIGHT, 0}, {"DELTA", TABLE_RIGHT, 0},
	    {"TOTAL A%", TABLE_RIGHT, 0}, {"TOTAL B%", TABLE_RIGHT, 0}, {"DELTA", TABLE_RIGHT, 0},
	    {"FUNCTION", TABLE_LEFT, 60}, {"MODULE", TABLE_LEFT, 24},
	};
	_cleanup_(table__freep) struct table *t = NULL;
	long long a, b, ta, tb;
	const json_t *functions, *fn;
	size_t i;
	int r;

	if ((r = get_int(diff, "session_a", &a)) < 0 || (r = get_int(diff, "session_b", &b)) < 0 ||
	    (r = get_int(diff, "total_samples_a", &ta)) < 0 ||
	    (r = get_int(diff, "total_samples_b", &tb)) < 0 ||
	    (r = get_array(diff, "functions", &functions)) < 0)
		return r;
	t = table__new(columns, ARRAY_SIZE(columns));
	if (!t)
		return -ENOMEM;
	json_array_foreach(functions, i, fn)
	{
		double v[6];
		static const char *const keys[] = {"self_pct_a",  "self_pct_b",  "self_delta_pct",
						   "total_pct_a", "total_pct_b", "total_delta_pct"};
		const char *name, *module;

		for (int k = 0; k < 6; k++)
			if ((r = get_num(fn, keys[k], &v[k])) < 0)
				return r;
		if ((r = get_str(fn, "function", &name)) < 0 ||
		    (r = get_opt_str(fn, "module", &module)) < 0)
			return r;
		if (table__cellf(t, "%.2f", v[0]) < 0 || table__cellf(t, "%.2f", v[1]) < 0 ||
		    table__cellf(t, "%+.2f", v[2]) < 0 || table__cellf(t, "%.2f", v[3]) < 0 ||
		    table__cellf(t, "%.2f", v[4]) < 0 || table__cellf(t, "%+.2f", v[5]) < 0 ||
		    table__cellf(t, "%s", name) < 0 || table__cellf(t, "%s", module_name(module)) < 0)
			return -ENOMEM;
	}
	fprintf(f, "A = session %lld (%lld samples), B = session %lld (%lld samples)\n", a, ta, b,
		tb);
	fprintf(f, "lost samples: A %lld, B %lld; truncated stacks: A %lld, B %lld; unsymbolized "
		   "frames: A %lld, B %lld\n",
		(long long)json_integer_value(json_object_get(diff, "lost_samples_a")),
		(long long)json_integer_value(json_object_get(diff, "lost_samples_b")),
		(long long)json_integer_value(json_object_get(diff, "truncated_stacks_a")),
		(long long)json_integer_value(json_object_get(diff, "truncated_stacks_b")),
		(long long)json_integer_value(json_object_get(diff, "unsymbolized_frames_a")),
		(long long)json_integer_value(json_object_get(diff, "unsymbolized_frames_b")));
	fprintf(f, "Shares of each session's samples, in %%; DELTA = B - A, largest change first.\n\n");
	table__print(t, f);
	return 0;
}

/* The "analyze" response: findings, most severe first, then what was checked. */
int output__analyze(FILE *f, const json_t *reply)
{
	const json_t *findings, *checks, *v;
	long long session;
	size_t i;
	int r;

	if ((r = get_int(reply, "session", &session)) < 0 ||
	    (r = get_array(reply, "findings", &findings)) < 0 ||
	    (r = get_array(reply, "checks", &checks)) < 0)
		return r;
	fprintf(f, "session %lld: %zu finding%s\n", session, json_array_size(findings),
		json_array_size(findings) == 1 ? "" : "s");
	json_array_foreach(findings, i, v)
	{
		const char *severity, *title, *suggestion, *key;
		const json_t *evidence, *e;
		bool first = true;

		if ((r = get_str(v, "severity", &severity)) < 0 || (r = get_str(v, "title", &title)) < 0 ||
		    (r = get_str(v, "suggestion", &suggestion)) < 0)
			return r;
		fprintf(f, "\n[%s] %s\n  evidence:", severity, title);
		evidence = json_object_get(v, "evidence");
		json_object_foreach((json_t *)evidence, key, e)
		{
			fprintf(f, "%s %s=", first ? "" : ",", key);
			scalar_text(f, e);
			first = false;
		}
		fprintf(f, "\n  suggestion: %s\n", suggestion);
	}
	fprintf(f, "\nchecks without a finding:\n");
	json_array_foreach(checks, i, v)
	{
		const char *rule, *status, *detail;

		if ((r = get_str(v, "rule", &rule)) < 0 || (r = get_str(v, "status", &status)) < 0 ||
		    (r = get_str(v, "detail", &detail)) < 0)
			return r;
		fprintf(f, "  %-22s %-8s %s\n", rule, status, detail);
	}
	return 0;
}
