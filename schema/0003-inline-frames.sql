-- 0003-inline-frames.sql: inlined calls as frames of their own.
--
-- One code address can now stand for several frames: the functions inlined
-- at it, innermost first, then the function the symbol table names. They
-- share (kind, module, build_id, rel_addr) and differ in inline_depth, so
-- the unique key changes, and SQLite can only change a table's constraints
-- by rebuilding it (sqlite.org/lang_altertable.html, "other kinds of table
-- schema changes"). profd runs this with foreign keys off and checks them
-- after.
CREATE TABLE frames_new (
	id           INTEGER PRIMARY KEY,
	kind         TEXT NOT NULL CHECK (kind IN ('user', 'kernel')),
	module       TEXT NOT NULL,
	build_id     TEXT NOT NULL DEFAULT '',
	rel_addr     INTEGER NOT NULL,
	-- 0: the function the symbol table names at rel_addr; 1, 2, ...: the
	-- functions inlined into it, outermost first (the deepest is the leaf).
	inline_depth INTEGER NOT NULL DEFAULT 0,
	function     TEXT,
	file         TEXT,
	line         INTEGER,
	UNIQUE (kind, module, build_id, rel_addr, inline_depth)
);
INSERT INTO frames_new (id, kind, module, build_id, rel_addr, function, file, line)
	SELECT id, kind, module, build_id, rel_addr, function, file, line FROM frames;
DROP TABLE frames;
ALTER TABLE frames_new RENAME TO frames;
