-- 0009-cuda.sql: what uprobes on the CUDA runtime/driver API, NVTX and generic
-- user functions saw (--events cuda,nvtx, --uprobe). Rows are added per flush
-- window: sum them (and take MIN/MAX) per session for totals.

-- Each probe outcome at attach: a symbol attached in a file, missing everywhere,
-- NVTX v3 calls inlined in a file, or a failure.
CREATE TABLE gpu_probes (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pid        INTEGER NOT NULL,  -- the target, or a child it forked (--children)
	what       TEXT NOT NULL,   -- symbol, LIB:SYMBOL, or 'NVTX v3 calls'
	file       TEXT NOT NULL,   -- mapped file it was found in, '' if none
	status     TEXT NOT NULL    -- 'attached', 'missing', 'inlined: ...', 'failed: ...'
);
CREATE INDEX gpu_probes_session ON gpu_probes (session_id);

-- Calls per CUDA API function (outermost and nested: cudaMemcpy and the
-- cuMemcpy it calls are both counted, each under its own name).
CREATE TABLE gpu_api_calls (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,   -- when the flush that wrote the row ran (CLOCK_REALTIME ns)
	api        TEXT NOT NULL,
	calls      INTEGER NOT NULL,
	errors     INTEGER NOT NULL,   -- calls that returned a CUDA error (non-zero)
	total_ns   INTEGER NOT NULL,   -- entry to return, summed
	min_ns     INTEGER NOT NULL,
	max_ns     INTEGER NOT NULL
);
CREATE INDEX gpu_api_calls_session ON gpu_api_calls (session_id);

-- Kernel launches (outermost launch calls only), per kernel name, grid,
-- block and launching call stack.
CREATE TABLE gpu_kernels (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	name       TEXT NOT NULL,      -- demangled kernel name, '[unknown kernel 0x...]' if not found
	api        TEXT NOT NULL,      -- the launch function probed
	grid       TEXT NOT NULL,      -- 'x,y,z' ('' if the launch API has none: graphs)
	block      TEXT NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	launches   INTEGER NOT NULL,
	errors     INTEGER NOT NULL    -- launches that returned an error
);
CREATE INDEX gpu_kernels_session ON gpu_kernels (session_id);

-- Every allocation and free (outermost calls). live_delta_bytes is +size
-- for an allocation that succeeded, -size for a free of a pointer allocated
-- in the session, 0 otherwise (failed call, or a pointer allocated before
-- the attach): SUM(live_delta_bytes) is the live bytes the session saw grow.
CREATE TABLE gpu_mem_events (
	session_id       INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	time_ns          INTEGER NOT NULL,  -- return of the call (CLOCK_REALTIME ns)
	api              TEXT NOT NULL,
	space            TEXT NOT NULL CHECK (space IN ('device', 'managed', 'host')),
	requested_bytes  INTEGER NOT NULL,  -- allocation size asked for; for a free, the size
	                                    -- allocated if known, else 0
	live_delta_bytes INTEGER NOT NULL,
	ok               INTEGER NOT NULL,  -- 1 if the call returned success
	address          INTEGER NOT NULL,  -- device pointer (0 if none)
	stack_id         INTEGER NOT NULL REFERENCES stacks (id) -- the call's stack; for a free
	                                    -- that matched, the stack that allocated
);
CREATE INDEX gpu_mem_events_session ON gpu_mem_events (session_id, time_ns);

-- Memory copies per API and direction (outermost calls only).
CREATE TABLE gpu_copies (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	api        TEXT NOT NULL,
	direction  TEXT NOT NULL,      -- HtoH, HtoD, DtoH, DtoD, default (unified), unknown
	calls      INTEGER NOT NULL,
	bytes      INTEGER NOT NULL,   -- bytes asked to copy, failed calls included
	errors     INTEGER NOT NULL
);
CREATE INDEX gpu_copies_session ON gpu_copies (session_id);

-- Time CPU threads waited in synchronization calls, per call stack.
CREATE TABLE gpu_syncs (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	api        TEXT NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	calls      INTEGER NOT NULL,
	total_ns   INTEGER NOT NULL
);
CREATE INDEX gpu_syncs_session ON gpu_syncs (session_id);

-- NVTX ranges closed in the window, per path of nested names (push/pop) or
-- per name (start/end, depth 0); marks have calls and 0 durations.
CREATE TABLE nvtx_ranges (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	kind       TEXT NOT NULL CHECK (kind IN ('push', 'start', 'mark')),
	path       TEXT NOT NULL,      -- outer names first, joined with ' > '
	name       TEXT NOT NULL,      -- the innermost name
	depth      INTEGER NOT NULL,   -- 0 for an outermost range
	calls      INTEGER NOT NULL,
	total_ns   INTEGER NOT NULL,
	min_ns     INTEGER NOT NULL,
	max_ns     INTEGER NOT NULL
);
CREATE INDEX nvtx_ranges_session ON nvtx_ranges (session_id);

-- Generic probes (--uprobe LIB:SYMBOL): calls and latency.
CREATE TABLE uprobe_calls (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	probe      TEXT NOT NULL,      -- LIB:SYMBOL as asked
	calls      INTEGER NOT NULL,
	total_ns   INTEGER NOT NULL,
	min_ns     INTEGER NOT NULL,
	max_ns     INTEGER NOT NULL
);
CREATE INDEX uprobe_calls_session ON uprobe_calls (session_id);

-- Calls lost before they reached the session (ring buffer full, no room for
-- the entry state), NVTX pops/ends without a push/start seen (the range
-- opened before the attach), launches whose kernel name was not found, and
-- call stacks taken at entry that filled all 127 frames or came back empty.
ALTER TABLE sessions ADD COLUMN gpu_lost_calls INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN nvtx_unmatched INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN gpu_unnamed_launches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN gpu_truncated_stacks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN gpu_missing_stacks INTEGER NOT NULL DEFAULT 0;
