-- 0001-initial.sql: sessions, threads, mappings, frames, call stacks and
-- aggregated CPU sample counts. Append-only: later changes go in 0002-*.sql.
-- Times are nanoseconds since the Unix epoch (UTC) unless a name says
-- otherwise. docs/schema.md documents every column.

CREATE TABLE sessions (
	id                 INTEGER PRIMARY KEY,
	pid                INTEGER NOT NULL,
	-- /proc/PID/stat field 22 (clock ticks after boot): tells a reused PID apart
	pid_start_ticks    INTEGER NOT NULL,
	comm               TEXT NOT NULL,
	exe                TEXT,
	uid                INTEGER NOT NULL,          -- uid of the requester (SO_PEERCRED)
	event              TEXT NOT NULL,             -- sampling event really used: 'cycles' or 'cpu-clock'
	events             TEXT NOT NULL,             -- what was asked for, comma-separated ('cpu')
	freq_hz            INTEGER NOT NULL,          -- samples per second per CPU while the target runs
	unwind             TEXT NOT NULL DEFAULT 'fp',-- how user stacks are unwound: 'fp' (frame pointers)
	duration_ns        INTEGER,                   -- requested duration; NULL: until detach or exit
	started_at_ns      INTEGER NOT NULL,
	ended_at_ns        INTEGER,
	state              TEXT NOT NULL CHECK (state IN ('running', 'ended')),
	end_reason         TEXT CHECK (end_reason IN
	                     ('duration', 'detached', 'target_exited', 'daemon_stopped', 'interrupted', 'error')),
	samples            INTEGER NOT NULL DEFAULT 0, -- samples stored
	lost_samples       INTEGER NOT NULL DEFAULT 0, -- samples dropped before storage (ring buffer full)
	truncated_stacks   INTEGER NOT NULL DEFAULT 0, -- samples whose stack hit the depth limit
	missing_user_stacks INTEGER NOT NULL DEFAULT 0,-- samples in user mode with no user stack at all
	unsymbolized_frames INTEGER NOT NULL DEFAULT 0 -- distinct frames left as module+offset
);
CREATE INDEX sessions_pid ON sessions (pid);

CREATE TABLE threads (
	session_id    INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	tid           INTEGER NOT NULL,
	name          TEXT NOT NULL,      -- comm of the thread at its latest sample
	first_seen_ns INTEGER NOT NULL,
	last_seen_ns  INTEGER NOT NULL,
	samples       INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, tid)
) WITHOUT ROWID;

-- File mappings of the target as read from /proc/PID/maps while it ran.
CREATE TABLE mappings (
	id            INTEGER PRIMARY KEY,
	session_id    INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	start_addr    INTEGER NOT NULL,
	end_addr      INTEGER NOT NULL,
	file_offset   INTEGER NOT NULL,
	path          TEXT NOT NULL,
	build_id      TEXT NOT NULL DEFAULT '' -- hex GNU build ID, '' if none
);
CREATE INDEX mappings_session ON mappings (session_id);

-- One row per distinct code address, shared by all sessions.
CREATE TABLE frames (
	id        INTEGER PRIMARY KEY,
	kind      TEXT NOT NULL CHECK (kind IN ('user', 'kernel')),
	module    TEXT NOT NULL,             -- file path, '[kernel.kallsyms]' or '[module]'
	build_id  TEXT NOT NULL DEFAULT '',
	rel_addr  INTEGER NOT NULL,          -- ELF virtual address in the module (what nm and addr2line use); kernel: absolute
	function  TEXT,                      -- demangled; NULL if unsymbolized
	file      TEXT,                      -- source file, NULL without DWARF line info
	line      INTEGER,
	UNIQUE (kind, module, build_id, rel_addr)
);

-- Call stacks, leaf first, kernel frames before user frames; shared by all sessions.
CREATE TABLE stacks (
	id        INTEGER PRIMARY KEY,
	frame_ids BLOB NOT NULL UNIQUE,      -- the frame ids, each a little-endian int64, leaf first
	depth     INTEGER NOT NULL,
	truncated INTEGER NOT NULL DEFAULT 0 -- 1 if the unwinder hit its depth limit
);
CREATE TABLE stack_frames (
	stack_id  INTEGER NOT NULL REFERENCES stacks (id),
	pos       INTEGER NOT NULL,          -- 0 = leaf (the sampled instruction)
	frame_id  INTEGER NOT NULL REFERENCES frames (id),
	PRIMARY KEY (stack_id, pos)
) WITHOUT ROWID;

-- CPU samples aggregated per session, per 1-second window, per thread, per stack.
CREATE TABLE samples (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,          -- start of the window
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	count      INTEGER NOT NULL,
	PRIMARY KEY (session_id, window_ns, tid, stack_id)
) WITHOUT ROWID;

-- Per-window counters, so losses can be placed in time.
CREATE TABLE windows (
	session_id          INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns           INTEGER NOT NULL,
	samples             INTEGER NOT NULL DEFAULT 0,
	lost_samples        INTEGER NOT NULL DEFAULT 0,
	truncated_stacks    INTEGER NOT NULL DEFAULT 0,
	missing_user_stacks INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (session_id, window_ns)
) WITHOUT ROWID;
