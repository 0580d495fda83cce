-- 0004-process-tree.sql: sessions that follow the processes their target forks.

-- 1 if processes forked by the target after the attach join the session.
ALTER TABLE sessions ADD COLUMN follow_children INTEGER NOT NULL DEFAULT 0;
-- The process of each thread (the target's PID, or a child's).
ALTER TABLE threads ADD COLUMN pid INTEGER;
-- The process whose address space a mapping belongs to.
ALTER TABLE mappings ADD COLUMN pid INTEGER;
UPDATE threads SET pid = (SELECT s.pid FROM sessions s WHERE s.id = threads.session_id) WHERE pid IS NULL;
UPDATE mappings SET pid = (SELECT s.pid FROM sessions s WHERE s.id = mappings.session_id) WHERE pid IS NULL;
