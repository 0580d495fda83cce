-- 0020-stack-frames-view.sql: stack_frames becomes a view over a JSON copy
-- of each stack's frame ids, no longer a table of one row per frame.
--
-- A new call stack was one stacks row plus one stack_frames row per frame
-- (33 on average on a deep C++ job, more under Python), each an insert into
-- a WITHOUT ROWID b-tree: on a job whose stacks keep changing (recursion,
-- sorting, Python), writing stack_frames was 43% of profd's CPU. The same
-- frames already stand in stacks.frame_ids, a blob plain SQL cannot take
-- apart; frame_ids_json holds them as a JSON array of integers, leaf first
-- ("[12,7,3]"), which json_each() (built into SQLite since 3.38,
-- sqlite.org/json1.html#jeach) turns into rows. The view keeps the columns,
-- the meaning and the order of the old table, so queries over stack_frames
-- read the same rows; a lookup by stack_id is a search of stacks by its
-- primary key, then one short array.
--
-- Rows another program inserts into stacks without frame_ids_json show no
-- frames in stack_frames; profd writes both.
ALTER TABLE stacks ADD COLUMN frame_ids_json TEXT;
UPDATE stacks SET frame_ids_json =
	(SELECT json_group_array(frame_id)
	   FROM (SELECT frame_id FROM stack_frames sf WHERE sf.stack_id = stacks.id ORDER BY sf.pos));
DROP TABLE stack_frames;
CREATE VIEW stack_frames AS
SELECT s.id AS stack_id, j.key AS pos, j.value AS frame_id
  FROM stacks s, json_each(s.frame_ids_json) j;
