/*
 * cmd-fleet.c - fleet top, hotpaths and sql: the sessions of every host,
 * as profd ships them to ClickHouse (docs/fleet.md), queried there
 * directly (clickhouse.c), not through profd; the answers take the shapes
 * of top and hotpaths (docs/protocol.md) and print as they do.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <ini.h>

#include "clickhouse.h"
#include "io.h"
#include "log.h"
#include "output.h"
#include "profctl.h"
#include "util.h"

#define DEFAULT_DATABASE "profd"
#define DEFAULT_SINCE_S 3600.0
#define DEFAULT_TOP_LIMIT 20
#define DEFAULT_HOTPATHS_LIMIT 10
#define MAX_PASSWORD_BYTES 4096

/* profd.conf's [fleet] settings profctl uses; strings live until profctl exits. */
struct fleet_conf {
	char *url, *database, *user, *password, *password_file, *ca_file;
};

static struct fleet_conf conf;

static int on_conf(void *user, const char *section, const char *key, const char *value)
{
	static const struct {
		const char *key;
		size_t field;
	} keys[] = {
	    {"clickhouse_url", offsetof(struct fleet_conf, url)},
	    {"clickhouse_database", offsetof(struct fleet_conf, database)},
	    {"clickhouse_user", offsetof(struct fleet_conf, user)},
	    {"clickhouse_password", offsetof(struct fleet_conf, password)},
	    {"clickhouse_password_file", offsetof(struct fleet_conf, password_file)},
	    {"ca_file", offsetof(struct fleet_conf, ca_file)},
	};

	if (strcmp(section, "fleet") != 0)
		return 1;
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		char **field = (char **)((char *)user + keys[i].field);

		if (strcmp(key, keys[i].key) != 0 || !*value)
			continue;
		free(*field);
		*field = strdup(value);
		if (!*field)
			return 0;
	}
	return 1;
}

/*
 * conf_load() - the [fleet] settings of @path (profd's configuration file)
 * into conf, if the file can be read: profd's own checks of the file are
 * not repeated, and a file profctl may not read (root's) is no error.
 * Returns 0, or -ENOMEM.
 */
static int conf_load(const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	return ini_parse_file(f, on_conf, &conf) < 0 ? -ENOMEM : 0;
}

int fleet__check_args(struct args *a)
{
	static const char *const filters[] = {"host",  "comm",	"label", "event",
					      "since", "limit", "ascii"};
	bool sql = a->fleet_report && strcmp(a->fleet_report, "sql") == 0;
	const char *env, *path;
	int r;

	if (!sql && strcmp(a->fleet_report, "top") != 0 &&
	    strcmp(a->fleet_report, "hotpaths") != 0) {
		log_error("unknown fleet report '%s': top, hotpaths or sql (see 'profctl fleet "
			  "--help')",
			  a->fleet_report);
		return -EINVAL;
	}
	if (sql && !a->sql) {
		log_error("missing QUERY: profctl fleet sql \"SELECT ...\" (see 'profctl fleet "
			  "--help')");
		return -EINVAL;
	}
	if (sql) {
		const void *given[] = {a->host,
				       a->comm,
				       a->label,
				       a->event,
				       a->since_s > 0 ? a : NULL,
				       a->limit ? a : NULL,
				       a->ascii ? a : NULL};

		for (size_t i = 0; i < ARRAY_SIZE(filters); i++)
			if (given[i]) {
				log_error("--%s is for fleet top and hotpaths; fleet sql runs "
					  "the query as given",
					  filters[i]);
				return -EINVAL;
			}
	} else if (a->csv) {
		log_error("--csv is for fleet sql");
		return -EINVAL;
	}

	path = getenv("PROFD_CONFIG");
	if ((r = conf_load(path && *path ? path : PROFD_DEFAULT_CONFIG)) < 0)
		return log_oom();
	env = getenv("PROFD_CLICKHOUSE_URL");
	if (!a->clickhouse_url)
		a->clickhouse_url = env && *env ? env : conf.url;
	if (!a->clickhouse_url) {
		log_error("no ClickHouse server given: use --clickhouse-url http://HOST:8123, set "
			  "PROFD_CLICKHOUSE_URL, or set clickhouse_url in [fleet] of %s",
			  path && *path ? path : PROFD_DEFAULT_CONFIG);
		return -EINVAL;
	}
	if (!a->database)
		a->database = conf.database ? conf.database : DEFAULT_DATABASE;
	/* profd's credentials only for profd's user, not for another --user. */
	if (!a->user) {
		a->user = conf.user;
		if (!a->password_file)
			a->password_file = conf.password_file;
	} else {
		free(conf.password);
		conf.password = NULL;
	}
	if (a->since_s <= 0)
		a->since_s = DEFAULT_SINCE_S;
	return 0;
}

/*
 * password_read() - the first line of @path, without its line end, in
 * *@ret (caller frees). Returns 0, or a negative errno (logged).
 */
static int password_read(const char *path, char **ret)
{
	_cleanup_free_ char *line = NULL;
	int r = read_first_line(path, &line);

	if (r == -ENOMEM)
		return log_oom();
	if (r < 0)
		return log_error_errno(r, "cannot read the password file %s: %m", path);
	if (strlen(line) > MAX_PASSWORD_BYTES)
		return log_error_errno(-EINVAL, "password file %s: first line longer than %d bytes",
				       path, MAX_PASSWORD_BYTES);
	*ret = TAKE_PTR(line);
	return 0;
}

/* sql_string() - @s as a ClickHouse string literal: quoted, ' and \ escaped. */
static void sql_string(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

/*
 * where_samples() - the WHERE clause that picks the samples of the fleet
 * report: of the event, in a minute that overlaps the last --since seconds
 * (a row's minute covers [minute, minute + 60 s)), of --host, --comm and
 * --label if given. Times are the server's: now() is ClickHouse's clock.
 */
static void where_samples(FILE *f, const struct args *a)
{
	fprintf(f, "WHERE event = ");
	sql_string(f, a->event ? a->event : "cpu");
	fprintf(f, " AND minute > now() - %lld", (long long)ceil(a->since_s) + 60);
	if (a->host) {
		fprintf(f, " AND host = ");
		sql_string(f, a->host);
	}
	if (a->comm) {
		fprintf(f, " AND comm = ");
		sql_string(f, a->comm);
	}
	if (a->label) {
		fprintf(f, " AND label = ");
		sql_string(f, a->label);
	}
}

/*
 * fleet_statement() - the statement @before, where_samples(), @after, then
 * " LIMIT @limit" and @tail if @limit > 0, in *@ret (caller frees).
 * Returns 0 or -ENOMEM (logged).
 */
static int fleet_statement(const struct args *a, const char *before, const char *after,
			   long long limit, const char *tail, char **ret)
{
	_cleanup_free_ char *sql = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&sql, &size);

	if (!f)
		return log_oom();
	fputs(before, f);
	where_samples(f, a);
	fputs(after, f);
	if (limit > 0)
		fprintf(f, " LIMIT %lld%s", limit, tail);
	if (fclose(f) != 0)
		return log_oom();
	*ret = TAKE_PTR(sql);
	return 0;
}

/*
 * fleet_run() - the @n statements @sqls run on @ch side by side (the
 * report's head and body each read every sample row of the period: on
 * two connections the server reads them at once, 0.40-0.50 s rather than
 * 0.61-0.72 s one after the other over 10 M rows on a 2-core machine,
 * bench/fleet); statement i's "data" rows in @rows[i] (caller unrefs).
 * Returns 0 or a negative errno, logged with ClickHouse's message.
 */
static int fleet_run(const struct clickhouse *ch, size_t n, const char *const *sqls, json_t **rows)
{
	_cleanup_free_ json_t **answers = calloc(n, sizeof(*answers));
	_cleanup_free_ char *error = NULL;
	size_t i;
	int r;

	if (!answers)
		return log_oom();
	r = clickhouse__query_all(ch, n, sqls, answers, &error);
	if (r == -ENOMEM)
		return log_oom();
	if (r < 0) {
		log_error("%s", error);
		return r;
	}
	for (i = 0; i < n; i++) {
		rows[i] = json_incref(json_object_get(answers[i], "data"));
		if (!json_is_array(rows[i]))
			r = -EBADMSG;
	}
	for (i = 0; i < n; i++) {
		json_decref(answers[i]);
		if (r < 0) {
			json_decref(rows[i]);
			rows[i] = NULL;
		}
	}
	if (r < 0)
		log_error("ClickHouse at %s: no rows in the answer to profctl's query", ch->url);
	return r;
}

/* cell() - column @i of @row as an integer (logged if not one). */
static int cell(const json_t *row, size_t i, long long *ret)
{
	if (clickhouse__int(json_array_get(row, i), ret) < 0) {
		log_error("malformed answer from ClickHouse: column %zu is not an integer", i + 1);
		return -EBADMSG;
	}
	return 0;
}

static double pct(long long n, long long total)
{
	return total > 0 ? round(1000.0 * (double)n / (double)total) / 10.0 : 0;
}

/*
 * summary_sql() - the statement of the report's head (fleet_summary()), in
 * *@ret. Returns 0 or -ENOMEM (logged).
 *
 * Sessions are grouped by the hash of their host's name: ClickHouse
 * groups two 64-bit keys faster than a string and a number (over 10 M
 * rows here, 0.5 s rather than 1.1-1.5 s for the GROUP BY alone,
 * 0.45-0.5 s rather than 0.7 s for this whole statement), and the hosts
 * are counted by their hash (exact but for a 64-bit collision of two
 * names).
 */
static int summary_sql(const struct args *a, char **ret)
{
	return fleet_statement(
	    a,
	    "SELECT sum(c), uniqExact(h), count(), sum(lost_samples), "
	    "sum(truncated_stacks), sum(missing_user_stacks), "
	    "sum(unsymbolized_frames), sum(limit_dropped_samples) FROM "
	    "(SELECT cityHash64(host) AS h, session_id, sum(count) AS c FROM "
	    "samples ",
	    " GROUP BY h, session_id) ANY LEFT JOIN (SELECT cityHash64(host) AS "
	    "h, session_id, lost_samples, truncated_stacks, missing_user_stacks, "
	    "unsymbolized_frames, limit_dropped_samples FROM sessions FINAL) "
	    "USING h, session_id",
	    0, NULL, ret);
}

/*
 * fleet_summary() - the report's head from the @rows summary_sql() gave:
 * "session": null, "hosts", "sessions", "since_s", "event",
 * "total_samples", and the loss counters summed over the sessions counted
 * (whole sessions, from the latest row of each in sessions FINAL). Returns
 * 0 with the object in *@ret, or a negative errno (logged).
 */
static int fleet_summary(const struct args *a, const json_t *rows, json_t **ret)
{
	static const char *const keys[] = {"total_samples",
					   "hosts",
					   "sessions",
					   "lost_samples",
					   "truncated_stacks",
					   "missing_user_stacks",
					   "unsymbolized_frames",
					   "limit_dropped_samples"};
	_cleanup_(json_decrefp) json_t *o = NULL;
	long long v[ARRAY_SIZE(keys)];
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if ((r = cell(json_array_get(rows, 0), i, &v[i])) < 0)
			return r;
	o = json_pack("{s:n, s:I, s:I, s:f, s:s}", "session", "hosts", (json_int_t)v[1], "sessions",
		      (json_int_t)v[2], "since_s", a->since_s, "event",
		      a->event ? a->event : "cpu");
	if (!o)
		return log_oom();
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (i != 1 && i != 2 && json_object_set_new(o, keys[i], json_integer(v[i])) < 0)
			return log_oom();
	*ret = TAKE_PTR(o);
	return 0;
}

/* A module as the reports give it: null rather than "" when unknown. */
static json_t *module_json(const char *module)
{
	return module && *module ? json_string(module) : json_null();
}

/*
 * top_sql() - the statement of profctl top's "functions" over the fleet,
 * in *@ret: per (function, module), self samples (the stack's leaf,
 * functions[1]) and total samples (stacks that hold it, once however
 * often: arrayEnumerateUniq keeps a function's first frame of each stack),
 * sorted by self. Returns 0 or -ENOMEM (logged).
 */
static int top_sql(const struct args *a, char **ret)
{
	return fleet_statement(
	    a,
	    "SELECT f, m, any(k), sum(if(i = 1, c, 0)) AS self, sum(c) AS total "
	    "FROM (SELECT c, functions, modules, kinds FROM (SELECT stack_hash, "
	    "sum(count) AS c FROM samples ",
	    " GROUP BY stack_hash) ANY INNER JOIN (SELECT stack_hash, functions, modules, "
	    "kinds FROM stacks) USING stack_hash) ARRAY JOIN functions AS f, modules AS "
	    "m, kinds AS k, arrayEnumerate(functions) AS i, arrayEnumerateUniq(functions, "
	    "modules) AS u WHERE u = 1 GROUP BY f, m ORDER BY self DESC, total DESC, f, m",
	    a->limit ? a->limit : DEFAULT_TOP_LIMIT, "", ret);
}

/* fleet_top() - the @rows top_sql() gave, appended to @functions; @total: all samples. */
static int fleet_top(const json_t *rows, long long total, json_t *functions)
{
	json_t *row;
	size_t i;
	int r;

	json_array_foreach(rows, i, row)
	{
		const char *function = json_string_value(json_array_get(row, 0));
		const char *module = json_string_value(json_array_get(row, 1));
		const char *kind = json_string_value(json_array_get(row, 2));
		long long self, incl;

		if ((r = cell(row, 3, &self)) < 0 || (r = cell(row, 4, &incl)) < 0)
			return r;
		if (!function) {
			log_error("malformed answer from ClickHouse: a function that is not a "
				  "string");
			return -EBADMSG;
		}
		if (json_array_append_new(
			functions,
			json_pack("{s:s, s:o, s:n, s:n, s:s, s:I, s:I, s:f, s:f}", "function",
				  function, "module", module_json(module), "file", "line", "kind",
				  kind ? kind : "user", "self_samples", (json_int_t)self,
				  "total_samples", (json_int_t)incl, "self_pct", pct(self, total),
				  "total_pct", pct(incl, total))) < 0)
			return log_oom();
	}
	return 0;
}

/*
 * hotpaths_sql() - the statement of profctl hotpaths' "paths" over the
 * fleet, in *@ret: the stacks with the most samples (stack_hash stands for
 * the sequence of (function, module): equal stacks of different hosts are
 * one), with their frames, leaf first. Returns 0 or -ENOMEM (logged).
 */
static int hotpaths_sql(const struct args *a, char **ret)
{
	return fleet_statement(
	    a,
	    "SELECT c, functions, modules, kinds FROM (SELECT stack_hash, "
	    "sum(count) AS c FROM samples ",
	    " GROUP BY stack_hash ORDER BY c DESC, stack_hash",
	    a->limit ? a->limit : DEFAULT_HOTPATHS_LIMIT,
	    ") ANY INNER JOIN (SELECT stack_hash, functions, modules, kinds FROM "
	    "stacks) USING stack_hash ORDER BY c DESC, stack_hash",
	    ret);
}

/* fleet_hotpaths() - the @rows hotpaths_sql() gave, appended to @paths; @total: all samples. */
static int fleet_hotpaths(const json_t *rows, long long total, json_t *paths)
{
	json_t *row;
	size_t i;
	int r;

	json_array_foreach(rows, i, row)
	{
		const json_t *functions = json_array_get(row, 1), *modules = json_array_get(row, 2);
		const json_t *kinds = json_array_get(row, 3);
		json_t *frames;
		long long samples;

		if ((r = cell(row, 0, &samples)) < 0)
			return r;
		if (!json_is_array(functions) || !json_is_array(modules) ||
		    json_array_size(modules) != json_array_size(functions)) {
			log_error("malformed answer from ClickHouse: a stack's functions and "
				  "modules differ in length");
			return -EBADMSG;
		}
		frames = json_array();
		if (!frames ||
		    json_array_append_new(
			paths, json_pack("{s:I, s:f, s:o}", "samples", (json_int_t)samples, "pct",
					 pct(samples, total), "frames", frames)) < 0)
			return log_oom();
		for (size_t k = 0; k < json_array_size(functions); k++) {
			const char *function = json_string_value(json_array_get(functions, k));
			const char *module = json_string_value(json_array_get(modules, k));
			const char *kind = json_string_value(json_array_get(kinds, k));
			bool inlined =
			    kind && (strcmp(kind, "inline") == 0 || strcmp(kind, "inlined") == 0);

			if (json_array_append_new(frames,
						  json_pack("{s:s, s:o, s:s, s:b}", "function",
							    function ? function : "?", "module",
							    module_json(module), "kind",
							    kind && !inlined ? kind : "user",
							    "inlined", inlined)) < 0)
				return log_oom();
		}
	}
	return 0;
}

/* print_report() - @reply as JSON with --json, else by the same code as profctl top/hotpaths. */
static int print_report(const struct args *a, const json_t *reply, bool hotpaths)
{
	struct render out;
	int r;

	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, hotpaths ? output__hotpaths(out.f, reply, want_ascii(a))
					 : output__top(out.f, reply));
}

/* is_int64_type() - a ClickHouse type whose values the server quotes in JSON: (U)Int64. */
static bool is_int64_type(const char *type)
{
	if (strncmp(type, "Nullable(", 9) == 0)
		type += 9;
	return strncmp(type, "Int64", 5) == 0 || strncmp(type, "UInt64", 6) == 0;
}

/*
 * fleet_sql() - @a->sql run read-only (readonly=1: the server refuses
 * writes, DDL and settings changes) and printed as profctl sql prints:
 * the answer in the shape of the "sql" response ({"columns","types",
 * "rows","row_count","truncated"}), (U)Int64 values as numbers where they
 * fit. A query with a FORMAT of its own is printed as the server sent it.
 */
static int fleet_sql(struct clickhouse *ch, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *answer = NULL;
	_cleanup_(json_decrefp) json_t *reply = NULL;
	_cleanup_free_ char *error = NULL;
	const json_t *meta, *data, *row;
	json_t *columns, *types, *rows;
	struct render out;
	size_t i;
	int r;

	ch->readonly = true;
	r = clickhouse__query(ch, a->sql, &answer, &error);
	if (r == -ENOMEM)
		return log_oom();
	if (r < 0) {
		log_error("%s", error);
		return r;
	}
	if (json_is_string(json_object_get(answer, "text"))) {
		fputs(json_string_value(json_object_get(answer, "text")), stdout);
		return 0;
	}
	meta = json_object_get(answer, "meta");
	data = json_object_get(answer, "data");
	columns = json_array();
	types = json_array();
	rows = json_array();
	reply = json_pack("{s:o, s:o, s:o, s:I, s:b, s:n}", "columns", columns, "types", types,
			  "rows", rows, "row_count", (json_int_t)json_array_size(data), "truncated",
			  false, "truncated_by");
	if (!reply)
		return log_oom();
	for (i = 0; i < json_array_size(meta); i++) {
		const char *name =
		    json_string_value(json_object_get(json_array_get(meta, i), "name"));
		const char *type =
		    json_string_value(json_object_get(json_array_get(meta, i), "type"));

		if (json_array_append_new(columns, json_string(name ? name : "?")) < 0 ||
		    json_array_append_new(types, json_string(type ? type : "?")) < 0)
			return log_oom();
	}
	json_array_foreach(data, i, row)
	{
		json_t *copy = json_deep_copy(row);

		if (!copy || json_array_append_new(rows, copy) < 0)
			return log_oom();
		for (size_t k = 0; k < json_array_size(copy) && k < json_array_size(types); k++) {
			long long v;

			if (json_is_string(json_array_get(copy, k)) &&
			    is_int64_type(json_string_value(json_array_get(types, k))) &&
			    clickhouse__int(json_array_get(copy, k), &v) == 0 &&
			    json_array_set_new(copy, k, json_integer(v)) < 0)
				return log_oom();
		}
	}
	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, a->csv ? output__sql_csv(out.f, reply) : output__sql(out.f, reply));
}

/*
 * fleet_report() - fleet top (@hotpaths false) or hotpaths: its head and
 * its body ("functions" or "paths") queried side by side, into *@ret.
 * Returns 0 or a negative errno (logged).
 */
static int fleet_report(const struct clickhouse *ch, const struct args *a, bool hotpaths,
			json_t **ret)
{
	_cleanup_free_ char *head = NULL, *body = NULL;
	json_t *rows[2] = {NULL, NULL};
	int r;

	if ((r = summary_sql(a, &head)) < 0 ||
	    (r = hotpaths ? hotpaths_sql(a, &body) : top_sql(a, &body)) < 0)
		return r;
	r = fleet_run(ch, 2, (const char *const[]){head, body}, rows);
	if (r >= 0)
		r = fleet_summary(a, rows[0], ret);
	if (r >= 0) {
		long long total = json_integer_value(json_object_get(*ret, "total_samples"));
		json_t *list = json_array();

		if (!list || json_object_set_new(*ret, hotpaths ? "paths" : "functions", list) < 0)
			r = log_oom();
		else
			r = hotpaths ? fleet_hotpaths(rows[1], total, list)
				     : fleet_top(rows[1], total, list);
	}
	json_decref(rows[0]);
	json_decref(rows[1]);
	return r;
}

int run_fleet(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	_cleanup_free_ char *password = NULL;
	struct clickhouse ch = {.url = a->clickhouse_url,
				.database = a->database,
				.user = a->user,
				.password = conf.password,
				.ca_file = a->ca_file ? a->ca_file : conf.ca_file};
	bool hotpaths = strcmp(a->fleet_report, "hotpaths") == 0;
	int r;

	if (a->password_file) {
		if ((r = password_read(a->password_file, &password)) < 0)
			return r;
		ch.password = password;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return log_error_errno(-ENOMEM, "cannot initialize libcurl");

	if (strcmp(a->fleet_report, "sql") == 0)
		r = fleet_sql(&ch, a);
	else
		r = fleet_report(&ch, a, hotpaths, &reply);
	if (r >= 0 && reply)
		r = print_report(a, reply, hotpaths);
	curl_global_cleanup();
	return r;
}
