/*
 * profile.h - types shared by profile.bpf.c (kernel side) and daemon/collect/sampler.c.
 * Fixed-width types only: the layout must be the same on both sides.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Frames per stack (the kernel's default perf_event_max_stack is 127). */
#define PROFILE_MAX_FRAMES 127
/* Sessions that can sample at the same time (index = session slot). */
#define PROFILE_MAX_SLOTS 64
#define PROFILE_EVENT_THREAD_EXIT 2
/* A change of a target's address space (struct vm_change), with the user stack that made it. */
#define PROFILE_EVENT_VM 3

/* A perf event's BPF cookie: the slot in the low 16 bits, the event index above. */
#define PROFILE_COOKIE(slot, event) ((__u64)(slot) | ((__u64)(event) << 16))

/* Largest user stack slice copied per sample for DWARF unwinding (bytes). */
#define PROFILE_MAX_STACK_BYTES 32768
/* x86-64 DWARF registers 0..16 (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip). */
#define PROFILE_NREGS 17

/* Python frames walked per sample (innermost first); deeper ones are cut. */
#define PROFILE_MAX_PY_FRAMES 64
/* Thread states scanned for the sampled thread when it does not hold the GIL. */
#define PROFILE_PY_THREAD_SCAN 128

/* A python_config offset that this interpreter version does not have. */
#define PY_NO_OFFSET 0xffffffffu

/*
 * Where the CPython interpreter of a slot's target keeps its frames: the
 * address of _PyRuntime in the target, and the byte offsets of the fields
 * walked from it, taken from the interpreter version's own headers at build
 * time (daemon/symbols/python-offsets.c). runtime_addr 0: no Python walk.
 */
struct python_config {
	__u64 runtime_addr;
	__u32 runtime_tstate_current; /* _PyRuntimeState.gilstate.tstate_current (3.11; else none) */
	__u32 runtime_interp_main;    /* _PyRuntimeState.interpreters.main */
	__u32 interp_threads_head;    /* PyInterpreterState.threads.head */
	__u32 tstate_next;            /* PyThreadState.next */
	__u32 tstate_native_thread_id;/* PyThreadState.native_thread_id (the kernel tid) */
	__u32 tstate_cframe;          /* PyThreadState.cframe (3.11, 3.12; else none) */
	__u32 current_frame;          /* _PyCFrame.current_frame, or PyThreadState.current_frame
				       * without cframe (3.13) */
	__u32 frame_code;             /* _PyInterpreterFrame.f_code (3.13: f_executable) */
	__u32 frame_previous;         /* _PyInterpreterFrame.previous */
	__u32 frame_prev_instr;       /* _PyInterpreterFrame.prev_instr (3.13: instr_ptr) */
	__u32 frame_is_entry;         /* _PyInterpreterFrame.is_entry, a bool (3.11; else none) */
	__u32 frame_owner;            /* _PyInterpreterFrame.owner, a char (3.12+; else none) */
	__u32 owner_cstack;           /* FRAME_OWNED_BY_CSTACK: the entry frame of an
				       * interpreter call (3.12+), not a Python frame */
	/* A code object's fields, also read by user space from its head; the
	 * last three are its identity, whose tag (py_code_tag()) each frame
	 * carries, read in one PY_CODE_ID_BYTES read from code_filename. */
	__u32 code_type;              /* PyObject.ob_type */
	__u32 code_firstlineno;       /* PyCodeObject.co_firstlineno (int) */
	__u32 code_filename;          /* PyCodeObject.co_filename (str): the lowest of the three */
	__u32 code_qualname;          /* PyCodeObject.co_qualname (str) */
	__u32 code_linetable;         /* PyCodeObject.co_linetable (bytes) */
};

/* Bytes read from code_filename for the tag (3.11 to 3.13: co_filename,
 * co_name, co_qualname, co_linetable, one after the other). A field beyond
 * them counts as 0 on both sides. */
#define PY_CODE_ID_BYTES 32

/* Bytes the BPF walk reads from the start of each _PyInterpreterFrame, in one
 * read: every field it uses lies in them (3.11 to 3.13; python-offsets.c
 * fails the build for a CPython where one does not). */
#define PY_FRAME_HEAD_BYTES 72

/* Per-slot settings, written by user space before the slot's events are enabled. */
struct slot_config {
	__u32 copy_stack_bytes; /* 0: frame pointers only; else copy regs + up to this many stack bytes */
	__u32 fp_stack;         /* 1: also walk frame pointers with bpf_get_stack() */
	__u32 follow_children;  /* 1: processes a target forks become targets of the slot */
	__u32 vm_fault_period;  /* 0: no address-space events; else they are on, and one
				 * write fault to a page not present in this many is sampled */
	__u32 cfi_walk;         /* 1: walk the user stack with the CFI tables (cfi_walk.bpf.h);
				 * a walk that stops before the root falls back to the above */
	__u32 pad;
	struct python_config python;
};

/*
 * One Python frame as sampled: the code object it runs, with PY_FRAME_ENTRY
 * or'ed into bit 0 (code objects are 8-byte aligned) when the frame is the
 * first one of a _PyEval_EvalFrameDefault call; where the last instruction
 * it started (prev_instr) is, from which user space gets the line; and the
 * tag of the code object's identity fields as the walk read them, so that
 * user space knows a code object it has seen at that address without
 * reading the target's memory again.
 */
struct py_frame {
	__u64 code;
	__u32 instr_off; /* prev_instr - code in bytes; PY_NO_INSTR if unknown or beyond 4 GiB */
	__u32 tag;       /* py_code_tag() of the code object; 0: could not be read */
};
#define PY_FRAME_ENTRY 1ull
#define PY_NO_INSTR 0xffffffffu

/*
 * py_code_tag() - a 32-bit tag of a code object's identity, never 0: the
 * addresses of its file name, qualified name and line table. A code object
 * freed and another made at the same address differs in at least one of
 * them (a new object has a new line table), unless it is the same code
 * made again (same names, same table: same frames); two different ones
 * get the same tag with odds of 1 in 2^32. Computed by the BPF walk and by
 * user space (daemon/symbols/python.c) alike: the same function on both
 * sides.
 */
static inline __u32 py_code_tag(__u64 filename, __u64 qualname, __u64 linetable)
{
	const __u64 k = 0x9e3779b97f4a7c15ull;
	__u64 h = filename * k;
	__u32 t;

	h = (h ^ (h >> 29) ^ qualname) * k;
	h = (h ^ (h >> 29) ^ linetable) * k;
	t = (__u32)(h >> 32);
	return t ? t : 1;
}

/* The 8-byte field @at bytes into @id (PY_CODE_ID_BYTES bytes); 0 if beyond them. */
static inline __attribute__((always_inline)) __u64 py_code_id_field(const __u8 *id, __u32 at)
{
	__u64 v = 0;

	if (at <= PY_CODE_ID_BYTES - sizeof(v))
		__builtin_memcpy(&v, id + at, sizeof(v));
	return v;
}

/*
 * py_code_tag_of() - py_code_tag() of the code object whose
 * PY_CODE_ID_BYTES from pc->code_filename on are @id: what the BPF walk
 * reads with one bpf_probe_read_user() and user space finds in the head it
 * read (the same bytes, the same tag).
 */
static inline __attribute__((always_inline)) __u32
py_code_tag_of(const __u8 *id, const struct python_config *pc)
{
	return py_code_tag(py_code_id_field(id, 0),
			   py_code_id_field(id, pc->code_qualname - pc->code_filename),
			   py_code_id_field(id, pc->code_linetable - pc->code_filename));
}

/* vm_change.kind: what changed the address space. */
#define VM_BRK 0    /* brk(2) moved the break (the [heap] mapping) */
#define VM_MMAP 1   /* mmap(2) */
#define VM_MUNMAP 2 /* munmap(2) */
#define VM_MREMAP 3 /* mremap(2) */
#define VM_FAULT 4  /* a sampled write fault to a page not present: first touch */
#define VM_NR_KINDS 5

/*
 * An address-space change of a PROFILE_EVENT_VM record, read at the return
 * of the system call (fexit of __x64_sys_*: arguments from the user
 * registers saved at entry) or at the page fault (exceptions:page_fault_user).
 */
struct vm_change {
	__u64 addr;     /* BRK: the new break; MMAP: the new mapping; MUNMAP: the range;
			 * MREMAP: the new address; FAULT: the faulting address */
	__u64 len;      /* MMAP, MUNMAP: bytes; MREMAP: the new length; FAULT: the bytes this
			 * sample stands for (vm_fault_period pages) */
	__u64 old_addr; /* BRK: the break before the call; MREMAP: the old address */
	__u64 old_len;  /* MREMAP: the old length */
	__u32 kind;     /* VM_* */
	__u32 flags;    /* MMAP: mmap(2)'s flags argument; FAULT: the x86 error code */
	__s32 fd;       /* MMAP: the file descriptor argument (-1: anonymous) */
	__u32 file_kind; /* MMAP of a file: VM_FILE_*, what @fd was at the return */
};

/*
 * vm_change.file_kind: the file behind an mmap's fd, read in BPF at the
 * call's return, while the fd still names it (a job that maps a received
 * fd and closes it at once, as PyTorch's shared tensors do, leaves
 * /proc/PID/fd/N to the next file that gets the number).
 *   UNKNOWN  not read (anonymous, or the read failed): user space looks at the path;
 *   SHMEM    a regular file of tmpfs, hugetlbfs or ramfs (/dev/shm, memfd, SysV shm);
 *   REGULAR  a regular file of another file system;
 *   DEVICE   a character or block device (/dev/zero, a GPU): by its path;
 *   OTHER    anything else (an anon_inode, a socket).
 */
#define VM_FILE_UNKNOWN 0
#define VM_FILE_SHMEM 1
#define VM_FILE_REGULAR 2
#define VM_FILE_DEVICE 3
#define VM_FILE_OTHER 4

/*
 * Per-slot counters of address-space changes in the 'vm_stats' per-CPU
 * array: every change of a target, whether its record was sent or not.
 */
struct vm_stats {
	__u64 events[VM_NR_KINDS]; /* changes seen (FAULT: write faults to pages not present) */
	__u64 unsent;              /* changes whose record was not sent (rate cap, nesting) */
	__u64 bare;                /* growth changes sent without their stack (over the budget) */
};

/* sample_event.flags */
#define SAMPLE_USER_TRUNCATED (1u << 0)   /* user stack filled all PROFILE_MAX_FRAMES */
#define SAMPLE_KERNEL_TRUNCATED (1u << 1) /* kernel stack filled all PROFILE_MAX_FRAMES */
#define SAMPLE_USER_MISSING (1u << 2)     /* bpf_get_stack(user) failed or returned 0 frames */
#define SAMPLE_KERNEL_MODE (1u << 3)      /* sampled while in the kernel */
#define SAMPLE_HAS_REGS (1u << 4)         /* regs[] and stack[0..stack_size) are valid */
#define SAMPLE_PY_TRUNCATED (1u << 5)     /* more Python frames than PROFILE_MAX_PY_FRAMES */
#define SAMPLE_PY_NO_THREAD (1u << 6)     /* Python walk on, but no thread state for this tid */
#define SAMPLE_NO_STACK (1u << 7)         /* PROFILE_EVENT_VM: no stack taken (a shrinking change,
					   * or growth over the per-second budget) */
#define SAMPLE_CFI_TRIED (1u << 10)       /* the CFI-table walk ran: cfi_stop says where it stopped */
#define SAMPLE_CFI_WALKED (1u << 11)      /* ustack is the walk's (cfi_stop END or MAX_FRAMES);
					   * without it, the record fell back to fp_stack/copy */
/* Set by the unwinder in user space, never by BPF: */
#define SAMPLE_DWARF_UNWOUND (1u << 8)    /* ustack comes from DWARF unwinding */
#define SAMPLE_UNWIND_INCOMPLETE (1u << 9)/* the unwinder stopped before the outermost frame */

/*
 * One CPU sample, as profile.bpf.c builds it. Only the first kstack_len +
 * ustack_len addresses of ips[] are meaningful (kernel frames first, each
 * part leaf first), and the first py_len Python frames of py[].
 *
 * The ring buffer record comes in one of two layouts:
 *  - with SAMPLE_HAS_REGS (a stack copy for profd's CFI unwinding), this
 *    struct's own, offsetof(stack) + stack_size bytes: stack[] holds
 *    stack_size bytes of user stack in whole pages from the page holding
 *    regs[7] (rsp), stopping at the first page that could not be read; the
 *    value at rsp is at stack[stack_offset] (stack_offset < 4096;
 *    stack_size 0 if no page was read);
 *  - without it, compact, SAMPLE_COMPACT_BYTES(kstack_len + ustack_len,
 *    py_len) bytes: the first SAMPLE_HEAD_BYTES of this struct (up to
 *    regs[], which are not valid then), the kstack_len + ustack_len
 *    addresses of ips[], then the py_len frames of py[]. Most records take
 *    this one: a PyTorch sample of 35 addresses and 7 Python frames is 528
 *    bytes, where this struct's layout up to its last address is 1,576.
 * User space reads both as this struct (sample_event__read(), sampler.c).
 */
struct sample_event {
	__u64 time_ns;    /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u32 pid;        /* tgid */
	__u32 tid;
	__u32 slot;       /* session slot (the perf event's BPF cookie) */
	__u32 cpu;
	__u32 flags;      /* SAMPLE_* */
	__u32 event;      /* 0: the CPU sampling event; 1: the session's second sampled event;
			   * PROFILE_EVENT_THREAD_EXIT: the thread tid exited (no stack);
			   * PROFILE_EVENT_VM: an address-space change (vm; user stack only) */
	__u16 kstack_len; /* frames, 0..PROFILE_MAX_FRAMES */
	__u16 ustack_len; /* frames, 0..PROFILE_MAX_FRAMES */
	__u32 stack_size; /* bytes in stack[], a multiple of 4096, 0..PROFILE_MAX_STACK_BYTES */
	__u32 stack_offset; /* where rsp points in stack[] */
	char comm[16];    /* thread name at sample time */
	__u32 py_len;     /* Python frames in py[], 0..PROFILE_MAX_PY_FRAMES */
	__u32 cfi_stop;   /* SAMPLE_CFI_TRIED: enum cfi_walk_stop (cfi_walk.h) */
	__u32 cfi_frames; /* SAMPLE_CFI_TRIED: PCs the walk found; a fallback record (with
			   * SAMPLE_HAS_REGS, whose size covers all of ips[]) keeps them at
			   * ips[kstack_len..] unless the frame-pointer walk (auto) took
			   * their place */
	__u32 pad0;
	__u64 cfi_stop_pc; /* SAMPLE_CFI_TRIED with cfi_frames > 0: the last PC the walk
			    * found, where it stopped (a return address unless cfi_frames
			    * is 1); 0 otherwise */
	struct vm_change vm; /* PROFILE_EVENT_VM: the change */
	__u64 regs[PROFILE_NREGS]; /* user registers, DWARF order (SAMPLE_HAS_REGS) */
	struct py_frame py[PROFILE_MAX_PY_FRAMES]; /* innermost first (python_config) */
	/* one more than the frames: the CFI walk's bound, checked by the verifier,
	 * is 128 frames after up to 127 kernel ones (it stores at most 127) */
	__u64 ips[2 * PROFILE_MAX_FRAMES + 1];
	__u8 stack[PROFILE_MAX_STACK_BYTES];
};

/* The header of a compact record (struct sample_event): the fields before regs[]. */
#define SAMPLE_HEAD_BYTES offsetof(struct sample_event, regs)
/* The size of a compact record of @frames addresses and @py_frames Python frames. */
#define SAMPLE_COMPACT_BYTES(frames, py_frames)                                                    \
	(SAMPLE_HEAD_BYTES + (frames) * sizeof(__u64) + (py_frames) * sizeof(struct py_frame))

/* Per-slot counters in the 'drops' per-CPU array, summed by user space. */
struct slot_counters {
	__u64 ringbuf_full; /* samples lost: ring buffer had no room */
};
