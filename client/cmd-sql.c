/* cmd-sql.c - sql and ping: read-only SQL over the store, and a check that profd answers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "output.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"

int run_sql(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	json_t *request = json_pack("{s:i, s:s, s:s}", "v", PROFD_PROTOCOL_VERSION, "cmd", "sql",
				    "query", a->sql);
	struct render out;
	int r;

	if (a->max_rows)
		request = request_set(request, "max_rows", json_integer(a->max_rows));
	r = call(c, request, &reply);
	if (r < 0)
		return r;
	if (json_is_true(json_object_get(reply, "truncated")))
		log_warning("result truncated after %lld rows (at most %s): narrow the query or "
			    "raise --max-rows",
			    (long long)json_integer_value(json_object_get(reply, "row_count")),
			    strcmp(json_string_value(json_object_get(reply, "truncated_by")) ?: "",
				   "rows") == 0
				? "--max-rows rows"
				: "16 MiB");
	if (a->json)
		return print_json(reply);
	if ((r = render_begin(&out)) < 0)
		return r;
	return render_end(&out, a->csv ? output__sql_csv(out.f, reply) : output__sql(out.f, reply));
}

int run_ping(struct conn *c, const struct args *a)
{
	_cleanup_(json_decrefp) json_t *reply = NULL;
	const char *version;
	json_t *protocol, *t;
	int r;

	r = call_for_text(c, a, request_new("ping"), &reply);
	if (r <= 0)
		return r;
	version = json_string_value(json_object_get(reply, "version"));
	protocol = json_object_get(reply, "protocol");
	if (!version || !json_is_integer(protocol)) {
		log_error("malformed response from profd: no version or protocol");
		return -EBADMSG;
	}
	printf("profd %s (protocol %lld) at %s\n", version, (long long)json_integer_value(protocol),
	       a->socket_path);
	t = json_object_get(reply, "unwind_tables");
	if (json_is_object(t)) /* a profd before the table cache sends none */
		printf("unwind tables: %lld modules, %lld rows loaded; %.1f s compiling; cache %s: "
		       "%lld hits, %lld written, %lld rejected, %lld failed, %.1f MiB\n",
		       json_integer_value(json_object_get(t, "modules")),
		       json_integer_value(json_object_get(t, "rows")),
		       json_real_value(json_object_get(t, "compile_s")),
		       json_is_true(json_object_get(t, "cache")) ? "on" : "off",
		       json_integer_value(json_object_get(t, "cache_hits")),
		       json_integer_value(json_object_get(t, "cache_stored")),
		       json_integer_value(json_object_get(t, "cache_rejected")),
		       json_integer_value(json_object_get(t, "cache_failed")),
		       (double)json_integer_value(json_object_get(t, "cache_bytes")) / (1 << 20));
	return 0;
}
