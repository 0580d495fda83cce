/*
 * output.h - human renderings of profd's responses (the shapes of
 * docs/protocol.md): session summaries, tables and the hot-path call tree.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

/*
 * Each output__*() function writes to @f and returns 0, -ENOMEM, or -EBADMSG
 * when the response lacks a field it needs or has one of the wrong type; then
 * output__error() names the field, and @f may hold a partial rendering (write
 * to a memory stream and copy it out on success). They do not log.
 */
int output__attach(FILE *f, const json_t *reply);
int output__session(FILE *f, const json_t *session);
int output__sessions(FILE *f, const json_t *reply);
int output__top(FILE *f, const json_t *reply);
int output__hotpaths(FILE *f, const json_t *reply, bool ascii);
int output__threads(FILE *f, const json_t *reply, const json_t *session);
int output__progress(FILE *f, const json_t *session);
int output__offcpu(FILE *f, const json_t *reply);
/* output__memory() - the memory report (sparklines in block characters, or ASCII with @ascii). */
int output__memory(FILE *f, const json_t *reply, bool ascii);
int output__gpu(FILE *f, const json_t *reply);    /* in output-gpu.c */
int output__ranges(FILE *f, const json_t *reply); /* in output-gpu.c */
const char *output__error(void);
int output__sql(FILE *f, const json_t *reply);
int output__sql_csv(FILE *f, const json_t *reply);
int output__diff(FILE *f, const json_t *diff);
int output__analyze(FILE *f, const json_t *reply);
