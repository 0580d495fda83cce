/* uprobes.c - CUDA, NVTX and user-function probes: catalogue, symbol lookup, attach, records. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "procfs.h"
#include "symbols/elfsym.h"
#include "collect/link_closer.h"
#include "collect/uprobes.h"
#include "uprobes.skel.h"
#include "collect/bpf_util.h"
#include "util.h"

#define F_CUDA (UPROBE_F_NEST | UPROBE_F_STACK)

/* clang-format off: one catalogue entry per line reads best. */
/* Argument positions follow the x86-64 SysV ABI: a dim3 (12 bytes) takes two
 * registers, x | y << 32 then z; checked with objdump on nvcc 13 output. */
#define LAUNCH(sym, fn, dims)                                                                      \
	{                                                                                          \
		sym, GPU_KIND_LAUNCH, F_CUDA, false, dims, fn, -1, -1, -1, NULL, NULL, true        \
	}
#define ALLOC(sym, space, extra)                                                                   \
	{                                                                                          \
		sym, GPU_KIND_ALLOC, F_CUDA | UPROBE_F_OUT0 | (extra), false, GPU_DIMS_NONE, -1,   \
		    1, -1, -1, NULL, space, true                                                   \
	}
#define FREE(sym, space)                                                                           \
	{                                                                                          \
		sym, GPU_KIND_FREE, F_CUDA, false, GPU_DIMS_NONE, -1, -1, 0, -1, NULL, space, true \
	}
#define COPY(sym, size, kind, dir)                                                                 \
	{                                                                                          \
		sym, GPU_KIND_COPY, F_CUDA, false, GPU_DIMS_NONE, -1, size, -1, kind, dir, NULL,   \
		    true                                                                           \
	}
#define SYNC(sym)                                                                                  \
	{                                                                                          \
		sym, GPU_KIND_SYNC, F_CUDA, false, GPU_DIMS_NONE, -1, -1, -1, -1, NULL, NULL, true \
	}
#define NVTX(sym, kind, flags)                                                                     \
	{                                                                                          \
		sym, kind, flags, true, GPU_DIMS_NONE, -1, -1, -1, -1, NULL, NULL, false           \
	}

static const struct gpu_api catalogue[] = {
    LAUNCH("cudaLaunchKernel", 0, GPU_DIMS_DIM3_REGS),
    LAUNCH("__cudaLaunchKernel", -1, GPU_DIMS_DIM3_REGS), /* <<<>>> in CUDA 12/13: CUkernel */
    LAUNCH("cudaLaunchKernelExC", 1, GPU_DIMS_CONFIG_DIM3),
    LAUNCH("cuLaunchKernel", -1, GPU_DIMS_SCALARS),
    LAUNCH("cuLaunchKernelEx", -1, GPU_DIMS_CONFIG_U32),
    {"cudaGraphLaunch", GPU_KIND_GRAPH, F_CUDA, false, GPU_DIMS_NONE, -1, -1, -1, -1, NULL, NULL,
     true},
    ALLOC("cudaMalloc", "device", 0),
    ALLOC("cudaMallocAsync", "device", 0),
    ALLOC("cudaMallocManaged", "managed", 0),
    ALLOC("cudaMallocHost", "host", 0),
    ALLOC("cuMemAlloc_v2", "device", 0),
    ALLOC("cuMemAlloc", "device", 0),
    FREE("cudaFree", "device"),
    FREE("cudaFreeAsync", "device"),
    FREE("cudaFreeHost", "host"),
    FREE("cuMemFree_v2", "device"),
    FREE("cuMemFree", "device"),
    COPY("cudaMemcpy", 2, 3, NULL),
    COPY("cudaMemcpyAsync", 2, 3, NULL),
    COPY("cuMemcpy", 2, -1, "default"),
    COPY("cuMemcpyAsync", 2, -1, "default"),
    COPY("cuMemcpyHtoD_v2", 2, -1, "HtoD"),
    COPY("cuMemcpyDtoH_v2", 2, -1, "DtoH"),
    COPY("cuMemcpyDtoD_v2", 2, -1, "DtoD"),
    COPY("cuMemcpyHtoDAsync_v2", 2, -1, "HtoD"),
    COPY("cuMemcpyDtoHAsync_v2", 2, -1, "DtoH"),
    COPY("cuMemcpyDtoDAsync_v2", 2, -1, "DtoD"),
    SYNC("cudaDeviceSynchronize"),
    SYNC("cudaStreamSynchronize"),
    SYNC("cudaEventSynchronize"),
    SYNC("cuCtxSynchronize"),
    SYNC("cuStreamSynchronize"),
    SYNC("cuEventSynchronize"),
    /* The per-thread default stream variants (nvcc --default-stream per-thread). */
    LAUNCH("cudaLaunchKernel_ptsz", 0, GPU_DIMS_DIM3_REGS),
    LAUNCH("__cudaLaunchKernel_ptsz", -1, GPU_DIMS_DIM3_REGS),
    LAUNCH("cudaLaunchKernelExC_ptsz", 1, GPU_DIMS_CONFIG_DIM3),
    LAUNCH("cuLaunchKernel_ptsz", -1, GPU_DIMS_SCALARS),
    LAUNCH("cuLaunchKernelEx_ptsz", -1, GPU_DIMS_CONFIG_U32),
    {"cudaGraphLaunch_ptsz", GPU_KIND_GRAPH, F_CUDA, false, GPU_DIMS_NONE, -1, -1, -1, -1, NULL,
     NULL, true},
    ALLOC("cudaMallocAsync_ptsz", "device", 0),
    FREE("cudaFreeAsync_ptsz", "device"),
    COPY("cudaMemcpy_ptds", 2, 3, NULL),
    COPY("cudaMemcpyAsync_ptsz", 2, 3, NULL),
    COPY("cuMemcpy_ptds", 2, -1, "default"),
    COPY("cuMemcpyAsync_ptsz", 2, -1, "default"),
    SYNC("cudaStreamSynchronize_ptsz"),
    SYNC("cuStreamSynchronize_ptsz"),
    NVTX("nvtxRangePushA", GPU_KIND_NVTX_PUSH, UPROBE_F_STR0),
    NVTX("nvtxRangePushW", GPU_KIND_NVTX_PUSH, UPROBE_F_WSTR0),
    NVTX("nvtxRangePop", GPU_KIND_NVTX_POP, 0),
    NVTX("nvtxRangeStartA", GPU_KIND_NVTX_START, UPROBE_F_STR0),
    NVTX("nvtxRangeStartW", GPU_KIND_NVTX_START, UPROBE_F_WSTR0),
    NVTX("nvtxRangeEnd", GPU_KIND_NVTX_END, 0),
    NVTX("nvtxMarkA", GPU_KIND_NVTX_MARK, UPROBE_F_STR0),
    NVTX("nvtxMarkW", GPU_KIND_NVTX_MARK, UPROBE_F_WSTR0),
};
/* clang-format on */

/* Files searched for the catalogue, by the start of their base name; the executable too. */
static const char *const cuda_files[] = {"libcudart.so", "libcuda.so"};
static const char *const nvtx_files[] = {"libnvToolsExt.so"};

struct probe_entry {
	struct gpu_probe p;
	struct gpu_api *own_api; /* a generic probe's entry, owned */
};

struct slot_links {
	struct bpf_link **links;
	size_t n, cap;
	pid_t *pids; /* the processes probed: the target, children it forked */
	size_t nr_pids, cap_pids;
	int64_t owner;	    /* the session, copied into each probe */
	unsigned want;	    /* GPU_WANT_* of the attach */
	char uprobes[1024]; /* its generic probes, for the children */
	char **scanned;	    /* "PID path" of the files already searched for the catalogue */
	size_t nr_scanned, cap_scanned;
};

struct uprobes {
	struct uprobes_bpf *skel;
	struct record_reader reader;
	struct link_closer *closer; /* detaches: ~75 ms a link in the kernel */
	uprobes_event_fn fn;
	void *ctx;
	struct probe_entry *probes; /* by probe id; kept for the daemon's life (records of a
				     * detached session may still be in the ring buffer) */
	size_t nr_probes, cap_probes;
	struct slot_links slots[UPROBE_MAX_SLOTS];
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct uprobes *, uprobes__free)

/*
 * uprobe_event__valid() - whether the @size bytes at @data are a well-formed
 * struct uprobe_event: header complete, ustack_len within bounds and within
 * @size, slot in range, exit not before entry.
 */
bool uprobe_event__valid(const void *data, size_t size)
{
	const struct uprobe_event *e = data;

	if (size < offsetof(struct uprobe_event, ips))
		return false;
	return e->ustack_len <= UPROBE_MAX_FRAMES &&
	       size >= offsetof(struct uprobe_event, ips) + (size_t)e->ustack_len * sizeof(__u64) &&
	       e->slot < UPROBE_MAX_SLOTS && e->exit_ns >= e->entry_ns;
}

static bool handle_record(void *ctx, const void *data, size_t size)
{
	struct uprobes *g = ctx;
	const struct uprobe_event *e = data;

	if (!uprobe_event__valid(data, size) || e->probe >= g->nr_probes ||
	    g->probes[e->probe].p.slot != e->slot)
		return false;
	g->fn(g->ctx, &g->probes[e->probe].p, e, size);
	return true;
}

/*
 * uprobes__new() - load uprobes.bpf.c (nothing is attached until uprobes__attach()).
 * @ringbuf_bytes: ring buffer size, a power of two, multiple of the page
 *   size; a record is ~330 bytes + 8 per stack frame. The reader is woken
 *   only once 1/16 of it is full: call uprobes__poll() on a timer too.
 * @fn, @ctx: called from uprobes__poll() for each well-formed record.
 * Returns 0 and *@ret (owned by the caller, uprobes__free()), -EINVAL for a bad
 * size, -EPERM without CAP_BPF + CAP_PERFMON, -ENOMEM, libbpf's -errno, or
 * pthread_create()'s (the thread uprobes__detach() hands its links to).
 * Allocates; does not log.
 */
int uprobes__new(size_t ringbuf_bytes, uprobes_event_fn fn, void *ctx, struct uprobes **ret)
{
	_cleanup_(uprobes__freep) struct uprobes *g = NULL;
	int r;

	if (!ringbuf_size_ok(ringbuf_bytes))
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	*g = (struct uprobes){.fn = fn, .ctx = ctx};
	g->skel = uprobes_bpf__open();
	if (!g->skel)
		return -errno;
	g->skel->rodata->wakeup_bytes = ringbuf_bytes / 16;
	r = collector__load(g->skel->skeleton, g->skel->maps.events, ringbuf_bytes, NULL, -1,
			    handle_record, g, &g->reader);
	if (r < 0)
		return r;
	r = link_closer__new(&g->closer);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(g);
	return 0;
}

/*
 * uprobes__free() - detach every probe and free everything. Blocks until
 * the kernel has removed each probe (detaches still queued included: ~75 ms
 * a link). Accepts NULL and a half-built object.
 */
void uprobes__free(struct uprobes *g)
{
	if (!g)
		return;
	for (unsigned s = 0; g->skel && s < UPROBE_MAX_SLOTS; s++)
		uprobes__detach(g, s);
	/* Its jobs use the maps' fds: done before the skeleton goes. */
	link_closer__free(g->closer);
	record_reader__close(&g->reader);
	uprobes_bpf__destroy(g->skel);
	for (size_t i = 0; i < g->nr_probes; i++)
		free(g->probes[i].own_api);
	free(g->probes);
	free(g);
}

struct record_reader *uprobes__reader(struct uprobes *g)
{
	return &g->reader;
}

static bool keep_catalogue(const char *name, void *ctx)
{
	unsigned want = *(unsigned *)ctx;

	/* Every catalogue name starts with one of these: most of a large
	 * program's symbols are rejected without the loop. */
	if (strncmp(name, "cu", 2) != 0 && strncmp(name, "__cu", 4) != 0 &&
	    strncmp(name, "nvtx", 4) != 0)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(catalogue); i++)
		if ((catalogue[i].nvtx ? want & GPU_WANT_NVTX : want & GPU_WANT_CUDA) &&
		    strcmp(name, catalogue[i].symbol) == 0)
			return true;
	/* NVTX v3's one-time initializers: their presence without the API
	 * function itself means the calls were inlined. */
	return (want & GPU_WANT_NVTX) && strncmp(name, "nvtx", 4) == 0 &&
	       strstr(name, "_impl_init_v3") != NULL;
}

static bool keep_name(const char *name, void *ctx)
{
	return strcmp(name, ctx) == 0;
}

static int add_probe(struct uprobes *g, unsigned slot, const struct gpu_api *api,
		     struct gpu_api *own, const char *label, uint32_t *ret_id)
{
	struct probe_entry *pe;

	if (g->nr_probes >= UINT32_MAX)
		return -E2BIG;
	if (grow_array((void **)&g->probes, &g->cap_probes, g->nr_probes, sizeof(*g->probes)) < 0)
		return -ENOMEM;
	pe = &g->probes[g->nr_probes];
	pe->p.api = api;
	pe->p.slot = slot;
	pe->p.owner = g->slots[slot].owner;
	pe->own_api = own;
	snprintf(pe->p.label, sizeof(pe->p.label), "%s", label);
	*ret_id = (uint32_t)g->nr_probes++;
	return 0;
}

static int keep_link(struct uprobes *g, unsigned slot, struct bpf_link *l)
{
	struct slot_links *sl = &g->slots[slot];

	if (grow_array((void **)&sl->links, &sl->cap, sl->n, sizeof(*sl->links)) < 0)
		return -ENOMEM;
	sl->links[sl->n++] = l;
	return 0;
}

/* Attach entry and return probes for one symbol of @path at file offset @off. */
static int attach_one(struct uprobes *g, unsigned slot, pid_t pid, const char *path, uint64_t off,
		      const struct gpu_api *api, uint32_t id)
{
	struct bpf_program *progs[] = {g->skel->progs.uprobe_entry, g->skel->progs.uprobe_return};

	for (int ret = 0; ret < 2; ret++) {
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret == 1,
			    .bpf_cookie =
				UPROBE_COOKIE(id, api->flags, slot, g->skel->bss->slot_gen[slot]));
		struct bpf_link *l =
		    bpf_program__attach_uprobe_opts(progs[ret], pid, path, off, &opts);
		int r;

		if (!l)
			return -errno;
		r = keep_link(g, slot, l);
		if (r < 0) {
			bpf_link__destroy(l);
			return r;
		}
	}
	return 0;
}

static bool starts_with_any(const char *base, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strncmp(base, names[i], strlen(names[i])) == 0)
			return true;
	return false;
}

/* Whether mapping file @path is what LIB names: the path, its base name, or base name LIB.* /
 * LIB-*. */
static bool lib_matches(const char *path, const char *lib)
{
	const char *base = strrchr(path, '/');
	size_t n = strlen(lib);

	base = base ? base + 1 : path;
	if (strcmp(path, lib) == 0 || strcmp(base, lib) == 0)
		return true;
	return strncmp(base, lib, n) == 0 && (base[n] == '.' || base[n] == '-');
}

/* The path the kernel opens for a mapping of @pid: through /proc/PID/root (its mount namespace). */
static void probe_path(pid_t pid, const char *path, char *buf, size_t size)
{
	snprintf(buf, size, "/proc/%d/root%s", (int)pid, path);
}

static void note_status(uprobes_note_fn note, void *ctx, pid_t pid, const char *what,
			const char *file, int r)
{
	char buf[96];

	if (!note)
		return;
	if (r == 0) {
		note(ctx, pid, what, file, "attached");
		return;
	}
	snprintf(buf, sizeof(buf), "failed: %s", strerror(-r));
	note(ctx, pid, what, file, buf);
}

/*
 * Whether @path of process @pid was searched for @slot already; if not,
 * remember it. 1, 0, or -ENOMEM.
 */
static int scanned_before(struct slot_links *sl, pid_t pid, const char *path)
{
	char *copy;

	if (asprintf(&copy, "%d %s", (int)pid, path) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < sl->nr_scanned; i++)
		if (strcmp(sl->scanned[i], copy) == 0) {
			free(copy);
			return 1;
		}
	if (grow_array((void **)&sl->scanned, &sl->cap_scanned, sl->nr_scanned,
		       sizeof(*sl->scanned)) < 0) {
		free(copy);
		return -ENOMEM;
	}
	sl->scanned[sl->nr_scanned++] = copy;
	return 0;
}

/* Whether the file @base (a base name) may hold catalogue functions @want asks for. */
static bool catalogue_file(const char *base, unsigned want)
{
	return ((want & GPU_WANT_CUDA) &&
		starts_with_any(base, cuda_files, ARRAY_SIZE(cuda_files))) ||
	       ((want & GPU_WANT_NVTX) &&
		starts_with_any(base, nvtx_files, ARRAY_SIZE(nvtx_files)));
}

/* Attach the catalogue entries found in one file; marks found[] by catalogue index. */
static int attach_catalogue_file(struct uprobes *g, unsigned slot, pid_t pid, const char *path,
				 int fd, unsigned want, bool *found, bool *inlined,
				 uprobes_note_fn note, void *note_ctx)
{
	struct elf_sym_list syms = {0};
	char kpath[4200];
	int r;

	r = elfsym__scan(fd, keep_catalogue, &want, &syms);
	if (r < 0) {
		free(syms.v);
		return r == -EINVAL ? 0 : r;
	}
	probe_path(pid, path, kpath, sizeof(kpath));
	for (size_t k = 0; k < syms.n; k++) {
		if (strstr(syms.v[k].name, "_impl_init_v3")) {
			*inlined = true;
			continue;
		}
		for (size_t i = 0; i < ARRAY_SIZE(catalogue); i++) {
			uint32_t id;

			if (strcmp(syms.v[k].name, catalogue[i].symbol) != 0)
				continue;
			found[i] = true;
			r = add_probe(g, slot, &catalogue[i], NULL, catalogue[i].symbol, &id);
			if (r == 0)
				r = attach_one(g, slot, pid, kpath, syms.v[k].offset, &catalogue[i],
					       id);
			note_status(note, note_ctx, pid, catalogue[i].symbol, path, r);
			if (r == -ENOMEM) {
				free(syms.v);
				return r;
			}
		}
	}
	free(syms.v);
	return 0;
}

/* Attach one generic LIB:SYMBOL probe (@spec, NUL-terminated) to every mapped file LIB names. */
static int attach_generic(struct uprobes *g, unsigned slot, pid_t pid, const struct addrspace *as,
			  const char *spec, uprobes_note_fn note, void *note_ctx)
{
	char lib[128], *sym;
	const struct mapping *m;
	size_t nm;
	const char *last = NULL;
	bool any = false;

	snprintf(lib, sizeof(lib), "%s", spec);
	sym = strrchr(lib, ':');
	if (!sym)
		return -EINVAL;
	*sym++ = '\0';
	m = addrspace__mappings(as, &nm);
	for (size_t i = 0; i < nm; i++) {
		struct elf_sym_list syms = {0};
		_cleanup_close_ int fd = -1;
		char opened[4096], kpath[4200];
		int r;

		if (!lib_matches(m[i].path, lib) || (last && strcmp(last, m[i].path) == 0))
			continue;
		last = m[i].path;
		fd = addrspace__open_file(as, &m[i], opened, sizeof(opened));
		if (fd < 0)
			continue;
		r = elfsym__scan(fd, keep_name, sym, &syms);
		if (r == -ENOMEM)
			return r;
		probe_path(pid, m[i].path, kpath, sizeof(kpath));
		for (size_t k = 0; k < syms.n; k++) {
			struct gpu_api *api = calloc(1, sizeof(*api));
			uint32_t id;

			if (!api) {
				free(syms.v);
				return -ENOMEM;
			}
			api->symbol = "";
			api->kind = GPU_KIND_UPROBE;
			api->flags = 0;
			api->fn_arg = api->size_arg = api->ptr_arg = api->copy_kind_arg = -1;
			r = add_probe(g, slot, api, api, spec, &id);
			if (r < 0) {
				free(api);
				free(syms.v);
				return r;
			}
			r = attach_one(g, slot, pid, kpath, syms.v[k].offset, api, id);
			note_status(note, note_ctx, pid, spec, m[i].path, r);
			any = any || r == 0;
		}
		free(syms.v);
	}
	if (!any && note)
		note(note_ctx, pid, spec, "", "missing");
	return 0;
}

/*
 * uprobes__attach() - attach, for session @slot, the probes of process @pid:
 * with GPU_WANT_CUDA the CUDA runtime/driver functions of the catalogue, with
 * GPU_WANT_NVTX the NVTX ones, each found by symbol in the mapped
 * libcudart.so*, libcuda.so*, libnvToolsExt.so* and the executable (static
 * runtime, NVTX v3 compiled in); and each LIB:SYMBOL of @uprobes (a
 * comma-separated list checked by uprobes__check_list(), or NULL).
 * @owner: the session's id, kept in each probe: a record read after the
 * slot went to another session is told apart by it.
 * @as: the mappings of @pid (borrowed). @note is told each outcome, symbols
 * not found anywhere included ("missing"), NVTX v3 calls inlined in a file
 * ("inlined": only their one-time initializers are out of line, nothing can
 * be probed there). Probes of a process that forks are not inherited by the
 * child: uprobes__attach_more() adds a child to the slot.
 * Returns 0 (even if nothing was found: the notes say so), -EINVAL for a
 * bad @slot, -EBUSY if @pid is already probed for @slot, -ENOMEM. Probes attached before a failure
 * stay (uprobes__detach()). Blocks on ELF file reads; allocates; does not log.
 */
int uprobes__attach(struct uprobes *g, unsigned slot, int64_t owner, pid_t pid,
		    const struct addrspace *as, unsigned want, const char *uprobes,
		    uprobes_note_fn note, void *note_ctx)
{
	bool found[ARRAY_SIZE(catalogue)] = {0};
	char exe[4096], link[64];
	struct slot_links *sl;
	const struct mapping *m;
	const char *last = NULL;
	ssize_t n;
	size_t nm;
	int r;

	if (slot >= UPROBE_MAX_SLOTS)
		return -EINVAL;
	sl = &g->slots[slot];
	for (size_t i = 0; i < sl->nr_pids; i++)
		if (sl->pids[i] == pid)
			return -EBUSY;
	if (grow_array((void **)&sl->pids, &sl->cap_pids, sl->nr_pids, sizeof(*sl->pids)) < 0)
		return -ENOMEM;
	sl->pids[sl->nr_pids++] = pid;
	sl->owner = owner;
	sl->want = want;
	snprintf(sl->uprobes, sizeof(sl->uprobes), "%s", uprobes ? uprobes : "");
	snprintf(link, sizeof(link), "/proc/%d/exe", (int)pid);
	n = readlink(link, exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	m = addrspace__mappings(as, &nm);
	for (size_t i = 0; want && i < nm; i++) {
		const char *base = strrchr(m[i].path, '/');
		_cleanup_close_ int fd = -1;
		char opened[4096];
		bool inlined = false, is_exe;

		base = base ? base + 1 : m[i].path;
		if (last && strcmp(last, m[i].path) == 0)
			continue;
		is_exe = strcmp(m[i].path, exe) == 0;
		if (!is_exe && !catalogue_file(base, want))
			continue;
		last = m[i].path;
		r = scanned_before(sl, pid, m[i].path);
		if (r < 0)
			return r;
		if (r > 0)
			continue;
		fd = addrspace__open_file(as, &m[i], opened, sizeof(opened));
		if (fd < 0) {
			if (note)
				note(note_ctx, pid, base, m[i].path, "failed: cannot open");
			continue;
		}
		r = attach_catalogue_file(g, slot, pid, m[i].path, fd, want, found, &inlined, note,
					  note_ctx);
		if (r < 0)
			return r;
		if (inlined && note) {
			bool any_nvtx = false;

			for (size_t k = 0; k < ARRAY_SIZE(catalogue); k++)
				any_nvtx = any_nvtx || (catalogue[k].nvtx && found[k]);
			if (!any_nvtx)
				note(note_ctx, pid, "NVTX v3 calls", m[i].path,
				     "inlined: not traced (only nvtx*_impl_init_v3 are out of "
				     "line)");
		}
	}
	for (size_t i = 0; note && i < ARRAY_SIZE(catalogue); i++)
		if (!found[i] && (catalogue[i].nvtx ? want & GPU_WANT_NVTX : want & GPU_WANT_CUDA))
			note(note_ctx, pid, catalogue[i].symbol, "", "missing");
	if (sl->uprobes[0]) {
		char list[1024], *save = NULL;

		snprintf(list, sizeof(list), "%s", sl->uprobes);
		for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
			r = attach_generic(g, slot, pid, as, t, note, note_ctx);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

/* The probes of a detached slot whose open calls are forgotten once their links are gone. */
struct forget_job {
	int calls_fd, depth_fd; /* the skeleton's maps: valid until uprobes__free() */
	size_t n;
	uint32_t ids[]; /* ascending */
};

static bool has_id(const struct forget_job *j, uint32_t id)
{
	size_t lo = 0, hi = j->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (j->ids[mid] == id)
			return true;
		if (j->ids[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/* A key of 'calls': struct call_key of uprobes.bpf.c. */
struct open_call {
	__u32 tid, probe;
};

/* map_delete_if()'s test for 'calls': a call of a probe of the job; its thread's depth goes. */
static bool open_call_of(void *ctx, int fd, const void *key)
{
	const struct forget_job *j = ctx;
	const struct open_call *k = key;

	if (!has_id(j, k->probe))
		return false;
	bpf_map_delete_elem(j->depth_fd, &k->tid);
	return true;
}

/*
 * Forget the calls of a detached slot's probes still open in the kernel
 * maps (a thread waiting in cudaDeviceSynchronize at the detach never
 * returns through a probe now): their entries would stay in 'calls' for
 * good, and the thread's CUDA depth would make every call of a later
 * session on the same process look nested (not counted as a launch, copy,
 * ...). Runs on the link closer's thread after the links are destroyed (no
 * entry can be added after it), so it reads only the job, never struct
 * uprobes; frees the job.
 */
static void forget_open_calls(void *ctx)
{
	struct forget_job *j = ctx;

	map_delete_if(j->calls_fd, sizeof(struct open_call), open_call_of, j);
	free(j);
}

/* A forget_job for the probes of @slot's session, or NULL if out of memory. */
static struct forget_job *forget_job_new(struct uprobes *g, unsigned slot)
{
	const struct slot_links *sl = &g->slots[slot];
	struct forget_job *j;
	size_t n = 0;

	for (size_t i = 0; i < g->nr_probes; i++)
		n += g->probes[i].p.slot == slot && g->probes[i].p.owner == sl->owner;
	j = malloc(sizeof(*j) + n * sizeof(j->ids[0]));
	if (!j)
		return NULL;
	j->calls_fd = bpf_map__fd(g->skel->maps.calls);
	j->depth_fd = bpf_map__fd(g->skel->maps.depth);
	j->n = 0;
	for (size_t i = 0; i < g->nr_probes; i++)
		if (g->probes[i].p.slot == slot && g->probes[i].p.owner == sl->owner)
			j->ids[j->n++] = (uint32_t)i;
	return j;
}

/*
 * uprobes__detach() - remove every probe of @slot. Returns at once: the
 * links are destroyed on a thread of their own (the kernel takes ~75 ms a
 * link, and a CUDA session has ~60), so the probes may fire for a few
 * seconds more, at their cost to the target, but record no call entered
 * from now on (the slot's generation moves on). Calls already entered, and
 * records in flight, are still delivered, with the slot's old owner. The
 * slot may be attached again at once.
 * Does not block (unless out of memory: then the detach happens here).
 */
void uprobes__detach(struct uprobes *g, unsigned slot)
{
	struct slot_links *sl;

	if (slot >= UPROBE_MAX_SLOTS)
		return;
	sl = &g->slots[slot];
	g->skel->bss->slot_gen[slot]++;
	if (sl->n) {
		struct forget_job *j = forget_job_new(g, slot);

		/* Without memory for the job, the calls stay; the links still go. */
		link_closer__close(g->closer, sl->links, sl->n, j ? forget_open_calls : NULL, j);
	} else {
		free(sl->links);
	}
	for (size_t i = 0; i < sl->nr_scanned; i++)
		free(sl->scanned[i]);
	free(sl->scanned);
	free(sl->pids);
	*sl = (struct slot_links){0};
}

/* What rescan_file() needs: the process searched, and what it found. */
struct rescan {
	struct uprobes *g;
	unsigned slot;
	pid_t pid;
	uprobes_note_fn note;
	void *note_ctx;
	bool found[ARRAY_SIZE(catalogue)];
	int n; /* new files searched */
};

/* proc_maps_files()'s callback for rescan_process(): a catalogue file not searched before. */
static int rescan_file(void *ctx, const char *file, const char *root_path)
{
	struct rescan *rs = ctx;
	struct slot_links *sl = &rs->g->slots[rs->slot];
	const char *base = strrchr(file, '/') + 1;
	_cleanup_close_ int fd = -1;
	bool inlined = false;
	int r;

	if (!catalogue_file(base, sl->want))
		return 0;
	r = scanned_before(sl, rs->pid, file);
	if (r != 0)
		return r < 0 ? r : 0;
	fd = open(root_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (rs->note)
			rs->note(rs->note_ctx, rs->pid, base, file, "failed: cannot open");
		return 0;
	}
	r = attach_catalogue_file(rs->g, rs->slot, rs->pid, file, fd, sl->want, rs->found, &inlined,
				  rs->note, rs->note_ctx);
	if (r < 0)
		return r;
	rs->n++;
	return 0;
}

/* uprobes__rescan() for process @pid of @slot: the number of new files searched, or -errno. */
static int rescan_process(struct uprobes *g, unsigned slot, pid_t pid, uprobes_note_fn note,
			  void *note_ctx)
{
	struct rescan rs = {.g = g, .slot = slot, .pid = pid, .note = note, .note_ctx = note_ctx};
	int r = proc_maps_files(pid, true, rescan_file, &rs);

	return r < 0 ? r : rs.n;
}

/*
 * uprobes__rescan() - attach the catalogue probes of @slot (as uprobes__attach()
 * asked) in the files its process mapped since: libcuda.so is dlopen()ed
 * by cuInit(), libraries by frameworks when first used. Reads each probed
 * process's /proc/PID/maps (a process gone is skipped); files searched
 * before are skipped. @note is told each new outcome (symbols still
 * missing are not repeated). Returns the number of files searched (>= 0)
 * or -ENOMEM.
 * Blocks on /proc and ELF reads; does not log.
 */
int uprobes__rescan(struct uprobes *g, unsigned slot, uprobes_note_fn note, void *note_ctx)
{
	struct slot_links *sl = slot < UPROBE_MAX_SLOTS ? &g->slots[slot] : NULL;
	int n = 0, r;

	if (!sl || !sl->want)
		return 0;
	for (size_t i = 0; i < sl->nr_pids; i++) {
		r = rescan_process(g, slot, sl->pids[i], note, note_ctx);
		if (r == -ENOMEM)
			return r;
		n += r > 0 ? r : 0;
	}
	return n;
}

/*
 * uprobes__attach_more() - uprobes__attach() for one more process of @slot (a child
 * the session follows), with what the slot's uprobes__attach() asked for.
 * Returns as uprobes__attach(); -ENOENT if the slot has no probes asked for.
 */
int uprobes__attach_more(struct uprobes *g, unsigned slot, pid_t pid, const struct addrspace *as,
			 uprobes_note_fn note, void *note_ctx)
{
	struct slot_links *sl = slot < UPROBE_MAX_SLOTS ? &g->slots[slot] : NULL;
	char uprobes[sizeof(sl->uprobes)];

	if (!sl || (!sl->want && !sl->uprobes[0]))
		return -ENOENT;
	snprintf(uprobes, sizeof(uprobes), "%s", sl->uprobes);
	return uprobes__attach(g, slot, sl->owner, pid, as, sl->want, uprobes, note, note_ctx);
}

/* uprobes__wanted() - whether @slot's session asked for any probe (cuda, nvtx, --uprobe). */
bool uprobes__wanted(struct uprobes *g, unsigned slot)
{
	return slot < UPROBE_MAX_SLOTS && (g->slots[slot].want || g->slots[slot].uprobes[0]);
}

/* @slot's counters summed over CPUs, or all 0 if they cannot be read. */
static struct uprobe_counters slot_counters(struct uprobes *g, unsigned slot)
{
	struct uprobe_counters sum = {0};

	if (slot >= UPROBE_MAX_SLOTS ||
	    percpu_sum(g->skel->maps.drops, slot, (uint64_t *)&sum, U64S(sum)) < 0)
		return (struct uprobe_counters){0};
	return sum;
}

/*
 * uprobes__lost() - calls of @slot that were not reported (ring buffer full, no
 * room for the entry state), a running total since the daemon started
 * (0 if the counters cannot be read). Recursive inner calls are not lost:
 * the outer call is reported.
 */
uint64_t uprobes__lost(struct uprobes *g, unsigned slot)
{
	struct uprobe_counters sum = slot_counters(g, slot);

	return sum.ringbuf_full + sum.entry_map_full;
}

/*
 * uprobes__entered() - probed calls @slot's processes entered while its
 * probes were on (from the attach to the detach, recursive inner calls
 * included), counted in the kernel whether or not their records reached
 * the ring buffer: a running total since the daemon started (0 if the
 * counters cannot be read).
 */
uint64_t uprobes__entered(struct uprobes *g, unsigned slot)
{
	return slot_counters(g, slot).entered;
}

/*
 * uprobes__check_list() - validate a --uprobe list: 1..16 comma-separated
 * LIB:SYMBOL items, LIB and SYMBOL non-empty, no spaces, at most 1000 bytes.
 * Returns 0 or -EINVAL with one sentence in @errbuf. Pure; does not log.
 */
int uprobes__check_list(const char *list, char *errbuf, size_t errlen)
{
	size_t len = strlen(list), items = 0;
	const char *p = list;

	if (len == 0 || len > 1000) {
		snprintf(errbuf, errlen,
			 "\"uprobes\" must be 1 to 1000 bytes of LIB:SYMBOL[,LIB:SYMBOL]");
		return -EINVAL;
	}
	while (*p) {
		size_t n = strcspn(p, ","), colon;
		const char *c = memchr(p, ':', n);

		colon = c ? (size_t)(c - p) : n;
		if (n == 0 || !c || colon == 0 || colon + 1 >= n ||
		    memchr(c + 1, ':', n - colon - 1) || strcspn(p, " \t\n") < n || ++items > 16) {
			snprintf(errbuf, errlen,
				 "bad uprobe '%.*s': expected LIB:SYMBOL (e.g. libc.so.6:malloc), "
				 "at most 16, comma-separated",
				 (int)(n > 64 ? 64 : n), p);
			return -EINVAL;
		}
		p += n;
		if (*p == ',')
			p++;
		if (*p == '\0' && p[-1] == ',') {
			snprintf(errbuf, errlen, "\"uprobes\" must not end with a comma");
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * gpu_copy_direction() - the direction of copy @e made through @api: "HtoH",
 * "HtoD", "DtoH", "DtoD", "default" (unified addressing decides), or
 * "unknown" for a kind out of range. Static strings.
 */
const char *gpu_copy_direction(const struct gpu_api *api, const struct uprobe_event *e)
{
	static const char *const kinds[] = {"HtoH", "HtoD", "DtoH", "DtoD", "default"};

	if (api->copy_kind_arg < 0)
		return api->direction ? api->direction : "unknown";
	if (e->args[api->copy_kind_arg] < ARRAY_SIZE(kinds))
		return kinds[e->args[api->copy_kind_arg]];
	return "unknown";
}
