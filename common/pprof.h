/*
 * pprof.h - a loaded profile written as pprof's profile.proto, gzip'd: what
 * go tool pprof and Pyroscope's /ingest (format=pprof) read.
 */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "xprofile.h"

/*
 * pprof__write() - @p (of thread @tid only; 0: all threads) as one gzip'd
 * profile.proto message to @f. time_nanos and duration_nanos are
 * @p->started_at_ns and @p->elapsed_ns. Returns 0, -ENOMEM, or -EIO (a
 * write to @f failed). Does not log.
 */
int pprof__write(FILE *f, const struct xprofile *p, int64_t tid);
