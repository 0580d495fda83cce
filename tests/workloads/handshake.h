/*
 * handshake.h - how a workload and its test take turns: the workload says a
 * word on a line of its stdout, then waits for the test's line on its stdin.
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

/*
 * say_and_wait() - print @word and a newline, flush stdout, and read one
 * line from stdin. Returns false at EOF (the test is gone): the caller exits.
 */
static inline bool say_and_wait(const char *word)
{
	char line[256];

	printf("%s\n", word);
	fflush(stdout);
	return fgets(line, sizeof(line), stdin) != NULL;
}

/*
 * say_ready() - print "ready" (flushed); with @wait, then wait for a line on
 * stdin, as say_and_wait(). Returns false at EOF: the caller exits.
 */
static inline bool say_ready(bool wait)
{
	if (wait)
		return say_and_wait("ready");
	printf("ready\n");
	fflush(stdout);
	return true;
}
