-- 0019-offcpu-table-walk.sql: the off-CPU intervals of sessions with unwind
-- 'tables' (or 'auto' once it walks): how many had their user stack walked
-- whole in BPF from the CFI tables, and how many fell back to a
-- frame-pointer walk and a stack copy unwound by profd, per reason the walk
-- stopped (a JSON object as table_fallbacks, schema 17). Written whole at
-- each flush; 0/NULL for the other modes.
ALTER TABLE sessions ADD COLUMN offcpu_table_walked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN offcpu_table_fallbacks TEXT;
