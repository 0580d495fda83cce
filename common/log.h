/* log.h - leveled logging to stderr (with journald priorities under systemd), once, at the top of the program (library code does not log). */
#pragma once

#include <errno.h>

enum log_level { LOG_LEVEL_ERROR = 0, LOG_LEVEL_WARNING, LOG_LEVEL_INFO, LOG_LEVEL_DEBUG };

void log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* log_parse_level() - "error", "warning", "info" or "debug"; -EINVAL otherwise. */
int log_parse_level(const char *s);
void log_set_program(const char *name);

/*
 * log_priority_prefix() - "<3>" (error), "<4>", "<6>", "<7>" (debug) when
 * stderr is connected to the systemd journal (JOURNAL_STREAM), so that
 * journald records each line's priority; "" otherwise.
 */
const char *log_priority_prefix(enum log_level level);

/*
 * log_full_errno() - print "program: message" to stderr if @level is enabled.
 * @error: a negative errno or 0; if non-zero, %m in @fmt prints its text.
 * Returns @error (or -EIO when @error is 0 and level is error), so that callers
 * can write "return log_error_errno(r, ...)".
 */
int log_full_errno(enum log_level level, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_error_errno(e, ...) log_full_errno(LOG_LEVEL_ERROR, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_LEVEL_WARNING, (e), __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_LEVEL_ERROR, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_LEVEL_WARNING, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_LEVEL_INFO, 0, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_LEVEL_DEBUG, 0, __VA_ARGS__)
