/*
 * clickhouse.c - queries to a ClickHouse server over its HTTP interface
 * (libcurl): the statement is POSTed as the body, the answer asked for as
 * JSONCompact, and an error turned into one line with the server's message.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "clickhouse.h"
#include "conn.h"
#include "util.h"

/* Timeouts: a server that does not answer must not hang profctl. */
#define CONNECT_TIMEOUT_S 5L
#define QUERY_TIMEOUT_S 120L

/* ClickHouse's error codes for credentials (src/Common/ErrorCodes.cpp). */
#define CH_UNKNOWN_USER 192
#define CH_WRONG_PASSWORD 193
#define CH_REQUIRED_PASSWORD 194
#define CH_AUTHENTICATION_FAILED 516

/* The answer being received, cut off at PROFCTL_MAX_RESPONSE_BYTES. */
struct body {
	char *data;
	size_t size, cap;
	bool too_big;
};

static size_t body_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct body *b = userdata;
	size_t n = size * nmemb;

	if (b->size + n > PROFCTL_MAX_RESPONSE_BYTES) {
		b->too_big = true;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	if (b->size + n + 1 > b->cap) {
		size_t cap = MAX(b->cap * 2, b->size + n + 1);
		char *data = realloc(b->data, MAX(cap, (size_t)4096));

		if (!data)
			return 0;
		b->data = data;
		b->cap = MAX(cap, (size_t)4096);
	}
	memcpy(b->data + b->size, ptr, n);
	b->size += n;
	b->data[b->size] = '\0';
	return n;
}

/* @url without a "user:password@" part, for messages (into @buf of @size bytes). */
static const char *url_for_message(const char *url, char *buf, size_t size)
{
	const char *scheme = strstr(url, "://");
	const char *host = scheme ? scheme + 3 : url;
	const char *at = strchr(host, '@');
	const char *slash = strchr(host, '/');

	if (!at || (slash && slash < at))
		return url;
	snprintf(buf, size, "%.*s%s", (int)(host - url), url, at + 1);
	return buf;
}

/* *@ret_error = "ClickHouse at URL: " + the printf-style rest; returns @r. */
static int fail(int r, char **ret_error, const char *url, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(int r, char **ret_error, const char *url, const char *fmt, ...)
{
	_cleanup_free_ char *rest = NULL;
	char shown[1024];
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&rest, fmt, ap) < 0)
		rest = NULL;
	va_end(ap);
	if (!rest || asprintf(ret_error, "ClickHouse at %s: %s",
			      url_for_message(url, shown, sizeof(shown)), rest) < 0) {
		*ret_error = NULL;
		return -ENOMEM;
	}
	return r;
}

/*
 * server_message() - the server's error text, one line: from 18.16's
 * "Code: 62, e.displayText() = DB::Exception: MSG, e.what() = DB::Exception"
 * or a newer "Code: 62. DB::Exception: MSG. (SYNTAX_ERROR) (version ...)",
 * "MSG (code 62)" into @buf; any other body's first line as it is. *@ret_code
 * the code, 0 if none.
 */
static const char *server_message(const char *body, char *buf, size_t size, long *ret_code)
{
	const char *start = body, *end, *what;
	size_t len;

	*ret_code = 0;
	if (strncmp(body, "Code: ", 6) == 0)
		*ret_code = strtol(body + 6, NULL, 10);
	if (strstr(body, "DB::Exception: "))
		start = strstr(body, "DB::Exception: ") + strlen("DB::Exception: ");
	end = start + strcspn(start, "\r\n");
	what = strstr(start, ", e.what() = ");
	if (what && what < end)
		end = what;
	what = strstr(start, " (version ");
	if (what && what < end)
		end = what;
	len = (size_t)(end - start);
	while (len > 0 && (start[len - 1] == ' ' || start[len - 1] == '.' || start[len - 1] == ','))
		len--;
	if (*ret_code)
		snprintf(buf, size, "%.*s (code %ld)", (int)MIN(len, (size_t)400), start,
			 *ret_code);
	else
		snprintf(buf, size, "%.*s", (int)MIN(len, (size_t)400),
			 len ? start : "(no message)");
	return buf;
}

/* The query URL: @ch->url, then "?default_format=JSONCompact&database=...&readonly=1". */
static char *query_url(CURL *curl, const struct clickhouse *ch)
{
	_cleanup_free_ char *db = NULL;
	size_t len = strlen(ch->url);
	char *url;

	while (len > 0 && ch->url[len - 1] == '/')
		len--;
	if (ch->database) {
		db = curl_easy_escape(curl, ch->database, 0);
		if (!db)
			return NULL;
	}
	if (asprintf(&url, "%.*s%sdefault_format=JSONCompact%s%s%s", (int)len, ch->url,
		     strchr(ch->url, '?') ? "&" : "/?", db ? "&database=" : "", db ? db : "",
		     ch->readonly ? "&readonly=1" : "") < 0)
		return NULL;
	return url;
}

/* One statement on its way: its transfer, and what it needs until it ends. */
struct request {
	CURL *curl;
	struct curl_slist *headers;
	char *url, *user_header, *key_header;
	struct body body;
	char errbuf[CURL_ERROR_SIZE];
};

static void request_done(struct request *rq)
{
	if (rq->curl)
		curl_easy_cleanup(rq->curl);
	curl_slist_free_all(rq->headers);
	free(rq->url);
	free(rq->user_header);
	free(rq->key_header);
	free(rq->body.data);
	*rq = (struct request){};
}

/*
 * request_init() - @rq (zeroed) set up to POST @sql (borrowed: it must
 * outlive the transfer). Returns 0, -ENOMEM, or -EINVAL with *@ret_error.
 * request_done() frees what it set up, on failure too.
 */
static int request_init(const struct clickhouse *ch, const char *sql, struct request *rq,
			char **ret_error)
{
	rq->curl = curl_easy_init();
	if (!rq->curl || !(rq->url = query_url(rq->curl, ch)))
		return -ENOMEM;
	if (ch->user || ch->password) {
		/* The server's own headers, not basic auth: the password never goes in a URL. */
		if (asprintf(&rq->user_header, "X-ClickHouse-User: %s",
			     ch->user ? ch->user : "default") < 0 ||
		    asprintf(&rq->key_header, "X-ClickHouse-Key: %s",
			     ch->password ? ch->password : "") < 0) {
			rq->user_header = rq->key_header = NULL;
			return -ENOMEM;
		}
		rq->headers = curl_slist_append(NULL, rq->user_header);
		if (!rq->headers || !curl_slist_append(rq->headers, rq->key_header))
			return -ENOMEM;
	}
	if ((ch->ca_file && curl_easy_setopt(rq->curl, CURLOPT_CAINFO, ch->ca_file) != CURLE_OK) ||
	    curl_easy_setopt(rq->curl, CURLOPT_URL, rq->url) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_POSTFIELDS, sql) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_HTTPHEADER, rq->headers) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_WRITEFUNCTION, body_write) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_WRITEDATA, &rq->body) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_ERRORBUFFER, rq->errbuf) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_TIMEOUT, QUERY_TIMEOUT_S) != CURLE_OK ||
	    curl_easy_setopt(rq->curl, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK)
		return fail(-EINVAL, ret_error, ch->url, "cannot set up the request: %s",
			    rq->errbuf[0] ? rq->errbuf : "libcurl refused an option");
	return 0;
}

/*
 * request_result() - the answer of @rq, whose transfer ended with @cr, as
 * clickhouse__query() returns it.
 */
static int request_result(const struct clickhouse *ch, struct request *rq, CURLcode cr,
			  json_t **ret, char **ret_error)
{
	const char *errbuf = rq->errbuf;
	struct body *body = &rq->body;
	long status = 0, os_errno = 0, code;
	char msg[512];
	json_error_t jerr;
	json_t *j;

	if (cr != CURLE_OK) {
		curl_easy_getinfo(rq->curl, CURLINFO_OS_ERRNO, &os_errno);
		if (body->too_big)
			return fail(-EMSGSIZE, ret_error, ch->url, "answer longer than %d MiB",
				    PROFCTL_MAX_RESPONSE_BYTES / (1024 * 1024));
		if (cr == CURLE_COULDNT_CONNECT && os_errno == ECONNREFUSED)
			return fail(-ECONNREFUSED, ret_error, ch->url, "connection refused");
		if (cr == CURLE_OPERATION_TIMEDOUT)
			return fail(-ETIMEDOUT, ret_error, ch->url, "%s",
				    errbuf[0] ? errbuf : curl_easy_strerror(cr));
		if (cr == CURLE_OUT_OF_MEMORY || cr == CURLE_WRITE_ERROR)
			return -ENOMEM;
		if (cr == CURLE_URL_MALFORMAT || cr == CURLE_UNSUPPORTED_PROTOCOL)
			return fail(-EINVAL, ret_error, ch->url, "%s",
				    errbuf[0] ? errbuf : curl_easy_strerror(cr));
		return fail(-EHOSTUNREACH, ret_error, ch->url, "%s",
			    errbuf[0] ? errbuf : curl_easy_strerror(cr));
	}
	curl_easy_getinfo(rq->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		server_message(body->data ? body->data : "", msg, sizeof(msg), &code);
		if (status == 401 || status == 403 || code == CH_UNKNOWN_USER ||
		    code == CH_WRONG_PASSWORD || code == CH_REQUIRED_PASSWORD ||
		    code == CH_AUTHENTICATION_FAILED)
			return fail(-EACCES, ret_error, ch->url, "authentication failed: %s", msg);
		return fail(-EREMOTEIO, ret_error, ch->url, "HTTP %ld: %s", status, msg);
	}

	if (body->size == 0 || body->data[strspn(body->data, " \t\r\n")] != '{') {
		j = json_pack("{s:s%}", "text", body->data ? body->data : "", body->size);
		if (!j)
			return fail(-EBADMSG, ret_error, ch->url,
				    "an answer that is not UTF-8 text");
		*ret = j;
		return 0;
	}
	j = json_loadb(body->data, body->size, 0, &jerr);
	if (!j)
		return fail(-EBADMSG, ret_error, ch->url, "malformed JSON answer: %s (line %d)",
			    jerr.text, jerr.line);
	if (!json_is_array(json_object_get(j, "meta")) ||
	    !json_is_array(json_object_get(j, "data"))) {
		json_decref(j);
		return fail(-EBADMSG, ret_error, ch->url, "answer without \"meta\" and \"data\"");
	}
	*ret = j;
	return 0;
}

int clickhouse__query(const struct clickhouse *ch, const char *sql, json_t **ret, char **ret_error)
{
	return clickhouse__query_all(ch, 1, &sql, ret, ret_error);
}

int clickhouse__query_all(const struct clickhouse *ch, size_t n, const char *const *sqls,
			  json_t **rets, char **ret_error)
{
	_cleanup_free_ struct request *rqs = NULL;
	_cleanup_free_ CURLcode *codes = NULL;
	CURLM *multi = NULL;
	CURLMsg *m;
	int running = 0, left, r = 0;
	size_t i;

	*ret_error = NULL;
	for (i = 0; i < n; i++)
		rets[i] = NULL;
	rqs = calloc(n, sizeof(*rqs));
	codes = calloc(n, sizeof(*codes));
	multi = curl_multi_init();
	if (!rqs || !codes || !multi) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < n && r >= 0; i++) {
		r = request_init(ch, sqls[i], &rqs[i], ret_error);
		if (r >= 0 && curl_multi_add_handle(multi, rqs[i].curl) != CURLM_OK)
			r = -ENOMEM;
		codes[i] = CURLE_OK;
	}
	if (r < 0)
		goto out;
	/* The transfers go side by side; each ends by itself (its own timeouts). */
	do {
		if (curl_multi_perform(multi, &running) != CURLM_OK ||
		    (running && curl_multi_poll(multi, NULL, 0, 1000, NULL) != CURLM_OK)) {
			r = -ENOMEM; /* libcurl's multi interface fails only on allocation */
			goto out;
		}
		while ((m = curl_multi_info_read(multi, &left)))
			for (i = 0; i < n; i++)
				if (m->msg == CURLMSG_DONE && m->easy_handle == rqs[i].curl)
					codes[i] = m->data.result;
	} while (running);
	/* The first statement's failure, in @sqls order. */
	for (i = 0; i < n && r >= 0; i++)
		r = request_result(ch, &rqs[i], codes[i], &rets[i], ret_error);
out:
	for (i = 0; rqs && i < n; i++) {
		if (rqs[i].curl)
			curl_multi_remove_handle(multi, rqs[i].curl);
		request_done(&rqs[i]);
		if (r < 0) {
			json_decref(rets[i]);
			rets[i] = NULL;
		}
	}
	curl_multi_cleanup(multi);
	return r;
}

int clickhouse__int(const json_t *v, long long *ret)
{
	const char *s;
	char *end;
	long long n;

	if (json_is_integer(v)) {
		*ret = json_integer_value(v);
		return 0;
	}
	s = json_string_value(v);
	if (!s || !*s || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')))
		return -EBADMSG;
	errno = 0;
	n = strtoll(s, &end, 10);
	if (*end)
		return -EBADMSG;
	if (errno == ERANGE)
		return -ERANGE;
	*ret = n;
	return 0;
}
