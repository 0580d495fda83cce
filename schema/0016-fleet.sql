-- 0016-fleet.sql: how far each session has been shipped to each fleet sink
-- (docs/fleet.md). The shipping threads of profd write their own rows only.

-- One row per session and sink once shipping it started. A session's
-- windows before shipped_until_ns are in the sink; done = 1 once an ended
-- session is there whole. chunks and rows count what was sent, failures the
-- attempts that failed (last_error: the latest one's message, NULL after a
-- success). pending_until_ns: the end of the chunk being sent (NULL: none),
-- written before its first INSERT, so that a retry after a lost answer
-- sends the same chunk, which ClickHouse then recognizes as there.
CREATE TABLE fleet_cursors (
	session_id       INTEGER REFERENCES sessions (id) ON DELETE CASCADE,
	sink             TEXT NOT NULL CHECK (sink IN ('clickhouse', 'pyroscope')),
	shipped_until_ns INTEGER NOT NULL,
	chunks           INTEGER NOT NULL DEFAULT 0,
	rows             INTEGER NOT NULL DEFAULT 0,
	failures         INTEGER NOT NULL DEFAULT 0,
	last_error       TEXT,
	last_attempt_ns  INTEGER,
	done             INTEGER NOT NULL DEFAULT 0,
	pending_until_ns INTEGER,
	PRIMARY KEY (session_id, sink)
) WITHOUT ROWID;
