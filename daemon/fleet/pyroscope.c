/*
 * pyroscope.c - the Pyroscope push: a thread of its own that sends each
 * session's CPU samples, a piece of window time at a time, as gzip'd pprof
 * to POST {url}/ingest, with a cursor per session in the database
 * (fleet_cursors, sink 'pyroscope') so that every sample arrives, across
 * restarts and crashes too, and once unless an answer was lost.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fleet/curl_load.h"
#include <jansson.h>
#include <sqlite3.h>

#include "store/fleet_cursor.h"
#include "fleet/pyroscope.h"
#include "io.h"
#include "log.h"
#include "pprof.h"
#include "protocol.h"
#include "report/query.h"
#include "store/sqlite_util.h"
#include "util.h"
#include "worker_thread.h"
#include "xprofile.h"

/*
 * Windows closer to now than profd's flush interval and this are not pushed
 * yet: the loop still adds to the current one, and flushes it up to a flush
 * interval later (a late flush: one second more).
 */
#define SETTLE_AFTER_FLUSH_NS (2 * NSEC_PER_SEC)
/* A piece spans at most this much window time (catching up after an outage). */
#define PIECE_MAX_NS (600 * NSEC_PER_SEC)
/* Pieces end on this grid from the session's start when capped: the merged windows' minute. */
#define PIECE_GRID_NS (60 * NSEC_PER_SEC)
/* curl: connecting, the whole request, and no byte either way for this long. */
#define CONNECT_TIMEOUT_S 5L
#define TOTAL_TIMEOUT_S 30L
#define STALL_TIMEOUT_S 10L
/* The last round at stop ends this long after pyroscope__free() was called. */
#define STOP_BUDGET_NS (5 * NSEC_PER_SEC)
/* Of a failed answer's body, the first line up to this many bytes goes in the error. */
#define ERROR_BODY_BYTES 200

/* fleet_cursors.sink of this thread's rows. */
#define SINK "pyroscope"

struct pyroscope {
	/* Settings, owned. */
	char *url, *app, *tenant, *user, *password, *host;
	char *ca_file; /* https: CURLOPT_CAINFO, or NULL: the system's CA certificates */
	uint64_t interval_ns;
	int64_t settle_ns; /* a running session's windows this recent wait */
	sqlite3 *db; /* the thread's own; it writes only its fleet_cursors rows */
	CURL *curl;
	struct curl_slist *headers;
	/* The push state, for one log line per change. */
	bool failing;
	char error[256];
	uint64_t failed_pushes;
	bool warned_merged;
	size_t unfinished; /* sessions with samples not yet pushed, after the last round */
	bool curl_global;  /* curl_global_init() done */

	struct worker_thread worker; /* kicked when a session ends */
	uint64_t stop_by_ns;	     /* CLOCK_MONOTONIC; 0 while running; under worker.lock */
};

/* One session row, as a round reads it. */
struct push_session {
	int64_t id, pid, freq_hz, started_at_ns, ended_at_ns;
	bool running;
	char *comm, *exe, *label;
};

static void push_session__done(struct push_session *s)
{
	free(s->comm);
	free(s->exe);
	free(s->label);
}

/* A copy of @s with every character Pyroscope's name parser stops at made '_'; NULL: -ENOMEM. */
static char *label_value(const char *s, bool app)
{
	char *v = strdup(s ?: "");

	if (!v)
		return NULL;
	for (char *c = v; *c; c++) {
		bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			  (*c >= '0' && *c <= '9') || *c == '_' || *c == '.' || *c == '-' ||
			  *c == '/';

		/* The app name: [A-Za-z0-9_./-] only; a label value: anything but the
		 * parser's separators ",{}=" and control characters. */
		if (app ? !ok
			: (*c == ',' || *c == '{' || *c == '}' || *c == '=' ||
			   (unsigned char)*c < 0x20 || *c == 0x7f))
			*c = '_';
	}
	return v;
}

/*
 * The ingest URL of one piece: {url}/ingest?name=APP{host=H,comm=C[,label=L]}
 * &from=S&until=S&format=pprof&sampleRate=HZ&spyName=profd, from and until
 * in Unix seconds. NULL: -ENOMEM.
 */
static char *ingest_url(const struct pyroscope *ps, const struct push_session *s, int64_t from_ns,
			int64_t until_ns)
{
	_cleanup_free_ char *comm = label_value(s->comm, false);
	_cleanup_free_ char *label = label_value(s->label, false);
	_cleanup_free_ char *name = NULL;
	char *escaped, *url;
	int64_t from_s = from_ns / (int64_t)NSEC_PER_SEC;
	int64_t until_s = (until_ns + (int64_t)NSEC_PER_SEC - 1) / (int64_t)NSEC_PER_SEC;

	if (!comm || !label ||
	    asprintf(&name, "%s{host=%s,comm=%s%s%s}", ps->app, ps->host, comm,
		     *label ? ",label=" : "", label) < 0)
		return NULL;
	escaped = curl_easy_escape(ps->curl, name, 0);
	if (!escaped)
		return NULL;
	if (asprintf(&url,
		     "%s/ingest?name=%s&from=%" PRId64 "&until=%" PRId64
		     "&format=pprof&sampleRate=%" PRId64 "&spyName=profd",
		     ps->url, escaped, from_s, MAX(until_s, from_s + 1), s->freq_hz) < 0)
		url = NULL;
	curl_free(escaped);
	return url;
}

/* What a failed answer's body keeps: its first line, up to ERROR_BODY_BYTES. */
struct answer {
	char text[ERROR_BODY_BYTES + 1];
	size_t len;
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct answer *a = arg;
	size_t len = size * n, take = MIN(len, ERROR_BODY_BYTES - a->len);

	memcpy(a->text + a->len, data, take);
	a->len += take;
	a->text[a->len] = '\0';
	return len;
}

/* Aborts a transfer once the stop budget is spent (a hung server at shutdown). */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct pyroscope *ps = arg;
	uint64_t stop_by;

	pthread_mutex_lock(&ps->worker.lock);
	stop_by = ps->stop_by_ns;
	pthread_mutex_unlock(&ps->worker.lock);
	return stop_by && now_ns(CLOCK_MONOTONIC) > stop_by;
}

/*
 * post() - POST @body (@len bytes) to @url. Returns 0 on a 2xx answer, else
 * -EIO with @err (@errlen bytes) saying why: "connection refused",
 * "authentication failed (HTTP 401)", "HTTP 500: <first line of the body>",
 * "not an HTTP answer (...)", curl's message for the rest (timeouts: "Operation
 * too slow..." after STALL_TIMEOUT_S without a byte). May
 * block up to TOTAL_TIMEOUT_S; does not log.
 */
static int post(struct pyroscope *ps, const char *url, const void *body, size_t len, char *err,
		size_t errlen)
{
	char curl_err[CURL_ERROR_SIZE] = "";
	struct answer a = {};
	long status = 0;
	CURLcode rc;

	curl_easy_reset(ps->curl);
	curl_easy_setopt(ps->curl, CURLOPT_URL, url);
	if (ps->ca_file)
		curl_easy_setopt(ps->curl, CURLOPT_CAINFO, ps->ca_file);
	curl_easy_setopt(ps->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(ps->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(ps->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(ps->curl, CURLOPT_HTTPHEADER, ps->headers);
	if (ps->user) {
		curl_easy_setopt(ps->curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
		curl_easy_setopt(ps->curl, CURLOPT_USERNAME, ps->user);
		curl_easy_setopt(ps->curl, CURLOPT_PASSWORD, ps->password ?: "");
	}
	/* A thread of its own: no signals (SIGALRM for DNS timeouts) from libcurl. */
	curl_easy_setopt(ps->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(ps->curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
	curl_easy_setopt(ps->curl, CURLOPT_TIMEOUT, TOTAL_TIMEOUT_S);
	/* A server that takes the body and never answers fails in 10 s, not 30. */
	curl_easy_setopt(ps->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(ps->curl, CURLOPT_LOW_SPEED_TIME, STALL_TIMEOUT_S);
	curl_easy_setopt(ps->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(ps->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(ps->curl, CURLOPT_XFERINFODATA, ps);
	curl_easy_setopt(ps->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(ps->curl, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(ps->curl, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(ps->curl, CURLOPT_USERAGENT, "profd/" PROFD_VERSION);

	rc = curl_easy_perform(ps->curl);
	if (rc == CURLE_COULDNT_CONNECT) {
		snprintf(err, errlen, "connection refused");
		return -EIO;
	}
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		snprintf(err, errlen, "stopped: profd is shutting down");
		return -EIO;
	}
	if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_WEIRD_SERVER_REPLY) {
		snprintf(err, errlen, "not an HTTP answer (%s)",
			 *curl_err ? curl_err : curl_easy_strerror(rc));
		return -EIO;
	}
	if (rc != CURLE_OK) {
		snprintf(err, errlen, "%s", *curl_err ? curl_err : curl_easy_strerror(rc));
		return -EIO;
	}
	curl_easy_getinfo(ps->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
		return 0;
	a.text[strcspn(a.text, "\r\n")] = '\0';
	if (status == 401 || status == 403)
		snprintf(err, errlen, "authentication failed (HTTP %ld)", status);
	else
		snprintf(err, errlen, "HTTP %ld: %s", status, *a.text ? a.text : "(no body)");
	return -EIO;
}

/*
 * encode() - session @s's CPU samples of the windows in [@from_ns, @to_ns)
 * (window time; @to_ns INT64_MAX: to its end) as gzip'd pprof into *@ret
 * (malloc'd, *@ret_len bytes), their count into *@ret_samples, and in
 * *@ret_to_ns where the windows read end (after @to_ns when it falls in a
 * merged window: the whole window is read). *@ret NULL when there are no
 * samples. Returns 0, or query__profile()'s / pprof__write()'s -errno.
 */
static int encode(struct pyroscope *ps, const struct push_session *s, int64_t from_ns,
		  int64_t to_ns, char **ret, size_t *ret_len, int64_t *ret_samples,
		  int64_t *ret_to_ns)
{
	struct query_range range = {
	    .from_ns = from_ns - s->started_at_ns,
	    .to_ns = to_ns == INT64_MAX ? INT64_MAX : to_ns - s->started_at_ns,
	};
	_cleanup_(xprofile__free) struct xprofile p = {};
	_cleanup_(json_decrefp) json_t *profile = NULL, *session = NULL;
	_cleanup_free_ char *buf = NULL;
	const json_t *covered;
	size_t len = 0;
	FILE *f;
	int r;

	*ret = NULL;
	*ret_len = 0;
	*ret_samples = 0;
	*ret_to_ns = to_ns;
	r = query__profile(ps->db, s->id, NULL, &range, PROFILE_PACKED, &profile);
	if (r < 0)
		return r;
	/* Windows merged before they were pushed are read whole (report.c's window_bounds). */
	covered = json_object_get(profile, "covered_to_s");
	if (to_ns != INT64_MAX && json_is_number(covered))
		*ret_to_ns = MAX(to_ns, s->started_at_ns +
					    (int64_t)llround(json_number_value(covered) * 1e9));
	covered = json_object_get(profile, "covered_from_s");
	if (json_is_number(covered) &&
	    s->started_at_ns + (int64_t)llround(json_number_value(covered) * 1e9) < from_ns &&
	    !ps->warned_merged) {
		log_warning("Pyroscope: session %" PRId64 "'s windows were merged into longer ones "
			    "before they were pushed: some samples are pushed twice",
			    s->id);
		ps->warned_merged = true;
	}
	*ret_samples = json_integer_value(json_object_get(profile, "total_samples"));
	if (*ret_samples == 0)
		return 0;
	session = json_pack("{s:I, s:s, s:s, s:f}", "pid", (json_int_t)s->pid, "comm", s->comm,
			    "exe", s->exe, "elapsed_s", 0.0);
	if (!session)
		return -ENOMEM;
	r = xprofile__load(&p, profile, session);
	if (r < 0)
		return r;
	/* The piece's own time span, not the session's. */
	p.started_at_ns = from_ns;
	p.elapsed_ns = (to_ns == INT64_MAX ? MAX(s->ended_at_ns, from_ns) : *ret_to_ns) - from_ns;
	f = open_memstream(&buf, &len);
	if (!f)
		return -ENOMEM;
	r = pprof__write(f, &p, 0);
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	if (r < 0)
		return r;
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

/* Logs the push state when it changes: failing (with why) or working again. */
static void push_state(struct pyroscope *ps, const char *error)
{
	if (!error) {
		if (ps->failing)
			log_info("Pyroscope at %s: pushing again (%" PRIu64 " failed attempts)",
				 ps->url, ps->failed_pushes);
		ps->failing = false;
		ps->error[0] = '\0';
		ps->failed_pushes = 0;
		return;
	}
	ps->failed_pushes++;
	if (!ps->failing || strcmp(ps->error, error) != 0)
		log_warning("Pyroscope at %s: %s; retrying, the samples wait in the database",
			    ps->url, error);
	ps->failing = true;
	snprintf(ps->error, sizeof(ps->error), "%s", error);
}

/* A cursor call's -EIO, logged with SQLite's message (the database, not the server). */
static int cursor_result(struct pyroscope *ps, int r)
{
	if (r == -EIO)
		log_error("Pyroscope: writing the push cursor (fleet_cursors) failed: %s",
			  sqlite3_errmsg(ps->db));
	return r;
}

/*
 * push_session() - push session @s's pieces due now: from its cursor
 * (fleet_cursors, sink 'pyroscope'; made at its start if it has none) to
 * ps->settle_ns before @real_ns (CLOCK_REALTIME ns; window time, whole seconds),
 * or to its end once ended, each piece at most PIECE_MAX_NS. After each
 * answered push the cursor moves (or counts the failure) in the database,
 * so a restart goes on from there. *@ret_done: the session is pushed whole.
 * Returns 0 (all due pushed, nothing due, or the session is gone), -EIO
 * (a push failed: its cursor stays; or the database failed, logged), or
 * another -errno (reading the store).
 */
static int push_session(struct pyroscope *ps, const struct push_session *s, int64_t real_ns,
			bool *ret_done)
{
	struct fleet_cursor c;
	int64_t due;
	int r;

	*ret_done = false;
	r = fleet_cursor__begin(ps->db, SINK, s->id, s->started_at_ns);
	r = r ?: fleet_cursor__load(ps->db, SINK, s->id, &c);
	if (r == -ENOENT)
		return 0; /* deleted by retention meanwhile */
	if (r < 0)
		return cursor_result(ps, r);
	if (c.done) {
		*ret_done = true;
		return 0;
	}
	/* Whole seconds from the start: 1 s windows are pushed whole. */
	due = s->running ? s->started_at_ns + (real_ns - ps->settle_ns - s->started_at_ns) /
						  (int64_t)NSEC_PER_SEC * (int64_t)NSEC_PER_SEC
			 : INT64_MAX;
	/* An ended session: pieces up to its end, the last one to INT64_MAX (every window left). */
	while (!s->running || c.shipped_until_ns < due) {
		_cleanup_free_ char *body = NULL, *url = NULL;
		int64_t from = c.shipped_until_ns;
		int64_t end = s->running ? due : MAX(s->ended_at_ns, from);
		int64_t to = s->running ? due : INT64_MAX, read_to, samples, until;
		size_t len;
		char err[256];

		if (end - from > (int64_t)PIECE_MAX_NS) {
			/* Catching up: pieces end on the merged windows' minute grid. */
			to = from + (int64_t)PIECE_MAX_NS;
			to = s->started_at_ns + (to - s->started_at_ns) / (int64_t)PIECE_GRID_NS *
						    (int64_t)PIECE_GRID_NS;
			if (to <= from)
				to = from + (int64_t)PIECE_MAX_NS;
		}
		r = encode(ps, s, from, to, &body, &len, &samples, &read_to);
		if (r == -ENOENT)
			return 0; /* deleted by retention meanwhile */
		if (r < 0)
			return r;
		if (body) {
			url = ingest_url(ps, s, from,
					 to == INT64_MAX ? MAX(s->ended_at_ns, from) : read_to);
			if (!url)
				return -ENOMEM;
			r = post(ps, url, body, len, err, sizeof(err));
			if (r < 0) {
				/* Counted where profctl session shows it; the cursor stays. */
				r = fleet_cursor__failed(ps->db, SINK, s->id, err);
				if (r < 0 && r != -ENOENT)
					(void)cursor_result(ps, r);
				push_state(ps, err);
				return -EIO;
			}
			push_state(ps, NULL);
			log_debug("Pyroscope: session %" PRId64 ": pushed %" PRId64
				  " samples of [%.3f s, %.3f s) from its start",
				  s->id, samples, (double)(from - s->started_at_ns) / 1e9,
				  to == INT64_MAX ? -1.0
						  : (double)(read_to - s->started_at_ns) / 1e9);
		}
		/* Pushed: the cursor moves now. A crash before this line re-sends the piece
		 * (Pyroscope keeps no key to recognize it: docs/fleet.md). */
		until = to == INT64_MAX ? MAX(s->ended_at_ns, from) : read_to;
		r = fleet_cursor__advance(ps->db, SINK, s->id, until, body ? 1 : 0,
					  body ? samples : 0, to == INT64_MAX);
		if (r < 0)
			return cursor_result(ps, r);
		c.shipped_until_ns = until;
		if (to == INT64_MAX) {
			*ret_done = true;
			break;
		}
	}
	return 0;
}

/*
 * round_push() - push what is due of every session not pushed whole: those
 * with a cursor not done, and those without one yet (sessions stored since
 * Pyroscope was first configured on this database: pyroscope__new() gave a
 * done cursor to the ones before). Returns 0, or the first failure's -errno
 * (the sessions after it wait for the next round: the server is the same).
 */
static int round_push(struct pyroscope *ps)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = (int64_t)now_ns(CLOCK_REALTIME);
	struct push_session *list = NULL;
	size_t n = 0, cap = 0, done = 0;
	int r = 0, rc;

	if (sqlite3_prepare_v2(
		ps->db,
		"SELECT s.id, s.pid, s.comm, coalesce(s.exe, ''), coalesce(s.label, ''), "
		" s.freq_hz, s.started_at_ns, coalesce(s.ended_at_ns, 0), s.state = 'running'"
		" FROM sessions s LEFT JOIN fleet_cursors c ON c.session_id = s.id AND c.sink = ?1"
		" WHERE coalesce(c.done, 0) = 0 ORDER BY s.id",
		-1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_text(st, 1, SINK, -1, SQLITE_STATIC) != SQLITE_OK) {
		log_error("Pyroscope: reading the sessions to push failed: %s",
			  sqlite3_errmsg(ps->db));
		return -EIO;
	}
	/* The rows first: the pushes read the store through other statements. */
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct push_session *s;

		r = grow_array((void **)&list, &cap, n, sizeof(*list));
		if (r < 0)
			break;
		s = &list[n++];
		*s = (struct push_session){
		    .id = sqlite3_column_int64(st, 0),
		    .pid = sqlite3_column_int64(st, 1),
		    .comm = strdup((const char *)sqlite3_column_text(st, 2) ?: ""),
		    .exe = strdup((const char *)sqlite3_column_text(st, 3) ?: ""),
		    .label = strdup((const char *)sqlite3_column_text(st, 4) ?: ""),
		    .freq_hz = sqlite3_column_int64(st, 5),
		    .started_at_ns = sqlite3_column_int64(st, 6),
		    .ended_at_ns = sqlite3_column_int64(st, 7),
		    .running = sqlite3_column_int64(st, 8) != 0,
		};
		if (!s->comm || !s->exe || !s->label) {
			r = -ENOMEM;
			break;
		}
	}
	if (r == 0 && rc != SQLITE_DONE) {
		log_error("Pyroscope: reading the sessions to push failed: %s",
			  sqlite3_errmsg(ps->db));
		r = -EIO;
	}
	sqlite3_finalize(TAKE_PTR(st));
	for (size_t i = 0; i < n && r == 0; i++) {
		bool whole;

		r = push_session(ps, &list[i], now, &whole);
		done += whole;
	}
	ps->unfinished = n - done;
	for (size_t i = 0; i < n; i++)
		push_session__done(&list[i]);
	free(list);
	return r;
}

static void *pyroscope_main(void *arg)
{
	struct pyroscope *ps = arg;
	uint64_t backoff_ns = 0, next_ns = now_ns(CLOCK_MONOTONIC) + ps->interval_ns;
	bool stop = false;

	while (!stop) {
		int r;

		pthread_mutex_lock(&ps->worker.lock);
		worker_thread__wait(&ps->worker, next_ns);
		stop = ps->worker.stop;
		/* A session's end is pushed at once, unless pushes are failing (then the backoff).
		 */
		if (!stop && ps->worker.kicked && backoff_ns && now_ns(CLOCK_MONOTONIC) < next_ns) {
			ps->worker.kicked = false;
			pthread_mutex_unlock(&ps->worker.lock);
			continue;
		}
		ps->worker.kicked = false;
		pthread_mutex_unlock(&ps->worker.lock);

		r = round_push(ps);
		if (r < 0 && r != -EIO)
			log_warning_errno(r, "Pyroscope: cannot read the sessions to push: %m");
		if (r < 0) {
			backoff_ns =
			    backoff_ns ? MIN(backoff_ns * 2, ps->interval_ns) : NSEC_PER_SEC;
			next_ns = now_ns(CLOCK_MONOTONIC) + MIN(backoff_ns, ps->interval_ns);
		} else {
			backoff_ns = 0;
			next_ns = now_ns(CLOCK_MONOTONIC) + ps->interval_ns;
		}
	}
	return NULL;
}

static char *dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

int pyroscope__new(const char *db_path, const struct pyroscope_settings *s, struct pyroscope **ret)
{
	struct pyroscope *ps;
	char host[256];
	size_t len;
	int r;

	if (!s->url || !*s->url || s->interval_s == 0)
		return -EINVAL;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	worker_thread__init(&ps->worker);
	ps->interval_ns = (uint64_t)s->interval_s * NSEC_PER_SEC;
	ps->settle_ns =
	    (int64_t)MAX(s->flush_interval_s, 1u) * NSEC_PER_SEC + (int64_t)SETTLE_AFTER_FLUSH_NS;
	if (!s->host_name || !*s->host_name) {
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
	}
	ps->url = strdup(s->url);
	ps->app = label_value(s->app && *s->app ? s->app : "profd", true);
	ps->host = label_value(s->host_name && *s->host_name ? s->host_name : host, false);
	ps->tenant = dup_or_null(s->tenant);
	ps->ca_file = dup_or_null(s->ca_file);
	ps->user = dup_or_null(s->user);
	if (!ps->url || !ps->app || !ps->host || (s->tenant && *s->tenant && !ps->tenant) ||
	    (s->ca_file && *s->ca_file && !ps->ca_file) ||
	    (s->user && *s->user && !ps->user)) {
		r = -ENOMEM;
		goto fail;
	}
	len = strlen(ps->url);
	while (len > 0 && ps->url[len - 1] == '/')
		ps->url[--len] = '\0';
	if (s->password_file && *s->password_file) {
		r = read_first_line(s->password_file, &ps->password);
		if (r < 0)
			goto fail;
	}

	r = curl_load();
	if (r < 0) {
		log_error("Cannot load libcurl for Pyroscope: %s", curl_load_error());
		goto fail;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		r = -ENOMEM;
		goto fail;
	}
	ps->curl_global = true;
	ps->curl = curl_easy_init();
	ps->headers = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	if (!ps->curl || !ps->headers) {
		r = -ENOMEM;
		goto fail;
	}
	if (ps->tenant) {
		_cleanup_free_ char *h = NULL;
		struct curl_slist *l;

		if (asprintf(&h, "X-Scope-OrgID: %s", ps->tenant) < 0) {
			h = NULL;
			r = -ENOMEM;
			goto fail;
		}
		l = curl_slist_append(ps->headers, h);
		if (!l) {
			r = -ENOMEM;
			goto fail;
		}
		ps->headers = l;
	}

	r = fleet_cursor__open_db(db_path, &ps->db);
	if (r < 0)
		goto fail;
	/*
	 * The first start with Pyroscope on this database (no cursor of it
	 * yet): the sessions stored until now are marked done, nothing pushed,
	 * rather than pushing the database's whole history. Every session
	 * stored later gets its cursor at first sight (round_push()), so after
	 * a restart or a crash, pushing goes on where it was.
	 */
	r = fleet_cursor__adopt_stored(ps->db, SINK);
	if (r < 0)
		goto fail;

	/* jansson's hash seed, before the thread makes an object (jansson's docs). */
	json_object_seed(0);
	r = worker_thread__start(&ps->worker, pyroscope_main, ps);
	if (r < 0)
		goto fail;
	*ret = ps;
	return 0;
fail:
	pyroscope__free(ps);
	return r;
}

void pyroscope__session_ended(struct pyroscope *ps)
{
	if (ps)
		worker_thread__kick(&ps->worker);
}

void pyroscope__free(struct pyroscope *ps)
{
	if (!ps)
		return;
	if (ps->worker.started) {
		pthread_mutex_lock(&ps->worker.lock);
		ps->stop_by_ns = now_ns(CLOCK_MONOTONIC) + STOP_BUDGET_NS;
		pthread_mutex_unlock(&ps->worker.lock);
		worker_thread__stop(&ps->worker);
		if (ps->unfinished)
			log_warning("Pyroscope at %s: %zu session(s) not fully pushed at stop%s%s; "
				    "the next start pushes the rest",
				    ps->url, ps->unfinished, ps->failing ? ": " : "", ps->error);
	}
	sqlite3_close_v2(ps->db);
	curl_slist_free_all(ps->headers);
	curl_easy_cleanup(ps->curl); /* accepts NULL */
	if (ps->curl_global)
		curl_global_cleanup();
	worker_thread__destroy(&ps->worker);
	free(ps->url);
	free(ps->app);
	free(ps->host);
	free(ps->tenant);
	free(ps->ca_file);
	free(ps->user);
	free(ps->password);
	free(ps);
}
