-- 0008-memory.sql: memory growth. The RSS time series of each process of a
-- session, and allocations sampled by bytes with their call stacks.

-- One reading of a process's memory, every memory interval (1 s by default),
-- from /proc/PID/status (VmRSS, RssAnon, RssFile, RssShmem, VmSwap) and
-- /proc/PID/smaps_rollup (Pss). All in bytes. A process that has exited has
-- no more rows: its series simply ends.
CREATE TABLE memory_samples (
	session_id  INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	time_ns     INTEGER NOT NULL,          -- CLOCK_REALTIME of the reading, ns since the epoch
	pid         INTEGER NOT NULL,
	rss_bytes   INTEGER NOT NULL,          -- resident set: anon + file + shmem
	pss_bytes   INTEGER,                   -- proportional set size; NULL if smaps_rollup was unreadable
	anon_bytes  INTEGER NOT NULL,          -- resident anonymous memory (heap, stacks)
	file_bytes  INTEGER NOT NULL,          -- resident file-backed pages
	shmem_bytes INTEGER NOT NULL,          -- resident shared memory (tmpfs, shm, shared anon)
	swap_bytes  INTEGER NOT NULL,          -- swapped-out anonymous memory
	PRIMARY KEY (session_id, pid, time_ns)
) WITHOUT ROWID;

-- Sampled allocations (events 'malloc'): one row per sampled block. A call
-- of size bytes is sampled with probability 1 - exp(-size / sample_bytes);
-- weight_bytes = size / that probability is its unbiased share of all the
-- bytes allocated. free_ns stays NULL while the block is live.
CREATE TABLE allocations (
	id           INTEGER PRIMARY KEY,
	session_id   INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pid          INTEGER NOT NULL,
	tid          INTEGER NOT NULL,
	stack_id     INTEGER NOT NULL REFERENCES stacks (id), -- the allocating call stack, leaf first
	func         TEXT NOT NULL,            -- malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, mmap
	size_bytes   INTEGER NOT NULL,         -- bytes requested
	weight_bytes REAL NOT NULL,            -- bytes this sample stands for
	address      INTEGER NOT NULL,
	alloc_ns     INTEGER NOT NULL,         -- CLOCK_REALTIME, ns since the epoch
	free_ns      INTEGER,                  -- when it was freed (free, realloc, munmap); NULL: live
	untracked    INTEGER NOT NULL DEFAULT 0 -- 1: its free could not be watched (map full): not counted live
);
CREATE INDEX allocations_session ON allocations (session_id, stack_id);

-- Totals of the allocation probes per session, counted for every call
-- (sampled or not). NULL columns: the session did not trace allocations.
ALTER TABLE sessions ADD COLUMN malloc_sample_bytes INTEGER; -- mean bytes between samples
ALTER TABLE sessions ADD COLUMN malloc_calls INTEGER;        -- allocating calls (malloc, calloc, ...)
ALTER TABLE sessions ADD COLUMN free_calls INTEGER;          -- free and munmap calls
ALTER TABLE sessions ADD COLUMN malloc_bytes INTEGER;        -- bytes requested by allocating calls
ALTER TABLE sessions ADD COLUMN malloc_sampled INTEGER;      -- calls sampled
ALTER TABLE sessions ADD COLUMN malloc_lost INTEGER;         -- samples lost (ring buffer full, no room to track)
ALTER TABLE sessions ADD COLUMN malloc_probes TEXT;          -- what was probed: 'libc.so.6 (9 functions), ...'
ALTER TABLE sessions ADD COLUMN memory_interval_ns INTEGER;  -- RSS series period; NULL: no series
ALTER TABLE sessions ADD COLUMN malloc_max_hits_per_s INTEGER; -- probes detached above this rate; 0: never
ALTER TABLE sessions ADD COLUMN malloc_stopped_ns INTEGER;   -- when they were (CLOCK_REALTIME); NULL: never
