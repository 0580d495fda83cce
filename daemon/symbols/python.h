/*
 * python.h - CPython stacks: finding the interpreter in a target process
 * (version, _PyRuntime, _PyEval_EvalFrameDefault), reading the code objects
 * of sampled Python frames (qualified name, file, line), and merging those
 * frames into the native call stack in place of the interpreter's
 * _PyEval_EvalFrameDefault frames.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/profile.h"
#include "symbols/symbolize.h"

/*
 * Byte offsets of one CPython minor version's structures, generated at build
 * time from that version's own headers (python-offsets.c). The fields the
 * BPF program walks are in @bpf (runtime_addr left 0); the rest are read
 * by python.c from user space.
 */
struct python_offsets {
	unsigned version_hex; /* major << 24 | minor << 16 */
	struct python_config bpf;  /* also the code object's identity fields (code_type...) */
	unsigned code_adaptive;	   /* PyCodeObject.co_code_adaptive: the first instruction */
	unsigned unicode_length;   /* PyASCIIObject.length */
	unsigned unicode_state;	   /* PyASCIIObject.state (32-bit bitfield word) */
	unsigned unicode_kind_shift, unicode_kind_mask; /* state: kind (1, 2 or 4 bytes a char) */
	unsigned unicode_compact_bit, unicode_ascii_bit;
	unsigned unicode_ascii_size;   /* sizeof(PyASCIIObject): ASCII data follows */
	unsigned unicode_compact_size; /* sizeof(PyCompactUnicodeObject): other data follows */
	unsigned bytes_size;	       /* PyVarObject.ob_size */
	unsigned bytes_data;	       /* PyBytesObject.ob_sval */
};

/* What python__find() learned about a target's interpreter. */
struct python_interp {
	char version[16]; /* "3.11.7" */
	const struct python_offsets *offsets; /* NULL: a version this build has no offsets for */
	uint64_t runtime_addr;		      /* &_PyRuntime in the target */
	uint64_t code_type_addr;	      /* &PyCode_Type in the target, 0 if not exported */
	uint64_t eval_start, eval_end; /* _PyEval_EvalFrameDefault, [start, end) in the target */
};

/*
 * python__find() - look for a CPython interpreter among the mappings of
 * @as (process @pid): an executable or libpython whose symbols name
 * _PyRuntime and _PyEval_EvalFrameDefault; its version from Py_Version in
 * the target's memory. Returns 0 with *@ret filled (ret->offsets NULL if this
 * build has no offsets for that version), -ENOENT if the process runs no
 * CPython 3.11+, -ESRCH if it is gone. Reads ELF files and the target's
 * memory (process_vm_readv); does not log.
 */
int python__find(pid_t pid, const struct addrspace *as, struct python_interp *ret);

/*
 * python_linetable_line() - the source line of code unit @unit (2-byte
 * instructions from the first; -1 before the first) in a CPython 3.11-3.13
 * location table @t of @n bytes (co_linetable) of a code object starting at
 * line @firstlineno. 0 if the table has no line there or is malformed.
 */
int python_linetable_line(const uint8_t *t, size_t n, int firstlineno, int64_t unit);

/*
 * Merges Python frames into native stacks, for one session. Code objects are
 * read from the target once and cached by (pid, address), re-validated by a
 * small read of the object on each use (an address can be reused by new code).
 */
struct python_reader;

/* python_reader__new() - for @interp (copied). NULL only on out-of-memory. */
struct python_reader *python_reader__new(const struct python_interp *interp);
void python_reader__free(struct python_reader *r); /* accepts NULL */

/* Tokens standing for Python frames among user addresses: above every user address. */
#define PYTHON_TOKEN_TAG (0xfeull << 56)
static inline bool python_token(uint64_t ip)
{
	return (ip >> 56) == 0xfe;
}

/*
 * python_reader__merge() - the user stack of @e (@e->ustack_len addresses
 * after @e->kstack_len kernel ones, leaf first) with each
 * _PyEval_EvalFrameDefault address replaced by the Python frames that call
 * was running (@e->py split at its entry frames), as python tokens.
 * Writes at most @max addresses to @out and their number to *@ret_n;
 * *@ret_cut is set if the merged stack was longer than @max (its outermost
 * frames are cut: the caller marks the stack truncated).
 * Returns 1 if Python frames were merged, 0 if @e has none (@out is then
 * the native stack unchanged), -EPROTO if the Python frames do not match the
 * native stack (as many entry frames as interpreter calls; @out unchanged
 * native), -ENOMEM. Reads the target's memory; does not log.
 */
int python_reader__merge(struct python_reader *r, const struct sample_event *e, uint64_t *out,
			 size_t max, size_t *ret_n, bool *ret_cut);

/*
 * python_reader__frame() - the frame a token of python_reader__merge()
 * stands for: module and file = the .py path, function = the qualified name
 * (NULL if the code object could not be read), line, and a rel_addr that
 * tells apart the frames of one file. Strings are owned by @r. -ENOENT for
 * a token @r did not make.
 */
int python_reader__frame(struct python_reader *r, uint64_t token, struct frame_info *ret);
