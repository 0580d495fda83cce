/*
 * test-unwind.c - unit test of daemon/symbols/unwind.c on real stacks.
 *
 * Parts:
 *  - self: this process's own registers and stack, captured in place, are
 *    unwound to _start (no root needed), also from a signal handler;
 *  - bad input: zero registers, no stack, a zeroed stack, random registers
 *    and random stack bytes, tiny @max: short results, no crash, END only
 *    for a PC in _start; and no debuginfod client loaded on the way;
 *  - refresh: a library dlopen()ed after the first unwind is reported once
 *    addrspace__refresh() has seen it;
 *  - debug_frame: a library with CFI only in .debug_frame, in a separate
 *    debug file found by .gnu_debuglink (tests/fixtures/unwind-nocfi.c);
 *  - samples (root): real perf_event_open(2) samples (user registers and
 *    16 KiB of user stack) of tests/workloads/deep-nofp, a program without
 *    frame pointers, are unwound and symbolized: 95% reach _start or clone3
 *    with status END, the hot paths appear whole and in order, and a
 *    frame-pointer walk of the same samples is shown to get lost. Prints
 *    the unwinder's CPU time per sample and the frames per sample.
 *
 * The workload's path comes from DEEP_NOFP (set by tests/meson.build) or
 * argv[1], the fixture library's from UNWIND_NOCFI_LIB.
 *
 * Over 1,000 lines on purpose: the parts share the capture of real
 * registers and stack copies (this process's, deep-nofp's through
 * perf_event_open) and the checks of an unwound stack, and run as one
 * meson test; each part is a function of its own, named above.
 *
 * Exit status: 0 all parts passed, 1 a check failed, 77 nothing failed but
 * a part was skipped (the reason is printed), 99 setup error.
 */
#include <asm/perf_regs.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "check.h"
#include "check_samples.h"
#include "check_workload.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

#define MAX_FRAMES 128
#define WARM_PASSES 5
#define N_SAMPLES 400

/* ---------------------------------------------------------------------- */
/* Unwound stacks as function names */

struct stack {
	uint64_t pcs[MAX_FRAMES];
	int n;
	enum unwind_status status;
	const char *fn[MAX_FRAMES];  /* symbolized, "?" when unknown; owned by the symbolizer */
	const char *mod[MAX_FRAMES]; /* module path */
};

static void stack_symbolize(struct stack *st, struct symbolizer *s, const struct addrspace *as)
{
	for (int i = 0; i < st->n; i++) {
		struct frame_info fi;

		symbolizer__user(s, as, st->pcs[i], i > 0, &fi);
		st->fn[i] = fi.function ? fi.function : "?";
		st->mod[i] = fi.module;
	}
}

static void stack_print(FILE *f, const struct stack *st)
{
	fprintf(f, "  status %s, %d frames:\n", status_name(st->status), st->n);
	for (int i = 0; i < st->n; i++)
		fprintf(f, "    #%-2d %#" PRIx64 " %s (%s)\n", i, st->pcs[i], st->fn[i],
			st->mod[i]);
}

static bool fn_is(const struct stack *st, int i, const char *name)
{
	return i >= 0 && i < st->n && strcmp(st->fn[i], name) == 0;
}

static bool fn_has(const struct stack *st, int i, const char *part)
{
	return i >= 0 && i < st->n && strstr(st->fn[i], part) != NULL;
}

static bool mod_has(const struct stack *st, int i, const char *part)
{
	return i >= 0 && i < st->n && strstr(st->mod[i], part) != NULL;
}

/* find() - index of the first frame named @name, -1 if none. */
static int find(const struct stack *st, const char *name)
{
	for (int i = 0; i < st->n; i++)
		if (fn_is(st, i, name))
			return i;
	return -1;
}

/*
 * outermost_ok() - whether the stack ends where a thread starts: _start
 * under __libc_start_main and __libc_start_call_main (the main thread) or
 * clone3 under start_thread (other threads).
 */
static bool outermost_ok(const struct stack *st)
{
	int last = st->n - 1;

	if (fn_is(st, last, "_start"))
		return fn_has(st, last - 1, "__libc_start_main") &&
		       fn_is(st, last - 2, "__libc_start_call_main");
	/* glibc's .symtab names it __clone3, its alias */
	if (fn_is(st, last, "clone3") || fn_is(st, last, "__clone3"))
		return fn_is(st, last - 1, "start_thread");
	return false;
}

/* ---------------------------------------------------------------------- */
/* Self: unwind this very stack */
/* self_sample(), self_caller(): check_samples.h */

__attribute__((noipa)) static void test_self(struct unwinder *u, struct symbolizer *s,
					     const struct addrspace *as)
{
	uint64_t regs[UNWIND_NREGS];
	size_t len = self_caller(regs);
	struct stack st = {};
	int i, failures = check_failures;

	CHECK(len > 0);
	st.n = unwinder__unwind(u, as, regs, self_stack, len, st.pcs, MAX_FRAMES, &st.status);
	stack_symbolize(&st, s, as);
	CHECK_INT_EQ(st.status, UNWIND_END);
	CHECK(st.n >= 5);
	CHECK_STR_EQ(st.fn[0], "self_sample");
	CHECK_STR_EQ(st.fn[1], "self_caller");
	CHECK_STR_EQ(st.fn[2], "test_self");
	i = find(&st, "main");
	CHECK(i > 2);
	CHECK(outermost_ok(&st));
	if (check_failures > failures)
		stack_print(stderr, &st);

	/* the same sample with @max frames: truncated, the first frames alike */
	for (size_t max = 1; max <= 3; max++) {
		struct stack t = {};

		t.n = unwinder__unwind(u, as, regs, self_stack, len, t.pcs, max, &t.status);
		CHECK_INT_EQ(t.n, max);
		CHECK_INT_EQ(t.status, UNWIND_TRUNCATED);
		CHECK(memcmp(t.pcs, st.pcs, max * sizeof(t.pcs[0])) == 0);
	}
	{
		/* exactly as many frames as there are: END, not TRUNCATED */
		struct stack t = {};

		t.n =
		    unwinder__unwind(u, as, regs, self_stack, len, t.pcs, (size_t)st.n, &t.status);
		CHECK_INT_EQ(t.n, st.n);
		CHECK_INT_EQ(t.status, UNWIND_END);
	}
	{
		/* the stack cut short: the walk stops where the copy ends */
		struct stack t = {};

		t.n = unwinder__unwind(u, as, regs, self_stack, 64, t.pcs, MAX_FRAMES, &t.status);
		CHECK(t.n >= 1 && t.n < st.n);
		CHECK_INT_EQ(t.status, UNWIND_NO_STACK);
	}
	{
		/*
		 * A frame-pointer walk with nothing past the leaf (a process built
		 * without frame pointers) and a copy too short for the whole stack:
		 * the CFI frames it has are kept, not the one-frame walk.
		 */
		uint64_t walk[1] = {regs[UNWIND_REG_IP]}, pcs[MAX_FRAMES];
		struct stack t = {};
		size_t cut = 64;
		uint32_t flags;
		int n;

		do {
			cut += 64;
			t.n = unwinder__unwind(u, as, regs, self_stack, cut, t.pcs, MAX_FRAMES,
					       &t.status);
		} while (t.n < 2 && cut < len);
		CHECK(t.n >= 2 && t.status == UNWIND_NO_STACK);
		n = unwinder__complete_walk(u, as, regs, self_stack, cut, walk, 1, pcs, MAX_FRAMES,
					    &flags);
		CHECK_INT_EQ(n, t.n);
		CHECK(n > 0 && memcmp(pcs, st.pcs, (size_t)n * sizeof(pcs[0])) == 0);
		CHECK_INT_EQ(flags, UNWIND_WALK_FIXED | UNWIND_WALK_PARTIAL);

		/* A walk past the leaf that is garbage (rbp used for data by code
		 * without frame pointers): no address in a file mapping. The CFI
		 * frames win, even partial; never the garbage. */
		{
			uint64_t garbage[3] = {regs[UNWIND_REG_IP], 0x1000, 0x7ffffffff000};

			n = unwinder__complete_walk(u, as, regs, self_stack, cut, garbage, 3, pcs,
						    MAX_FRAMES, &flags);
			CHECK_INT_EQ(n, t.n);
			CHECK(n > 0 && memcmp(pcs, st.pcs, (size_t)n * sizeof(pcs[0])) == 0);
			CHECK_INT_EQ(flags, UNWIND_WALK_CFI_ONLY | UNWIND_WALK_PARTIAL);
		}
		/* One that reaches a file mapping (through JIT code, say) is kept
		 * when CFI cannot check it. */
		{
			uint64_t jit[3] = {regs[UNWIND_REG_IP], 0x1000,
					   (uint64_t)(uintptr_t)&test_self + 1};

			n = unwinder__complete_walk(u, as, regs, self_stack, cut, jit, 3, pcs,
						    MAX_FRAMES, &flags);
			CHECK_INT_EQ(n, 3);
			CHECK(memcmp(pcs, jit, sizeof(jit)) == 0);
			CHECK_INT_EQ(flags, UNWIND_WALK_UNCHECKED);
		}
	}
	printf("self: %d frames to %s, status %s\n", st.n, st.n ? st.fn[st.n - 1] : "-",
	       status_name(st.status));
}

/* ---------------------------------------------------------------------- */
/* Through a signal frame */

/* signal_sample(), sig_regs, sig_interrupted_ip: check_samples.h */

/*
 * test_signal() - a stack captured in a signal handler unwinds through the
 * signal trampoline (__restore_rt, whose CFI is a signal frame) to the
 * interrupted code and on to _start. The interrupted frame is not a return
 * address: it must be stored as its PC + 1, so that the symbolizer's - 1
 * lands on the very instruction the signal interrupted.
 */
__attribute__((noipa)) static void test_signal(struct unwinder *u, struct symbolizer *s,
					       const struct addrspace *as)
{
	struct stack st = {};
	int i, failures = check_failures;
	size_t sig_len = signal_sample();

	CHECK(sig_len > 0);

	st.n =
	    unwinder__unwind(u, as, sig_regs, self_stack, sig_len, st.pcs, MAX_FRAMES, &st.status);
	stack_symbolize(&st, s, as);
	i = find(&st, "signal_handler");
	CHECK_INT_EQ(st.status, UNWIND_END);
	CHECK_INT_EQ(i, 2);
	CHECK(fn_is(&st, i + 1, "__restore_rt"));
	CHECK_INT_EQ(st.pcs[i + 2], sig_interrupted_ip + 1);
	CHECK(find(&st, "test_signal") > i + 2);
	CHECK(outermost_ok(&st));
	if (check_failures > failures)
		stack_print(stderr, &st);
	printf("signal: %d frames through %s to %s, status %s\n", st.n,
	       i >= 0 && i + 2 < st.n ? st.fn[i + 2] : "-", st.n ? st.fn[st.n - 1] : "-",
	       status_name(st.status));
}

/* ---------------------------------------------------------------------- */
/* .debug_frame from a separate debug file */

static uint64_t cb_regs[UNWIND_NREGS];
static size_t cb_len;

__attribute__((noipa)) static int nocfi_cb(void)
{
	cb_len = self_sample(cb_regs, self_stack, sizeof(self_stack));
	__asm__ volatile("" ::: "memory");
	return 1;
}

/* copy_file() - copy @from to a new file @to, mode 0755. */
static void copy_file(const char *from, const char *to)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	char buf[65536];
	ssize_t n;

	if (in < 0 || out < 0)
		SETUP_FAIL("copy %s to %s: %m", from, to);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			SETUP_FAIL("write %s: %m", to);
	if (n < 0)
		SETUP_FAIL("read %s: %m", from);
}

/* run_nocfi() - call @lib's nocfi_call(nocfi_cb) and unwind the stack nocfi_cb captured. */
__attribute__((noipa)) static void run_nocfi(struct unwinder *u, struct symbolizer *s,
					     struct addrspace *as, const char *lib,
					     struct stack *st)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	int (*call)(int (*)(void)) = h ? (int (*)(int (*)(void)))dlsym(h, "nocfi_call") : NULL;

	if (!call)
		SETUP_FAIL("dlopen/dlsym %s: %s", lib, dlerror());
	CHECK_INT_EQ(call(nocfi_cb), 11);
	CHECK(addrspace__refresh(as) > 0);
	st->n =
	    unwinder__unwind(u, as, cb_regs, self_stack, cb_len, st->pcs, MAX_FRAMES, &st->status);
	stack_symbolize(st, s, as);
	/* h stays open: its mapping is in @as */
}

/*
 * test_debug_frame() - the fixture library has CFI only in .debug_frame, in
 * a separate file named by its .gnu_debuglink: the stack through it
 * unwinds to _start. A copy of the library without the debug file next to
 * it stops at its first frame with UNWIND_NO_CFI: missing, not wrong.
 */
__attribute__((noipa)) static void test_debug_frame(struct unwinder *u, struct symbolizer *s,
						    struct addrspace *as)
{
	const char *lib = getenv("UNWIND_NOCFI_LIB");
	char dir[] = "/tmp/test-unwind-XXXXXX", copy[sizeof(dir) + 32];
	struct stack st = {}, bare = {};
	int failures = check_failures;

	if (!lib || !lib[0]) {
		check_skip("debug_frame", "UNWIND_NOCFI_LIB not set (run from meson test)");
		return;
	}
	run_nocfi(u, s, as, lib, &st);
	CHECK_INT_EQ(st.status, UNWIND_END);
	CHECK_STR_EQ(st.fn[1], "nocfi_cb");
	CHECK(fn_is(&st, 2, "nocfi_inner") && fn_is(&st, 3, "nocfi_call"));
	CHECK(fn_is(&st, 4, "run_nocfi") && fn_is(&st, 5, "test_debug_frame"));
	CHECK(outermost_ok(&st));
	if (check_failures > failures)
		stack_print(stderr, &st);
	printf("debug_frame: %d frames through %s to %s, status %s\n", st.n,
	       st.n > 3 ? st.fn[3] : "-", st.n ? st.fn[st.n - 1] : "-", status_name(st.status));

	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	snprintf(copy, sizeof(copy), "%s/nocfi.so", dir);
	copy_file(lib, copy);
	failures = check_failures;
	run_nocfi(u, s, as, copy, &bare);
	CHECK_INT_EQ(bare.status, UNWIND_NO_CFI);
	CHECK_INT_EQ(bare.n, 3); /* self_sample, nocfi_cb, and the PC nocfi_cb returns to */
	CHECK(fn_is(&bare, bare.n - 1, "nocfi_inner"));
	if (check_failures > failures)
		stack_print(stderr, &bare);
	unlink(copy);
	rmdir(dir);
}

/* copy_file_flipped() - copy @from to @to with the byte at the middle of the file flipped. */
static void copy_file_flipped(const char *from, const char *to)
{
	struct stat st;
	unsigned char b;
	int fd;

	copy_file(from, to);
	fd = open(to, O_RDWR | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0 || pread(fd, &b, 1, st.st_size / 2) != 1)
		SETUP_FAIL("open %s: %m", to);
	b ^= 0xff;
	if (pwrite(fd, &b, 1, st.st_size / 2) != 1)
		SETUP_FAIL("write %s: %m", to);
	close(fd);
}

/* Unwinds through a copy of the fixture at @lib_copy into a cleared @st, with a fresh unwinder. */
static void unwind_copy(struct symbolizer *s, struct addrspace *as, const char *lib_copy,
			struct stack *st)
{
	struct unwinder *u = unwinder__new(); /* reads PROFD_DEBUG_PATH */

	if (!u)
		SETUP_FAIL("out of memory");
	*st = (struct stack){};
	run_nocfi(u, s, as, lib_copy, st);
	unwinder__free(u);
}

/*
 * test_debug_lookup() - the unwinder finds separate debug files where the
 * symbolizer does (symbols/debuginfo.c): under a root of PROFD_DEBUG_PATH
 * (ROOT/<directory of the library>/NAME), and for a library without a
 * build ID, by .gnu_debuglink checked by its CRC: a debug file whose bytes
 * changed is refused, and the stack stops visibly (UNWIND_NO_CFI) instead
 * of going on with the wrong CFI.
 */
__attribute__((noipa)) static void test_debug_lookup(struct symbolizer *s, struct addrspace *as)
{
	const char *lib = getenv("UNWIND_NOCFI_LIB"), *noid = getenv("UNWIND_NOCFI_NOID_LIB");
	char dir[] = "/tmp/test-unwind-dbg-XXXXXX", libdir[64], root[64], rootdir[160],
	     path[256], debug[PATH_MAX];
	struct stack st = {};

	if (!lib || !lib[0] || !noid || !noid[0]) {
		check_skip("debug_lookup", "UNWIND_NOCFI_LIB/UNWIND_NOCFI_NOID_LIB not set");
		return;
	}
	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	snprintf(libdir, sizeof(libdir), "%s/lib", dir);
	snprintf(root, sizeof(root), "%s/root", dir);
	snprintf(rootdir, sizeof(rootdir), "%s%s", root, libdir);
	if (mkdir(libdir, 0755) < 0 || mkdir(root, 0755) < 0)
		SETUP_FAIL("mkdir: %m");
	for (char *q = rootdir + strlen(root) + 1; (q = strchr(q, '/')); q++) {
		*q = '\0';
		mkdir(rootdir, 0755);
		*q = '/';
	}
	if (mkdir(rootdir, 0755) < 0)
		SETUP_FAIL("mkdir %s: %m", rootdir);

	/* Found only through PROFD_DEBUG_PATH: nothing next to the copy. */
	snprintf(path, sizeof(path), "%s/by-root.so", libdir);
	copy_file(lib, path);
	snprintf(debug, sizeof(debug), "%s/unwind-nocfi.debug", rootdir);
	{
		char src[PATH_MAX];

		snprintf(src, sizeof(src), "%.*s/unwind-nocfi.debug",
			 (int)(strrchr(lib, '/') - lib), lib);
		copy_file(src, debug);
	}
	setenv("PROFD_DEBUG_PATH", root, 1);
	unwind_copy(s, as, path, &st);
	CHECK_INT_EQ(st.status, UNWIND_END);
	CHECK(fn_is(&st, 2, "nocfi_inner") && fn_is(&st, 3, "nocfi_call"));
	printf("debug_lookup: %d frames with the debug file under PROFD_DEBUG_PATH, status %s\n",
	       st.n, status_name(st.status));
	unsetenv("PROFD_DEBUG_PATH");
	unlink(debug);
	unlink(path);

	/* No build ID: the debuglink's CRC says which file is the one. */
	{
		char src[PATH_MAX];

		snprintf(src, sizeof(src), "%.*s/unwind-nocfi-noid.debug",
			 (int)(strrchr(noid, '/') - noid), noid);
		snprintf(path, sizeof(path), "%s/noid.so", libdir);
		snprintf(debug, sizeof(debug), "%s/unwind-nocfi-noid.debug", libdir);
		copy_file(noid, path);
		copy_file(src, debug);
		unwind_copy(s, as, path, &st);
		CHECK_INT_EQ(st.status, UNWIND_END);
		CHECK(fn_is(&st, 2, "nocfi_inner") && fn_is(&st, 3, "nocfi_call"));
		unlink(debug);
		snprintf(path, sizeof(path), "%s/noid2.so", libdir);
		copy_file(noid, path);
		copy_file_flipped(src, debug);
		unwind_copy(s, as, path, &st);
		CHECK_INT_EQ(st.status, UNWIND_NO_CFI);
		CHECK(st.n == 3 && fn_is(&st, st.n - 1, "nocfi_inner"));
		printf("debug_lookup: a debug file with the wrong CRC refused: %d frames, status %s\n",
		       st.n, status_name(st.status));
		unlink(debug);
		unlink(path);
		snprintf(path, sizeof(path), "%s/noid.so", libdir);
		unlink(path);
	}
	for (char *q; strlen(rootdir) > strlen(dir); *q = '\0') {
		rmdir(rootdir);
		q = strrchr(rootdir, '/');
	}
	rmdir(libdir);
	rmdir(dir);
}

/* ---------------------------------------------------------------------- */
/* Bad input */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* is_thread_start() - whether @fn is code whose CFI says it has no caller. */
static bool is_thread_start(const char *fn)
{
	static const char *const names[] = {"_start", "clone3", "__clone3", "clone", "__clone"};

	for (size_t i = 0; fn && i < ARRAY_SIZE(names); i++)
		if (strcmp(fn, names[i]) == 0)
			return true;
	return false;
}

static void test_bad_input(struct unwinder *u, struct symbolizer *s, const struct addrspace *as)
{
	uint64_t regs[UNWIND_NREGS] = {}, pcs[MAX_FRAMES];
	static unsigned char garbage[16384];
	size_t n_maps;
	const struct mapping *maps = addrspace__mappings(as, &n_maps);
	enum unwind_status status;
	uint64_t ip = (uint64_t)(uintptr_t)&test_bad_input;
	unsigned long statuses[5] = {};
	struct end {
		uint64_t pc;
		bool return_addr;
	} ends[16];
	size_t n_ends = 0;
	int n, failures;

	/* all registers zero: no PC at all */
	n = unwinder__unwind(u, as, regs, NULL, 0, pcs, MAX_FRAMES, &status);
	CHECK_INT_EQ(n, 0);
	CHECK(status != UNWIND_END);

	/* a real PC, SP on our stack, no stack copy (NULL with a length, too) */
	regs[UNWIND_REG_IP] = ip;
	regs[UNWIND_REG_SP] = (uint64_t)(uintptr_t)garbage;
	n = unwinder__unwind(u, as, regs, garbage, 0, pcs, MAX_FRAMES, &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(pcs[0], ip);
	CHECK_INT_EQ(status, UNWIND_NO_STACK);
	n = unwinder__unwind(u, as, regs, NULL, 4096, pcs, MAX_FRAMES, &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(status, UNWIND_NO_STACK);

	/* a zeroed stack: a return address of 0 is not the end of the stack */
	memset(garbage, 0, sizeof(garbage));
	n = unwinder__unwind(u, as, regs, garbage, sizeof(garbage), pcs, MAX_FRAMES, &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(status, UNWIND_ERROR);

	/* @max 0 */
	n = unwinder__unwind(u, as, regs, garbage, sizeof(garbage), pcs, 0, &status);
	CHECK_INT_EQ(n, 0);
	CHECK(status != UNWIND_END);

	/* a PC in no mapping */
	regs[UNWIND_REG_IP] = 0x10;
	n = unwinder__unwind(u, as, regs, garbage, sizeof(garbage), pcs, MAX_FRAMES, &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(status, UNWIND_NO_CFI);

	/*
	 * Random registers (PCs inside our mappings half of the time) and
	 * random stack bytes, sometimes seeded with PCs of ours so the walk
	 * goes on for a while: never a crash, never more than @max, and END
	 * only where it is true: a PC that happens to fall in _start.
	 */
	failures = check_failures;
	for (int iter = 0; iter < 3000; iter++) {
		size_t len = rng() % (sizeof(garbage) + 1), max = 1 + rng() % MAX_FRAMES;

		for (size_t i = 0; i < sizeof(garbage); i += 8) {
			uint64_t v = rng();

			if (n_maps && v % 4 == 0) {
				const struct mapping *m = &maps[rng() % n_maps];

				v = m->start + rng() % (m->end - m->start);
			}
			memcpy(garbage + i, &v, 8);
		}
		for (int r = 0; r < UNWIND_NREGS; r++)
			regs[r] = rng();
		regs[UNWIND_REG_SP] = (uint64_t)(uintptr_t)garbage + (rng() % 64) * 8 - 64;
		if (n_maps && iter % 2 == 0) {
			const struct mapping *m = &maps[rng() % n_maps];

			regs[UNWIND_REG_IP] = m->start + rng() % (m->end - m->start);
		}
		n = unwinder__unwind(u, as, regs, garbage, len, pcs, max, &status);
		CHECK(n >= 1 && (size_t)n <= max);
		if (status == UNWIND_END && n >= 1 && n_ends < ARRAY_SIZE(ends))
			ends[n_ends++] = (struct end){pcs[n - 1], n > 1};
		if ((unsigned)status < ARRAY_SIZE(statuses))
			statuses[status]++;
		if (n >= 1)
			CHECK_INT_EQ(pcs[0], regs[UNWIND_REG_IP]);
		if (check_failures > failures) {
			fprintf(stderr, "random input %d: %d frames, status %s\n", iter, n,
				status_name(status));
			break;
		}
	}
	/*
	 * Random PCs without .eh_frame entries made libdw ask the unwinder's
	 * find_debuginfo callback for separate debug files (for .debug_frame)
	 * of every library; libdwfl's standard one would have started its
	 * debuginfod client (which dlopen()s libdebuginfod). Checked before
	 * anything is symbolized: the symbolizer may load it.
	 */
	CHECK(!dlopen("libdebuginfod.so.1", RTLD_NOW | RTLD_NOLOAD));
	/* END only where it is right: the last PC is in code with no caller */
	for (size_t i = 0; i < n_ends; i++) {
		struct frame_info fi;

		symbolizer__user(s, as, ends[i].pc, ends[i].return_addr, &fi);
		CHECK(is_thread_start(fi.function));
		if (!is_thread_start(fi.function))
			fprintf(stderr, "random input: END at %s %s+%#" PRIx64 "\n", fi.module,
				fi.function ? fi.function : "?", fi.rel_addr);
	}
	printf("bad input: random registers and stacks gave END %lu, TRUNCATED %lu, NO_CFI %lu, "
	       "NO_STACK %lu, ERROR %lu\n",
	       statuses[0], statuses[1], statuses[2], statuses[3], statuses[4]);
}

/* ---------------------------------------------------------------------- */
/* Refresh: a library loaded after the Dwfl was built */

static void test_refresh(struct unwinder *u, struct addrspace *as)
{
	static const char *const libs[][2] = {
	    {"libsqlite3.so.0", "sqlite3_libversion"},
	    {"libjansson.so.4", "jansson_version_str"},
	};
	uint64_t regs[UNWIND_NREGS] = {}, pcs[4];
	enum unwind_status status;
	void *handle = NULL, *fn = NULL;
	int n, r;

	for (size_t i = 0; i < ARRAY_SIZE(libs) && !fn; i++) {
		if (dlopen(libs[i][0], RTLD_NOW | RTLD_NOLOAD))
			continue; /* already loaded: not new */
		handle = dlopen(libs[i][0], RTLD_NOW | RTLD_LOCAL);
		fn = handle ? dlsym(handle, libs[i][1]) : NULL;
	}
	if (!fn) {
		check_skip("refresh", "none of libsqlite3.so.0, libjansson.so.4 could be dlopen()ed");
		return;
	}
	/* a leaf function: its return address is at SP, which has no copy */
	regs[UNWIND_REG_IP] = (uint64_t)(uintptr_t)fn;
	regs[UNWIND_REG_SP] = 0x7ff000000000ULL;
	n = unwinder__unwind(u, as, regs, NULL, 0, pcs, ARRAY_SIZE(pcs), &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(status, UNWIND_NO_CFI); /* not in the address space yet */
	r = addrspace__refresh(as);
	CHECK(r > 0);
	n = unwinder__unwind(u, as, regs, NULL, 0, pcs, ARRAY_SIZE(pcs), &status);
	CHECK_INT_EQ(n, 1);
	CHECK_INT_EQ(status, UNWIND_NO_STACK); /* its CFI was found: the file was reported */
	printf("refresh: %d new mapping(s), the new library's CFI is used\n", r);
	/* handle stays open: its mapping is in @as */
}

/* ---------------------------------------------------------------------- */
/* Samples of deep-nofp */

/*
 * fp_walk() - what a frame-pointer unwinder makes of a sample: [rbp] is the
 * caller's rbp and [rbp + 8] the return address, read from the stack copy.
 */
static int fp_walk(const struct sample *s, uint64_t *pcs, int max)
{
	uint64_t sp = s->regs[UNWIND_REG_SP], bp = s->regs[UNWIND_REG_BP];
	int n = 0;

	pcs[n++] = s->regs[UNWIND_REG_IP];
	while (n < max) {
		uint64_t next, ret;

		if (bp < sp || bp - sp > s->stack_len || s->stack_len - (bp - sp) < 16)
			break;
		memcpy(&next, s->stack + (bp - sp), 8);
		memcpy(&ret, s->stack + (bp - sp) + 8, 8);
		if (ret == 0)
			break;
		pcs[n++] = ret;
		if (next <= bp)
			break;
		bp = next;
	}
	return n;
}

/* reaches_main() - whether a frame after the leaf is main() or the worker's worker_main(). */
static bool reaches_main(const struct stack *st)
{
	for (int i = 1; i < st->n; i++)
		if (fn_is(st, i, "main") || fn_is(st, i, "worker_main"))
			return true;
	return false;
}

enum path_kind { PATH_NONE, PATH_QSORT, PATH_STDSORT, PATH_CLOCK };

/*
 * hot_path() - which hot path @st shows whole and in order, leaf to root:
 *   cmp_c ← qsort internals in libc (msort_with_tmp, qsort_r) ← sort_c
 *   cmp_cpp ← std::sort internals (unless inlined) ← the call_once lambda
 *     ← libc's __pthread_once_slow ← sort_cpp
 *   the vDSO ← libc's clock_gettime ← clock_spin
 * then, for all three: ← recursive ×5 ← level2 ← level1 ← run ← main or
 * worker_main. PATH_NONE if anything is missing or out of order.
 */
static enum path_kind hot_path(const struct stack *st)
{
	enum path_kind kind;
	int i = 0, j;

	if (fn_is(st, 0, "cmp_c")) {
		kind = PATH_QSORT;
		for (i = 1; i < st->n && mod_has(st, i, "libc.so") &&
			    (fn_has(st, i, "msort") || fn_has(st, i, "qsort"));
		     i++)
			;
		if (i < 2 || !fn_is(st, i, "sort_c"))
			return PATH_NONE;
	} else if (fn_is(st, 0, "cmp_cpp")) {
		kind = PATH_STDSORT;
		/* std::__introsort_loop ...; none when the final insertion sort is inlined */
		for (i = 1; i < st->n && fn_has(st, i, "std::__"); i++)
			;
		/* the function call_once hands pthread_once:
		 * "...call_once<sort_cpp::{lambda()#1}>...::_FUN()" */
		if (!fn_has(st, i, "sort_cpp") || !fn_has(st, i, "lambda"))
			return PATH_NONE;
		i++;
		if (!fn_is(st, i, "__pthread_once_slow"))
			return PATH_NONE;
		i++;
		if (!fn_is(st, i, "sort_cpp"))
			return PATH_NONE;
	} else if (mod_has(st, 0, "[vdso]") ||
		   (mod_has(st, 0, "libc.so") && fn_has(st, 0, "clock_gettime"))) {
		kind = PATH_CLOCK;
		for (i = 1; i < st->n && !fn_is(st, i, "clock_spin"); i++)
			if (!mod_has(st, i, "[vdso]") && !mod_has(st, i, "libc.so"))
				return PATH_NONE;
		if (!fn_is(st, i, "clock_spin"))
			return PATH_NONE;
	} else {
		return PATH_NONE;
	}
	for (j = 1; j <= 5; j++)
		if (!fn_is(st, i + j, "recursive"))
			return PATH_NONE;
	i += 5;
	if (!fn_is(st, i + 1, "level2") || !fn_is(st, i + 2, "level1") || !fn_is(st, i + 3, "run"))
		return PATH_NONE;
	if (!fn_is(st, i + 4, "main") && !fn_is(st, i + 4, "worker_main"))
		return PATH_NONE;
	return kind;
}

/*
 * consistent() - whether every frame of @st that the workload's code
 * determines is where it must be, whatever the leaf: from the root, _start
 * ← __libc_start_main ← __libc_start_call_main ← main ← run, or clone3 ←
 * start_thread ← (libstdc++) ← worker_main ← run; then, leafward of run if
 * the sample is deeper, level1 ← level2 ← recursive ×5 ← sort_c, sort_cpp or
 * clock_spin. A frame skipped, doubled or invented by a wrong unwind fails.
 */
static bool consistent(const struct stack *st)
{
	int last = st->n - 1, r;

	if (fn_is(st, last, "_start")) {
		r = last - 4;
		if (!fn_has(st, last - 1, "__libc_start_main") ||
		    !fn_is(st, last - 2, "__libc_start_call_main") || !fn_is(st, last - 3, "main"))
			return false;
	} else if (fn_is(st, last, "__clone3") || fn_is(st, last, "clone3")) {
		r = last - 4;
		if (!fn_is(st, last - 1, "start_thread") || !mod_has(st, last - 2, "libstdc++") ||
		    !fn_is(st, last - 3, "worker_main"))
			return false;
	} else {
		return false;
	}
	if (r < 0)
		return true; /* the leaf is in main or worker_main */
	if (!fn_is(st, r, "run"))
		return r == 0; /* a leaf called by main (vector, thread), not deeper */
	if (r == 0)
		return true; /* in run */
	if (!fn_is(st, r - 1, "level1")) {
		/* what run calls itself: clock_gettime (and the vDSO), operator new */
		for (int i = 0; i < r; i++)
			if (!mod_has(st, i, "libc.so") && !mod_has(st, i, "[vdso]") &&
			    !mod_has(st, i, "libstdc++"))
				return false;
		return true;
	}
	for (int i = 1; i <= 7 && r - i >= 0; i++) {
		const char *want = i == 1 ? "level1" : i == 2 ? "level2" : "recursive";

		if (!fn_is(st, r - i, want))
			return false;
	}
	if (r - 8 < 0)
		return true;
	return fn_is(st, r - 8, "sort_c") || fn_is(st, r - 8, "sort_cpp") ||
	       fn_is(st, r - 8, "clock_spin");
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void test_samples(const char *path)
{
	static struct sample samples[N_SAMPLES];
	static struct stack stacks[N_SAMPLES], fp;
	static double us[N_SAMPLES];
	struct ring_stats ring = {};
	struct addrspace *as = NULL;
	struct unwinder *u;
	struct symbolizer *s;
	unsigned long statuses[5] = {}, end_ok = 0, dwarf_main = 0, fp_main = 0, frames = 0;
	unsigned long paths[4] = {}, threads_seen[2] = {}, printed = 0, n_consistent = 0;
	uint64_t cold_ns, warm_ns, best_pass_ns;
	bool have_vdso = getauxval(AT_SYSINFO_EHDR) != 0;
	unsigned long vdso_excluded = 0;
	int m = 0; /* samples judged */
	int n = 0;

	if (geteuid() != 0) {
		check_skip("samples",
		     "not root (perf_event_open on another process and /proc/PID/map_files)");
		return;
	}
	n = collect((char *[]){(char *)path, "30", NULL}, "DEEP_NOFP_WAIT=1", COLLECT_STDIN_GO, 0,
		    samples, N_SAMPLES, &as, &ring);
	if (n < 0) {
		char reason[128];

		snprintf(reason, sizeof(reason), "perf_event_open(task-clock, pid, cpu): %s",
			 strerror(-n));
		check_skip("samples", reason);
		n = 0;
		goto out;
	}
	printf("samples: %d collected (%lu lost records, %lu without user registers, %lu bad)\n", n,
	       ring.lost, ring.no_regs, ring.bad);
	CHECK(n >= 200);
	CHECK_INT_EQ(ring.bad, 0);
	if (n == 0)
		goto out;

	u = unwinder__new();
	s = symbolizer__new();
	if (!u || !s)
		SETUP_FAIL("out of memory");

	/* cold: the first sample builds the Dwfl; then warm, timed per sample */
	cold_ns = now_ns(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < n; i++)
		stacks[i].n =
		    unwinder__unwind(u, as, samples[i].regs, samples[i].stack, samples[i].stack_len,
				     stacks[i].pcs, MAX_FRAMES, &stacks[i].status);
	cold_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cold_ns;
	warm_ns = 0;
	best_pass_ns = UINT64_MAX;
	for (int pass = 0; pass < WARM_PASSES; pass++) {
		uint64_t pass_ns = 0;

		for (int i = 0; i < n; i++) {
			struct stack again;
			uint64_t t0 = now_ns(CLOCK_THREAD_CPUTIME_ID), t;

			again.n = unwinder__unwind(u, as, samples[i].regs, samples[i].stack,
						   samples[i].stack_len, again.pcs, MAX_FRAMES,
						   &again.status);
			t = now_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
			pass_ns += t;
			/* per sample, the best of the passes: the least disturbed by the host */
			if (pass == 0 || (double)t / 1000.0 < us[i])
				us[i] = (double)t / 1000.0;
			CHECK_INT_EQ(again.n, stacks[i].n);
			CHECK_INT_EQ(again.status, stacks[i].status);
			CHECK(again.n < 0 || memcmp(again.pcs, stacks[i].pcs,
						    (size_t)again.n * sizeof(again.pcs[0])) == 0);
		}
		warm_ns += pass_ns;
		best_pass_ns = MIN(best_pass_ns, pass_ns);
	}

	for (int i = 0; i < n; i++) {
		struct stack *st = &stacks[i];
		enum path_kind kind;

		CHECK(st->n >= 1);
		if (st->n < 1)
			continue;
		frames += (unsigned long)st->n;
		stack_symbolize(st, s, as);
		if (!have_vdso && mod_has(st, 0, "[vdso]")) {
			vdso_excluded++;
			continue;
		}
		m++;
		statuses[st->status]++;
		if (st->status == UNWIND_END && outermost_ok(st))
			end_ok++;
		else if (printed++ < 3) {
			fprintf(stderr, "sample %d (tid %u) did not unwind to a thread start:\n", i,
				samples[i].tid);
			stack_print(stderr, st);
		}
		dwarf_main += reaches_main(st);
		kind = hot_path(st);
		paths[kind]++;
		if (consistent(st))
			n_consistent++;
		else if (printed++ < 3) {
			fprintf(stderr, "sample %d (tid %u) has a frame out of place:\n", i,
				samples[i].tid);
			stack_print(stderr, st);
		}
		threads_seen[samples[i].tid != samples[i].pid]++;

		fp = (struct stack){};
		fp.n = fp_walk(&samples[i], fp.pcs, MAX_FRAMES);
		stack_symbolize(&fp, s, as);
		fp_main += reaches_main(&fp);
	}
	qsort(us, (size_t)n, sizeof(us[0]), cmp_double);

	printf("unwind: END %lu, TRUNCATED %lu, NO_CFI %lu, NO_STACK %lu, ERROR %lu; "
	       "%lu of %d (%.1f%%) END at _start or clone3\n",
	       statuses[0], statuses[1], statuses[2], statuses[3], statuses[4], end_ok, m,
	       100.0 * end_ok / m);
	if (vdso_excluded)
		printf("unwind: %lu samples in the vDSO left out: this process has no vDSO to take "
		       "its CFI from (valgrind hides it)\n",
		       vdso_excluded);
	printf("unwind: samples from the main thread %lu, from the worker %lu\n", threads_seen[0],
	       threads_seen[1]);
	printf("hot paths whole and in order: qsort %lu, std::sort %lu, vDSO clock %lu, "
	       "other %lu (%.1f%% whole)\n",
	       paths[PATH_QSORT], paths[PATH_STDSORT], paths[PATH_CLOCK], paths[PATH_NONE],
	       100.0 * (m - (long)paths[PATH_NONE]) / m);
	printf("reach main/worker_main: CFI unwinder %lu of %d (%.1f%%), frame-pointer walk %lu "
	       "(%.1f%%)\n",
	       dwarf_main, m, 100.0 * dwarf_main / m, fp_main, 100.0 * fp_main / m);
	printf("every frame in place (root to the sort/clock function): %lu of %d (%.1f%%)\n",
	       n_consistent, m, 100.0 * n_consistent / m);
	printf("frames per sample: %.1f mean\n", (double)frames / n);
	printf(
	    "unwinder CPU time per sample, warm: %.1f us mean over %d passes (best pass %.1f), "
	    "per sample best of the passes: median %.1f, p95 %.1f, max %.1f; %.2f us per frame\n",
	    (double)warm_ns / 1000.0 / n / WARM_PASSES, WARM_PASSES,
	    (double)best_pass_ns / 1000.0 / n, us[n / 2], us[n * 95 / 100], us[n - 1],
	    (double)warm_ns / 1000.0 / WARM_PASSES / (double)frames);
	printf(
	    "unwinder CPU time per sample, first pass (builds the Dwfl, cold CFI): %.1f us mean, "
	    "%.1f ms in all\n",
	    (double)cold_ns / 1000.0 / n, (double)cold_ns / 1e6);

	CHECK(end_ok * 100 >= 95UL * (unsigned long)m);
	CHECK(n_consistent * 100 >= 99UL * (unsigned long)m);
	/* the comparators are where the time goes: most samples show a whole path */
	CHECK(paths[PATH_QSORT] * 100 >= 20UL * (unsigned long)m);
	CHECK(paths[PATH_STDSORT] * 100 >= 15UL * (unsigned long)m);
	CHECK(paths[PATH_NONE] * 100 <= 40UL * (unsigned long)m);
	CHECK(m >= n / 2);
	CHECK(threads_seen[0] > 0 && threads_seen[1] > 0);
	CHECK(fp_main * 2 <= dwarf_main);

	unwinder__free(u);
	symbolizer__free(s);
out:
	for (int i = 0; i < n; i++)
		free(samples[i].stack);
	addrspace__free(as);
	workload_kill();
}

int main(int argc, char **argv)
{
	const char *path = getenv("DEEP_NOFP");
	struct addrspace *self = NULL;
	struct unwinder *u;
	struct symbolizer *s;
	int r;

	if (argc > 1)
		path = argv[1];
	r = addrspace__new(getpid(), &self);
	if (r < 0)
		SETUP_FAIL("addrspace__new(self): %s", strerror(-r));
	u = unwinder__new();
	s = symbolizer__new();
	if (!u || !s)
		SETUP_FAIL("out of memory");
	test_bad_input(u, s, self); /* first: it checks no debuginfod client was loaded */
	test_self(u, s, self);
	test_signal(u, s, self);
	test_refresh(u, self);
	test_debug_frame(u, s, self);
	test_debug_lookup(s, self);
	test_self(u, s, self); /* after the rebuild */
	unwinder__free(u);
	unwinder__free(NULL);
	symbolizer__free(s);
	addrspace__free(self);

	if (!path || !path[0])
		check_skip("samples", "DEEP_NOFP not set and no path given");
	else
		test_samples(path);

	return check_exit_skip("test-unwind");
}
