-- 0013-sample-totals.sql: per-session rollups of the samples, so that a
-- report over a whole session reads one row per (thread, call stack)
-- instead of one per (1 s window, thread, call stack): a 10-hour session
-- of 64 threads has millions of the latter and thousands of the former.
--
-- sample_totals and event_sample_totals have the columns of samples and
-- event_samples; their window_ns is the first window the (thread, stack)
-- had samples in, and count the sum over every window. Triggers keep them
-- equal to those sums in the transaction that writes the samples, so they
-- hold after a restart or a crash mid-flush as the samples do. Reports of
-- a time range (--from/--to) and per-window exports read the windows.

CREATE TABLE sample_totals (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,          -- first window with samples
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	count      INTEGER NOT NULL,          -- samples, over every window
	PRIMARY KEY (session_id, tid, stack_id)
) WITHOUT ROWID;

CREATE TABLE event_sample_totals (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	window_ns  INTEGER NOT NULL,
	tid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	count      INTEGER NOT NULL,
	PRIMARY KEY (session_id, tid, stack_id)
) WITHOUT ROWID;

-- The sessions stored before this version.
INSERT INTO sample_totals (session_id, window_ns, tid, stack_id, count)
SELECT session_id, min(window_ns), tid, stack_id, sum(count)
  FROM samples GROUP BY session_id, tid, stack_id;
INSERT INTO event_sample_totals (session_id, window_ns, tid, stack_id, count)
SELECT session_id, min(window_ns), tid, stack_id, sum(count)
  FROM event_samples GROUP BY session_id, tid, stack_id;

-- Every write of samples, as the store makes it: an insert, or an upsert
-- that adds to a row's count. A deleted row (a session deleted with its
-- rows, or windows merged) is taken off while its session exists.
CREATE TRIGGER sample_totals_insert AFTER INSERT ON samples BEGIN
	INSERT INTO sample_totals (session_id, window_ns, tid, stack_id, count)
	VALUES (NEW.session_id, NEW.window_ns, NEW.tid, NEW.stack_id, NEW.count)
	ON CONFLICT DO UPDATE SET count = count + excluded.count,
	                          window_ns = min(window_ns, excluded.window_ns);
END;
CREATE TRIGGER sample_totals_update AFTER UPDATE OF count ON samples BEGIN
	UPDATE sample_totals SET count = count + NEW.count - OLD.count
	 WHERE session_id = NEW.session_id AND tid = NEW.tid AND stack_id = NEW.stack_id;
END;
CREATE TRIGGER sample_totals_delete AFTER DELETE ON samples
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id) BEGIN
	UPDATE sample_totals SET count = count - OLD.count
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND stack_id = OLD.stack_id;
END;

CREATE TRIGGER event_sample_totals_insert AFTER INSERT ON event_samples BEGIN
	INSERT INTO event_sample_totals (session_id, window_ns, tid, stack_id, count)
	VALUES (NEW.session_id, NEW.window_ns, NEW.tid, NEW.stack_id, NEW.count)
	ON CONFLICT DO UPDATE SET count = count + excluded.count,
	                          window_ns = min(window_ns, excluded.window_ns);
END;
CREATE TRIGGER event_sample_totals_update AFTER UPDATE OF count ON event_samples BEGIN
	UPDATE event_sample_totals SET count = count + NEW.count - OLD.count
	 WHERE session_id = NEW.session_id AND tid = NEW.tid AND stack_id = NEW.stack_id;
END;
CREATE TRIGGER event_sample_totals_delete AFTER DELETE ON event_samples
WHEN EXISTS (SELECT 1 FROM sessions WHERE id = OLD.session_id) BEGIN
	UPDATE event_sample_totals SET count = count - OLD.count
	 WHERE session_id = OLD.session_id AND tid = OLD.tid AND stack_id = OLD.stack_id;
END;

-- The documented views of 0011 over whole sessions read the rollups.
DROP VIEW hot_functions;
CREATE VIEW hot_functions AS
WITH per_stack(session_id, stack_id, n) AS (
	SELECT session_id, stack_id, sum(count) FROM sample_totals GROUP BY session_id, stack_id),
per_session(session_id, total) AS (
	SELECT session_id, sum(count) FROM sample_totals GROUP BY session_id),
stack_funcs(stack_id, function, module, leaf) AS (
	SELECT sf.stack_id, fn.function, fn.module, max(sf.pos = 0)
	  FROM stack_frames sf JOIN frame_names fn ON fn.frame_id = sf.frame_id
	 WHERE sf.stack_id IN (SELECT stack_id FROM per_stack)
	 GROUP BY sf.stack_id, fn.function, fn.module)
SELECT ps.session_id, sf.function, sf.module,
       sum(CASE WHEN sf.leaf THEN ps.n ELSE 0 END) AS self_samples,
       sum(ps.n) AS total_samples,
       round(100.0 * sum(CASE WHEN sf.leaf THEN ps.n ELSE 0 END) / pt.total, 1) AS self_pct,
       round(100.0 * sum(ps.n) / pt.total, 1) AS total_pct
  FROM per_stack ps JOIN stack_funcs sf ON sf.stack_id = ps.stack_id
  JOIN per_session pt ON pt.session_id = ps.session_id
 GROUP BY ps.session_id, sf.function, sf.module;

DROP VIEW hot_paths;
CREATE VIEW hot_paths AS
WITH per_stack(session_id, stack_id, n) AS (
	SELECT session_id, stack_id, sum(count) FROM sample_totals GROUP BY session_id, stack_id)
SELECT ps.session_id, ps.stack_id, ps.n AS samples,
       round(100.0 * ps.n / (SELECT sum(count) FROM sample_totals s WHERE s.session_id = ps.session_id), 1) AS pct,
       st.depth, st.truncated,
       (SELECT group_concat(function, ';') FROM
          (SELECT fn.function FROM stack_frames sf JOIN frame_names fn ON fn.frame_id = sf.frame_id
            WHERE sf.stack_id = ps.stack_id ORDER BY sf.pos DESC)) AS path
  FROM per_stack ps JOIN stacks st ON st.id = ps.stack_id;

DROP VIEW thread_imbalance;
CREATE VIEW thread_imbalance AS
WITH per_thread(session_id, tid, n) AS (
	SELECT session_id, tid, sum(count) FROM sample_totals GROUP BY session_id, tid),
per_session(session_id, total, mean) AS (
	SELECT session_id, sum(n), avg(n) FROM per_thread GROUP BY session_id)
SELECT pt.session_id, pt.tid, t.name, pt.n AS samples,
       round(100.0 * pt.n / ps.total, 1) AS share_pct,
       round(pt.n / ps.mean, 2) AS over_mean
  FROM per_thread pt JOIN per_session ps ON ps.session_id = pt.session_id
  LEFT JOIN threads t ON t.session_id = pt.session_id AND t.tid = pt.tid;
