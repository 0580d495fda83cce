-- 0017-table-walk.sql: sessions with unwind 'tables' (the user stack walked
-- in BPF from compiled CFI tables): how many CPU samples the walk took
-- whole, and how many fell back to the stack copy unwound by profd, per
-- reason the walk stopped (a JSON object, reason -> samples: no_process,
-- no_mapping, no_table, no_cfi, expr, signal, read_fault, bp_lost,
-- bad_frame). Written whole at each flush; NULL/0 for the other modes.
ALTER TABLE sessions ADD COLUMN table_walked INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN table_fallbacks TEXT;
