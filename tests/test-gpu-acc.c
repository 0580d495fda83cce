/*
 * test-gpu-acc.c - CUDA/NVTX/uprobe call records through the session's
 * accounting (daemon/session/gpu_acc.c), the store's writes
 * (daemon/store/gpu.c) and back out of the gpu and ranges reports
 * (daemon/report/gpu.c): the numbers a user reads are those of the calls
 * fed in, across two flushes and a flush that failed and was retried.
 * Also what the accounting lets the session evict (gpu_acc__held_stacks():
 * the stacks of live allocations and unflushed rows, no others), and that
 * a kernel named from its launching stack is remembered by the stack's
 * content, not by the address the session interned it at (freed and reused
 * once the stack is evicted). Needs neither root nor a GPU.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "check_json.h"
#include "check_store.h"
#include "report/gpu.h"
#include "session/gpu_acc.h"
#include "store/store.h"

/* The test's own stack table: a stack is its leaf address; frames are named by address. */
struct raw_stack {
	uint64_t ips[4];
	unsigned n;
	int64_t id;
};

static struct raw_stack stacks[16];
static unsigned nstacks;
static struct store *st;
/* >= 0: the next intern() puts its stack in this slot, as a session reuses freed memory */
static int reuse_slot = -1;
/* The symbolizer and address space call() hands the accounting: NULL, none, else the test's. */
static struct symbolizer *call_sym;
static struct addrspace *call_as;
static volatile int sink;

/* Kernel launch stubs as nvcc names them for extern "C" kernels (gpu_acc.c: stub_kernel_name()). */
__attribute__((noinline, used)) void __device_stub__gpuacc_first(void)
{
	sink++;
}

__attribute__((noinline, used)) void __device_stub__gpuacc_second(void)
{
	sink--;
}

static const char *frame_name(uint64_t ip)
{
	switch (ip) {
	case 0x1000:
		return "train_step";
	case 0x2000:
		return "alloc_weights";
	case 0x3000:
		return "copy_batch";
	case 0x4000:
		return "main";
	default:
		return "other";
	}
}

static struct raw_stack *intern(void *ctx, pid_t pid, const uint64_t *ips, unsigned n,
				uint32_t flags)
{
	struct raw_stack *s;

	for (unsigned i = 0; i < nstacks; i++)
		if (stacks[i].n == n && memcmp(stacks[i].ips, ips, n * sizeof(*ips)) == 0)
			return &stacks[i];
	if (nstacks == 16 || n > 4)
		return NULL;
	s = reuse_slot >= 0 ? &stacks[reuse_slot] : &stacks[nstacks++];
	memcpy(s->ips, ips, n * sizeof(*ips));
	s->n = n;
	s->id = 0;
	return s;
}

/* The stacks gpu_acc__held_stacks() names, as bits over stacks[]. */
static int held_bit(void *ctx, struct raw_stack *s)
{
	*(unsigned *)ctx |= 1u << (s - stacks);
	return 0;
}

static unsigned held(const struct gpu_acc *a)
{
	unsigned bits = 0;

	CHECK_INT_EQ(gpu_acc__held_stacks(a, held_bit, &bits), 0);
	return bits;
}

/* The bit of the stack interned for calls from @leaf (call()), 0 if none. */
static unsigned stack_bit(uint64_t leaf)
{
	for (unsigned i = 0; i < nstacks; i++)
		if (stacks[i].n > 1 && stacks[i].ips[1] == leaf)
			return 1u << i;
	return 0;
}

/* Frames and the stack row written the way a session's flush writes them. */
static int resolve(void *ctx, const struct session_env *env, struct raw_stack *s, bool *refreshed,
		   int64_t *ret_id)
{
	int64_t ids[4];

	for (unsigned i = 0; i < s->n; i++)
		if (test_frame_id(st, "/app/train", s->ips[i], frame_name(s->ips[i]), &ids[i]) < 0)
			return -EIO;
	if (store__stack_id(st, ids, s->n, false, true, &s->id) < 0)
		return -EIO;
	*ret_id = s->id;
	return 0;
}

/* A catalogue entry as collect/uprobes.c describes the function: no argument used unless set. */
static struct gpu_api api(const char *symbol, enum gpu_kind kind, bool nvtx)
{
	return (struct gpu_api){.symbol = symbol,
				.kind = kind,
				.nvtx = nvtx,
				.fn_arg = -1,
				.size_arg = -1,
				.ptr_arg = -1,
				.copy_kind_arg = -1,
				.error_if_nonzero = !nvtx && kind != GPU_KIND_UPROBE};
}

static struct gpu_api api_malloc, api_free, api_memcpy, api_sync, api_launch, api_push, api_pop,
    api_uprobe;

static void catalogue(void)
{
	api_malloc = api("cudaMalloc", GPU_KIND_ALLOC, false);
	api_malloc.flags = UPROBE_F_OUT0;
	api_malloc.size_arg = 1;
	api_malloc.space = "device";
	api_free = api("cudaFree", GPU_KIND_FREE, false);
	api_free.ptr_arg = 0;
	api_free.space = "device";
	api_memcpy = api("cudaMemcpy", GPU_KIND_COPY, false);
	api_memcpy.size_arg = 2;
	api_memcpy.copy_kind_arg = 3;
	api_sync = api("cudaDeviceSynchronize", GPU_KIND_SYNC, false);
	api_launch = api("cuLaunchKernel", GPU_KIND_LAUNCH, false);
	api_launch.dims = GPU_DIMS_SCALARS;
	api_push = api("nvtxRangePushA", GPU_KIND_NVTX_PUSH, true);
	api_push.flags = UPROBE_F_STR0;
	api_pop = api("nvtxRangePop", GPU_KIND_NVTX_POP, true);
	api_uprobe = api("libtrain:step", GPU_KIND_UPROBE, false);
}

static const uint64_t mono0 = 5000000000ULL;	      /* the session's start, CLOCK_MONOTONIC */
static const uint64_t real0 = 1700000000000000000ULL; /* the same instant, CLOCK_REALTIME */
static const uint64_t mib = 1 << 20;

/* One call of @api at @t_ms after the start, lasting @dur_us, from the stack leaf, caller. */
/* UPROBE_EV_* flags for the next call() only. */
static uint32_t next_flags;

static void call(struct gpu_acc *a, const struct gpu_api *api, uint64_t t_ms, uint64_t dur_us,
		 uint64_t leaf, const uint64_t *args, uint64_t ret, uint64_t out, const char *str)
{
	struct gpu_probe p = {.api = api, .slot = 0, .owner = 1};
	struct uprobe_event e = {.flags = next_flags};

	snprintf(p.label, sizeof(p.label), "%s", api->symbol);
	e.entry_ns = mono0 + t_ms * 1000000;
	e.exit_ns = e.entry_ns + dur_us * 1000;
	e.pid = 77;
	e.tid = 78;
	e.ret = ret;
	if (args)
		memcpy(e.args, args, sizeof(e.args));
	if (api->flags & UPROBE_F_OUT0) {
		e.out = out;
		e.flags |= UPROBE_EV_OUT_OK;
	}
	if (str)
		snprintf(e.str, sizeof(e.str), "%s", str);
	/* The leaf is the probed function's own address; its caller, then main. */
	e.ips[0] = 0x9000;
	e.ips[1] = leaf;
	e.ips[2] = 0x4000;
	e.ustack_len = 3;
	next_flags = 0;
	gpu_acc__on_event(a, call_sym, call_as, &p, &e);
}

/* One flush in its own transaction, as the session's flush runs it. */
static int flush(struct gpu_acc *a, bool fail_commit)
{
	bool refreshed = false;
	int r;

	CHECK_INT_EQ(store__begin(st), 0);
	r = gpu_acc__flush(a, st, NULL, &refreshed);
	if (r == 0 && !fail_commit && store__commit(st) == 0) {
		gpu_acc__flush_done(a);
		return 0;
	}
	store__rollback(st);
	for (unsigned i = 0; i < nstacks; i++)
		stacks[i].id = 0; /* their rows were rolled back too */
	return r < 0 ? r : -EIO;
}

/* The entry of @list whose @key is @value, or NULL. */
static const json_t *find(const json_t *list, const char *key, const char *value)
{
	const json_t *x;
	size_t i;

	json_array_foreach(list, i, x) if (gs(x, key) && strcmp(gs(x, key), value) == 0) return x;
	return NULL;
}

/*
 * Two launches named from the __device_stub__ frame of their stacks, the
 * second from a stack interned where the first was (its memory reused).
 * Each keeps its own name: with names remembered by stack address, the
 * second took the first's.
 */
static void check_names_by_content(void)
{
	struct store_session row = test_session_row(77, "train", "cpu,cuda", real0);
	struct gpu_acc_owner owner = {.intern = intern, .resolve = resolve};
	const uint64_t dims[8] = {0, 4, 1, 1, 128, 1, 1};
	const json_t *k;
	struct gpu_acc *a;
	json_t *g = NULL;
	int64_t sid;
	size_t i;

	call_sym = symbolizer__new();
	CHECK_INT_EQ(addrspace__new(getpid(), &call_as), 0);
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	a = gpu_acc__new(&owner);
	if (!a || !call_sym || !call_as)
		exit(99);
	gpu_acc__set_session(a, sid, real0, mono0);
	nstacks = 0;
	/* return addresses into the stubs: looked up at the address - 1 */
	call(a, &api_launch, 100, 5, (uint64_t)(uintptr_t)__device_stub__gpuacc_first + 1, dims, 0,
	     0, NULL);
	reuse_slot = 0;
	call(a, &api_launch, 200, 5, (uint64_t)(uintptr_t)__device_stub__gpuacc_second + 1, dims, 0,
	     0, NULL);
	reuse_slot = -1;
	CHECK_INT_EQ(nstacks, 1);
	CHECK_INT_EQ(flush(a, false), 0);
	CHECK_INT_EQ(query__gpu(store__db(st), sid, 10, &g), 0);
	if (!g)
		exit(1);
	CHECK_INT_EQ(gi(g, "unnamed_launches"), 0);
	CHECK_INT_EQ(json_array_size(json_object_get(g, "kernels")), 2);
	json_array_foreach(json_object_get(g, "kernels"), i, k)
	{
		CHECK(gs(k, "name") && (strcmp(gs(k, "name"), "gpuacc_first") == 0 ||
					strcmp(gs(k, "name"), "gpuacc_second") == 0));
		CHECK_INT_EQ(gi(k, "launches"), 1);
	}
	json_decref(g);
	gpu_acc__free(a);
	addrspace__free(call_as);
	symbolizer__free(call_sym);
	call_as = NULL;
	call_sym = NULL;
}

int main(void)
{
	char dir[] = "/tmp/test-gpu-acc-XXXXXX", path[64];
	struct store_session row = test_session_row(77, "train", "cpu,cuda,nvtx", real0);
	struct gpu_acc_owner owner = {.intern = intern, .resolve = resolve};
	json_t *g = NULL, *r = NULL;
	const json_t *mem, *x;
	struct gpu_acc *a;
	int64_t sid;

	catalogue();
	test_db_path(dir, path, sizeof(path));
	if (store__open(path, &st) < 0)
		return 99;
	CHECK_INT_EQ(store__begin(st), 0);
	CHECK_INT_EQ(store__session_insert(st, &row, &sid), 0);
	CHECK_INT_EQ(store__commit(st), 0);
	a = gpu_acc__new(&owner);
	if (!a)
		return 99;
	gpu_acc__set_session(a, sid, real0, mono0);

	/* First window: weights allocated (4 MiB, 1 MiB), a failed 64 GiB one, a copy in,
	 * a kernel launched twice, a sync, NVTX step > forward, a generic probe. */
	call(a, &api_malloc, 100, 50, 0x2000, (uint64_t[8]){0, 4 * mib}, 0, 0xa000, NULL);
	call(a, &api_malloc, 110, 30, 0x2000, (uint64_t[8]){0, mib}, 0, 0xb000, NULL);
	call(a, &api_malloc, 120, 20, 0x2000, (uint64_t[8]){0, 64ULL << 30}, 2, 0, NULL);
	call(a, &api_memcpy, 200, 400, 0x3000, (uint64_t[8]){0, 0, 8192, 1}, 0, 0, NULL);
	call(a, &api_push, 300, 1, 0x1000, NULL, 0, 0, "step");
	call(a, &api_push, 310, 1, 0x1000, NULL, 0, 0, "forward");
	for (int i = 0; i < 2; i++)
		call(a, &api_launch, 320 + i, 5, 0x1000, (uint64_t[8]){0, 4, 1, 1, 128, 1, 1}, 0, 0,
		     NULL);
	call(a, &api_pop, 510, 1, 0x1000, NULL, 0, 0, NULL); /* forward: 200 ms */
	next_flags = UPROBE_EV_TRUNCATED; /* its stack filled the record */
	call(a, &api_sync, 520, 9000, 0x1000, NULL, 0, 0, NULL);
	call(a, &api_pop, 800, 1, 0x1000, NULL, 0, 0, NULL); /* step: 500 ms */
	call(a, &api_uprobe, 900, 250, 0x1000, NULL, 0, 0, NULL);
	gpu_acc__note_probe(a, 77, "cudaMalloc", "/usr/lib/libcudart.so.13", "attached");
	gpu_acc__count_lost(a, 3);
	/* Unflushed rows hold their stacks; once stored, only the live blocks' stack is held. */
	CHECK(stack_bit(0x2000) && stack_bit(0x1000));
	CHECK_INT_EQ(held(a), stack_bit(0x2000) | stack_bit(0x1000));
	CHECK_INT_EQ(flush(a, false), 0);
	CHECK_INT_EQ(held(a), stack_bit(0x2000));

	/* Second window, written by a flush that fails (its COMMIT is refused) and
	 * is retried: nothing twice. The 4 MiB block is freed; a copy back; one launch. */
	call(a, &api_free, 1100, 10, 0x2000, (uint64_t[8]){0xa000}, 0, 0, NULL);
	next_flags = UPROBE_EV_NO_STACK; /* its stack could not be read */
	call(a, &api_memcpy, 1200, 100, 0x3000, (uint64_t[8]){0, 0, 100, 2}, 0, 0, NULL);
	call(a, &api_launch, 1300, 5, 0x1000, (uint64_t[8]){0, 4, 1, 1, 128, 1, 1}, 0, 0, NULL);
	call(a, &api_pop, 1400, 1, 0x1000, NULL, 0, 0, NULL); /* nothing open: unmatched */
	call(a, &api_uprobe, 1500, 50, 0x1000, NULL, 0, 0, NULL);
	CHECK(flush(a, true) < 0);
	CHECK_INT_EQ(flush(a, false), 0);
	CHECK_INT_EQ(store__session_end(st, sid, "detached", real0 + 2000000000ULL), 0);
	CHECK_INT_EQ(held(a), stack_bit(0x2000)); /* the 1 MiB block is still live */

	CHECK_INT_EQ(query__gpu(store__db(st), sid, 10, &g), 0);
	if (!g)
		return 1;
	CHECK_INT_EQ(gi(g, "lost_calls"), 3);
	CHECK_INT_EQ(gi(g, "unnamed_launches"), 3); /* no address space: names unknown */
	CHECK_INT_EQ(gi(g, "truncated_stacks"), 1);
	CHECK_INT_EQ(gi(g, "missing_stacks"), 1);
	x = find(json_object_get(g, "api"), "api", "cudaMalloc");
	CHECK(x != NULL);
	CHECK_INT_EQ(gi(x, "calls"), 3);
	CHECK_INT_EQ(gi(x, "errors"), 1);
	CHECK(gr(x, "total_ms") == 0.1 && gr(x, "min_ms") == 0.02 && gr(x, "max_ms") == 0.05);
	x = find(json_object_get(g, "api"), "api", "cudaDeviceSynchronize");
	CHECK(x != NULL && gi(x, "calls") == 1 && gr(x, "total_ms") == 9.0);
	x = find(json_object_get(g, "kernels"), "api", "cuLaunchKernel");
	CHECK(x != NULL);
	CHECK_INT_EQ(gi(x, "launches"), 3);
	CHECK_STR_EQ(gs(x, "grid"), "4,1,1");
	CHECK_STR_EQ(gs(x, "block"), "128,1,1");
	CHECK_STR_EQ(json_string_value(json_array_get(json_object_get(x, "stack"), 1)),
		     "train_step");
	x = find(json_object_get(g, "copies"), "direction", "HtoD");
	CHECK(x != NULL && gi(x, "calls") == 1 && gi(x, "bytes") == 8192);
	x = find(json_object_get(g, "copies"), "direction", "DtoH");
	CHECK(x != NULL && gi(x, "calls") == 1 && gi(x, "bytes") == 100);
	x = find(json_object_get(g, "probes"), "what", "cudaMalloc");
	CHECK(x != NULL && strcmp(gs(x, "status"), "attached") == 0);
	CHECK_INT_EQ(json_array_size(json_object_get(g, "probes")), 1);

	mem = json_object_get(g, "memory");
	CHECK_INT_EQ(gi(mem, "allocations"), 3); /* attempts, the failed one too */
	CHECK_INT_EQ(gi(mem, "failed_allocations"), 1);
	CHECK_INT_EQ(gi(mem, "allocated_bytes"), 5 * mib);
	CHECK_INT_EQ(gi(mem, "frees"), 1);
	CHECK_INT_EQ(gi(mem, "freed_bytes"), 4 * mib);
	CHECK_INT_EQ(gi(mem, "live_bytes"), mib);
	CHECK_INT_EQ(gi(mem, "peak_live_bytes"), 5 * mib);
	x = json_array_get(json_object_get(mem, "by_stack"), 0);
	CHECK_STR_EQ(json_string_value(json_array_get(json_object_get(x, "stack"), 1)),
		     "alloc_weights");
	CHECK_INT_EQ(gi(x, "live_bytes"), mib);

	CHECK_INT_EQ(query__ranges(store__db(st), sid, &r), 0);
	if (!r)
		return 1;
	CHECK_INT_EQ(gi(r, "nvtx_unmatched"), 1);
	x = find(json_object_get(r, "ranges"), "path", "step");
	CHECK(x != NULL && gi(x, "calls") == 1 && gr(x, "total_ms") == 500.0);
	x = find(json_object_get(r, "ranges"), "path", "step > forward");
	CHECK(x != NULL && gi(x, "calls") == 1 && gr(x, "total_ms") == 200.0 &&
	      gi(x, "depth") == 1);
	x = find(json_object_get(g, "uprobes"), "probe", "libtrain:step");
	CHECK(x != NULL && gi(x, "calls") == 2 && gr(x, "total_ms") == 0.3);

	json_decref(g);
	json_decref(r);
	gpu_acc__free(a);
	check_names_by_content();
	store__close(st);
	test_db_remove(dir, path);
	return check_exit("gpu-acc");
}
