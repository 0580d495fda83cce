-- 0002-dwarf-unwinding.sql: what DWARF unwinding adds.

-- 1 if the stack's outermost user frame is a thread's root (_start,
-- __libc_start_main, __libc_start_call_main, main, start_thread, clone,
-- clone3): the stack is complete. A property of the frames, so shared like them.
ALTER TABLE stacks ADD COLUMN reached_root INTEGER NOT NULL DEFAULT 0;

-- Bytes of user stack copied per sample for DWARF unwinding (0 with --unwind fp).
ALTER TABLE sessions ADD COLUMN stack_bytes INTEGER NOT NULL DEFAULT 0;
-- Samples dropped because the unwinding thread could not keep up (also in lost_samples).
ALTER TABLE sessions ADD COLUMN unwind_dropped INTEGER NOT NULL DEFAULT 0;
-- Distinct frames (code addresses) the session symbolized: with
-- unsymbolized_frames, the share of frames left unsymbolized.
ALTER TABLE sessions ADD COLUMN frames INTEGER NOT NULL DEFAULT 0;
