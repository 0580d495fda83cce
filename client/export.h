/*
 * export.h - a loaded profile (common/xprofile.h) rendered in the formats
 * other tools read: folded stacks, Chrome trace event JSON, speedscope
 * JSON, SVG flame graph; pprof is common/pprof.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pprof.h"
#include "xprofile.h"

/* @tid: only this thread's samples; 0: all. */
int export__folded(FILE *f, const struct xprofile *p, int64_t tid);
int export__chrome_trace(FILE *f, const struct xprofile *p, int64_t tid);
int export__speedscope(FILE *f, const struct xprofile *p, int64_t tid);
int flamegraph__svg(FILE *f, const struct xprofile *p, int64_t tid, bool inverted);
