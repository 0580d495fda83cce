/* malloc_probes.c - allocation sampling: the heap.bpf.c uprobes, their ring buffer and counters. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "io.h"
#include "procfs.h"
#include "symbols/elfsym.h"
#include "collect/jeprof.h"
#include "collect/link_closer.h"
#include "collect/malloc_probes.h"
#include "malloc.skel.h"
#include "collect/bpf_util.h"
#include "util.h"

/* Allocator libraries probed at most per process, and links per slot. */
#define HEAP_MAX_LIBS 4
#define HEAP_MAX_LINKS 128

struct malloc_probes {
	struct malloc_bpf *skel;
	struct record_reader reader;
	struct link_closer *closer; /* detaches: ~75 ms a link in the kernel */
	malloc_probes_fn fn;
	void *ctx;
	struct heap_proc *procs[MALLOC_MAX_SLOTS]; /* the processes each slot probes */
	/* Objects that appeared in and went from heap profiles (jeprof), per slot. */
	uint64_t profile_allocs[MALLOC_MAX_SLOTS], profile_frees[MALLOC_MAX_SLOTS];
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct malloc_probes *, malloc_probes__free)

/* One probed process: its uprobes (the returns first, then the entries), or the reader of
 * the heap profiles its jemalloc writes (no probe). */
struct heap_proc {
	struct heap_proc *next;
	pid_t pid;
	struct jeprof_reader *jeprof;
	size_t nlinks;
	struct bpf_link *links[];
};

/*
 * Detach @p's probes, entries first (malloc_probes__attach()), on @closer's
 * thread (link_closer__close(): here if @closer is NULL or memory is
 * short), and free @p. The probes may fire a little longer: their state
 * in the maps is forgotten again by the next attach to the process.
 */
static void heap_proc_free(struct link_closer *closer, struct heap_proc *p)
{
	struct bpf_link **links = malloc(p->nlinks * sizeof(*links) + 1);

	jeprof_reader__free(p->jeprof);
	if (!links)
		closer = NULL;
	for (size_t i = 0; links && i < p->nlinks; i++)
		links[i] = p->links[p->nlinks - 1 - i];
	if (links)
		link_closer__close(closer, links, p->nlinks, NULL, NULL);
	else
		while (p->nlinks > 0)
			bpf_link__destroy(p->links[--p->nlinks]);
	free(p);
}

static const char *const func_names[MALLOC_NR_FUNCS] = {
    [MALLOC_FUNC_MALLOC] = "malloc",
    [MALLOC_FUNC_CALLOC] = "calloc",
    [MALLOC_FUNC_REALLOC] = "realloc",
    [MALLOC_FUNC_POSIX_MEMALIGN] = "posix_memalign",
    [MALLOC_FUNC_ALIGNED_ALLOC] = "aligned_alloc",
    [MALLOC_FUNC_MEMALIGN] = "memalign",
    [MALLOC_FUNC_MMAP] = "mmap",
    [MALLOC_FUNC_FREE] = "free",
    [MALLOC_FUNC_MUNMAP] = "munmap",
    [MALLOC_FUNC_USDT_ALLOC] = "otel_memory:alloc",
    [MALLOC_FUNC_USDT_FREE] = "otel_memory:free",
    [MALLOC_FUNC_JEMALLOC_PROF] = "jemalloc:prof",
};

const char *malloc_probes__func_name(unsigned func)
{
	return func < MALLOC_NR_FUNCS ? func_names[func] : "?";
}

/*
 * malloc_probes__weight() - an unbiased estimate of the bytes a sampled block stands
 * for: a call of s bytes is sampled with probability 1 - exp(-s / mean)
 * (heap.bpf.c), so it is weighed s / (1 - exp(-s / mean)). Small blocks
 * weigh about the mean, blocks much larger than the mean their own size.
 */
double malloc_probes__weight(uint64_t size_bytes, uint64_t sample_bytes)
{
	double p;

	if (size_bytes == 0 || sample_bytes == 0)
		return (double)size_bytes;
	p = -expm1(-(double)size_bytes / (double)sample_bytes);
	return p > 0 ? (double)size_bytes / p : (double)size_bytes;
}

bool malloc_event__valid(const void *data, size_t size)
{
	const struct malloc_event *e = data;

	if (size < sizeof(*e) || e->kind > MALLOC_EV_FREE || e->func >= MALLOC_NR_FUNCS ||
	    e->slot >= MALLOC_MAX_SLOTS)
		return false;
	if (e->kind != MALLOC_EV_ALLOC)
		return true;
	return !(e->ustack_len > MALLOC_MAX_FRAMES || e->stack_size > MALLOC_STACK_BYTES ||
		 e->stack_size % sizeof(__u64) != 0 ||
		 (e->stack_size && !(e->flags & MALLOC_HAS_REGS)) ||
		 size < offsetof(struct malloc_alloc_event, ips) +
			    (size_t)e->ustack_len * sizeof(__u64) + e->stack_size);
}

/* A bad record is counted and skipped; 0 always, so that consumption goes on. */
static bool handle_record(void *ctx, const void *data, size_t size)
{
	struct malloc_probes *h = ctx;

	if (!malloc_event__valid(data, size))
		return false;
	h->fn(h->ctx, data, size);
	return true;
}

/*
 * malloc_probes__new() - load heap.bpf.c, sharing the targets map @targets_fd (a
 * hash map of __u32 tgid -> __u32 slot + 1: the CPU sampler's, so followed
 * children count) and attach its thread-exit program. No uprobe is attached
 * until malloc_probes__attach().
 * @ringbuf_bytes: ring buffer size, a power of two and a multiple of the
 *   page size; an ALLOC record is about 2.5 KiB, RETURN and FREE 64 bytes.
 * @fn, @ctx: called from malloc_probes__poll() for each well-formed record.
 *
 * Returns 0 and *@ret (owned by the caller: malloc_probes__free()), -EINVAL for a
 * bad @ringbuf_bytes, -EPERM without CAP_BPF + CAP_PERFMON, -ENOMEM, libbpf's
 * -errno, or pthread_create()'s (the thread detaches run on). Does not log
 * (libbpf's messages go through its callback).
 */
int malloc_probes__new(size_t ringbuf_bytes, int targets_fd, malloc_probes_fn fn, void *ctx,
		       struct malloc_probes **ret)
{
	_cleanup_(malloc_probes__freep) struct malloc_probes *h = NULL;
	int r;

	if (!ringbuf_size_ok(ringbuf_bytes) || targets_fd < 0)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	*h = (struct malloc_probes){.fn = fn, .ctx = ctx};
	h->skel = malloc_bpf__open();
	if (!h->skel)
		return -errno;
	for (unsigned i = 0; i < MALLOC_INTERVALS; i++)
		h->skel->rodata->intervals_q16[i] =
		    (__u32)lround(-log((i + 0.5) / MALLOC_INTERVALS) * 65536.0);
	/* Woken by the ring buffer only once it is 1/16 full, else by the
	 * loop's tick: a wakeup per record made each sampled allocation and
	 * free pay for a switch to profd inside the probe (a uprobe's program
	 * runs preemptible), ~25 us of the thread's time per record. */
	h->skel->rodata->wakeup_bytes = ringbuf_bytes / 16;
	r = collector__load(h->skel->skeleton, h->skel->maps.events, ringbuf_bytes,
			    h->skel->maps.targets, targets_fd, handle_record, h, &h->reader);
	if (r < 0)
		return r;
	h->skel->links.malloc_thread_exit = bpf_program__attach(h->skel->progs.malloc_thread_exit);
	if (!h->skel->links.malloc_thread_exit)
		return -errno;
	r = link_closer__new(&h->closer);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(h);
	return 0;
}

/*
 * malloc_probes__free() - detach every probe and free everything. Blocks
 * until the kernel has removed each probe (~75 ms a link). Accepts NULL and
 * a half-built object.
 */
void malloc_probes__free(struct malloc_probes *h)
{
	if (!h)
		return;
	for (unsigned i = 0; i < MALLOC_MAX_SLOTS; i++)
		malloc_probes__detach(h, i);
	link_closer__free(h->closer);
	record_reader__close(&h->reader);
	malloc_bpf__destroy(h->skel);
	free(h);
}

struct record_reader *malloc_probes__reader(struct malloc_probes *h)
{
	return &h->reader;
}

/* elfsym__scan()'s filter: the functions heap.bpf.c probes. */
static bool is_probed_func(const char *name, void *ctx)
{
	for (unsigned i = 0; i < MALLOC_NR_FUNCS; i++)
		if (strcmp(name, func_names[i]) == 0)
			return true;
	return false;
}

/*
 * The file offset of each MALLOC_FUNC_* function the ELF file open at @fd
 * defines, in @ret_offsets (0 where it defines none; the first symbol of
 * the name, .dynsym before .symtab). Returns how many it defines, or -errno
 * of elfsym__scan() (not an ELF file, out of memory).
 */
static int probed_offsets(int fd, uint64_t ret_offsets[MALLOC_NR_FUNCS])
{
	struct elf_sym_list syms = {0};
	int r = elfsym__scan(fd, is_probed_func, NULL, &syms), found = 0;

	for (unsigned func = 0; func < MALLOC_NR_FUNCS; func++) {
		ret_offsets[func] = 0;
		for (size_t k = 0; k < syms.n && !ret_offsets[func]; k++)
			if (strcmp(syms.v[k].name, func_names[func]) == 0)
				ret_offsets[func] = syms.v[k].offset;
		found += ret_offsets[func] != 0;
	}
	free(syms.v);
	return r < 0 ? r : found;
}

/*
 * What each probed function (@func < MALLOC_NR_FUNCS) gets: an entry
 * program, and a return program for allocating ones.
 */
static void probe_progs(struct malloc_bpf *skel, unsigned func, struct bpf_program **ret_entry,
			struct bpf_program **ret_return)
{
	struct bpf_program *progs[MALLOC_NR_FUNCS][2] = {
	    [MALLOC_FUNC_MALLOC] = {skel->progs.malloc_entry, skel->progs.ptr_return},
	    [MALLOC_FUNC_CALLOC] = {skel->progs.calloc_entry, skel->progs.ptr_return},
	    [MALLOC_FUNC_REALLOC] = {skel->progs.realloc_entry, skel->progs.ptr_return},
	    [MALLOC_FUNC_POSIX_MEMALIGN] = {skel->progs.posix_memalign_entry,
					    skel->progs.posix_memalign_return},
	    [MALLOC_FUNC_ALIGNED_ALLOC] = {skel->progs.aligned_alloc_entry, skel->progs.ptr_return},
	    [MALLOC_FUNC_MEMALIGN] = {skel->progs.memalign_entry, skel->progs.ptr_return},
	    [MALLOC_FUNC_MMAP] = {skel->progs.mmap_entry, skel->progs.mmap_return},
	    [MALLOC_FUNC_FREE] = {skel->progs.free_probe, NULL},
	    [MALLOC_FUNC_MUNMAP] = {skel->progs.munmap_entry, NULL},
	    /* attached by attach_usdt(), never as uprobes */
	    [MALLOC_FUNC_USDT_ALLOC] = {NULL, NULL},
	    [MALLOC_FUNC_USDT_FREE] = {NULL, NULL},
	};

	*ret_entry = progs[func][0];
	*ret_return = progs[func][1];
}

/* Whether the file name of @path starts with @prefix ("libjemalloc.so"). */
static bool lib_is(const char *path, const char *prefix)
{
	const char *base = strrchr(path, '/');

	return strncmp(base ? base + 1 : path, prefix, strlen(prefix)) == 0;
}

/* Whether @path (a mapping of the target) is an allocator library. */
static bool is_allocator_lib(const char *path)
{
	return lib_is(path, "libc.so") || lib_is(path, "libc-") || lib_is(path, "libjemalloc.so") ||
	       lib_is(path, "libtcmalloc") || lib_is(path, "libmimalloc.so");
}

/* Files found in /proc/PID/maps: up to @max paths, through /proc/PID/root. */
struct file_list {
	char (*paths)[PATH_MAX];
	int n, max;
};

/* proc_maps_files()'s callback for allocator_files(): allocator libraries, each once. */
static int add_allocator_lib(void *ctx, const char *path, const char *root_path)
{
	struct file_list *l = ctx;

	if (!is_allocator_lib(path))
		return 0;
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->paths[i], root_path) == 0)
			return 0;
	snprintf(l->paths[l->n++], PATH_MAX, "%s", root_path);
	return l->n == l->max;
}

/*
 * The allocator files of @pid, at most @max, as /proc/PID/root paths (seen
 * from profd whatever the target's mount namespace): the libraries of
 * is_allocator_lib(), then the executable (probed only if it defines
 * malloc: statically linked, or with its own allocator). Returns how many,
 * or proc_maps_files()' -errno (-ESRCH: @pid is gone).
 */
static int allocator_files(pid_t pid, char paths[][PATH_MAX], int max)
{
	struct file_list l = {.paths = paths, .max = max - 1};
	int r = max > 1 ? proc_maps_files(pid, false, add_allocator_lib, &l) : 0;

	if (r < 0)
		return r;
	snprintf(paths[l.n++], PATH_MAX, "/proc/%d/exe", (int)pid);
	return l.n;
}

/* map_delete_if()'s test for 'threads': a thread of process *@ctx. */
static bool thread_of(void *ctx, int fd, const void *key)
{
	struct malloc_thread st;

	return bpf_map_lookup_elem(fd, key, &st) == 0 && st.tgid == *(const __u32 *)ctx;
}

/* map_delete_if()'s test for 'live': a block of process *@ctx. */
static bool block_of(void *ctx, int fd, const void *key)
{
	return ((const struct malloc_live_key *)key)->tgid == *(const __u32 *)ctx;
}

/* Remove @tgid's entries from the threads and live maps (a session ended, or starts afresh). */
static void forget_process(struct malloc_probes *h, pid_t tgid)
{
	__u32 t = (__u32)tgid;

	map_delete_if(bpf_map__fd(h->skel->maps.threads), sizeof(__u32), thread_of, &t);
	map_delete_if(bpf_map__fd(h->skel->maps.live), sizeof(struct malloc_live_key), block_of,
		      &t);
}

static int reset_stats(struct malloc_probes *h, unsigned slot, uint64_t sample_bytes)
{
	__u32 key = slot;
	__u64 mean = sample_bytes;
	int r = percpu_zero(h->skel->maps.stats, slot, sizeof(struct malloc_stats));

	h->profile_allocs[slot] = h->profile_frees[slot] = 0;
	if (r == 0 &&
	    bpf_map_update_elem(bpf_map__fd(h->skel->maps.sample_bytes), &key, &mean, BPF_ANY) < 0)
		r = -errno;
	return r;
}

/* The SDT provider of a process that samples its own allocations (malloc.h). */
#define USDT_PROVIDER "otel_memory"

/* proc_maps_files()'s callback for usdt_files(): executable files with the provider's notes. */
static int add_usdt_file(void *ctx, const char *path, const char *root_path)
{
	struct file_list *l = ctx;
	_cleanup_close_ int fd = open(root_path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || elfsym__has_usdt_provider(fd, USDT_PROVIDER) != 1)
		return 0;
	snprintf(l->paths[l->n++], PATH_MAX, "%s", root_path);
	return l->n == l->max;
}

/*
 * The executable files mapped by @pid whose SDT notes name USDT_PROVIDER, at
 * most @max, as /proc/PID/root paths. Returns how many, or proc_maps_files()'
 * -errno (-ESRCH: @pid is gone).
 */
static int usdt_files(pid_t pid, char paths[][PATH_MAX], int max)
{
	struct file_list l = {.paths = paths, .max = max};
	int r = max > 0 ? proc_maps_files(pid, true, add_usdt_file, &l) : 0;

	return r < 0 ? r : l.n;
}

/*
 * Attach otel_memory:alloc and otel_memory:free of each of @files (@n) for
 * @pid into @links (*@nlinks of them, at most HEAP_MAX_LINKS). A file needs
 * both: without its frees, every sampled block would look live; a file
 * without them is emptied (""). Returns the number of files probed, or
 * -errno of the first failed attach.
 */
static int attach_usdt(struct malloc_probes *h, pid_t pid, char files[][PATH_MAX], int n,
		       struct bpf_link **links, size_t *nlinks)
{
	struct bpf_program *progs[2] = {h->skel->progs.malloc_usdt_alloc,
					h->skel->progs.malloc_usdt_free};
	static const char *const names[2] = {"alloc", "free"};
	int probed = 0;

	for (int f = 0; f < n; f++) {
		size_t first = *nlinks;

		for (int k = 1; k >= 0; k--) { /* the free first, as with the uprobes */
			struct bpf_link *l;

			if (*nlinks == HEAP_MAX_LINKS)
				return -E2BIG;
			l = bpf_program__attach_usdt(progs[k], pid, files[f], USDT_PROVIDER,
						     names[k], NULL);
			if (!l && errno == ENOENT)
				break; /* not both probes in this file */
			if (!l)
				return -errno;
			links[(*nlinks)++] = l;
		}
		if (*nlinks - first == 2) {
			probed++;
			continue;
		}
		while (*nlinks > first)
			bpf_link__destroy(links[--*nlinks]);
		files[f][0] = '\0'; /* not probed: not named either */
	}
	return probed;
}

/*
 * Uprobes on the allocator functions of each of @paths (@nfiles) for @pid
 * into @links (*@nlinks); what was probed is written at @ret_probes +
 * *@off. Returns 0 or -errno of the first failed attach.
 */
static int attach_uprobes(struct malloc_probes *h, pid_t pid, char paths[][PATH_MAX], int nfiles,
			  struct bpf_link **links, size_t *nlinks, char *ret_probes,
			  size_t probes_len, size_t *off)
{
	for (int f = 0; f < nfiles; f++) {
		_cleanup_close_ int fd = open(paths[f], O_RDONLY | O_CLOEXEC);
		uint64_t offsets[MALLOC_NR_FUNCS];
		int found;

		if (fd < 0)
			continue;
		found = probed_offsets(fd, offsets);
		if (found <= 0)
			continue;
		/*
		 * Return probes first: a call already in flight when its entry
		 * probe arrives, before its return probe, would leave the
		 * thread's nesting depth at 1 for good, and every later call of
		 * the thread would be taken for a nested one. A return without
		 * its entry is ignored (depth 0).
		 */
		for (int k = 1; k >= 0; k--) {
			for (unsigned func = 0; func < MALLOC_NR_FUNCS; func++) {
				LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = k == 1);
				struct bpf_program *progs[2];
				struct bpf_link *l;

				if (!offsets[func])
					continue;
				probe_progs(h->skel, func, &progs[0], &progs[1]);
				if (!progs[k])
					continue;
				if (*nlinks == HEAP_MAX_LINKS)
					return -E2BIG;
				l = bpf_program__attach_uprobe_opts(progs[k], pid, paths[f],
								    (size_t)offsets[func], &opts);
				if (!l)
					return -errno;
				links[(*nlinks)++] = l;
			}
		}
		if (*off < probes_len) {
			const char *base = strrchr(paths[f], '/');

			if (f == nfiles - 1) { /* /proc/PID/exe: name the executable */
				char exe[PATH_MAX];
				ssize_t len = readlink(paths[f], exe, sizeof(exe) - 1);

				exe[len > 0 ? len : 0] = '\0';
				base = strrchr(exe, '/');
				*off += snprintf(ret_probes + *off, probes_len - *off,
						 "%s%s: %d functions", *off ? ", " : "",
						 base ? base + 1 : "executable", found);
			} else {
				*off += snprintf(ret_probes + *off, probes_len - *off,
						 "%s%s: %d functions", *off ? ", " : "",
						 base ? base + 1 : paths[f], found);
			}
		}
	}
	return 0;
}

/*
 * The MALLOC_CONF of @pid's environment (jemalloc reads it at start) in @buf
 * (@size bytes); "" if it has none. Returns 0 or -errno of reading
 * /proc/PID/environ (-ESRCH: gone).
 */
static int malloc_conf_of(pid_t pid, char *buf, size_t size)
{
	_cleanup_free_ char *env = NULL;
	_cleanup_close_ int fd = -1;
	char path[64];
	size_t len;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	r = read_all(fd, 1u << 20, &env, &len); /* ARG_MAX-sized environments whole */
	if (r < 0)
		return r;
	buf[0] = '\0';
	for (size_t i = 0; i < len; i += strnlen(env + i, len - i) + 1)
		if (strncmp(env + i, "MALLOC_CONF=", 12) == 0)
			snprintf(buf, size, "%.*s", (int)strnlen(env + i + 12, len - i - 12),
				 env + i + 12);
	return 0;
}

/*
 * Whether @pid runs jemalloc (one of @paths, @n) with its profiler on and
 * dumping heap profiles on its own (MALLOC_CONF prof:true,
 * lg_prof_interval:N): then a reader of those in *@ret, and what is read in
 * @ret_probes. Returns 1, 0 (not so), -ENOMEM.
 */
static int jemalloc_profiles(pid_t pid, char paths[][PATH_MAX], int n, struct jeprof_reader **ret,
			     char *ret_probes, size_t probes_len)
{
	char conf_text[1024];
	struct jeprof_conf conf;
	bool jemalloc = false;
	int r;

	for (int i = 0; i < n && !jemalloc; i++)
		jemalloc = lib_is(paths[i], "libjemalloc.so");
	if (!jemalloc || malloc_conf_of(pid, conf_text, sizeof(conf_text)) < 0 ||
	    jeprof__parse_conf(conf_text, &conf) < 0 || !jeprof__dumps_periodically(&conf))
		return 0;
	r = jeprof_reader__new(pid, &conf, ret);
	if (r < 0)
		return r == -ENOMEM ? r : 0;
	if (probes_len)
		snprintf(ret_probes, probes_len, "jemalloc heap profiles: %s", conf.prefix);
	return 1;
}

/*
 * malloc_probes__attach() - sample the allocations of process @pid for session
 * @slot (0..MALLOC_MAX_SLOTS-1; @pid must already be in the targets map
 * under it; a slot may probe several processes: a target and the children
 * it forks, whose probes are their own).
 *
 * Where a file @pid has mapped carries the otel_memory:alloc and
 * otel_memory:free USDT probes (a process that samples its own allocations,
 * OpenTelemetry's contract: opentelemetry-ebpf-profiler design-docs/00003),
 * those two are attached and nothing else: only sampled allocations trap,
 * weighed as the process says, and @sample_bytes is not used. Otherwise,
 * where @pid runs jemalloc with its profiler on and writing heap profiles
 * every 2^N bytes (MALLOC_CONF prof:true,lg_prof_interval:N in its
 * environment: jemalloc(3)), nothing is attached: malloc_probes__poll()
 * reads those profiles (collect/jeprof.h) and sends what changed as
 * records, at jemalloc's own sampling rate. Otherwise,
 * uprobes on malloc, calloc, realloc, posix_memalign, aligned_alloc,
 * memalign, mmap (anonymous mappings), free and munmap in each allocator
 * library @pid has mapped (libc, jemalloc, tcmalloc, mimalloc) and in its
 * executable if that defines them, sampled here by bytes: every call traps.
 * Only @pid's calls trap (the probes are per process).
 * @sample_bytes: mean bytes between samples, 1..2^40.
 * @ret_probes: receives what was probed ("libc.so.6: 9 functions, ...",
 *   "otel_memory USDT: libtrain.so" or "jemalloc heap profiles: PREFIX"),
 *   @probes_len bytes.
 *
 * @sample_bytes is the slot's for its first process, and ignored after.
 *
 * Returns the number of probes attached (> 0; 0 when it reads heap profiles),
 * -EINVAL for a bad argument, -EBUSY if @slot already probes @pid, -ESRCH if
 * @pid is gone, -ENOENT if no allocator function was found, -ENOMEM, or the
 * first -errno of a failed attach (those already attached are detached).
 * Blocks on file I/O (reading the ELF files, the environment, a heap
 * profile), and until the probes of earlier detaches are removed
 * (malloc_probes__detach()); does not log.
 */
int malloc_probes__attach(struct malloc_probes *h, unsigned slot, pid_t pid, uint64_t sample_bytes,
			  char *ret_probes, size_t probes_len)
{
	char paths[HEAP_MAX_LIBS + 1][PATH_MAX];
	struct heap_proc *proc;
	size_t nlinks = 0, off = 0;
	int nfiles, r = 0;

	if (slot >= MALLOC_MAX_SLOTS || pid <= 0 || sample_bytes == 0 ||
	    sample_bytes > (1ULL << 40))
		return -EINVAL;
	if (malloc_probes__attached(h, slot, pid))
		return -EBUSY;
	/* Probes of a detach still in progress find their slot in the targets
	 * map too: with the new ones, each allocation would count twice. Only
	 * an attach right after a detach waits here. */
	link_closer__wait_idle(h->closer);
	nfiles = usdt_files(pid, paths, HEAP_MAX_LIBS);
	if (nfiles < 0)
		return nfiles;
	proc = calloc(1, sizeof(*proc) + HEAP_MAX_LINKS * sizeof(proc->links[0]));
	if (!proc)
		return -ENOMEM;
	forget_process(h, pid);
	/* The slot's first process starts its counters and sets its rate. */
	if (!h->procs[slot]) {
		r = reset_stats(h, slot, sample_bytes);
		if (r < 0)
			goto fail;
		h->skel->bss->slot_off[slot] = 0; /* the earlier attach's links are gone */
	}
	if (probes_len)
		ret_probes[0] = '\0';
	r = attach_usdt(h, pid, paths, nfiles, proc->links, &nlinks);
	for (int f = 0; r > 0 && f < nfiles && off < probes_len; f++)
		if (paths[f][0]) {
			const char *base = strrchr(paths[f], '/');

			off += snprintf(ret_probes + off, probes_len - off, "%s%s",
					off ? ", " : USDT_PROVIDER " USDT: ", base ? base + 1 : paths[f]);
		}
	if (r == 0) {
		nfiles = allocator_files(pid, paths, HEAP_MAX_LIBS + 1);
		r = nfiles < 0 ? nfiles
			       : jemalloc_profiles(pid, paths, nfiles, &proc->jeprof, ret_probes,
						   probes_len);
		if (r == 0)
			r = attach_uprobes(h, pid, paths, nfiles, proc->links, &nlinks, ret_probes,
					   probes_len, &off);
	}
	if (r < 0)
		goto fail;
	if (nlinks == 0 && !proc->jeprof) {
		r = -ENOENT;
		goto fail;
	}
	if (proc->jeprof)
		jeprof_reader__poll(proc->jeprof, slot, h->fn, h->ctx); /* the baseline */
	proc->pid = pid;
	proc->nlinks = nlinks;
	proc->next = h->procs[slot];
	h->procs[slot] = proc;
	return (int)nlinks;
fail:
	proc->nlinks = nlinks;
	heap_proc_free(h->closer, proc);
	return r;
}

/* malloc_probes__probing() - whether @slot has probes attached (to any process). */
bool malloc_probes__probing(struct malloc_probes *h, unsigned slot)
{
	return slot < MALLOC_MAX_SLOTS && h->procs[slot];
}

/* malloc_probes__attached() - whether @slot probes process @pid. */
bool malloc_probes__attached(struct malloc_probes *h, unsigned slot, pid_t pid)
{
	if (slot >= MALLOC_MAX_SLOTS)
		return false;
	for (struct heap_proc *p = h->procs[slot]; p; p = p->next)
		if (p->pid == pid)
			return true;
	return false;
}

/*
 * malloc_probes__detach() - remove @slot's uprobes and forget its processes' threads
 * and live blocks in the BPF maps. Returns at once: the kernel removes the
 * probes on a thread of their own (~75 ms a link, a second for a process);
 * until then they still fire, at their cost to the target, but record
 * nothing. Records already in the ring buffer are still delivered. Accepts
 * a slot without probes.
 */
void malloc_probes__detach(struct malloc_probes *h, unsigned slot)
{
	struct heap_proc *p;

	if (slot >= MALLOC_MAX_SLOTS)
		return;
	h->skel->bss->slot_off[slot] = 1;
	while ((p = h->procs[slot])) {
		h->procs[slot] = p->next;
		forget_process(h, p->pid);
		heap_proc_free(h->closer, p);
	}
}

/*
 * malloc_probes__stats() - @slot's counters since its malloc_probes__attach(), summed over
 * CPUs. Returns 0, -EINVAL, -ENOMEM or bpf()'s -errno (*@ret unchanged).
 */
int malloc_probes__stats(struct malloc_probes *h, unsigned slot, struct malloc_stats *ret)
{
	struct malloc_stats st;
	int r;

	if (slot >= MALLOC_MAX_SLOTS)
		return -EINVAL;
	r = percpu_sum(h->skel->maps.stats, slot, (uint64_t *)&st, U64S(st));
	if (r < 0)
		return r;
	/* Objects read from heap profiles: each an allocation sampled by jemalloc, and the frees
	 * of those, as the USDT probes count theirs. */
	st.calls[MALLOC_FUNC_JEMALLOC_PROF] += h->profile_allocs[slot];
	st.profile_frees += h->profile_frees[slot];
	st.sampled += h->profile_allocs[slot];
	*ret = st;
	return 0;
}

/*
 * malloc_probes__poll() - read the heap profiles written since the last poll
 * by @slot's processes that have them (malloc_probes__attach()), and send
 * what changed to the callback as records. Returns the records sent, -ENOMEM,
 * or the error of a profile that could not be read (jeprof_reader__poll(),
 * after the other processes' profiles are read). Blocks on reading the files
 * (a few milliseconds for a profile of thousands of stacks); does not log.
 */
int malloc_probes__poll(struct malloc_probes *h, unsigned slot)
{
	int sent = 0, bad = 0;

	if (slot >= MALLOC_MAX_SLOTS)
		return 0;
	for (struct heap_proc *p = h->procs[slot]; p; p = p->next) {
		struct jeprof_counts before, after;
		int r;

		if (!p->jeprof)
			continue;
		jeprof_reader__counts(p->jeprof, &before);
		r = jeprof_reader__poll(p->jeprof, slot, h->fn, h->ctx);
		jeprof_reader__counts(p->jeprof, &after);
		h->profile_allocs[slot] += after.allocs - before.allocs;
		h->profile_frees[slot] += after.frees - before.frees;
		if (r == -ENOMEM)
			return r;
		if (r < 0)
			bad = r;
		else
			sent += r;
	}
	return bad < 0 ? bad : sent;
}
