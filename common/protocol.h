/*
 * protocol.h - constants of the profd <-> profctl socket protocol.
 *
 * One JSON object per line (UTF-8, '\n'-terminated) on a Unix stream socket;
 * every request gets exactly one response line. docs/protocol.md has the
 * commands and the shape of every response.
 */
#pragma once

#include <stdbool.h>

#define PROFD_PROTOCOL_VERSION 1

/*
 * The last member of a response object, when its value is a string of at
 * least this many bytes that are all plain (protocol_plain_byte(): no
 * escape needed in JSON), is written by profd and read by profctl around
 * jansson, which escapes and unescapes a string one character at a time:
 * 0.2 s to write and 0.4 s to read the 8 MB of a 10-hour session's packed
 * profile rows ("samples_packed"), against a few ms as plain bytes. The
 * line is the same JSON either way.
 */
#define PROFD_PLAIN_TAIL_MIN_BYTES (64 * 1024)

/* Whether byte @c stands for itself inside a JSON string: printable ASCII but '"' and '\\'. */
static inline bool protocol_plain_byte(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* Requests longer than this (bytes, including the newline) get an error. */
#define PROFD_MAX_REQUEST_BYTES (64 * 1024)

#define PROFD_DEFAULT_SOCKET "/run/profd/profd.sock"
#define PROFD_DEFAULT_DB "/var/lib/profd/profd.db"

#define PROFD_DEFAULT_FREQ_HZ 99
#define PROFD_MAX_FREQ_HZ 10000
/* User stack copied per sample for DWARF unwinding: deep enough for ~100 frames of typical C/C++. */
#define PROFD_DEFAULT_STACK_BYTES 16384
/* How often each process's memory (RSS...) is read (events "rss"). */
#define PROFD_DEFAULT_MEMORY_INTERVAL_NS 1000000000ULL
/* Mean bytes allocated between two allocation samples (events "malloc"), as tcmalloc's default. */
#define PROFD_DEFAULT_MALLOC_SAMPLE_BYTES (512ULL * 1024)
/*
 * Allocation probe hits per second (2 per malloc, 1 per free) above which
 * profd detaches a session's allocation probes: each hit traps into the
 * kernel, ~1-15 us here, so 100000/s costs the target up to a core.
 */
#define PROFD_DEFAULT_MALLOC_MAX_HITS_PER_S 100000ULL
/* Aggregation window and flush interval: a crash loses at most this much. */
#define PROFD_WINDOW_NS 1000000000ULL
