/* log.c - leveled logging to stderr for profd and profctl. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <syslog.h>

#include "log.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

static enum log_level current_level = LOG_LEVEL_INFO;
static const char *program = "profd";

void log_set_level(enum log_level level)
{
	current_level = level;
}

enum log_level log_get_level(void)
{
	return current_level;
}

void log_set_program(const char *name)
{
	program = name;
}

int log_parse_level(const char *s)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };

	for (int i = 0; i < 4; i++)
		if (strcasecmp(s, names[i]) == 0)
			return i;
	return -EINVAL;
}

/*
 * Is stderr the journal's stream? systemd sets JOURNAL_STREAM to
 * "DEVICE:INODE" of the stream it connected stderr to (systemd.exec(5));
 * stderr redirected elsewhere since does not match.
 */
static bool stderr_is_journal(void)
{
	static int cached = -1;
	const char *env;
	unsigned long long dev, ino;
	struct stat st;

	if (cached >= 0)
		return cached;
	env = getenv("JOURNAL_STREAM");
	cached = env && sscanf(env, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
		 (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
	return cached;
}

const char *log_priority_prefix(enum log_level level)
{
	/* sd-daemon(3)'s SD_ERR, SD_WARNING, SD_INFO, SD_DEBUG: "<N>" with syslog's N. */
	static const char *const prefixes[] = {
		[LOG_LEVEL_ERROR] = "<" STRINGIFY(LOG_ERR) ">",
		[LOG_LEVEL_WARNING] = "<" STRINGIFY(LOG_WARNING) ">",
		[LOG_LEVEL_INFO] = "<" STRINGIFY(LOG_INFO) ">",
		[LOG_LEVEL_DEBUG] = "<" STRINGIFY(LOG_DEBUG) ">",
	};

	return stderr_is_journal() ? prefixes[level] : "";
}

int log_full_errno(enum log_level level, int error, const char *fmt, ...)
{
	static const char *const prefix[] = { "error: ", "warning: ", "", "debug: " };
	int saved = errno;
	va_list ap;

	if (level <= current_level) {
		/* Make %m print the errno we were given, not whatever errno holds. */
		errno = error < 0 ? -error : error;
		fprintf(stderr, "%s%s: %s", log_priority_prefix(level), program, prefix[level]);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	errno = saved;
	if (error == 0 && level == LOG_LEVEL_ERROR)
		return -EIO;
	return error;
}
