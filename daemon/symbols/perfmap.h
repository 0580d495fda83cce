/*
 * perfmap.h - symbols of just-in-time code from /tmp/perf-PID.map, the
 * format perf defines (tools/perf/Documentation/jit-interface.txt): one
 * "START SIZE NAME" line per function, START and SIZE in hex. Written by
 * CPython 3.12's perf trampoline, the JVM's perf-map-agent, V8, LuaJIT.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct perfmap;

/* perfmap__new() - for process @pid; the file is read lazily. NULL on OOM. */
struct perfmap *perfmap__new(pid_t pid);
void perfmap__free(struct perfmap *pm); /* accepts NULL */

/*
 * perfmap__lookup() - the JIT function holding @addr. The file is re-read
 * when it changed since the last read (JITs append to it), looked for first
 * in the target's root (/proc/PID/root/tmp/..., for containers), then in
 * /tmp; a file last written before the process started (by an earlier
 * process with the same PID) is not read. Returns 0 with *@ret_name (owned
 * by @pm, valid until the next lookup that re-reads the file or
 * perfmap__free) and *@ret_path (the file),
 * -ENOENT if no file or no entry holds @addr. Malformed lines are skipped;
 * at most PERFMAP_MAX_ENTRIES are kept. Does not log.
 */
int perfmap__lookup(struct perfmap *pm, uint64_t addr, const char **ret_name,
		    const char **ret_path);

#define PERFMAP_MAX_ENTRIES (1 << 20)
