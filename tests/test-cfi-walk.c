/*
 * test-cfi-walk.c - the stack walk in BPF from CFI tables (bpf/cfi_walk.bpf.h,
 * loaded by daemon/collect/cfi_maps.c) against libdw's unwinder
 * (symbols/unwind.c) on the very same samples: bpf/cfi_walk_test.bpf.c,
 * attached to cpu-clock events of a workload, sends per sample both the
 * BPF walk's PCs and stop reason and the registers + 32 KiB of user stack,
 * which libdw unwinds here.
 *
 * Parts (all need root and BPF; the test skips, 77, without them):
 *  - verifier: the program loads with the walk at CFI_WALK_MAX_FRAMES (128);
 *  - loader: a process with torch imported: its mappings and modules in
 *    the maps, rows and bytes per module (libc, libstdc++, the Python
 *    interpreter, libtorch_cpu.so), compile time, shared modules loaded
 *    once, and freed with the last process; a row array too small for a
 *    module: counted, that module without rows, the rest loaded;
 *  - samples: deep-nofp, spin-threads, cxx-throw, a Python program, and
 *    jit-map (a leaf in anonymous memory: the walk ends there, visibly): for
 *    each, >= 99% of the samples give libdw's PCs exactly, or a prefix of
 *    them ended by a stated reason; no BPF stack ever has a frame libdw does
 *    not have at the same depth; every difference is printed symbolized;
 *  - figures: deep-nofp at 999 Hz, the BPF run time per sample of the walk
 *    alone, of the walk with its PCs sent, and of the registers + 16 KiB
 *    stack copy sent as profile.bpf.c sends them (BPF_ENABLE_STATS,
 *    bpf_obj_get_info_by_fd()). Printed, not checked: the machine is shared.
 *
 * Workload paths come from DEEP_NOFP, SPIN_THREADS, CXX_THROW, PY_WORKLOADS,
 * JIT_MAP (tests/meson.build); CFI_WALK_ONLY=NAME (deep-nofp, cxx-throw, ...) runs
 * the samples part of that workload alone (the others are skipped).
 * Nothing stays loaded: every BPF object, link and event is closed before
 * the test exits.
 *
 * Exit status: 0 all parts passed, 1 a check failed, 77 skipped (the
 * reason is printed), 99 setup error.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "cfi_walk_test.skel.h"

#include "cfi_walk_test.h"
#include "check.h"
#include "check_workload.h"
#include "collect/cfi_maps.h"
#include "symbols/cfi_unwind.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

#define N_SAMPLES 400
#define SAMPLE_FREQ_HZ 999
#define MAX_EVENTS 256 /* perf events: one per thread of the workload */
#define RINGBUF_BYTES (16u << 20)
#define COLLECT_TIMEOUT_NS (20 * NSEC_PER_SEC)
#define FIGURE_SECONDS 4

static const char *stop_name(unsigned s)
{
	static const char *const names[] = {"end",	  "max-frames", "no-process", "no-mapping",
					    "no-table",	  "no-cfi",	"expr",	      "signal",
					    "read-fault", "bp-lost",	"bad-frame"};

	return s < ARRAY_SIZE(names) ? names[s] : "?";
}

static const char *status_str(enum unwind_status s)
{
	static const char *const names[] = {"END", "TRUNCATED", "NO_CFI", "NO_STACK", "ERROR"};

	return (unsigned)s < ARRAY_SIZE(names) ? names[s] : "?";
}

static long perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group,
			    unsigned long flags)
{
	return syscall(SYS_perf_event_open, attr, pid, cpu, group, flags);
}

/* ---------------------------------------------------------------------- */
/* The BPF side: the test program loaded, its maps filled, attached */

struct run {
	struct cfi_walk_test_bpf *skel;
	struct cfi_maps *maps;
	struct ring_buffer *rb;
	int fds[MAX_EVENTS];
	struct bpf_link *links[MAX_EVENTS];
	size_t n_events;
	/* what was received */
	struct cfi_walk_test_event **events;
	size_t n, cap;
	unsigned long bad;
	bool keep_none; /* figures: only the cost matters */
};

/* What a run does per sample (the program's .rodata). */
struct run_config {
	bool walk;
	uint32_t copy_stack_bytes;
	bool send;
	uint32_t rows_cap;
};

/*
 * run_load() - open and load the test program for @tgid with @cfg, and a
 * loader on its maps. Returns 0, or the -errno of the load (the caller
 * skips on -EPERM). Prints the verifier's instruction count once.
 */
static int run_load(struct run *run, pid_t tgid, const struct run_config *cfg)
{
	static bool printed;
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);
	int ncpus = libbpf_num_possible_cpus(), r;

	*run = (struct run){};
	run->skel = cfi_walk_test_bpf__open();
	if (!run->skel)
		return -errno;
	if (ncpus <= 0)
		SETUP_FAIL("libbpf_num_possible_cpus: %d", ncpus);
	run->skel->rodata->target_tgid = (uint32_t)tgid;
	run->skel->rodata->walk = cfg->walk;
	run->skel->rodata->copy_stack_bytes = cfg->copy_stack_bytes;
	run->skel->rodata->send = cfg->send;
	/* woken per 1/16 of the ring, as the sampler is (its reader polls every 50 ms too) */
	run->skel->rodata->wakeup_bytes = RINGBUF_BYTES / 16;
	if (bpf_map__set_max_entries(run->skel->maps.scratch, (uint32_t)ncpus) < 0 ||
	    bpf_map__set_max_entries(run->skel->maps.events, RINGBUF_BYTES) < 0)
		SETUP_FAIL("bpf_map__set_max_entries: %m");
	r = cfi_walk_test_bpf__load(run->skel);
	if (r < 0)
		return r;
	if (!printed && bpf_obj_get_info_by_fd(bpf_program__fd(run->skel->progs.cfi_walk_sample),
					       &info, &len) == 0) {
		printf("verifier: the walk (%d frames) loads: %u instructions verified, %u in "
		       "the program\n",
		       CFI_WALK_MAX_FRAMES, info.verified_insns, info.xlated_prog_len / 8);
		printed = true;
	}
	r = cfi_maps__new(bpf_map__fd(run->skel->maps.cfi_procs),
			  bpf_map__fd(run->skel->maps.cfi_modules),
			  bpf_map__fd(run->skel->maps.cfi_rows), cfg->rows_cap, &run->maps);
	if (r < 0)
		SETUP_FAIL("cfi_maps__new: %s", strerror(-r));
	return 0;
}

/* Ring buffer callback: keep a checked copy of each record. */
static int on_record(void *ctx, void *data, size_t size)
{
	struct run *run = ctx;
	const struct cfi_walk_test_event *e = data;
	size_t head = offsetof(struct cfi_walk_test_event, stack);

	if (size < head || e->stack_size > CFI_WALK_TEST_STACK_BYTES ||
	    size != head + e->stack_size || e->stack_offset >= 4096 ||
	    (e->stack_size && e->stack_offset >= e->stack_size) || e->n_pcs > CFI_WALK_MAX_FRAMES ||
	    e->stop > CFI_STOP_NR) {
		run->bad++;
		return 0;
	}
	if (run->keep_none || run->n >= N_SAMPLES)
		return 0;
	if (grow_array((void **)&run->events, &run->cap, run->n, sizeof(*run->events)) < 0)
		SETUP_FAIL("out of memory");
	run->events[run->n] = malloc(size);
	if (!run->events[run->n])
		SETUP_FAIL("out of memory");
	memcpy(run->events[run->n], data, size);
	/* a page the program could not read holds an earlier sample's bytes */
	for (uint32_t pg = 0; pg < e->stack_size / 4096; pg++)
		if (e->missing_pages & (1u << pg))
			memset(run->events[run->n]->stack + pg * 4096, 0, 4096);
	run->n++;
	return 0;
}

/*
 * run_attach() - a cpu-clock event at SAMPLE_FREQ_HZ on every thread of
 * @pid now (inherit: threads they create later too), each running the
 * program, disabled until run_enable(). Returns the events opened.
 */
static size_t run_attach(struct run *run, pid_t pid)
{
	struct perf_event_attr attr = {
	    .size = sizeof(attr),
	    .type = PERF_TYPE_SOFTWARE,
	    .config = PERF_COUNT_SW_CPU_CLOCK,
	    .sample_freq = SAMPLE_FREQ_HZ,
	    .freq = 1,
	    .disabled = 1,
	    .inherit = 1,
	};
	pid_t tids[MAX_EVENTS];
	size_t n_tids = workload_tids(pid, tids, MAX_EVENTS);

	for (size_t i = 0; i < n_tids; i++) {
		int fd = (int)perf_event_open(&attr, tids[i], -1, -1, PERF_FLAG_FD_CLOEXEC);

		if (fd < 0)
			continue; /* the thread is gone */
		run->links[run->n_events] =
		    bpf_program__attach_perf_event(run->skel->progs.cfi_walk_sample, fd);
		if (!run->links[run->n_events])
			SETUP_FAIL("bpf_program__attach_perf_event: %m");
		run->fds[run->n_events++] = fd;
	}
	run->rb = ring_buffer__new(bpf_map__fd(run->skel->maps.events), on_record, run, NULL);
	if (!run->rb)
		SETUP_FAIL("ring_buffer__new: %m");
	return run->n_events;
}

static void run_enable(struct run *run, bool on)
{
	for (size_t i = 0; i < run->n_events; i++)
		ioctl(run->fds[i], on ? PERF_EVENT_IOC_ENABLE : PERF_EVENT_IOC_DISABLE, 0);
}

/* run_collect() - read records until N_SAMPLES or COLLECT_TIMEOUT_NS; then disable. */
static void run_collect(struct run *run)
{
	uint64_t deadline = now_ns(CLOCK_MONOTONIC) + COLLECT_TIMEOUT_NS;

	while (run->n < N_SAMPLES && now_ns(CLOCK_MONOTONIC) < deadline)
		ring_buffer__poll(run->rb, 50);
	run_enable(run, false);
	ring_buffer__consume(run->rb);
}

/* run_stops() - the per-CPU counters of cfi_walk_stops summed, in @ret[CFI_WALK_COUNTERS]. */
static void run_stops(struct run *run, uint64_t *ret)
{
	int ncpus = libbpf_num_possible_cpus();
	uint64_t vals[ncpus > 0 ? ncpus : 1];

	for (uint32_t k = 0; k < CFI_WALK_COUNTERS; k++) {
		ret[k] = 0;
		if (bpf_map_lookup_elem(bpf_map__fd(run->skel->maps.cfi_walk_stops), &k, vals) < 0)
			continue;
		for (int c = 0; c < ncpus; c++)
			ret[k] += vals[c];
	}
}

/* run_free() - everything of @run closed: events, links, maps, the program. */
static void run_free(struct run *run)
{
	ring_buffer__free(run->rb);
	for (size_t i = 0; i < run->n_events; i++) {
		bpf_link__destroy(run->links[i]);
		close(run->fds[i]);
	}
	cfi_maps__free(run->maps);
	cfi_walk_test_bpf__destroy(run->skel);
	for (size_t i = 0; i < run->n; i++)
		free(run->events[i]);
	free(run->events);
	*run = (struct run){};
}

/* ---------------------------------------------------------------------- */
/* Printing */

static void pcs_print(FILE *f, const char *title, const uint64_t *pcs, int n, const char *how,
		      struct symbolizer *s, const struct addrspace *as)
{
	fprintf(f, "  %s: %s, %d frames:\n", title, how, n);
	for (int i = 0; i < n; i++) {
		struct frame_info fi;

		symbolizer__user(s, as, pcs[i], i > 0, &fi);
		fprintf(f, "    #%-3d %#" PRIx64 " %s (%s+%#" PRIx64 ")\n", i, pcs[i],
			fi.function ? fi.function : "?", fi.module, fi.rel_addr);
	}
}

/* Whether the sampled instruction @pcs[0] is in the process's [vdso]. */
static bool in_vdso(struct symbolizer *s, const struct addrspace *as, const uint64_t *pcs)
{
	struct frame_info fi;

	symbolizer__user(s, as, pcs[0], false, &fi);
	return fi.module && strcmp(fi.module, "[vdso]") == 0;
}

/* ---------------------------------------------------------------------- */
/* The loader on a process with torch imported */

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

struct module_rows {
	const char *name;
	uint32_t rows;
};

static int cmp_rows_desc(const void *a, const void *b)
{
	const struct module_rows *x = a, *y = b;

	return (x->rows < y->rows) - (x->rows > y->rows);
}

static void test_loader(void)
{
	static const char *const shown[] = {"libc.so.6", "libstdc++.so.6.0.30", "python3.11",
					    "libtorch_cpu.so"};
	char *argv[] = {"/usr/bin/python3", "-c", "import sys, torch; sys.stdin.read()", NULL};
	struct run_config cfg = {.walk = true, .send = true, .rows_cap = CFI_WALK_MAX_ROWS};
	const struct cfi_maps_stats *st;
	struct addrspace *as = NULL;
	const struct mapping *maps;
	struct module_rows *mr;
	uint64_t t0, shown_rows = 0;
	struct run run;
	size_t n_maps, n_mr = 0;
	int go, r;

	if (access("/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so", R_OK) != 0) {
		check_skip("loader", "no /usr/lib/python3/dist-packages/torch (python3-torch)");
		return;
	}
	go = workload_start(argv, NULL, STDIN_FILENO);
	if (!wait_blocked_in_read(workload_pid, 60))
		SETUP_FAIL("python3 with torch did not start");
	r = addrspace__new(workload_pid, &as);
	if (r < 0)
		SETUP_FAIL("addrspace__new: %s", strerror(-r));
	r = run_load(&run, workload_pid, &cfg);
	if (r < 0)
		SETUP_FAIL("load: %s", strerror(-r));
	maps = addrspace__mappings(as, &n_maps);
	t0 = now_ns(CLOCK_MONOTONIC);
	CHECK_INT_EQ(cfi_maps__add_process(run.maps, (uint32_t)workload_pid, as), 0);
	st = cfi_maps__stats(run.maps);
	printf("loader: python3 + torch: %zu executable mappings (max %d), %" PRIu64
	       " modules with rows, %" PRIu64 " without, %" PRIu64 " refused (%" PRIu64
	       " no room, %" PRIu64 " wide), %" PRIu64 " mappings dropped; %" PRIu64
	       " rows = %.1f MiB (%" PRIu64
	       " arrays of %.1f MiB in all, at most %.0f MiB); %" PRIu64
	       " rows narrowed to EXPR; loaded in %.2f s (compiling %.2f s)\n",
	       n_maps, CFI_WALK_MAX_MAPPINGS, st->modules, st->modules_empty,
	       st->modules_no_room + st->modules_wide, st->modules_no_room, st->modules_wide,
	       st->mappings_dropped, st->rows_used, st->rows_used * 8 / 1048576.0, st->row_arrays,
	       st->rows_len * 8 / 1048576.0, st->rows_cap * 8 / 1048576.0, st->rows_narrowed,
	       (now_ns(CLOCK_MONOTONIC) - t0) / 1e9, st->compile_ns / 1e9);
	/* arrays made as modules need them, not grown: 0.7% of their rows unused (measured), where
	 * arrays made half as large again as a module needs leave 9.6% */
	CHECK(st->row_arrays >= 2 && st->row_arrays == st->row_arrays_made);
	CHECK(st->rows_len >= st->rows_used && st->rows_len <= st->rows_cap);
	CHECK((st->rows_len - st->rows_used) * 32 <= st->rows_used);
	CHECK(st->rows_len % CFI_MAPS_FIRST_ROWS == 0);
	CHECK(n_maps <= CFI_WALK_MAX_MAPPINGS);
	CHECK_INT_EQ(st->mappings_dropped, 0);
	CHECK_INT_EQ(st->modules_no_room + st->modules_wide, 0);
	/* offsets that do not fit 8 bytes a row are rare enough to stop the walk on */
	CHECK(st->rows_narrowed * 10000 <= st->rows_used);
	/* the largest tables, and the ones the issue asks about */
	mr = calloc(n_maps + 1, sizeof(*mr));
	if (!mr)
		SETUP_FAIL("out of memory");
	for (size_t i = 0; i < n_maps; i++) {
		uint32_t rows = 0;
		bool dup = false;

		for (size_t k = 0; k < n_mr; k++)
			dup |= strcmp(mr[k].name, base_name(maps[i].path)) == 0;
		if (dup || cfi_maps__module_rows(run.maps, &maps[i], &rows) < 0)
			continue;
		mr[n_mr++] = (struct module_rows){base_name(maps[i].path), rows};
	}
	qsort(mr, n_mr, sizeof(*mr), cmp_rows_desc);
	for (size_t k = 0; k < n_mr; k++) {
		bool show = k < 6;

		for (size_t j = 0; j < ARRAY_SIZE(shown); j++) {
			if (strcmp(mr[k].name, shown[j]) == 0) {
				show = true;
				shown_rows += mr[k].rows;
				CHECK(mr[k].rows > 1000);
			}
		}
		if (show)
			printf("loader:   #%-3zu %-28s %8u rows, %6.2f MiB\n", k + 1, mr[k].name,
			       mr[k].rows, mr[k].rows * 8 / 1048576.0);
	}
	printf("loader:   fixed maps: cfi_procs %.1f MiB (%d processes of %d mappings), "
	       "cfi_modules %.2f MiB\n",
	       CFI_WALK_MAX_PROCS * (double)sizeof(struct cfi_walk_proc) / 1048576.0,
	       CFI_WALK_MAX_PROCS, CFI_WALK_MAX_MAPPINGS,
	       CFI_WALK_MAX_MODULES * (double)sizeof(struct cfi_walk_module) / 1048576.0);
	free(mr);
	CHECK(shown_rows > 0);
	/* the same modules for a second process: shared, not loaded again */
	{
		uint64_t rows = st->rows_used, modules = st->modules;

		CHECK_INT_EQ(cfi_maps__add_process(run.maps, 1u << 30, as), 0);
		CHECK_INT_EQ(st->rows_used, rows);
		CHECK_INT_EQ(st->modules, modules);
		CHECK_INT_EQ(st->procs, 2);
		/* refreshed: the entry replaced, nothing loaded again */
		CHECK_INT_EQ(cfi_maps__add_process(run.maps, 1u << 30, as), 0);
		CHECK_INT_EQ(st->rows_used, rows);
		CHECK_INT_EQ(cfi_maps__remove_process(run.maps, 1u << 30), 0);
		CHECK_INT_EQ(st->rows_used, rows);
		CHECK_INT_EQ(cfi_maps__remove_process(run.maps, 1u << 30), -ENOENT);
		CHECK_INT_EQ(cfi_maps__remove_process(run.maps, (uint32_t)workload_pid), 0);
		CHECK_INT_EQ(st->rows_used, 0);
		CHECK_INT_EQ(st->rows_len, 0); /* the arrays went with the last process */
		CHECK_INT_EQ(st->row_arrays, 0);
		CHECK_INT_EQ(st->modules + st->modules_empty, 0);
		CHECK_INT_EQ(st->procs, 0);
	}
	run_free(&run);

	/* a row array too small for the largest modules: counted, the rest loads */
	cfg.rows_cap = 512u << 10;
	r = run_load(&run, workload_pid, &cfg);
	if (r < 0)
		SETUP_FAIL("load: %s", strerror(-r));
	CHECK_INT_EQ(cfi_maps__add_process(run.maps, (uint32_t)workload_pid, as), 0);
	st = cfi_maps__stats(run.maps);
	printf("loader: with a %.0f MiB row array: %" PRIu64 " modules with rows, %" PRIu64
	       " refused for room (%" PRIu64 " rows used)\n",
	       cfg.rows_cap * 8 / 1048576.0, st->modules, st->modules_no_room, st->rows_used);
	CHECK(st->modules_no_room >= 1);
	CHECK(st->modules > 10);
	for (size_t i = 0; i < n_maps; i++) {
		uint32_t rows = 1;

		if (strcmp(base_name(maps[i].path), "libtorch_cpu.so") == 0) {
			CHECK_INT_EQ(cfi_maps__module_rows(run.maps, &maps[i], &rows), 0);
			CHECK_INT_EQ(rows, 0);
		}
	}
	run_free(&run);
	close(go);
	addrspace__free(as);
	workload_kill();
}

/* ---------------------------------------------------------------------- */
/* Samples: the BPF walk against libdw */

/* What one sample's comparison found. */
enum verdict {
	SAME,	     /* the same PCs */
	PREFIX,	     /* the BPF walk stopped early, with a reason; its PCs are libdw's first */
	BEYOND_COPY, /* libdw stopped outside the stack copy (NO_STACK), the BPF walk,
		      * reading the live stack, went on: libdw's PCs are the BPF walk's first.
		      * Seen in libgcc's epilogues, whose CFI still has rbp saved 32 bytes
		      * below rsp after the pop (no DW_CFA_restore): the live read gets the
		      * popped value, the copy starts at rsp */
	DIFFERENT,   /* a frame libdw does not have at that depth */
	/*
	 * DIFFERENT in a sample taken in the vDSO, where the tables walked in
	 * user space over the copy give the BPF walk's PCs: libdw's walk out of
	 * the vDSO, not the tables, is wrong. Seen in jit's samples in
	 * __vdso_clock_gettime: libdw left main out, above clock_gettime in libc,
	 * whose CFI there is rsp+16, and main's call of clock_gettime@plt is at
	 * the BPF walk's return address (objdump). At most 1% of the samples.
	 */
	LIBDW_VDSO,
	NR_VERDICTS,
};

static const char *const verdict_names[] = {"same", "prefix", "beyond-copy", "different",
					    "libdw-vdso"};

static enum verdict compare(const struct cfi_walk_test_event *e, const uint64_t *ref, int n_ref,
			    enum unwind_status ref_status)
{
	int n = (int)e->n_pcs, common = MIN(n, n_ref);

	if (memcmp(e->pcs, ref, (size_t)common * sizeof(*ref)) != 0)
		return DIFFERENT;
	if (n == n_ref)
		return SAME;
	if (n < n_ref)
		return e->stop != CFI_STOP_END ? PREFIX : DIFFERENT;
	return ref_status == UNWIND_NO_STACK ? BEYOND_COPY : DIFFERENT;
}

/*
 * compare_workload() - sample @argv (started with @env; with @stdin_go it
 * waits for a byte on stdin, else it runs @settle_ms first) and compare
 * the BPF walk with libdw on every sample. @expect_stop: the stop reason
 * most (>= 90%) walks must end with: CFI_STOP_END for whole stacks.
 */
static void compare_workload(const char *name, char *const argv[], const char *env, bool stdin_go,
			     int settle_ms, enum cfi_walk_stop expect_stop)
{
	struct run_config cfg = {.walk = true,
				 .copy_stack_bytes = CFI_WALK_TEST_STACK_BYTES - 4096,
				 .send = true,
				 .rows_cap = CFI_MAPS_DEFAULT_ROWS};
	unsigned long verdicts[NR_VERDICTS] = {}, stops[CFI_STOP_NR + 1] = {}, frames = 0;
	unsigned long cfi_same = 0;
	uint64_t counted[CFI_WALK_COUNTERS], counted_all = 0;
	struct addrspace *as = NULL;
	struct unwinder *u = unwinder__new();
	struct cfi_unwinder *cu = cfi_unwinder__new();
	struct symbolizer *s = symbolizer__new();
	const struct cfi_maps_stats *st;
	struct run run;
	int go, r;

	if (!u || !cu || !s)
		SETUP_FAIL("out of memory");
	if (getenv("CFI_WALK_ONLY") && strcmp(getenv("CFI_WALK_ONLY"), name) != 0) {
		check_skip(name, "not in CFI_WALK_ONLY");
		return;
	}
	go = workload_start(argv, env, STDIN_FILENO);
	if (stdin_go) {
		if (!wait_blocked_in_read(workload_pid, 60))
			SETUP_FAIL("%s did not start", name);
	} else {
		usleep((useconds_t)settle_ms * 1000);
	}
	r = addrspace__new(workload_pid, &as);
	if (r < 0)
		SETUP_FAIL("addrspace__new(%s): %s", name, strerror(-r));
	r = run_load(&run, workload_pid, &cfg);
	if (r < 0)
		SETUP_FAIL("load: %s", strerror(-r));
	CHECK_INT_EQ(cfi_maps__add_process(run.maps, (uint32_t)workload_pid, as), 0);
	if (run_attach(&run, workload_pid) == 0)
		SETUP_FAIL("%s: no perf event could be opened", name);
	run_enable(&run, true);
	if (stdin_go && write(go, "g", 1) != 1)
		SETUP_FAIL("write to the workload: %m");
	run_collect(&run);
	kill(workload_pid, SIGSTOP); /* its /proc files stay for the unwinder */
	run_stops(&run, counted);

	CHECK(run.n >= 100);
	CHECK_INT_EQ(run.bad, 0);
	for (size_t i = 0; i < run.n; i++) {
		const struct cfi_walk_test_event *e = run.events[i];
		uint64_t ref[CFI_WALK_MAX_FRAMES], tab[CFI_WALK_MAX_FRAMES];
		enum unwind_status ref_status, tab_status;
		size_t len = e->stack_size ? e->stack_size - e->stack_offset : 0;
		const void *stack = e->stack + e->stack_offset;
		int n_ref, n_tab;
		bool tab_same;
		enum verdict v;

		n_ref = unwinder__unwind(u, as, (const uint64_t *)e->regs, stack, len, ref,
					 CFI_WALK_MAX_FRAMES, &ref_status);
		/* the same tables walked in user space over the copy: tells a table
		 * problem from a BPF walk problem when they differ */
		n_tab = cfi_unwinder__unwind(cu, as, (const uint64_t *)e->regs, stack, len, tab,
					     CFI_WALK_MAX_FRAMES, &tab_status, NULL);
		v = compare(e, ref, n_ref, ref_status);
		tab_same = n_tab == (int)e->n_pcs &&
			   memcmp(tab, e->pcs, (size_t)n_tab * sizeof(*tab)) == 0;
		if (v == DIFFERENT && tab_same && e->n_pcs > 0 &&
		    in_vdso(s, as, (const uint64_t *)e->pcs))
			v = LIBDW_VDSO;
		verdicts[v]++;
		stops[MIN(e->stop, (uint32_t)CFI_STOP_NR)]++;
		frames += e->n_pcs;
		cfi_same += tab_same;
		if (v != SAME) { /* every difference, symbolized */
			char how[64];

			fprintf(stderr,
				"%s: sample %zu (tid %u) is %s; rsp %#" PRIx64 ", rbp %#" PRIx64
				", stack copy %u bytes from rsp's page, pages not read %#x:\n",
				name, i, e->tid, verdict_names[v], (uint64_t)e->regs[7],
				(uint64_t)e->regs[6], e->stack_size, e->missing_pages);
			snprintf(how, sizeof(how), "stop %s", stop_name(e->stop));
			pcs_print(stderr, "BPF walk", (const uint64_t *)e->pcs, (int)e->n_pcs, how,
				  s, as);
			snprintf(how, sizeof(how), "status %s, %zu bytes of stack copy",
				 status_str(ref_status), len);
			pcs_print(stderr, "libdw", ref, n_ref, how, s, as);
			snprintf(how, sizeof(how), "status %s", status_str(tab_status));
			pcs_print(stderr, "tables in user space", tab, n_tab, how, s, as);
		}
	}
	for (int k = 0; k < CFI_STOP_NR; k++)
		counted_all += counted[k];
	printf("samples %s: %zu samples, %.1f BPF frames each: same as libdw %lu (%.1f%%), "
	       "prefix with a reason %lu, beyond libdw's stack copy %lu, different %lu, "
	       "libdw wrong out of the vDSO %lu; user-space table walk gives the BPF PCs on %lu\n",
	       name, run.n, run.n ? (double)frames / (double)run.n : 0.0, verdicts[SAME],
	       run.n ? 100.0 * (double)verdicts[SAME] / (double)run.n : 0.0, verdicts[PREFIX],
	       verdicts[BEYOND_COPY], verdicts[DIFFERENT], verdicts[LIBDW_VDSO], cfi_same);
	printf("samples %s: BPF stops:", name);
	for (int k = 0; k < CFI_STOP_NR; k++)
		if (stops[k])
			printf(" %s %lu", stop_name((unsigned)k), stops[k]);
	printf("; counted in cfi_walk_stops: %" PRIu64 " walks\n", counted_all);
	printf("samples %s: rows from the row cache %" PRIu64 ", from a search %" PRIu64
	       "; stack reads %.2f a walk, %.0f bytes a walk\n",
	       name, counted[CFI_WALK_ROW_CACHE_HITS], counted[CFI_WALK_ROW_CACHE_MISSES],
	       (double)counted[CFI_WALK_STACK_READS] / (double)(counted_all ? counted_all : 1),
	       (double)counted[CFI_WALK_STACK_BYTES] / (double)(counted_all ? counted_all : 1));
	st = cfi_maps__stats(run.maps);
	printf("samples %s: %" PRIu64 " row arrays of %" PRIu64 " rows (%" PRIu64 " used)\n", name,
	       st->row_arrays, st->rows_len, st->rows_used);
	/* python3.11 and libc need more than one array: these PCs came from slots beyond 0 */
	if (strcmp(name, "python") == 0)
		CHECK(st->row_arrays >= 2);
	/* >= 99% the same, or ended early with a reason; never a frame libdw does not have */
	CHECK((verdicts[SAME] + verdicts[PREFIX] + verdicts[BEYOND_COPY]) * 100 >= 99UL * run.n);
	CHECK_INT_EQ(verdicts[DIFFERENT], 0);
	CHECK(verdicts[SAME] * 100 >= 95UL * run.n);
	CHECK(counted_all >= run.n); /* every walk counted (a few may not have been sent) */
	/* stacks repeat their return addresses: most rows come from the row cache, and the
	 * walks above, which gave libdw's frames, used them. Judged where the walks looked up
	 * rows at all: jit's stacks end in JIT code without CFI, so a sample that happens to
	 * land in clock_gettime() brings a handful of rows, none of them seen before. */
	if (counted[CFI_WALK_ROW_CACHE_HITS] + counted[CFI_WALK_ROW_CACHE_MISSES] >= 200)
		CHECK(counted[CFI_WALK_ROW_CACHE_HITS] * 10 >=
		      8 * (counted[CFI_WALK_ROW_CACHE_HITS] +
			   counted[CFI_WALK_ROW_CACHE_MISSES]));
	CHECK(stops[expect_stop] * 10 >= 9UL * run.n);

	run_free(&run);
	close(go);
	unwinder__free(u);
	cfi_unwinder__free(cu);
	symbolizer__free(s);
	addrspace__free(as);
	workload_kill();
}

static void test_samples(void)
{
	const char *deep = getenv("DEEP_NOFP"), *spin = getenv("SPIN_THREADS");
	const char *cxx = getenv("CXX_THROW"), *py_dir = getenv("PY_WORKLOADS");
	const char *jit = getenv("JIT_MAP");
	char py[PATH_MAX];

	if (!deep || !spin || !cxx || !py_dir || !jit)
		SETUP_FAIL(
		    "DEEP_NOFP, SPIN_THREADS, CXX_THROW, PY_WORKLOADS and JIT_MAP must be set");
	compare_workload("deep-nofp", (char *[]){(char *)deep, "30", NULL}, "DEEP_NOFP_WAIT=1",
			 true, 0, CFI_STOP_END);
	compare_workload("spin-threads", (char *[]){(char *)spin, "--seconds", "30", NULL}, NULL,
			 false, 300, CFI_STOP_END);
	compare_workload("cxx-throw", (char *[]){(char *)cxx, "30", NULL}, NULL, false, 200,
			 CFI_STOP_END);
	snprintf(py, sizeof(py), "%s/py-deep.py", py_dir);
	compare_workload("python", (char *[]){"/usr/bin/python3", py, "30", NULL}, NULL, false, 500,
			 CFI_STOP_END);
	/* code in anonymous memory: the walk ends visibly at the leaf, as libdw's */
	compare_workload("jit", (char *[]){(char *)jit, "30", NULL}, NULL, false, 300,
			 CFI_STOP_NO_MAPPING);
}

/* ---------------------------------------------------------------------- */
/* Figures: BPF run time per sample */

/*
 * figure() - deep-nofp sampled at SAMPLE_FREQ_HZ for FIGURE_SECONDS with
 * the program configured as @cfg; prints its run time per run.
 */
static double figure(const char *what, const struct run_config *cfg, const char *deep)
{
	struct bpf_prog_info info = {};
	uint32_t len = sizeof(info);
	struct addrspace *as = NULL;
	struct run run;
	double ns = 0;
	int go, r;

	go = workload_start((char *[]){(char *)deep, "30", NULL}, "DEEP_NOFP_WAIT=1", STDIN_FILENO);
	if (!wait_blocked_in_read(workload_pid, 60))
		SETUP_FAIL("deep-nofp did not start");
	r = addrspace__new(workload_pid, &as);
	if (r < 0)
		SETUP_FAIL("addrspace__new: %s", strerror(-r));
	r = run_load(&run, workload_pid, cfg);
	if (r < 0)
		SETUP_FAIL("load: %s", strerror(-r));
	CHECK_INT_EQ(cfi_maps__add_process(run.maps, (uint32_t)workload_pid, as), 0);
	run_attach(&run, workload_pid);
	run_enable(&run, true);
	if (write(go, "g", 1) != 1)
		SETUP_FAIL("write to the workload: %m");
	run.keep_none = true;
	for (uint64_t end = now_ns(CLOCK_MONOTONIC) + FIGURE_SECONDS * NSEC_PER_SEC;
	     now_ns(CLOCK_MONOTONIC) < end;)
		ring_buffer__poll(run.rb, 50);
	run_enable(&run, false);
	if (bpf_obj_get_info_by_fd(bpf_program__fd(run.skel->progs.cfi_walk_sample), &info, &len) <
	    0)
		SETUP_FAIL("bpf_obj_get_info_by_fd: %m");
	if (info.run_cnt)
		ns = (double)info.run_time_ns / (double)info.run_cnt;
	printf("figures: deep-nofp at %d Hz, %s: %llu runs, %.2f us of BPF per sample\n",
	       SAMPLE_FREQ_HZ, what, (unsigned long long)info.run_cnt, ns / 1e3);
	CHECK(info.run_cnt > 0);
	run_free(&run);
	close(go);
	addrspace__free(as);
	workload_kill();
	return ns;
}

static void test_figures(void)
{
	const char *deep = getenv("DEEP_NOFP");
	struct run_config walk = {.walk = true, .rows_cap = CFI_MAPS_DEFAULT_ROWS};
	struct run_config walk_send = walk;
	struct run_config copy = {
	    .copy_stack_bytes = 16384, .send = true, .rows_cap = CFI_MAPS_DEFAULT_ROWS};
	int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	double w, c;

	walk_send.send = true;
	if (stats_fd < 0) {
		check_skip("figures", "BPF_ENABLE_STATS refused");
		return;
	}
	w = figure("the walk alone", &walk, deep);
	figure("the walk, its PCs sent (a record of 1.2 KiB)", &walk_send, deep);
	c = figure("registers + 16 KiB stack copy sent, as profile.bpf.c (--unwind auto)", &copy,
		   deep);
	if (w > 0)
		printf("figures: the walk costs %.2fx the stack copy it would replace\n", w / c);
	close(stats_fd); /* run-time statistics off again, unless someone else holds them */
}

int main(void)
{
	if (geteuid() != 0) {
		check_skip("all", "not root (BPF, perf events on another process)");
		return check_exit_skip("test-cfi-walk");
	}
	{
		/* can this kernel load it at all? */
		struct run_config cfg = {.walk = true, .send = true, .rows_cap = 1024};
		struct run run;
		int r = run_load(&run, getpid(), &cfg);

		/* -EACCES, -EINVAL: the verifier refused it, a failure, not a skip */
		if (r == -EPERM || r == -ENOSYS) {
			check_skip("all", "BPF programs cannot be loaded here");
			return check_exit_skip("test-cfi-walk");
		}
		if (r < 0)
			SETUP_FAIL("the test program did not load: %s", strerror(-r));
		run_free(&run);
	}
	if (!getenv("CFI_WALK_ONLY"))
		test_loader();
	test_samples();
	if (!getenv("CFI_WALK_ONLY"))
		test_figures();
	return check_exit_skip("test-cfi-walk");
}
