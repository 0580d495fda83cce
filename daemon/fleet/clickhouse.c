/* clickhouse.c - ClickHouse's HTTP interface through libcurl: queries, inserts, profd's tables. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/curl_load.h"
#include <zlib.h>

#include "fleet/clickhouse.h"
#include "util.h"

/* An answer is kept up to this size: counts and error messages are short. */
#define ANSWER_MAX_BYTES (1u << 20)

/*
 * Insert bodies go gzip'd (Content-Encoding: gzip; ClickHouse 18.16
 * inflates it, and refuses a cut-off stream whole). JSONEachRow repeats
 * every key, host, comm and label: bench/fleet measured 88.6 kB per 1,000
 * samples plain, 5.3 kB at level 6 and 6.3 kB at level 1, and no change
 * in shipping time beyond the noise (zlib takes about 0.5 s of CPU per
 * 1 M samples' 90 MB at level 6; docs/fleet.md).
 */
#define GZIP_LEVEL 6

struct clickhouse {
	CURL *curl;
	struct curl_slist *headers, *insert_headers; /* insert_headers: + Content-Encoding */
	char *url, *database, *user, *password;
	char *ca_file; /* CURLOPT_CAINFO, or NULL: the system's CA certificates */
	clickhouse_cancel_fn cancel;
	void *cancel_arg;
	struct fleet_buf answer;
	struct fleet_buf gz; /* the compressed body of the last insert */
	z_stream zs;	     /* kept between inserts (deflateReset) */
	bool zs_ready;
	uint64_t bytes_sent;
	char curl_err[CURL_ERROR_SIZE];
	char errmsg[512];
};

int fleet_buf__append(struct fleet_buf *b, const void *p, size_t len)
{
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		char *d;

		while (cap < b->len + len + 1)
			cap *= 2;
		d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

void fleet_buf__reset(struct fleet_buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void fleet_buf__done(struct fleet_buf *b)
{
	free(b->data);
	*b = (struct fleet_buf){0};
}

/* curl: answer bytes; kept up to ANSWER_MAX_BYTES, the rest read and dropped. */
static size_t on_answer(char *p, size_t size, size_t n, void *arg)
{
	struct fleet_buf *b = arg;
	size_t len = size * n, keep = 0;

	if (b->len < ANSWER_MAX_BYTES)
		keep = MIN(len, ANSWER_MAX_BYTES - b->len);
	if (keep && fleet_buf__append(b, p, keep) < 0)
		return 0; /* curl fails the transfer: CURLE_WRITE_ERROR */
	return len;
}

/* curl: during a transfer, about once a second and at each chunk of data. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct clickhouse *ch = arg;

	return ch->cancel && ch->cancel(ch->cancel_arg) ? 1 : 0;
}

static bool valid_database(const char *s)
{
	if (!s || !*s || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return false;
	return true;
}

int clickhouse__new(const char *url, const char *database, const char *user, const char *password,
		    clickhouse_cancel_fn cancel, void *arg, struct clickhouse **ret)
{
	struct clickhouse *ch;
	_cleanup_free_ char *h_user = NULL, *h_key = NULL;
	size_t n;

	if (!url || (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) ||
	    !valid_database(database))
		return -EINVAL;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return -ENOMEM;
	ch->url = strdup(url);
	ch->database = strdup(database);
	ch->user = strdup(user && *user ? user : "default");
	ch->password = password ? strdup(password) : NULL;
	ch->cancel = cancel;
	ch->cancel_arg = arg;
	ch->curl = curl_easy_init();
	if (!ch->url || !ch->database || !ch->user || (password && !ch->password) || !ch->curl)
		goto oom;
	n = strlen(ch->url);
	while (n > 0 && ch->url[n - 1] == '/')
		ch->url[--n] = '\0';
	/* Credentials in headers, not in the URL (which error messages print). */
	if (asprintf(&h_user, "X-ClickHouse-User: %s", ch->user) < 0) {
		h_user = NULL;
		goto oom;
	}
	ch->headers = curl_slist_append(NULL, h_user);
	ch->insert_headers = curl_slist_append(NULL, h_user);
	if (!ch->headers || !ch->insert_headers)
		goto oom;
	if (ch->password) {
		struct curl_slist *l;

		if (asprintf(&h_key, "X-ClickHouse-Key: %s", ch->password) < 0) {
			h_key = NULL;
			goto oom;
		}
		l = curl_slist_append(ch->headers, h_key);
		if (!l)
			goto oom;
		ch->headers = l;
		l = curl_slist_append(ch->insert_headers, h_key);
		explicit_bzero(h_key, strlen(h_key));
		if (!l)
			goto oom;
		ch->insert_headers = l;
	}
	{
		struct curl_slist *l =
		    curl_slist_append(ch->insert_headers, "Content-Encoding: gzip");

		if (!l)
			goto oom;
		ch->insert_headers = l;
	}
	*ret = ch;
	return 0;
oom:
	clickhouse__free(ch);
	return -ENOMEM;
}

int clickhouse__set_ca_file(struct clickhouse *ch, const char *path)
{
	char *copy = path && *path ? strdup(path) : NULL;

	if (path && *path && !copy)
		return -ENOMEM;
	free(ch->ca_file);
	ch->ca_file = copy;
	return 0;
}

void clickhouse__free(struct clickhouse *ch)
{
	if (!ch)
		return;
	if (ch->curl)
		curl_easy_cleanup(ch->curl);
	curl_slist_free_all(ch->headers);
	curl_slist_free_all(ch->insert_headers);
	if (ch->zs_ready)
		deflateEnd(&ch->zs);
	fleet_buf__done(&ch->gz);
	free(ch->ca_file);
	if (ch->password) {
		explicit_bzero(ch->password, strlen(ch->password));
		free(ch->password);
	}
	free(ch->url);
	free(ch->database);
	free(ch->user);
	fleet_buf__done(&ch->answer);
	free(ch);
}

static int fail(struct clickhouse *ch, int r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets the message "ClickHouse at URL: ..." and returns @r. */
static int fail(struct clickhouse *ch, int r, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(ch->errmsg, sizeof(ch->errmsg), "ClickHouse at %s: ", ch->url);
	if (n < 0 || (size_t)n >= sizeof(ch->errmsg))
		return r;
	va_start(ap, fmt);
	vsnprintf(ch->errmsg + n, sizeof(ch->errmsg) - (size_t)n, fmt, ap);
	va_end(ap);
	return r;
}

/* The first line of the answer, at most 200 bytes, control characters as spaces. */
static void first_line(const struct fleet_buf *b, char *out, size_t size)
{
	size_t i = 0;

	for (; b->data && i < b->len && i + 1 < size && i < 200; i++) {
		char c = b->data[i];

		if (c == '\n' || c == '\r')
			break;
		out[i] = (unsigned char)c < 0x20 ? ' ' : c;
	}
	out[i] = '\0';
}

/*
 * One POST to @url_query (after the server's URL) with @body; the answer in
 * ch->answer. @fresh: on a new connection. libcurl sends a request again by
 * itself when a reused connection breaks before any answer arrives (it
 * takes the connection for one the server had closed while idle); for an
 * INSERT whose answer was lost that would store its rows twice, so inserts
 * go on a connection of their own, and a broken one is an error the
 * shipper checks (clickhouse__count() of the chunk) before sending again.
 */
static int post(struct clickhouse *ch, const char *url_query, const char *body, size_t len,
		bool fresh, const struct curl_slist *headers)
{
	_cleanup_free_ char *url = NULL;
	curl_off_t sent = 0;
	long status = 0;
	CURLcode rc;
	char line[256];

	if (asprintf(&url, "%s/%s", ch->url, url_query) < 0) {
		url = NULL;
		return fail(ch, -ENOMEM, "out of memory");
	}
	fleet_buf__reset(&ch->answer);
	ch->curl_err[0] = '\0';
	curl_easy_reset(ch->curl); /* keeps the connection */
	curl_easy_setopt(ch->curl, CURLOPT_URL, url);
	if (ch->ca_file)
		curl_easy_setopt(ch->curl, CURLOPT_CAINFO, ch->ca_file);
	curl_easy_setopt(ch->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(ch->curl, CURLOPT_POST, 1L);
	curl_easy_setopt(ch->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(ch->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(ch->curl, CURLOPT_WRITEFUNCTION, on_answer);
	curl_easy_setopt(ch->curl, CURLOPT_WRITEDATA, &ch->answer);
	curl_easy_setopt(ch->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(ch->curl, CURLOPT_XFERINFODATA, ch);
	curl_easy_setopt(ch->curl, CURLOPT_NOPROGRESS, 0L);
	/* No signals from a thread (curl's resolver timeout would use SIGALRM). */
	curl_easy_setopt(ch->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(ch->curl, CURLOPT_CONNECTTIMEOUT, (long)CLICKHOUSE_CONNECT_TIMEOUT_S);
	curl_easy_setopt(ch->curl, CURLOPT_TIMEOUT, (long)CLICKHOUSE_TIMEOUT_S);
	curl_easy_setopt(ch->curl, CURLOPT_ERRORBUFFER, ch->curl_err);
	/* A body of rows is sent at once, without "Expect: 100-continue" round trips. */
	curl_easy_setopt(ch->curl, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
	curl_easy_setopt(ch->curl, CURLOPT_FRESH_CONNECT, fresh ? 1L : 0L);
	rc = curl_easy_perform(ch->curl);
	if (curl_easy_getinfo(ch->curl, CURLINFO_SIZE_UPLOAD_T, &sent) == CURLE_OK && sent > 0)
		ch->bytes_sent += (uint64_t)sent;
	switch (rc) {
	case CURLE_OK:
		break;
	case CURLE_COULDNT_CONNECT:
		return fail(ch, -ECONNREFUSED, "connection refused (%s)", ch->curl_err);
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return fail(ch, -EHOSTUNREACH, "%s", ch->curl_err);
	case CURLE_OPERATION_TIMEDOUT:
		return fail(ch, -ETIMEDOUT, "no answer in time (%s)", ch->curl_err);
	case CURLE_ABORTED_BY_CALLBACK:
		return fail(ch, -ECANCELED, "request cancelled: profd is stopping");
	case CURLE_GOT_NOTHING:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
		return fail(ch, -ECONNRESET, "connection lost (%s)", ch->curl_err);
	case CURLE_WRITE_ERROR:
	case CURLE_OUT_OF_MEMORY:
		return fail(ch, -ENOMEM, "out of memory");
	default:
		return fail(ch, -EIO, "%s",
			    ch->curl_err[0] ? ch->curl_err : curl_easy_strerror(rc));
	}
	curl_easy_getinfo(ch->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status == 200)
		return 0;
	first_line(&ch->answer, line, sizeof(line));
	/* 18.16 answers a bad user or password with 401 and Code 192, 193 or 194;
	 * later versions with 516 (AUTHENTICATION_FAILED). */
	if (status == 401 || status == 403 || status == 516 ||
	    (ch->answer.data &&
	     (strstr(ch->answer.data, "Code: 192,") || strstr(ch->answer.data, "Code: 193,") ||
	      strstr(ch->answer.data, "Code: 194,") || strstr(ch->answer.data, "Code: 516,"))))
		return fail(ch, -EACCES, "authentication failed as user '%s': %s", ch->user, line);
	return fail(ch, -EPROTO, "HTTP %ld: %s", status, line[0] ? line : "(empty answer)");
}

int clickhouse__query(struct clickhouse *ch, const char *sql, bool in_database,
		      struct fleet_buf *ret_out)
{
	_cleanup_free_ char *q = NULL;
	int r;

	if (asprintf(&q, in_database ? "?database=%s" : "%s", in_database ? ch->database : "") <
	    0) {
		q = NULL;
		return fail(ch, -ENOMEM, "out of memory");
	}
	r = post(ch, q, sql, strlen(sql), false, ch->headers);
	if (r >= 0 && ret_out) {
		fleet_buf__reset(ret_out);
		if (ch->answer.len &&
		    fleet_buf__append(ret_out, ch->answer.data, ch->answer.len) < 0)
			return fail(ch, -ENOMEM, "out of memory");
	}
	return r;
}

/* @len bytes of @body gzip'd into ch->gz. Returns 0 or -ENOMEM. */
static int gzip_body(struct clickhouse *ch, const char *body, size_t len)
{
	uLong bound;
	int rc;

	if (!ch->zs_ready) {
		/* windowBits 15 + 16: a gzip header and trailer, not zlib's. */
		if (deflateInit2(&ch->zs, GZIP_LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
		    Z_OK)
			return -ENOMEM;
		ch->zs_ready = true;
	} else if (deflateReset(&ch->zs) != Z_OK) {
		return -ENOMEM;
	}
	/* One deflate() call: the body's size fits a uInt (rows per INSERT are capped). */
	if (len > UINT32_MAX / 2)
		return -ENOMEM;
	bound = deflateBound(&ch->zs, (uLong)len);
	fleet_buf__reset(&ch->gz);
	if (ch->gz.cap < bound + 1) {
		char *d = realloc(ch->gz.data, bound + 1);

		if (!d)
			return -ENOMEM;
		ch->gz.data = d;
		ch->gz.cap = bound + 1;
	}
	ch->zs.next_in = (Bytef *)body;
	ch->zs.avail_in = (uInt)len;
	ch->zs.next_out = (Bytef *)ch->gz.data;
	ch->zs.avail_out = (uInt)bound;
	rc = deflate(&ch->zs, Z_FINISH);
	if (rc != Z_STREAM_END)
		return -ENOMEM; /* deflateBound() was enough: only a broken zlib gets here */
	ch->gz.len = bound - ch->zs.avail_out;
	ch->gz.data[ch->gz.len] = '\0';
	return 0;
}

int clickhouse__insert(struct clickhouse *ch, const char *table, const char *body, size_t len)
{
	_cleanup_free_ char *q = NULL;

	/* The statement in the URL, the rows as the body: nothing to escape in either. */
	if (asprintf(&q, "?database=%s&query=INSERT%%20INTO%%20%s%%20FORMAT%%20JSONEachRow",
		     ch->database, table) < 0) {
		q = NULL;
		return fail(ch, -ENOMEM, "out of memory");
	}
	if (gzip_body(ch, body, len) < 0)
		return fail(ch, -ENOMEM, "out of memory");
	return post(ch, q, ch->gz.data, ch->gz.len, true, ch->insert_headers);
}

int clickhouse__count(struct clickhouse *ch, const char *sql, uint64_t *ret)
{
	char *end;
	unsigned long long v;
	int r;

	r = clickhouse__query(ch, sql, true, NULL);
	if (r < 0)
		return r;
	errno = 0;
	v = ch->answer.data ? strtoull(ch->answer.data, &end, 10) : 0;
	if (!ch->answer.data || end == ch->answer.data || errno || (*end && *end != '\n')) {
		char line[256];

		first_line(&ch->answer, line, sizeof(line));
		return fail(ch, -EBADMSG, "unexpected answer to a count: '%s'", line);
	}
	*ret = v;
	return 0;
}

/*
 * profd's tables (docs/fleet.md). Times are Unix ns (UInt64) beside a
 * DateTime for partitions and filters: 18.16 has no DateTime64.
 */
static const char *const tables[] = {
    "CREATE TABLE IF NOT EXISTS sessions (host String, session_id UInt64, pid UInt32, "
    "comm String, exe String, label String, uid UInt32, user String, event String, "
    "events String, freq_hz UInt32, started_at DateTime, started_at_ns UInt64, "
    "ended_at_ns UInt64, state String, end_reason String, samples UInt64, "
    "lost_samples UInt64, truncated_stacks UInt64, missing_user_stacks UInt64, "
    "unsymbolized_frames UInt64, limit_dropped_samples UInt64, version UInt64) "
    "ENGINE = ReplacingMergeTree(version) ORDER BY (host, session_id)",
    "CREATE TABLE IF NOT EXISTS stacks (stack_hash UInt64, functions Array(String), "
    "modules Array(String), kinds Array(String), depth UInt16, truncated UInt8) "
    "ENGINE = ReplacingMergeTree ORDER BY stack_hash",
    "CREATE TABLE IF NOT EXISTS samples (host String, session_id UInt64, chunk_ns UInt64, "
    "event String, minute DateTime, tid UInt32, thread String, pid UInt32, comm String, "
    "label String, user String, stack_hash UInt64, count UInt64) "
    "ENGINE = MergeTree PARTITION BY toYYYYMM(minute) "
    "ORDER BY (host, session_id, chunk_ns, event, tid, stack_hash)",
    "CREATE TABLE IF NOT EXISTS threads (host String, session_id UInt64, tid UInt32, "
    "pid UInt32, name String, samples UInt64, version UInt64) "
    "ENGINE = ReplacingMergeTree(version) ORDER BY (host, session_id, tid)",
    "CREATE TABLE IF NOT EXISTS memory (host String, session_id UInt64, chunk_ns UInt64, "
    "pid UInt32, time DateTime, time_ns UInt64, rss_bytes UInt64, pss_bytes Int64, "
    "anon_bytes UInt64, file_bytes UInt64, shmem_bytes UInt64, swap_bytes UInt64) "
    "ENGINE = MergeTree ORDER BY (host, session_id, chunk_ns, time_ns)",
    "CREATE TABLE IF NOT EXISTS gpu_kernels (host String, session_id UInt64, "
    "chunk_ns UInt64, name String, launches UInt64, errors UInt64) "
    "ENGINE = MergeTree ORDER BY (host, session_id, chunk_ns, name)",
};

int clickhouse__create_tables(struct clickhouse *ch)
{
	_cleanup_free_ char *db = NULL;
	int r;

	if (asprintf(&db, "CREATE DATABASE IF NOT EXISTS %s", ch->database) < 0) {
		db = NULL;
		return fail(ch, -ENOMEM, "out of memory");
	}
	r = clickhouse__query(ch, db, false, NULL);
	for (size_t i = 0; i < ARRAY_SIZE(tables) && r >= 0; i++)
		r = clickhouse__query(ch, tables[i], true, NULL);
	return r;
}

char *clickhouse__quote(const char *s)
{
	size_t n = 2;
	char *q, *p;

	for (const char *c = s; *c; c++)
		n += (*c == '\'' || *c == '\\') ? 2 : 1;
	q = malloc(n + 1);
	if (!q)
		return NULL;
	p = q;
	*p++ = '\'';
	for (const char *c = s; *c; c++) {
		if (*c == '\'' || *c == '\\')
			*p++ = '\\';
		*p++ = *c;
	}
	*p++ = '\'';
	*p = '\0';
	return q;
}

const char *clickhouse__errmsg(const struct clickhouse *ch)
{
	return ch->errmsg;
}

uint64_t clickhouse__bytes_sent(const struct clickhouse *ch)
{
	return ch->bytes_sent;
}

const char *clickhouse__url(const struct clickhouse *ch)
{
	return ch->url;
}
