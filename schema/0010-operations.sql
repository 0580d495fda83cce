-- 0010-operations.sql: running profd unattended. A free-text label given at
-- attach (profctl snapshot --label, e.g. the timer that took it); NULL if none.
ALTER TABLE sessions ADD COLUMN label TEXT;
-- Retention deletes the oldest ended sessions first.
CREATE INDEX sessions_ended_at ON sessions (ended_at_ns) WHERE state = 'ended';
-- Samples dropped because the session reached a limit of profd.conf
-- (max_stacks_per_session distinct call stacks, max_threads_per_session threads).
ALTER TABLE sessions ADD COLUMN limit_dropped_samples INTEGER NOT NULL DEFAULT 0;
