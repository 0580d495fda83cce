-- 0018-stack-hash.sql: stacks are found by a 64-bit hash of frame_ids, not
-- by a unique index on the blob itself.
--
-- A new call stack was an insert into an index keyed by its whole frame_ids
-- blob (8 bytes a frame: ~260 bytes for a 33-frame stack), at a random place
-- in it, and a search of that index before it: the pages a flush dirtied
-- were most of profd's cost per sample on a job whose stacks keep changing
-- (deep recursion, Python). An index of 8-byte hashes is a tenth the size.
-- profd keeps frame_ids unique itself: it looks a stack up by (hash,
-- frame_ids) before it inserts one (store.c, store__stack_id()).
--
-- hash is FNV-1a 64 over the frame_ids bytes, as a signed 64-bit integer
-- (common/hashmap.h, hash64()). Plain SQL cannot compute it, so the rows
-- copied here get NULL, and profd fills every NULL hash each time it opens
-- the database (store.c, fill_stack_hashes()). Dropping the
-- UNIQUE constraint takes a rebuild (sqlite.org/lang_altertable.html,
-- "other kinds of table schema changes"); profd runs this with foreign keys
-- off and checks them after. The views that read stacks (hot_paths) name
-- it, not stacks_new: legacy_alter_table keeps RENAME from re-checking them
-- while no table is called stacks (sqlite.org/pragma.html#pragma_legacy_alter_table).
CREATE TABLE stacks_new (
	id           INTEGER PRIMARY KEY,
	frame_ids    BLOB NOT NULL,
	depth        INTEGER NOT NULL,
	truncated    INTEGER NOT NULL DEFAULT 0,
	reached_root INTEGER NOT NULL DEFAULT 0,
	hash         INTEGER
);
INSERT INTO stacks_new (id, frame_ids, depth, truncated, reached_root)
	SELECT id, frame_ids, depth, truncated, reached_root FROM stacks;
DROP TABLE stacks;
PRAGMA legacy_alter_table = ON;
ALTER TABLE stacks_new RENAME TO stacks;
PRAGMA legacy_alter_table = OFF;
CREATE INDEX stacks_hash ON stacks (hash);
