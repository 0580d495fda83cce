-- 0005-threads.sql: off-CPU time and per-thread counters, per window.

-- Time threads spent off-CPU, per window, thread, blocking stack and state.
CREATE TABLE offcpu (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,          -- window of the moment the thread ran again
	pid        INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id), -- the stack it blocked in
	-- sleeping: TASK_INTERRUPTIBLE (futex, sleep, poll); io: TASK_UNINTERRUPTIBLE (D state);
	-- runnable: waiting for a CPU (preempted, or woken and not yet running); other
	state      TEXT NOT NULL CHECK (state IN ('sleeping', 'io', 'runnable', 'other')),
	count      INTEGER NOT NULL,          -- off-CPU intervals
	total_ns   INTEGER NOT NULL,          -- their summed length
	PRIMARY KEY (session_id, window_ns, tid, stack_id, state)
) WITHOUT ROWID;

-- Counting-mode perf counters per thread and window. value is NULL when the
-- counter is not 'ok' for that thread: unsupported is never stored as 0.
CREATE TABLE thread_counters (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	counter    TEXT NOT NULL,             -- 'task-clock' (ns), 'context-switches', 'voluntary-context-switches', ...
	value      INTEGER,                   -- increase during the window
	status     TEXT NOT NULL CHECK (status IN ('ok', 'unsupported', 'denied')),
	PRIMARY KEY (session_id, window_ns, tid, counter)
) WITHOUT ROWID;

-- What the session asked for and what the machine gave: one row per counter.
CREATE TABLE session_counters (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	counter    TEXT NOT NULL,
	status     TEXT NOT NULL CHECK (status IN ('ok', 'unsupported', 'denied')),
	PRIMARY KEY (session_id, counter)
) WITHOUT ROWID;

-- Off-CPU intervals lost (ring buffer full), like lost_samples for CPU samples.
ALTER TABLE sessions ADD COLUMN offcpu_lost INTEGER NOT NULL DEFAULT 0;
