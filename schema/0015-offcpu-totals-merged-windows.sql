-- 0015-offcpu-totals-merged-windows.sql: rollups of off-CPU time and of
-- the per-thread counters, and windows merged into coarser ones as they age.
--
-- offcpu_totals is to offcpu what sample_totals is to samples (0013): one
-- row per (session, thread, blocking stack, state), summed over every
-- window, kept equal to those sums by triggers in the transaction that
-- writes offcpu. thread_counter_totals is thread_counters summed per
-- (session, thread, counter, status). The offcpu, threads and analyze
-- reports read them.

CREATE TABLE thread_counter_totals (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	tid        INTEGER NOT NULL,
	counter    TEXT NOT NULL,
	status     TEXT NOT NULL,
	windows    INTEGER NOT NULL,          -- rows of thread_counters summed
	value      INTEGER,                   -- sum of their values; NULL unless status is 'ok'
	PRIMARY KEY (session_id, tid, counter, status)
) WITHOUT ROWID;

INSERT INTO thread_counter_totals (session_id, tid, counter, status, windows, value)
SELECT session_id, tid, counter, status, count(*), sum(value)
  FROM thread_counters GROUP BY session_id, tid, counter, status;

-- An upsert of thread_counters can change a row's status: the row leaves
-- its old (status) total and joins the new one. Merges of windows go
-- through these triggers too (few rows), so the totals always equal
-- SELECT ... GROUP BY session_id, tid, counter, status over the table.
CREATE TRIGGER thread_counter_totals_insert AFTER INSERT ON thread_counters BEGIN
	INSERT INTO thread_counter_totals (session_id, tid, counter, status, windows, value)
	VALUES (NEW.session_id, NEW.tid, NEW.counter, NEW.status, 1, NEW.value)
	ON CONFLICT DO UPDATE SET windows = windows + 1,
	    value = CASE WHEN excluded.value IS NULL THEN value
	                 ELSE coalesce(value, 0) + excluded.value END;
END;
CREATE TRIGGER thread_counter_totals_update AFTER UPDATE OF value, status ON thread_counters BEGIN
	UPDATE thread_counter_totals SET windows = windows - 1, value = value - coalesce(OLD.value, 0)
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND counter = OLD.counter
	   AND status = OLD.status;
	DELETE FROM thread_counter_totals
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND counter = OLD.counter
	   AND status = OLD.status AND windows = 0;
	INSERT INTO thread_counter_totals (session_id, tid, counter, status, windows, value)
	VALUES (NEW.session_id, NEW.tid, NEW.counter, NEW.status, 1, NEW.value)
	ON CONFLICT DO UPDATE SET windows = windows + 1,
	    value = CASE WHEN excluded.value IS NULL THEN value
	                 ELSE coalesce(value, 0) + excluded.value END;
END;
CREATE TRIGGER thread_counter_totals_delete AFTER DELETE ON thread_counters
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id) BEGIN
	UPDATE thread_counter_totals SET windows = windows - 1, value = value - coalesce(OLD.value, 0)
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND counter = OLD.counter
	   AND status = OLD.status;
	DELETE FROM thread_counter_totals
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND counter = OLD.counter
	   AND status = OLD.status AND windows = 0;
END;

-- While a transaction merges windows (below), it holds its session's row
-- here: the rows it deletes and puts back keep the same sums, so the
-- rollups' triggers skip them (they would make the merge eight times
-- slower). Empty outside that transaction.
CREATE TABLE window_merge (
	session_id INTEGER PRIMARY KEY
);

CREATE TABLE offcpu_totals (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,          -- first window with off-CPU time
	pid        INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	state      TEXT NOT NULL,
	count      INTEGER NOT NULL,          -- off-CPU intervals, over every window
	total_ns   INTEGER NOT NULL,          -- their summed length, ns
	PRIMARY KEY (session_id, tid, stack_id, state)
) WITHOUT ROWID;

INSERT INTO offcpu_totals (session_id, window_ns, pid, tid, stack_id, state, count, total_ns)
SELECT session_id, min(window_ns), min(pid), tid, stack_id, state, sum(count), sum(total_ns)
  FROM offcpu GROUP BY session_id, tid, stack_id, state;

CREATE TRIGGER offcpu_totals_insert AFTER INSERT ON offcpu
WHEN NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = NEW.session_id) BEGIN
	INSERT INTO offcpu_totals (session_id, window_ns, pid, tid, stack_id, state, count, total_ns)
	VALUES (NEW.session_id, NEW.window_ns, NEW.pid, NEW.tid, NEW.stack_id, NEW.state,
	        NEW.count, NEW.total_ns)
	ON CONFLICT DO UPDATE SET count = count + excluded.count,
	                          total_ns = total_ns + excluded.total_ns,
	                          window_ns = min(window_ns, excluded.window_ns);
END;
CREATE TRIGGER offcpu_totals_update AFTER UPDATE OF count, total_ns ON offcpu BEGIN
	UPDATE offcpu_totals SET count = count + NEW.count - OLD.count,
	                         total_ns = total_ns + NEW.total_ns - OLD.total_ns
	 WHERE session_id = NEW.session_id AND tid = NEW.tid AND stack_id = NEW.stack_id
	   AND state = NEW.state;
END;
CREATE TRIGGER offcpu_totals_delete AFTER DELETE ON offcpu
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id)
 AND NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = OLD.session_id) BEGIN
	UPDATE offcpu_totals SET count = count - OLD.count, total_ns = total_ns - OLD.total_ns
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND stack_id = OLD.stack_id
	   AND state = OLD.state;
END;

-- The rollups of 0013 skip merges too.
DROP TRIGGER sample_totals_insert;
CREATE TRIGGER sample_totals_insert AFTER INSERT ON samples
WHEN NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = NEW.session_id) BEGIN
	INSERT INTO sample_totals (session_id, window_ns, tid, stack_id, count)
	VALUES (NEW.session_id, NEW.window_ns, NEW.tid, NEW.stack_id, NEW.count)
	ON CONFLICT DO UPDATE SET count = count + excluded.count,
	                          window_ns = min(window_ns, excluded.window_ns);
END;
DROP TRIGGER sample_totals_delete;
CREATE TRIGGER sample_totals_delete AFTER DELETE ON samples
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id)
 AND NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = OLD.session_id) BEGIN
	UPDATE sample_totals SET count = count - OLD.count
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND stack_id = OLD.stack_id;
END;

DROP TRIGGER event_sample_totals_insert;
CREATE TRIGGER event_sample_totals_insert AFTER INSERT ON event_samples
WHEN NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = NEW.session_id) BEGIN
	INSERT INTO event_sample_totals (session_id, window_ns, tid, stack_id, count)
	VALUES (NEW.session_id, NEW.window_ns, NEW.tid, NEW.stack_id, NEW.count)
	ON CONFLICT DO UPDATE SET count = count + excluded.count,
	                          window_ns = min(window_ns, excluded.window_ns);
END;
DROP TRIGGER event_sample_totals_delete;
CREATE TRIGGER event_sample_totals_delete AFTER DELETE ON event_samples
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id)
 AND NOT EXISTS (SELECT 1 FROM window_merge WHERE session_id = OLD.session_id) BEGIN
	UPDATE event_sample_totals SET count = count - OLD.count
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND stack_id = OLD.stack_id;
END;

-- Windows older than merge_windows_after_s (profd.conf) are merged into
-- windows of merged_window_s: the rows of samples, event_samples, offcpu,
-- thread_counters and windows whose window_ns is below merged_until_ns
-- are each the sum of a merged window, which starts at started_at_ns + k *
-- merged_window_ns. Rows at or above merged_until_ns are 1 s windows.
-- NULL: nothing merged yet.
ALTER TABLE sessions ADD COLUMN merged_until_ns INTEGER;
ALTER TABLE sessions ADD COLUMN merged_window_ns INTEGER;
