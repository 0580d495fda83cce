/*
 * resymbolize.h - name stored frames that were left unsymbolized, from
 * debug info that appeared later (a -dbg package installed, a debug file
 * under PROFD_DEBUG_PATH, or debuginfod when asked), by build ID + address.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"

/*
 * resymbolize__session() - for every user frame of @session_id's stacks with
 * no function (inline depth 0), look the address up again with
 * symbolizer__file() and store the function and source line found; then
 * recount the session's unsymbolized frames. Frames are shared, so other
 * sessions with the same frames gain the names too (their counters are not
 * recounted). Inlined calls found now are not added as frames: the stored
 * stacks keep their shape.
 * @debuginfod: let libdebuginfod fetch missing debug info when the daemon's
 *   environment sets DEBUGINFOD_URLS. May block for as long as downloads
 *   take; sampling goes on in the kernel meanwhile, and what the ring buffer
 *   cannot hold is counted as lost.
 * Returns 0 with *@ret = {"session", "frames_checked", "frames_named",
 * "unsymbolized_frames"}, -ENOENT for an unknown session, -EIO, -ENOMEM.
 * Writes in one transaction. Does not log.
 */
int resymbolize__session(struct store *st, int64_t session_id, bool debuginfod, json_t **ret);
