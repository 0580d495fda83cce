/*
 * python_frames.h - the Python view of call stacks (python_frames.c): which
 * frames are CPython's own machinery, and folding them away between the
 * Python frames a report shows. Reports only; the store keeps every frame.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* What a frame is to the Python view. */
enum frame_role {
	FRAME_OTHER,	   /* kernel, library, extension or program frame: always kept */
	FRAME_PYTHON,	   /* a Python function, read from the interpreter's frame stack */
	FRAME_INTERPRETER, /* CPython's own code (eval loop, call machinery): folded away */
};

enum frame_role python_frames__role(const char *kind, const char *module, const char *build_id,
				    const char *function, const char *file);
size_t python_frames__fold(int64_t *frames, size_t n, const uint8_t *roles);
