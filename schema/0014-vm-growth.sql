-- 0014-vm-growth.sql: memory growth explained. Each RSS reading split by
-- mapping kind, and the call stacks that grow or shrink the address space.

-- Resident bytes by mapping kind, summed from /proc/PID/smaps (Rss of each
-- mapping). NULL: smaps was not read at this reading (profd reads it less
-- often than status when it is dear: at most 1% of a core per process).
ALTER TABLE memory_samples ADD COLUMN map_heap_bytes INTEGER;  -- [heap]: the brk heap
ALTER TABLE memory_samples ADD COLUMN map_anon_bytes INTEGER;  -- anonymous mappings: malloc arenas,
                                                               -- large blocks, interpreter arenas
ALTER TABLE memory_samples ADD COLUMN map_stack_bytes INTEGER; -- [stack] of the main thread
ALTER TABLE memory_samples ADD COLUMN map_shmem_bytes INTEGER; -- /dev/shm, memfd, SysV shm, shared anon
ALTER TABLE memory_samples ADD COLUMN map_file_bytes INTEGER;  -- other file mappings (code, data)
ALTER TABLE memory_samples ADD COLUMN map_other_bytes INTEGER; -- [vdso], [vvar] and the rest

-- Address-space changes with their user call stacks (Python frames
-- merged), summed per session, process, stack, change and mapping kind:
-- brk (heap), mmap, munmap and mremap (anon, shmem or file), and sampled
-- write faults to pages not present (first touches: 'touch'). bytes is
-- signed: what the change added to the address space (munmap and brk
-- shrinks are negative; an munmap of a mapping made in the session counts
-- against the stack that mapped it); for faults, the bytes the samples
-- stand for. events counts changes recorded with a stack.
CREATE TABLE vm_changes (
	session_id INTEGER NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	pid        INTEGER NOT NULL,
	stack_id   INTEGER NOT NULL REFERENCES stacks (id),
	change     TEXT NOT NULL,    -- brk, mmap, munmap, mremap, fault
	mapping    TEXT NOT NULL,    -- heap, anon, shmem, file, touch
	events     INTEGER NOT NULL,
	bytes      INTEGER NOT NULL,
	PRIMARY KEY (session_id, pid, stack_id, change, mapping)
) WITHOUT ROWID;

-- Totals of the address-space probes; NULL: the session did not follow them.
ALTER TABLE sessions ADD COLUMN vm_events INTEGER;       -- changes seen (faults: write faults to
                                                         -- absent pages), with a stack or not
ALTER TABLE sessions ADD COLUMN vm_unsent INTEGER;       -- changes seen without their stack (rate cap)
ALTER TABLE sessions ADD COLUMN vm_fault_period INTEGER; -- one write fault in this many sampled
