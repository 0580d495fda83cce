/*
 * dispatch.c - one request line in, one response object out: parse, check
 * that the requester may see the session it names, bring the store up to
 * date, and call the command (attach.c, the reports of daemon/report/).
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "protocol.h"
#include "report/analyze.h"
#include "report/gpu.h"
#include "report/memory.h"
#include "report/query.h"
#include "report/sql.h"
#include "service/authz.h"
#include "service/daemon.h"
#include "service/readers.h"
#include "store/store.h"
#include "symbols/resymbolize.h"
#include "util.h"

/* profctl sql: result size cap, and how long a statement may run (reports: query_timeout_s). */
#define SQL_MAX_RESULT_BYTES (16u << 20)
#define SQL_TIMEOUT_NS (5 * NSEC_PER_SEC)

/* dispatch__ok() - a success response with @fields (taken; may be NULL) merged in. */
json_t *dispatch__ok(json_t *fields)
{
	json_t *resp = json_pack("{s:i, s:b}", "v", PROFD_PROTOCOL_VERSION, "ok", 1);

	if (fields)
		json_object_update(resp, fields);
	json_decref(fields);
	return resp;
}

/*
 * dispatch__result() - the response to a report that returned @r with
 * @fields (taken): success, "no session", or the error.
 */
json_t *dispatch__result(int r, json_t *fields, int64_t session_id)
{
	if (r == -ENOENT)
		return json_error_response(r, "no session %lld", (long long)session_id);
	if (r < 0)
		return json_error_response(r, "query failed: %s", strerror(-r));
	return dispatch__ok(fields);
}

/* A report of a sampled event: say why there is none. */
static json_t *event_result(int r, json_t *fields, const struct request *req)
{
	if (r == -ENODATA)
		return json_error_response(
		    r, "session %lld did not sample %s (attach --events cpu,%s)",
		    (long long)req->session, req->sampled_event, req->sampled_event);
	if (r == -EOPNOTSUPP)
		return json_error_response(r,
					   "%s is unsupported on this machine (no hardware PMU): "
					   "session %lld has no samples of it",
					   req->sampled_event, (long long)req->session);
	return dispatch__result(r, fields, req->session);
}

/*
 * The one check every command naming a session goes through: sessions that
 * are not the requester's are invisible to it, as if absent (authz.h).
 */
static bool may_see(struct profd *p, const struct ucred *peer, bool admin, int64_t id)
{
	uid_t uid;

	if (admin)
		return true;
	return store__session_uid(p->env.store, id, &uid) == 0 && authz__may_see(peer, admin, uid);
}

/* Drop from a sessions list those the requester may not see. */
static void filter_sessions(json_t *list, const struct ucred *peer, bool admin)
{
	json_t *item;
	size_t i;

	json_array_foreach(list, i, item)
	{
		if (!authz__may_see(peer, admin,
				    (uid_t)json_integer_value(json_object_get(item, "uid")))) {
			json_array_remove(list, i);
			i--;
		}
	}
}

/* A report or SQL query, as a reader thread runs it (readers.h). */
struct report_job {
	struct request req;
	bool admin;
	uid_t uid;
	const char *db_path; /* profctl sql opens a connection of its own */
};

/* reader_fn: the reports, on a reader thread's read-only connection @db. */
static json_t *run_report(sqlite3 *db, void *arg, const atomic_bool *cancel)
{
	const struct report_job *j = arg;
	const struct request *req = &j->req;
	const struct query_range r_range = {.from_ns = req->from_ns, .to_ns = req->to_ns};
	const struct query_range *range = req->has_range ? &r_range : NULL;
	unsigned view = req->python_all ? QUERY_PYTHON_ALL : 0;
	json_t *fields = NULL;
	char err[512];
	int r;

	switch (req->cmd) {
	case CMD_TOP:
		r = query__top(db, req->session, req->limit, req->sampled_event, range, view,
			       &fields);
		return event_result(r, fields, req);
	case CMD_HOTPATHS:
		r = query__hotpaths(db, req->session, req->limit, req->sampled_event, range, view,
				    &fields);
		return event_result(r, fields, req);
	case CMD_PROFILE:
		r = query__profile(db, req->session, req->sampled_event, range,
				   (req->per_window ? PROFILE_PER_WINDOW : 0) |
				       (req->packed ? PROFILE_PACKED : 0) |
				       (req->per_thread ? 0 : PROFILE_BY_STACK) | view,
				   &fields);
		return event_result(r, fields, req);
	case CMD_ANALYZE:
		r = analyze__session(db, req->session, view, &fields);
		break;
	case CMD_SQL:
		r = sql__run(j->db_path, req->sql, j->admin, j->uid, (size_t)req->max_rows,
			     SQL_MAX_RESULT_BYTES, SQL_TIMEOUT_NS, cancel, &fields, err,
			     sizeof(err));
		if (r < 0)
			return json_error_response(r, "%s", err[0] ? err : strerror(-r));
		return dispatch__ok(fields);
	case CMD_THREADS: {
		struct threads_opts topts = {.group_by_name = req->group_by_name,
					     .window_s = req->window_s,
					     .all = req->all_threads};

		r = query__threads(db, req->session, &topts, &fields);
		break;
	}
	case CMD_OFFCPU:
		r = query__offcpu(db, req->session, req->limit, &fields);
		break;
	case CMD_MEMORY:
		r = query__memory(db, req->session, req->limit, &fields);
		break;
	case CMD_GPU:
		r = query__gpu(db, req->session, req->limit, &fields);
		break;
	case CMD_RANGES:
		r = query__ranges(db, req->session, &fields);
		break;
	default:
		return json_error_response(-EINVAL, "unknown command");
	}
	return dispatch__result(r, fields, req->session);
}

/*
 * Queue @req for a reader thread. Returns NULL (the answer comes later), or
 * the error to answer now: profd is busy, for this user or for everyone.
 */
static json_t *submit_report(struct profd *p, uint64_t client, const struct ucred *peer, bool admin,
			     const struct request *req)
{
	struct report_job *j = malloc(sizeof(*j));
	int r;

	if (!j)
		return json_error_response(-ENOMEM, "out of memory");
	*j = (struct report_job){
	    .req = *req, .admin = admin, .uid = peer->uid, .db_path = p->cfg->db_path};
	r = readers__submit(p->readers, client, peer->uid, run_report, j, free);
	if (r == -EUSERS)
		return json_error_response(-EBUSY,
					   "busy: user %u has %u reports or queries running or "
					   "waiting already (queries_per_user in profd.conf); try "
					   "again when one ends",
					   (unsigned)peer->uid, p->cfg->queries_per_user);
	if (r == -EBUSY)
		return json_error_response(-EBUSY,
					   "busy: %u reports or queries are running or waiting "
					   "(max_queries in profd.conf); try again shortly",
					   MAX(p->cfg->max_queries, p->cfg->query_threads));
	if (r < 0)
		return json_error_response(r, "cannot queue the query: %s", strerror(-r));
	return NULL;
}

/*
 * tables_object() - the ping's "unwind_tables": what the BPF walk's CFI
 * tables hold now, in all sessions, and what the table cache on disk did
 * since profd started (docs/protocol.md).
 */
static json_t *tables_object(struct profd *p)
{
	struct cfi_maps_stats t;

	sampler__tables_stats(p->env.sampler, &t);
	return json_pack(
	    "{s:I, s:I, s:I, s:I, s:f, s:b, s:I, s:I, s:I, s:I, s:I, s:I}", "processes",
	    (json_int_t)t.procs, "modules", (json_int_t)t.modules, "rows", (json_int_t)t.rows_used,
	    "row_array_rows", (json_int_t)t.rows_len, "compile_s", (double)t.compile_ns / 1e9,
	    "cache", sampler__has_table_cache(p->env.sampler), "cache_hits",
	    (json_int_t)t.cache_hits, "cache_stored", (json_int_t)t.cache_stored, "cache_rejected",
	    (json_int_t)t.cache_rejected, "cache_failed", (json_int_t)t.cache_failed,
	    "cache_evicted", (json_int_t)t.cache_evicted, "cache_bytes", (json_int_t)t.cache_bytes);
}

/* One ring's entry in rings_object(): @r may be NULL (the feature is off). */
static void ring_entry(json_t *o, const char *name, struct record_reader *r)
{
	if (r)
		json_object_set_new(o, name,
				    json_pack("{s:I, s:I}", "ring_bytes", (json_int_t)r->ring_bytes,
					      "queued_peak_bytes",
					      (json_int_t)record_reader__queued_peak(r)));
}

/*
 * rings_object() - the ping's "rings": each BPF ring buffer's size and the
 * most bytes of its records queued at once by its drain thread since profd
 * started, while the loop was busy (docs/protocol.md).
 */
static json_t *rings_object(struct profd *p)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	ring_entry(o, "samples", sampler__reader(p->env.sampler));
	ring_entry(o, "offcpu", p->offcpu ? offcpu__reader(p->offcpu) : NULL);
	ring_entry(o, "malloc", p->malloc_probes ? malloc_probes__reader(p->malloc_probes) : NULL);
	ring_entry(o, "uprobes", p->uprobes ? uprobes__reader(p->uprobes) : NULL);
	return o;
}

/*
 * One request: answered here, on the loop, when it reads little or changes
 * a session (ping, attach, detach, session, sessions, resymbolize), or
 * handed to a reader thread (NULL) when it is a report or SQL.
 */
static json_t *run_request(struct profd *p, uint64_t client, const struct ucred *peer,
			   const char *line, size_t len)
{
	static struct request req; /* 16 KiB of SQL text: not on the stack */
	sqlite3 *db = store__db(p->env.store);
	char err[512];
	json_t *fields = NULL;
	bool admin;
	int r;

	r = request__parse(line, len, &req, err, sizeof(err));
	if (r < 0)
		return json_error_response(r, "%s", err);

	admin = authz__is_admin(peer);
	if (req.session && !may_see(p, peer, admin, req.session))
		return json_error_response(-ENOENT, "no session %lld", (long long)req.session);

	/* Reports read the store: give them what was sampled up to now. */
	if (req.cmd != CMD_PING && req.cmd != CMD_ATTACH) {
		profd__collect(p, false);
		profd__flush(p);
	}

	switch (req.cmd) {
	case CMD_PING:
		return dispatch__ok(json_pack("{s:s, s:i, s:i, s:o, s:o}", "version", PROFD_VERSION,
					      "protocol", PROFD_PROTOCOL_VERSION, "queries_running",
					      (json_int_t)readers__busy(p->readers),
					      "unwind_tables", tables_object(p), "rings",
					      rings_object(p)));
	case CMD_ATTACH:
		return attach__run(p, peer, admin, &req);
	case CMD_DETACH:
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i] && session__id(p->slots[i]) == req.session)
				profd__end_session(p, i, "detached");
		/* answer with the session as it is now */
		__attribute__((fallthrough));
	case CMD_SESSION:
		r = query__session(db, req.session, &fields);
		if (r == 0 && req.cmd == CMD_SESSION)
			fields = json_pack("{s:o}", "session", fields);
		return dispatch__result(r, fields, req.session);
	case CMD_SESSIONS:
		r = query__sessions(db, &fields);
		if (r == 0)
			filter_sessions(json_object_get(fields, "sessions"), peer, admin);
		return dispatch__result(r, fields, 0);
	case CMD_RESYMBOLIZE:
		/* It writes: on the loop, with the store's connection. */
		r = resymbolize__session(p->env.store, req.session, req.debuginfod, &fields);
		if (r == -EIO)
			return json_error_response(r, "resymbolize failed: %s",
						   store__errmsg(p->env.store));
		return dispatch__result(r, fields, req.session);
	default:
		return submit_report(p, client, peer, admin, &req);
	}
}

/*
 * dispatch__finish() - @resp (taken) as it goes to the client: while the
 * database cannot be written (a full disk), queries still answer from what
 * is stored, and every successful answer says that newer samples are
 * waiting: the requester learns it, not only the log.
 */
json_t *dispatch__finish(struct profd *p, json_t *resp)
{
	if (p->flush_errors && json_is_true(json_object_get(resp, "ok"))) {
		char msg[512];
		time_t since = (time_t)(p->flush_failing_since_ns / NSEC_PER_SEC);
		struct tm tm;
		char when[32] = "";

		if (gmtime_r(&since, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(msg, sizeof(msg),
			 "the database cannot be written since %s (%s): samples since then are "
			 "held in memory and not in these results; profd retries every second",
			 when, p->flush_error);
		json_object_set_new(resp, "warning", json_string(msg));
	}
	return resp;
}

/* dispatch__gone() - server_gone_fn: @client hung up; its report stops at once. */
void dispatch__gone(void *ctx, uint64_t client)
{
	struct profd *p = ctx;

	readers__cancel(p->readers, client);
}

/*
 * dispatch__request() - answer one request line of @len bytes from @peer,
 * the server's client @client (server_handler_fn; @ctx is the struct
 * profd): the response, or NULL when a reader thread will answer.
 */
json_t *dispatch__request(void *ctx, uint64_t client, const struct ucred *peer, const char *line,
			  size_t len)
{
	struct profd *p = ctx;
	json_t *resp = run_request(p, client, peer, line, len);

	return resp ? dispatch__finish(p, resp) : NULL;
}
