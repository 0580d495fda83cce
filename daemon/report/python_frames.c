/*
 * python_frames.c - the Python view of call stacks: the rule for which
 * frames are interpreter-internal, and the fold that drops them from a
 * stack that holds Python frames.
 *
 * The rule (stated for users in profctl(1), "PYTHON FRAMES"): a frame is
 * interpreter-internal when its module is the Python interpreter (a file
 * named python, python3, python3.11, python3.11d, ...) or libpython
 * (libpython3.11.so.1.0, ...), symbolized or not, unless its function is
 * one of the waits below: there the thread waits for the GIL, sleeps, or
 * does I/O, and a user wants to see that. py-spy --native draws the same
 * line (it keeps the eval loop only as the Python frames it ran).
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "report/python_frames.h"
#include "util.h"

/*
 * Interpreter functions kept in the view (CPython 3.8-3.13 names; the ones
 * a stripped interpreter such as Debian's exports are the PyEval_* and
 * PyThread_* ones, the others need its debug symbols).
 */
static const char *const interpreter_waits[] = {
    /* The GIL */
    "take_gil",
    "drop_gil",
    "PyEval_RestoreThread",
    "PyEval_AcquireThread",
    "PyEval_AcquireLock",
    "PyGILState_Ensure",
    /* time.sleep() */
    "time_sleep",
    "pysleep",
    /* Locks, queues, thread joins */
    "PyThread_acquire_lock",
    "PyThread_acquire_lock_timed",
    "acquire_timed",
    "lock_PyThread_acquire_lock",
    "rlock_acquire",
    /* I/O: files, pipes, sockets, select, child processes */
    "_Py_read",
    "_Py_write",
    "os_read",
    "os_write",
    "_io_FileIO_read",
    "_io_FileIO_readinto",
    "_io_FileIO_readall",
    "_io_FileIO_write",
    "sock_recv",
    "sock_recv_into",
    "sock_send",
    "sock_sendall",
    "sock_accept",
    "sock_connect",
    "select_select",
    "select_poll_poll",
    "select_epoll_poll",
    "os_waitpid",
    "os_wait",
    /* A garbage collection pass */
    "gc_collect_main",
};

/*
 * The index in @s past a version and ABI flags from @i on: [0-9.]* then
 * [dmu]*, leaving a last '.' for what follows ("3.11.so": at ".so").
 */
static size_t skip_version(const char *s, size_t i)
{
	size_t start = i;

	while (s[i] == '.' || (s[i] >= '0' && s[i] <= '9'))
		i++;
	if (i > start && s[i - 1] == '.')
		i--;
	while (s[i] == 'd' || s[i] == 'm' || s[i] == 'u')
		i++;
	return i;
}

/* Whether the file name @base is the CPython interpreter or libpython. */
static bool is_interpreter_module(const char *base)
{
	size_t i;

	if (strncmp(base, "python", 6) == 0)
		return base[skip_version(base, 6)] == '\0';
	if (strncmp(base, "libpython", 9) != 0)
		return false;
	i = skip_version(base, 9);
	return strncmp(base + i, ".so", 3) == 0 && (base[i + 3] == '\0' || base[i + 3] == '.');
}

/*
 * python_frames__role() - the role of one stored frame, from its columns in
 * the frames table (docs/schema.md): @kind "user" or "kernel"; @module the
 * mapped file's path, or for a Python frame its source file; @build_id ""
 * when none; @function NULL when unsymbolized; @file NULL without line
 * info. A Python frame is how the symbolizer stores one (daemon/symbols/
 * python.c): a user frame with no build ID whose file is its module.
 * Never fails; NULL @build_id or @module read as "".
 */
enum frame_role python_frames__role(const char *kind, const char *module, const char *build_id,
				    const char *function, const char *file)
{
	const char *base;

	if (!kind || strcmp(kind, "user") != 0 || !module)
		return FRAME_OTHER;
	if ((!build_id || !*build_id) && file && strcmp(file, module) == 0)
		return FRAME_PYTHON;
	base = strrchr(module, '/');
	if (!is_interpreter_module(base ? base + 1 : module))
		return FRAME_OTHER;
	for (size_t i = 0; function && i < ARRAY_SIZE(interpreter_waits); i++)
		if (strcmp(function, interpreter_waits[i]) == 0)
			return FRAME_OTHER;
	return FRAME_INTERPRETER;
}

/*
 * python_frames__fold() - the Python view of one call stack, in place.
 * @frames: @n frame numbers, leaf first; @roles[frames[i]] is each one's
 * enum frame_role.
 * A stack with at least one Python frame loses every interpreter-internal
 * frame, wherever it is: between Python frames, at the root (the
 * interpreter's main()) and at the leaf (the eval loop running a Python
 * function, whose self samples then go to that Python frame). A stack
 * without Python frames (interpreter start-up, native threads) is left as
 * it is. Returns the new length, <= @n; the order of the kept frames is
 * unchanged.
 */
size_t python_frames__fold(int64_t *frames, size_t n, const uint8_t *roles)
{
	size_t k = 0;
	bool python = false;

	for (size_t i = 0; i < n && !python; i++)
		python = roles[frames[i]] == FRAME_PYTHON;
	if (!python)
		return n;
	for (size_t i = 0; i < n; i++)
		if (roles[frames[i]] != FRAME_INTERPRETER)
			frames[k++] = frames[i];
	return k;
}
