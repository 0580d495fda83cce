-- 0007-thread-exit.sql: when a thread of the target exited (sched_process_exit),
-- NULL while it lives or if it outlived the session.
ALTER TABLE threads ADD COLUMN exited_at_ns INTEGER;
