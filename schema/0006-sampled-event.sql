-- 0006-sampled-event.sql: a second event sampled with call stacks beside the
-- CPU samples (page-faults, cache-misses, ...), for `top --event NAME`.

-- Samples of the session's second event, shaped as `samples`.
CREATE TABLE event_samples (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	count      INTEGER NOT NULL,
	PRIMARY KEY (session_id, window_ns, tid, stack_id)
) WITHOUT ROWID;

-- The second event asked for (NULL: none), and whether the machine could
-- sample it: 'ok' or 'unsupported' (then event_samples has no rows for it).
ALTER TABLE sessions ADD COLUMN sampled_event TEXT;
ALTER TABLE sessions ADD COLUMN sampled_event_status TEXT;
