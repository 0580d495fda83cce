-- 0011-views.sql: documented views for SQL over the profiles (profctl sql,
-- or sqlite3 -readonly on the database). docs/schema.md describes them.
-- Views hold no data, so they cost nothing until read. They name tables
-- unqualified, so that profctl sql can give a user who is not an admin the
-- same views over only that user's sessions.

-- A frame's display name: the function, or "<module basename>+0x<hex address>"
-- when unsymbolized (as profctl top names it).
CREATE VIEW frame_names AS
SELECT f.id AS frame_id,
       coalesce(f.function,
                replace(f.module, rtrim(f.module, replace(f.module, '/', '')), '')
                || '+0x' || printf('%x', f.rel_addr)) AS function,
       f.module, f.file, f.line, f.kind, f.inline_depth > 0 AS inlined
  FROM frames f;

-- Per session and function (function, module): self samples (the function
-- was the leaf: running) and total samples (on the stack at least once),
-- of the CPU samples.
CREATE VIEW hot_functions AS
WITH per_stack(session_id, stack_id, n) AS (
	SELECT session_id, stack_id, sum(count) FROM samples GROUP BY session_id, stack_id),
stack_funcs(stack_id, function, module, leaf) AS (
	SELECT sf.stack_id, fn.function, fn.module, max(sf.pos = 0)
	  FROM stack_frames sf JOIN frame_names fn ON fn.frame_id = sf.frame_id
	 WHERE sf.stack_id IN (SELECT stack_id FROM per_stack)
	 GROUP BY sf.stack_id, fn.function, fn.module)
SELECT ps.session_id, sf.function, sf.module,
       sum(CASE WHEN sf.leaf THEN ps.n ELSE 0 END) AS self_samples,
       sum(ps.n) AS total_samples,
       round(100.0 * sum(CASE WHEN sf.leaf THEN ps.n ELSE 0 END)
             / (SELECT sum(count) FROM samples s WHERE s.session_id = ps.session_id), 1) AS self_pct,
       round(100.0 * sum(ps.n)
             / (SELECT sum(count) FROM samples s WHERE s.session_id = ps.session_id), 1) AS total_pct
  FROM per_stack ps JOIN stack_funcs sf ON sf.stack_id = ps.stack_id
 GROUP BY ps.session_id, sf.function, sf.module;

-- Per session and call stack: its CPU samples and its frames as one string,
-- outermost caller first, joined by ';' (the folded-stacks form).
CREATE VIEW hot_paths AS
WITH per_stack(session_id, stack_id, n) AS (
	SELECT session_id, stack_id, sum(count) FROM samples GROUP BY session_id, stack_id)
SELECT ps.session_id, ps.stack_id, ps.n AS samples,
       round(100.0 * ps.n / (SELECT sum(count) FROM samples s WHERE s.session_id = ps.session_id), 1) AS pct,
       st.depth, st.truncated,
       (SELECT group_concat(function, ';') FROM
          (SELECT fn.function FROM stack_frames sf JOIN frame_names fn ON fn.frame_id = sf.frame_id
            WHERE sf.stack_id = ps.stack_id ORDER BY sf.pos DESC)) AS path
  FROM per_stack ps JOIN stacks st ON st.id = ps.stack_id;

-- Per session and thread: CPU samples, share of the session's samples, and
-- the ratio to the mean of the threads with samples (1.0 = even load).
CREATE VIEW thread_imbalance AS
WITH per_thread(session_id, tid, n) AS (
	SELECT session_id, tid, sum(count) FROM samples GROUP BY session_id, tid),
per_session(session_id, total, mean) AS (
	SELECT session_id, sum(n), avg(n) FROM per_thread GROUP BY session_id)
SELECT pt.session_id, pt.tid, t.name, pt.n AS samples,
       round(100.0 * pt.n / ps.total, 1) AS share_pct,
       round(pt.n / ps.mean, 2) AS over_mean
  FROM per_thread pt JOIN per_session ps ON ps.session_id = pt.session_id
  LEFT JOIN threads t ON t.session_id = pt.session_id AND t.tid = pt.tid;
