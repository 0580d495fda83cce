/*
 * cfi_walk.h - types shared by cfi_walk.bpf.h (the user-stack walk in BPF
 * from compiled CFI tables) and daemon/collect/cfi_maps.c (which fills its
 * maps): the row format in BPF, a process's mappings, a module's place in
 * the shared row array, and why a walk stopped. Fixed-width types only.
 */
#pragma once

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * Bounds, and what each costs:
 * - CFI_WALK_MAX_MAPPINGS executable mappings per process (32 bytes each:
 *   a cfi_walk_proc is 16 KiB). A Debian python3 that imported torch has
 *   315; mappings beyond are not loaded (counted by cfi_maps), and
 *   a PC in them stops the walk with CFI_STOP_NO_MAPPING.
 * - CFI_WALK_MAX_PROCS processes (the hash map is preallocated:
 *   CFI_WALK_MAX_PROCS * 16 KiB = 4 MiB). A process that does not fit is
 *   refused (-ENOSPC) and its samples stop at CFI_STOP_NO_PROCESS.
 * - CFI_WALK_MAX_MODULES modules (16 bytes each).
 * - rows: up to CFI_WALK_ROW_ARRAYS arrays of struct cfi_walk_row, made by
 *   user space as modules need them, holding together at most rows_cap
 *   rows (cfi_maps' rows_cap, at most CFI_WALK_MAX_ROWS: the binary search
 *   is bounded for that many). A module that does not fit is counted and
 *   gets no rows: its PCs stop at CFI_STOP_NO_TABLE.
 * - CFI_WALK_MAX_FRAMES frames per walk.
 */
#define CFI_WALK_MAX_MAPPINGS 512
#define CFI_WALK_MAX_PROCS 256
#define CFI_WALK_MAX_MODULES 4096
#define CFI_WALK_MAX_ROWS (8u << 20)
#define CFI_WALK_ROW_ARRAYS 128
#define CFI_WALK_MAX_FRAMES 128
/*
 * The walk reads the stack through a window of this many bytes (a power of
 * 2), copied with one bpf_probe_read_user() from the first address it
 * needs up: the return addresses and saved rbps of the next frames are in
 * it, so a walk of 40 small frames makes one read, not 80.
 */
#define CFI_WALK_WINDOW 4096

/* Binary search steps: log2 of the bounds above, + 1. */
#define CFI_WALK_MAPPING_STEPS 10
#define CFI_WALK_ROW_STEPS 24

/*
 * One row of a module's table in BPF: 8 bytes (an array map stores values
 * rounded up to 8 bytes, so a 12-byte row would take 16). It covers
 * [pc, next row's pc) of its module; the module's last row is
 * CFI_ROW_NONE (or EXPR). Same meaning as struct cfi_row
 * (daemon/symbols/cfi_table.h) with narrower fields. The CFA offset is
 * kept in units of 8 bytes: on x86-64 every CFA offset the compilers emit
 * is a multiple of 8 (pushes, and rsp kept 16-byte aligned), and the
 * largest seen reach 131,360 bytes (libtorch_cpu.so: 33 of its 1.4
 * million rows are beyond 32 KiB; python3.11 65,600), which 16 bits of
 * bytes would not hold. Saved-rbp offsets are -48..11 in every library
 * checked (libc, libstdc++, python3.11, libdnnl, libtorch_cpu). A row
 * that does not fit (offset not a multiple of 8, beyond +-256 KiB, rbp
 * beyond +-127) becomes CFI_ROW_EXPR: the walk stops there, visibly. A
 * module whose ELF addresses do not fit 32 bits is not loaded.
 */
struct cfi_walk_row {
	__u32 pc;	/* first PC covered: ELF virtual address (runtime address - load bias) */
	__s16 cfa_off8; /* bytes added to the CFA register, / 8 */
	__s8 fp_off;	/* FP_SAVED: bytes from the CFA to the saved rbp; PLT: the (pc & 15)
			 * threshold */
	__u8 kind;	/* CFI_WALK_KIND() | CFI_WALK_* flags below */
};

/* cfi_walk_row.kind: enum cfi_row_kind (cfi_table.h) in the low 3 bits, then cfi_row's flags. */
#define CFI_WALK_KIND(k) ((k)&7u)
#define CFI_WALK_CFA_BP (1u << 3)   /* CFI_ROW_CFA_BP: CFA = rbp + cfa_off */
#define CFI_WALK_FP_SAVED (1u << 4) /* CFI_ROW_FP_SAVED: caller's rbp at CFA + fp_off */
#define CFI_WALK_FP_UNDEF (1u << 5) /* CFI_ROW_FP_UNDEF: caller's rbp lost */

/* The kinds, as cfi_table.h numbers them (checked there with a static assert by cfi_maps.c). */
#define CFI_WALK_ROW_NONE 0
#define CFI_WALK_ROW_CFA 1
#define CFI_WALK_ROW_PLT 2
#define CFI_WALK_ROW_EXPR 3
#define CFI_WALK_ROW_SIGNAL 4
#define CFI_WALK_ROW_OUTERMOST 5

/* One executable mapping of a process: [start, end), its bias and module. */
struct cfi_walk_mapping {
	__u64 start;
	__u64 end;
	__u64 bias;   /* runtime address - ELF virtual address */
	__u32 module; /* index in cfi_modules */
	__u32 pad;
};

/*
 * What a walk keeps from frame to frame, in a map value (where the
 * verifier does not carry the bounds of these numbers from frame to frame,
 * as it would on the BPF stack, and so does not check each frame again for
 * each): the stack window, and the mapping of the frame before, since the
 * next one is often in it (recursion, an interpreter's frames).
 */
struct cfi_stack_window {
	__u64 start, len; /* user address of bytes[0]; bytes read, 0..CFI_WALK_WINDOW */
	__u32 n_reads, n_bytes;	      /* this walk's stack reads, and the bytes they asked for */
	struct cfi_walk_mapping last; /* a copy; end 0 until the first frame */
	__u8 bytes[CFI_WALK_WINDOW];
};

/* A process's mappings, sorted by start, not overlapping: the value of cfi_procs. */
struct cfi_walk_proc {
	__u32 n; /* mappings in m[], 0..CFI_WALK_MAX_MAPPINGS */
	__u32 pad;
	struct cfi_walk_mapping m[CFI_WALK_MAX_MAPPINGS];
};

/*
 * A module's rows: [first, first + n) of the row array in slot @array of
 * cfi_rows. n == 0: no table (stop).
 * fill: a number user space gives each filling of a module slot, never 0
 * and not reused (it wraps after 2^32 fills): the rows of a module are
 * cached under it (cfi_row_cache), so a slot filled again with other rows
 * misses the old entries.
 */
struct cfi_walk_module {
	__u32 array;
	__u32 first;
	__u32 n;
	__u32 fill;
};

/*
 * The row cache: CFI_ROW_CACHE_ENTRIES entries (a power of 2), 16 bytes
 * each, shared by all CPUs, direct-mapped by (fill, module address). An
 * entry's check is (fill << 32 | module address) XOR the row's 8 bytes: an
 * entry read while another CPU writes it does not pass its check, and an
 * empty one (all 0) never does, since fill is never 0.
 */
#define CFI_ROW_CACHE_ENTRIES 16384
#define CFI_ROW_CACHE_BITS 14
struct cfi_row_cache_entry {
	__u64 check;
	__u64 row; /* struct cfi_walk_row */
};

/* Why a walk stopped. The counters in cfi_walk_stops are indexed by it. */
enum cfi_walk_stop {
	CFI_STOP_END = 0,    /* an outermost row (_start, clone3): the whole stack */
	CFI_STOP_MAX_FRAMES, /* CFI_WALK_MAX_FRAMES (or the caller's max) reached */
	CFI_STOP_NO_PROCESS, /* the process has no entry in cfi_procs */
	CFI_STOP_NO_MAPPING, /* a PC in no loaded mapping (JIT code, anonymous memory) */
	CFI_STOP_NO_TABLE,   /* the module has no rows (no CFI, not compiled, did not fit) */
	CFI_STOP_NO_CFI,     /* the module's table has no CFI for the PC */
	CFI_STOP_EXPR,	     /* a rule the rows cannot hold (DWARF expression, ...) */
	CFI_STOP_SIGNAL,     /* a signal trampoline's frame (PC stored + 1, as libdw) */
	CFI_STOP_READ_FAULT, /* the return address could not be read */
	CFI_STOP_BP_LOST,    /* the CFA is in rbp, which CFI left undefined or was unreadable */
	CFI_STOP_BAD_FRAME,  /* a return address of 0, or an SP that does not grow */
	CFI_STOP_NR,
};

/*
 * cfi_walk_stops: after the CFI_STOP_NR walk counters, the row cache's, then
 * the reads of the user stack (bpf_probe_read_user() calls, window or single
 * word; a window read that faulted and its shorter retry count two) and the
 * bytes they asked for.
 */
#define CFI_WALK_ROW_CACHE_HITS CFI_STOP_NR
#define CFI_WALK_ROW_CACHE_MISSES (CFI_STOP_NR + 1)
#define CFI_WALK_STACK_READS (CFI_STOP_NR + 2)
#define CFI_WALK_STACK_BYTES (CFI_STOP_NR + 3)
#define CFI_WALK_COUNTERS (CFI_STOP_NR + 4)
