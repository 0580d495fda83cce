-- 0012-python.sql: Python-aware stacks (profctl attach --python auto|off).
-- Python frames themselves are ordinary rows of `frames` (kind 'user',
-- module and file = the .py path, function = the qualified name).

-- 'off' (not asked for), 'ok' (frames walked), 'not_found' (the target runs
-- no CPython 3.11+), 'unsupported' (a CPython version this build has no
-- struct offsets for); NULL for sessions from before this column.
ALTER TABLE sessions ADD COLUMN python TEXT;
-- The interpreter version seen in the target ('3.11.7'), NULL if none.
ALTER TABLE sessions ADD COLUMN python_version TEXT;
-- CPU samples whose stack has Python frames merged into it.
ALTER TABLE sessions ADD COLUMN python_samples INTEGER NOT NULL DEFAULT 0;
-- CPU samples with Python frames that did not match the native stack (as
-- many interpreter calls as entry frames): stored with native frames only.
ALTER TABLE sessions ADD COLUMN python_unmerged INTEGER NOT NULL DEFAULT 0;
