/*
 * pyroscope.c - the Pyroscope push: a thread of its own that sends each
 * session's CPU samples, a piece of window time at a time, as gzip'd pprof
 * to POST {url}/ingest, with a cursor per session so that every sample
 * arrives once.
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

#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "fleet/pyroscope.h"
#include "log.h"
#include "pprof.h"
#include "protocol.h"
#include "report/query.h"
#include "store/sqlite_util.h"
#include "util.h"
#include "xprofile.h"

/*
 * Windows this close to now are not pushed yet: the loop still adds to the
 * current one, and flushes it up to a second later (a late flush: one more).
 */
#define SETTLE_NS (3 * NSEC_PER_SEC)
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

/*
 * A session's push state: what fleet_cursors (sink 'pyroscope') holds once
 * schema 16 has it. pushed_until_ns is window time (CLOCK_REALTIME ns, the
 * session's start + whole seconds): the samples of every window before it
 * are in Pyroscope.
 */
struct push_cursor {
	int64_t session_id;
	int64_t pushed_until_ns;
	uint64_t pieces;  /* pushes answered 2xx */
	uint64_t samples; /* samples in them */
	uint64_t failures;
	int64_t last_attempt_ns; /* CLOCK_REALTIME */
	char last_error[256];	 /* "" after a success */
	bool done;		 /* ended, and pushed to its end */
};

struct pyroscope {
	/* Settings, owned. */
	char *url, *app, *tenant, *user, *password, *host;
	uint64_t interval_ns;
	sqlite3 *db; /* the thread's own, read-only */
	CURL *curl;
	struct curl_slist *headers;
	int64_t first_session_id; /* sessions above it are pushed (those created after the start) */
	/* The cursors, in memory: cursor__load() and cursor__save() are the only ways in. */
	struct push_cursor *cursors;
	size_t n_cursors, cap_cursors;
	/* The push state, for one log line per change. */
	bool failing;
	char error[256];
	uint64_t failed_pushes;
	bool warned_merged;
	size_t unfinished; /* sessions with samples not yet pushed, after the last round */
	bool curl_global;  /* curl_global_init() done */

	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop, kick;     /* under lock */
	uint64_t stop_by_ns; /* CLOCK_MONOTONIC; 0 while running; set under lock */
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

/*
 * cursor__load() - session @id's push state into *@ret (a copy). Returns 0,
 * or -ENOENT if nothing was pushed of it yet (then *@ret starts at
 * @started_at_ns, nothing pushed). Today the cursors live in this thread's
 * memory: after a restart no session has one (see first_session_id).
 */
static int cursor__load(const struct pyroscope *ps, int64_t id, int64_t started_at_ns,
			struct push_cursor *ret)
{
	for (size_t i = 0; i < ps->n_cursors; i++)
		if (ps->cursors[i].session_id == id) {
			*ret = ps->cursors[i];
			return 0;
		}
	*ret = (struct push_cursor){.session_id = id, .pushed_until_ns = started_at_ns};
	return -ENOENT;
}

/*
 * cursor__save() - record @c as its session's push state, replacing the
 * one before. Called after each answered push (success or failure), so
 * that a push whose answer was 2xx is never sent again. Returns 0 or
 * -ENOMEM (then the state before stays, and that piece would be pushed
 * again).
 */
static int cursor__save(struct pyroscope *ps, const struct push_cursor *c)
{
	int r;

	for (size_t i = 0; i < ps->n_cursors; i++)
		if (ps->cursors[i].session_id == c->session_id) {
			ps->cursors[i] = *c;
			return 0;
		}
	r = grow_array((void **)&ps->cursors, &ps->cap_cursors, ps->n_cursors,
		       sizeof(*ps->cursors));
	if (r < 0)
		return r;
	ps->cursors[ps->n_cursors++] = *c;
	return 0;
}

/* cursor__forget() - session @id is gone from the store (retention): drop its state. */
static void cursor__forget(struct pyroscope *ps, int64_t id)
{
	for (size_t i = 0; i < ps->n_cursors; i++)
		if (ps->cursors[i].session_id == id) {
			ps->cursors[i] = ps->cursors[--ps->n_cursors];
			return;
		}
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

	pthread_mutex_lock(&ps->lock);
	stop_by = ps->stop_by_ns;
	pthread_mutex_unlock(&ps->lock);
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

/*
 * push_session() - push session @s's pieces due now: from its cursor to
 * SETTLE_NS before @real_ns (CLOCK_REALTIME ns; window time, whole seconds), or to its end
 * once ended, each piece at most PIECE_MAX_NS. Returns 0 (all due pushed,
 * or nothing due), -EIO (a push failed: its cursor stays), or another
 * -errno (reading the store).
 */
static int push_session(struct pyroscope *ps, const struct push_session *s, int64_t real_ns)
{
	struct push_cursor c;
	int64_t due;
	int r;

	cursor__load(ps, s->id, s->started_at_ns, &c);
	if (c.done)
		return 0;
	/* Whole seconds from the start: 1 s windows are pushed whole. */
	due = s->running ? s->started_at_ns + (real_ns - (int64_t)SETTLE_NS - s->started_at_ns) /
						  (int64_t)NSEC_PER_SEC * (int64_t)NSEC_PER_SEC
			 : INT64_MAX;
	/* An ended session: pieces up to its end, the last one to INT64_MAX (every window left). */
	while (!s->running || c.pushed_until_ns < due) {
		_cleanup_free_ char *body = NULL, *url = NULL;
		int64_t end = s->running ? due : MAX(s->ended_at_ns, c.pushed_until_ns);
		int64_t to = s->running ? due : INT64_MAX, read_to, samples;
		size_t len;
		char err[256];

		if (end - c.pushed_until_ns > (int64_t)PIECE_MAX_NS) {
			/* Catching up: pieces end on the merged windows' minute grid. */
			to = c.pushed_until_ns + (int64_t)PIECE_MAX_NS;
			to = s->started_at_ns + (to - s->started_at_ns) / (int64_t)PIECE_GRID_NS *
						    (int64_t)PIECE_GRID_NS;
			if (to <= c.pushed_until_ns)
				to = c.pushed_until_ns + (int64_t)PIECE_MAX_NS;
		}
		r = encode(ps, s, c.pushed_until_ns, to, &body, &len, &samples, &read_to);
		if (r == -ENOENT) {
			cursor__forget(ps, s->id); /* deleted by retention meanwhile */
			return 0;
		}
		if (r < 0)
			return r;
		if (body) {
			url = ingest_url(ps, s, c.pushed_until_ns,
					 to == INT64_MAX ? MAX(s->ended_at_ns, c.pushed_until_ns)
							 : read_to);
			if (!url)
				return -ENOMEM;
			c.last_attempt_ns = (int64_t)now_ns(CLOCK_REALTIME);
			r = post(ps, url, body, len, err, sizeof(err));
			if (r < 0) {
				c.failures++;
				snprintf(c.last_error, sizeof(c.last_error), "%s", err);
				(void)cursor__save(ps, &c);
				push_state(ps, err);
				return r;
			}
			push_state(ps, NULL);
			c.pieces++;
			c.samples += (uint64_t)samples;
			c.last_error[0] = '\0';
			log_debug(
			    "Pyroscope: session %" PRId64 ": pushed %" PRId64
			    " samples of [%.3f s, %.3f s) from its start",
			    s->id, samples, (double)(c.pushed_until_ns - s->started_at_ns) / 1e9,
			    to == INT64_MAX ? -1.0 : (double)(read_to - s->started_at_ns) / 1e9);
		}
		if (to == INT64_MAX) {
			c.done = true;
			c.pushed_until_ns = MAX(s->ended_at_ns, c.pushed_until_ns);
		} else {
			c.pushed_until_ns = read_to;
		}
		r = cursor__save(ps, &c);
		if (r < 0)
			return r;
		if (c.done)
			break;
	}
	return 0;
}

/*
 * round_push() - push what is due of every session created since the start
 * (and not fully pushed). Returns 0, or the first failure's -errno (the
 * sessions after it wait for the next round: the server is the same).
 */
static int round_push(struct pyroscope *ps)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int64_t now = (int64_t)now_ns(CLOCK_REALTIME);
	struct push_session *list = NULL;
	size_t n = 0, cap = 0;
	int r = 0, rc;

	if (sqlite3_prepare_v2(
		ps->db,
		"SELECT id, pid, comm, coalesce(exe, ''), coalesce(label, ''), freq_hz,"
		" started_at_ns, coalesce(ended_at_ns, 0), state = 'running'"
		" FROM sessions WHERE id > ?1 ORDER BY id",
		-1, &st, NULL) != SQLITE_OK ||
	    sqlite3_bind_int64(st, 1, ps->first_session_id) != SQLITE_OK)
		return -EIO;
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
	if (r == 0 && rc != SQLITE_DONE)
		r = -EIO;
	sqlite3_finalize(TAKE_PTR(st));
	for (size_t i = 0; i < n && r == 0; i++)
		r = push_session(ps, &list[i], now);
	ps->unfinished = 0;
	for (size_t i = 0; i < n; i++) {
		struct push_cursor c;

		cursor__load(ps, list[i].id, list[i].started_at_ns, &c);
		ps->unfinished += !c.done;
		push_session__done(&list[i]);
	}
	free(list);
	return r;
}

static void *pyroscope_main(void *arg)
{
	struct pyroscope *ps = arg;
	uint64_t backoff_ns = 0, next_ns = now_ns(CLOCK_MONOTONIC) + ps->interval_ns;
	bool stop = false;

	while (!stop) {
		struct timespec ts;
		int r;

		pthread_mutex_lock(&ps->lock);
		while (!ps->stop && !ps->kick && now_ns(CLOCK_MONOTONIC) < next_ns) {
			ts.tv_sec = (time_t)(next_ns / NSEC_PER_SEC);
			ts.tv_nsec = (long)(next_ns % NSEC_PER_SEC);
			pthread_cond_timedwait(&ps->wake, &ps->lock, &ts);
		}
		stop = ps->stop;
		/* A session's end is pushed at once, unless pushes are failing (then the backoff).
		 */
		if (!stop && ps->kick && backoff_ns && now_ns(CLOCK_MONOTONIC) < next_ns) {
			ps->kick = false;
			pthread_mutex_unlock(&ps->lock);
			continue;
		}
		ps->kick = false;
		pthread_mutex_unlock(&ps->lock);

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

/* The first line of file @path, malloc'd, into *@ret. Returns 0 or -errno. */
static int read_password(const char *path, char **ret)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t size = 0;
	ssize_t n;

	if (!f)
		return -errno;
	n = getline(&line, &size, f);
	if (n < 0) {
		free(line);
		if (ferror(f))
			return -EIO;
		line = strdup(""); /* an empty file: an empty password */
		if (!line)
			return -ENOMEM;
	}
	line[strcspn(line, "\r\n")] = '\0';
	*ret = line;
	return 0;
}

static char *dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

int pyroscope__new(const char *db_path, const struct pyroscope_settings *s, struct pyroscope **ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	struct pyroscope *ps;
	pthread_condattr_t ca;
	char host[256];
	size_t len;
	int r;

	if (!s->url || !*s->url || s->interval_s == 0)
		return -EINVAL;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -ENOMEM;
	pthread_mutex_init(&ps->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ps->wake, &ca);
	pthread_condattr_destroy(&ca);
	ps->interval_ns = (uint64_t)s->interval_s * NSEC_PER_SEC;
	if (!s->host_name || !*s->host_name) {
		if (gethostname(host, sizeof(host)) < 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
	}
	ps->url = strdup(s->url);
	ps->app = label_value(s->app && *s->app ? s->app : "profd", true);
	ps->host = label_value(s->host_name && *s->host_name ? s->host_name : host, false);
	ps->tenant = dup_or_null(s->tenant);
	ps->user = dup_or_null(s->user);
	if (!ps->url || !ps->app || !ps->host || (s->tenant && *s->tenant && !ps->tenant) ||
	    (s->user && *s->user && !ps->user)) {
		r = -ENOMEM;
		goto fail;
	}
	len = strlen(ps->url);
	while (len > 0 && ps->url[len - 1] == '/')
		ps->url[--len] = '\0';
	if (s->password_file && *s->password_file) {
		r = read_password(s->password_file, &ps->password);
		if (r < 0)
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

	if (sqlite3_open_v2(db_path, &ps->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
	    SQLITE_OK) {
		r = ps->db ? -EIO : -ENOMEM;
		goto fail;
	}
	sqlite3_busy_timeout(ps->db, 5000);
	if (sqlite3_prepare_v2(ps->db, "SELECT coalesce(max(id), 0) FROM sessions", -1, &st,
			       NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW) {
		r = -EIO;
		goto fail;
	}
	ps->first_session_id = sqlite3_column_int64(st, 0);

	/* jansson's hash seed, before the thread makes an object (jansson's docs). */
	json_object_seed(0);
	r = -pthread_create(&ps->thread, NULL, pyroscope_main, ps);
	if (r < 0)
		goto fail;
	ps->started = true;
	*ret = ps;
	return 0;
fail:
	pyroscope__free(ps);
	return r;
}

void pyroscope__session_ended(struct pyroscope *ps)
{
	if (!ps)
		return;
	pthread_mutex_lock(&ps->lock);
	ps->kick = true;
	pthread_cond_signal(&ps->wake);
	pthread_mutex_unlock(&ps->lock);
}

void pyroscope__free(struct pyroscope *ps)
{
	if (!ps)
		return;
	if (ps->started) {
		pthread_mutex_lock(&ps->lock);
		ps->stop = true;
		ps->stop_by_ns = now_ns(CLOCK_MONOTONIC) + STOP_BUDGET_NS;
		pthread_cond_signal(&ps->wake);
		pthread_mutex_unlock(&ps->lock);
		pthread_join(ps->thread, NULL);
		if (ps->unfinished)
			log_warning("Pyroscope at %s: %zu session(s) not fully pushed at stop%s%s",
				    ps->url, ps->unfinished, ps->failing ? ": " : "", ps->error);
	}
	sqlite3_close_v2(ps->db);
	curl_slist_free_all(ps->headers);
	curl_easy_cleanup(ps->curl); /* accepts NULL */
	if (ps->curl_global)
		curl_global_cleanup();
	pthread_cond_destroy(&ps->wake);
	pthread_mutex_destroy(&ps->lock);
	free(ps->cursors);
	free(ps->url);
	free(ps->app);
	free(ps->host);
	free(ps->tenant);
	free(ps->user);
	free(ps->password);
	free(ps);
}
