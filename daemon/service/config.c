/* config.c - profd's settings from defaults, /etc/profd/profd.conf (inih) and flags. */
#include <errno.h>
#include <ini.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../bpf/profile.h"
#include "service/config.h"
#include "log.h"
#include "protocol.h"
#include "util.h"

#define NSEC_PER_DAY (86400ULL * NSEC_PER_SEC)

enum setting_kind {
	SET_PATH,
	SET_STRING, /* any text, "" allowed */
	SET_URL,    /* "" or http://... or https://... */
	SET_LOG_LEVEL,
	SET_UINT,
	SET_DAYS,
	SET_BYTES,
	SET_POW2_BYTES,
	SET_BOOL, /* yes/no, true/false, on/off, 1/0 */
};

/* Every setting: its section in the file, its key, and where it goes. */
static const struct setting {
	const char *section;
	const char *key;
	enum setting_kind kind;
	size_t offset;
	unsigned long long min, max; /* SET_UINT, SET_DAYS */
} settings[] = {
    {"daemon", "db", SET_PATH, offsetof(struct profd_config, db_path), 0, 0},
    {"daemon", "socket", SET_PATH, offsetof(struct profd_config, socket_path), 0, 0},
    {"daemon", "log_level", SET_LOG_LEVEL, offsetof(struct profd_config, log_level), 0, 0},
    {"daemon", "default_freq_hz", SET_UINT, offsetof(struct profd_config, default_freq_hz), 1,
     PROFD_MAX_FREQ_HZ},
    {"daemon", "offcpu", SET_BOOL, offsetof(struct profd_config, offcpu), 0, 0},
    {"daemon", "flush_interval_s", SET_UINT, offsetof(struct profd_config, flush_interval_s), 1,
     3600},
    {"retention", "retention_days", SET_DAYS, offsetof(struct profd_config, retention_ns), 0,
     100000},
    {"retention", "max_db_bytes", SET_BYTES, offsetof(struct profd_config, max_db_bytes), 0, 0},
    {"retention", "merge_windows_after_s", SET_UINT,
     offsetof(struct profd_config, merge_windows_after_s), 0, 100U * 86400},
    {"retention", "merged_window_s", SET_UINT, offsetof(struct profd_config, merged_window_s), 2,
     86400},
    {"limits", "max_sessions", SET_UINT, offsetof(struct profd_config, max_sessions), 1,
     PROFILE_MAX_SLOTS},
    {"limits", "max_threads_per_session", SET_UINT, offsetof(struct profd_config, max_threads), 1,
     1000000},
    {"limits", "max_stacks_per_session", SET_UINT, offsetof(struct profd_config, max_stacks), 16,
     100000000},
    {"limits", "ring_buffer_bytes", SET_POW2_BYTES,
     offsetof(struct profd_config, ring_buffer_bytes), 1ULL << 20, 1ULL << 30},
    {"limits", "cfi_cache_bytes", SET_BYTES, offsetof(struct profd_config, cfi_cache_bytes), 0, 0},
    {"limits", "query_threads", SET_UINT, offsetof(struct profd_config, query_threads), 1, 64},
    {"limits", "queries_per_user", SET_UINT, offsetof(struct profd_config, queries_per_user), 1,
     1024},
    {"limits", "max_queries", SET_UINT, offsetof(struct profd_config, max_queries), 1, 4096},
    {"limits", "query_timeout_s", SET_UINT, offsetof(struct profd_config, query_timeout_s), 1,
     86400},
    {"fleet", "host_name", SET_STRING, offsetof(struct profd_config, host_name), 0, 0},
    {"fleet", "fleet_interval_s", SET_UINT, offsetof(struct profd_config, fleet_interval_s), 1,
     86400},
    {"fleet", "clickhouse_url", SET_URL, offsetof(struct profd_config, clickhouse_url), 0, 0},
    {"fleet", "clickhouse_database", SET_STRING, offsetof(struct profd_config, clickhouse_database),
     0, 0},
    {"fleet", "clickhouse_user", SET_STRING, offsetof(struct profd_config, clickhouse_user), 0, 0},
    {"fleet", "clickhouse_password", SET_STRING, offsetof(struct profd_config, clickhouse_password),
     0, 0},
    {"fleet", "clickhouse_password_file", SET_PATH,
     offsetof(struct profd_config, clickhouse_password_file), 0, 0},
    {"fleet", "ca_file", SET_PATH, offsetof(struct profd_config, fleet_ca_file), 0, 0},
    {"fleet", "pyroscope_url", SET_URL, offsetof(struct profd_config, pyroscope_url), 0, 0},
    {"fleet", "pyroscope_app", SET_STRING, offsetof(struct profd_config, pyroscope_app), 0, 0},
    {"fleet", "pyroscope_tenant", SET_STRING, offsetof(struct profd_config, pyroscope_tenant), 0,
     0},
    {"fleet", "pyroscope_user", SET_STRING, offsetof(struct profd_config, pyroscope_user), 0, 0},
    {"fleet", "pyroscope_password_file", SET_PATH,
     offsetof(struct profd_config, pyroscope_password_file), 0, 0},
};

static int fail(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int config__init(struct profd_config *c)
{
	*c = (struct profd_config){
	    .db_path = strdup(PROFD_DEFAULT_DB),
	    .socket_path = strdup(PROFD_DEFAULT_SOCKET),
	    .log_level = LOG_LEVEL_INFO,
	    .default_freq_hz = PROFD_DEFAULT_FREQ_HZ,
	    .offcpu = true,
	    .flush_interval_s = PROFD_DEFAULT_FLUSH_INTERVAL_S,
	    .max_sessions = PROFD_DEFAULT_MAX_SESSIONS,
	    .max_threads = PROFD_DEFAULT_MAX_THREADS,
	    .max_stacks = PROFD_DEFAULT_MAX_STACKS,
	    .ring_buffer_bytes = PROFD_DEFAULT_RING_BUFFER_BYTES,
	    .cfi_cache_bytes = PROFD_DEFAULT_CFI_CACHE_BYTES,
	    .query_threads = PROFD_DEFAULT_QUERY_THREADS,
	    .queries_per_user = PROFD_DEFAULT_QUERIES_PER_USER,
	    .max_queries = PROFD_DEFAULT_MAX_QUERIES,
	    .query_timeout_s = PROFD_DEFAULT_QUERY_TIMEOUT_S,
	    .merge_windows_after_s = PROFD_DEFAULT_MERGE_WINDOWS_AFTER_S,
	    .merged_window_s = PROFD_DEFAULT_MERGED_WINDOW_S,
	    .fleet_interval_s = PROFD_DEFAULT_FLEET_INTERVAL_S,
	    .clickhouse_database = strdup("profd"),
	    .pyroscope_app = strdup("profd"),
	};
	return c->db_path && c->socket_path && c->clickhouse_database && c->pyroscope_app ? 0
											  : -ENOMEM;
}

/* config__done() - free the strings of @c (every setting of a string kind) and set them NULL. */
void config__done(struct profd_config *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
		char **field = (char **)((char *)c + settings[i].offset);

		if (settings[i].kind != SET_PATH && settings[i].kind != SET_STRING &&
		    settings[i].kind != SET_URL)
			continue;
		free(*field);
		*field = NULL;
	}
}

int parse_size_bytes(const char *s, uint64_t *ret)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	switch (*end) {
	case '\0':
		break;
	case 'K':
	case 'k':
		shift = 10;
		break;
	case 'M':
	case 'm':
		shift = 20;
		break;
	case 'G':
	case 'g':
		shift = 30;
		break;
	case 'T':
	case 't':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (*end && end[1] != '\0' && !(end[1] == 'i' && end[2] == 'B' && end[3] == '\0') &&
	    !(end[1] == 'B' && end[2] == '\0'))
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*ret = (uint64_t)v << shift;
	return 0;
}

/* yes, true, on, 1: 1; no, false, off, 0: 0; anything else: -EINVAL. */
static int parse_bool(const char *s)
{
	static const char *const yes[] = {"yes", "true", "on", "1"};
	static const char *const no[] = {"no", "false", "off", "0"};

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return 1;
		if (strcasecmp(s, no[i]) == 0)
			return 0;
	}
	return -EINVAL;
}

static const struct setting *setting_find(const char *section, const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(settings); i++)
		if (strcmp(settings[i].key, key) == 0 &&
		    (!section || strcmp(settings[i].section, section) == 0))
			return &settings[i];
	return NULL;
}

/* Replace the string *@field with a copy of @value: 0, or -ENOMEM (*@field unchanged). */
static int set_string(char **field, const char *value)
{
	char *copy = strdup(value);

	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

static int setting_apply(struct profd_config *c, const struct setting *s, const char *value,
			 char *errbuf, size_t errlen)
{
	void *field = (char *)c + s->offset;
	unsigned long long v;
	uint64_t bytes;
	char *end;
	int r;

	switch (s->kind) {
	case SET_PATH:
		if (value[0] != '/')
			return fail(errbuf, errlen, "%s must be an absolute path, not '%s'", s->key,
				    value);
		return set_string(field, value);
	case SET_URL:
		if (*value && strncmp(value, "http://", 7) != 0 &&
		    strncmp(value, "https://", 8) != 0)
			return fail(errbuf, errlen,
				    "%s must be an http:// or https:// URL, not '%s'", s->key,
				    value);
		/* fall through */
	case SET_STRING:
		return set_string(field, value);
	case SET_LOG_LEVEL:
		r = log_parse_level(value);
		if (r < 0)
			return fail(errbuf, errlen,
				    "log_level must be error, warning, info or debug, not '%s'",
				    value);
		*(int *)field = r;
		return 0;
	case SET_UINT:
	case SET_DAYS:
		errno = 0;
		v = strtoull(value, &end, 10);
		if (value[0] < '0' || value[0] > '9' || *end || errno || v < s->min || v > s->max)
			return fail(errbuf, errlen,
				    "%s must be an integer from %llu to %llu, not '%s'", s->key,
				    s->min, s->max, value);
		if (s->kind == SET_DAYS)
			*(uint64_t *)field = (uint64_t)v * NSEC_PER_DAY;
		else
			*(unsigned *)field = (unsigned)v;
		return 0;
	case SET_BYTES:
		if (parse_size_bytes(value, &bytes) < 0)
			return fail(errbuf, errlen,
				    "%s must be a size in bytes (suffixes K, M, G, T), not '%s'",
				    s->key, value);
		*(uint64_t *)field = bytes;
		return 0;
	case SET_POW2_BYTES:
		/* The kernel wants a BPF ring buffer of a power-of-2 number of pages. */
		if (parse_size_bytes(value, &bytes) < 0 || bytes < s->min || bytes > s->max ||
		    (bytes & (bytes - 1)))
			return fail(errbuf, errlen,
				    "%s must be a power of 2 from 1M to 1G (suffixes K, M, G), "
				    "not '%s'",
				    s->key, value);
		*(uint64_t *)field = bytes;
		return 0;
	case SET_BOOL:
		r = parse_bool(value);
		if (r < 0)
			return fail(errbuf, errlen, "%s must be yes or no, not '%s'", s->key,
				    value);
		*(bool *)field = r;
		return 0;
	}
	return -EINVAL;
}

int config__set(struct profd_config *c, const char *key, const char *value, char *errbuf,
		size_t errlen)
{
	const struct setting *s = setting_find(NULL, key);

	if (!s)
		return fail(errbuf, errlen, "unknown setting '%s'", key);
	return setting_apply(c, s, value, errbuf, errlen);
}

struct load_ctx {
	struct profd_config *c;
	const char *path;
	char *errbuf;
	size_t errlen;
	int r;
	FILE *f;
	int line; /* of the line inih works on: our reader counts them */
};

/* inih's fgets: counts lines, since this inih calls the handler without them. */
static char *read_line(char *str, int num, void *stream)
{
	struct load_ctx *ctx = stream;
	char *r = fgets(str, num, ctx->f);

	if (r)
		ctx->line++;
	return r;
}

static int on_ini(void *user, const char *section, const char *key, const char *value)
{
	struct load_ctx *ctx = user;
	const struct setting *s;
	char msg[256];
	int r;

	if (ctx->r < 0)
		return 1; /* keep the first error */
	s = setting_find(section, key);
	if (!s) {
		if (setting_find(NULL, key))
			snprintf(msg, sizeof(msg), "'%s' belongs in section [%s], not [%s]", key,
				 setting_find(NULL, key)->section, section);
		else
			snprintf(msg, sizeof(msg), "unknown setting '%s' in section [%s]", key,
				 section);
		r = -EINVAL;
	} else {
		r = setting_apply(ctx->c, s, value, msg, sizeof(msg));
	}
	if (r < 0) {
		ctx->r = r;
		snprintf(ctx->errbuf, ctx->errlen, "%s:%d: %s", ctx->path, ctx->line, msg);
	}
	return 1;
}

int config__load(struct profd_config *c, const char *path, bool missing_ok, char *errbuf,
		 size_t errlen)
{
	struct load_ctx ctx = {c, path, errbuf, errlen, 0, NULL, 0};
	FILE *f = fopen(path, "re");
	int r;

	ctx.f = f;
	if (!f) {
		if (errno == ENOENT && missing_ok)
			return 0;
		r = -errno;
		snprintf(errbuf, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	r = ini_parse_stream(read_line, &ctx, on_ini, &ctx);
	fclose(f);
	if (ctx.r < 0)
		return ctx.r;
	if (r > 0)
		return fail(errbuf, errlen,
			    "%s:%d: syntax error (expected [section] or key = value)", path, r);
	if (r < 0)
		return -ENOMEM;
	return 0;
}

void config__print(const struct profd_config *c, FILE *f)
{
	static const char *const levels[] = {"error", "warning", "info", "debug"};

	fprintf(f, "[daemon]\n");
	fprintf(f, "db = %s\n", c->db_path);
	fprintf(f, "socket = %s\n", c->socket_path);
	fprintf(f, "log_level = %s\n", levels[c->log_level]);
	fprintf(f, "default_freq_hz = %u\n", c->default_freq_hz);
	fprintf(f, "offcpu = %s\n", c->offcpu ? "yes" : "no");
	fprintf(f, "flush_interval_s = %u\n", c->flush_interval_s);
	fprintf(f, "\n[retention]\n");
	fprintf(f, "retention_days = %llu\n", (unsigned long long)(c->retention_ns / NSEC_PER_DAY));
	fprintf(f, "max_db_bytes = %" PRIu64 "\n", c->max_db_bytes);
	fprintf(f, "merge_windows_after_s = %u\n", c->merge_windows_after_s);
	fprintf(f, "merged_window_s = %u\n", c->merged_window_s);
	fprintf(f, "\n[limits]\n");
	fprintf(f, "max_sessions = %u\n", c->max_sessions);
	fprintf(f, "max_threads_per_session = %u\n", c->max_threads);
	fprintf(f, "max_stacks_per_session = %u\n", c->max_stacks);
	fprintf(f, "ring_buffer_bytes = %llu\n", (unsigned long long)c->ring_buffer_bytes);
	fprintf(f, "cfi_cache_bytes = %llu\n", (unsigned long long)c->cfi_cache_bytes);
	fprintf(f, "query_threads = %u\n", c->query_threads);
	fprintf(f, "queries_per_user = %u\n", c->queries_per_user);
	fprintf(f, "max_queries = %u\n", c->max_queries);
	fprintf(f, "query_timeout_s = %u\n", c->query_timeout_s);
	fprintf(f, "\n[fleet]\n");
	fprintf(f, "fleet_interval_s = %u\n", c->fleet_interval_s);
	/* Strings left empty are not printed: the file reads back the same. */
	for (size_t i = 0; i < ARRAY_SIZE(settings); i++) {
		const char *v = *(char **)((char *)c + settings[i].offset);

		if (strcmp(settings[i].section, "fleet") != 0 || settings[i].kind == SET_UINT ||
		    !v || !*v)
			continue;
		/* A password is never printed (clickhouse_password_file is the better way). */
		if (strcmp(settings[i].key, "clickhouse_password") != 0)
			fprintf(f, "%s = %s\n", settings[i].key, v);
	}
}
