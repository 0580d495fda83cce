/* log.c - leveled logging to stderr for profd and profctl. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "log.h"

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

int log_full_errno(enum log_level level, int error, const char *fmt, ...)
{
	static const char *const prefix[] = { "error: ", "warning: ", "", "debug: " };
	int saved = errno;
	va_list ap;

	if (level <= current_level) {
		/* Make %m print the errno we were given, not whatever errno holds. */
		errno = error < 0 ? -error : error;
		fprintf(stderr, "%s: %s", program, prefix[level]);
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
