/*
 * uprobes.h - user-function probes (uprobes.bpf.c): the catalogue of CUDA
 * runtime/driver and NVTX functions profd knows, finding them by symbol in
 * the files a target has mapped, attaching entry/return probes per session,
 * and reading the call records back.
 */
#pragma once

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "bpf/uprobes.h"
#include "collect/bpf_util.h"
#include "symbols/symbolize.h"

/* What a probed function does, for the per-session accounting (gpu_acc.c). */
enum gpu_kind {
	GPU_KIND_LAUNCH,     /* kernel launch: grid/block in the args */
	GPU_KIND_GRAPH,	     /* cudaGraphLaunch: a whole graph */
	GPU_KIND_ALLOC,	     /* device/managed/host-pinned allocation */
	GPU_KIND_FREE,	     /* its release, by pointer */
	GPU_KIND_COPY,	     /* memory copy */
	GPU_KIND_SYNC,	     /* the CPU thread waits for the GPU */
	GPU_KIND_NVTX_PUSH,  /* nvtxRangePush: opens a nested range on the thread */
	GPU_KIND_NVTX_POP,   /* nvtxRangePop */
	GPU_KIND_NVTX_START, /* nvtxRangeStart: a range with an id, returned */
	GPU_KIND_NVTX_END,   /* nvtxRangeEnd(id) */
	GPU_KIND_NVTX_MARK,  /* an instant */
	GPU_KIND_UPROBE,     /* a generic --uprobe: calls and latency only */
};

/* How the arguments of a launch give the grid and block dimensions. */
enum gpu_dims {
	GPU_DIMS_NONE,
	GPU_DIMS_DIM3_REGS, /* (fn, dim3 grid, dim3 block, ...): x|y<<32 and z in two registers each
			     */
	GPU_DIMS_SCALARS,   /* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, ...) */
	GPU_DIMS_CONFIG_DIM3, /* cudaLaunchKernelExC(&config, ...): two dim3 at the start of config
			       */
	GPU_DIMS_CONFIG_U32,  /* cuLaunchKernelEx(&config, ...): six unsigned at the start of config
			       */
};

/* One function of the catalogue (or a generic probe). */
struct gpu_api {
	const char *symbol; /* symbol name looked up */
	enum gpu_kind kind;
	unsigned flags; /* UPROBE_F_* */
	bool nvtx;	/* part of --events nvtx (else cuda) */
	enum gpu_dims dims;
	int fn_arg;   /* launch: argument holding the host function (-1: name from the stack) */
	int size_arg; /* alloc: bytes; copy: bytes (-1: none) */
	int ptr_arg;  /* free: the pointer released */
	int copy_kind_arg;     /* copy: cudaMemcpyKind argument, -1 for a fixed direction */
	const char *direction; /* copy with copy_kind_arg -1: "HtoD", "DtoH", "DtoD", "default" */
	const char *space;     /* alloc/free: "device", "managed", "host" (pinned host memory) */
	bool error_if_nonzero; /* the return value is a CUDA error code (0 = success) */
};

/* One attached symbol: what a record's probe id stands for. */
struct gpu_probe {
	const struct gpu_api *api; /* the catalogue entry, or the session's generic entry */
	unsigned slot;
	int64_t owner;	 /* the session that attached it (uprobes__attach()'s @owner) */
	char label[160]; /* "cudaMalloc", or "LIB:SYMBOL" for a generic probe */
};

/* Which probe families an attach asks for (uprobes__attach()). */
#define GPU_WANT_CUDA (1u << 0)
#define GPU_WANT_NVTX (1u << 1)

/*
 * Called by uprobes__attach() once per probe outcome in process @pid: @what is the symbol or
 * LIB:SYMBOL, @file the file it was looked up in ("" if none), @status
 * "attached", "missing", "inlined" or "failed: <reason>". Strings valid
 * during the call only.
 */
typedef void (*uprobes_note_fn)(void *ctx, pid_t pid, const char *what, const char *file,
				const char *status);

/* Called for each well-formed record; @e (@size bytes) valid during the call only. */
typedef void (*uprobes_event_fn)(void *ctx, const struct gpu_probe *p, const struct uprobe_event *e,
				 size_t size);

struct uprobes;

/* Each function is documented where it is defined, in uprobes.c. */
int uprobes__new(size_t ringbuf_bytes, uprobes_event_fn fn, void *ctx, struct uprobes **ret);
void uprobes__free(struct uprobes *g);			  /* accepts NULL */
struct record_reader *uprobes__reader(struct uprobes *g); /* owned by @g */
int uprobes__attach(struct uprobes *g, unsigned slot, int64_t owner, pid_t pid,
		    const struct addrspace *as, unsigned want, const char *uprobes,
		    uprobes_note_fn note, void *note_ctx);
int uprobes__attach_more(struct uprobes *g, unsigned slot, pid_t pid, const struct addrspace *as,
			 uprobes_note_fn note, void *note_ctx);
bool uprobes__wanted(struct uprobes *g, unsigned slot);
int uprobes__rescan(struct uprobes *g, unsigned slot, uprobes_note_fn note, void *note_ctx);
void uprobes__detach(struct uprobes *g, unsigned slot);
uint64_t uprobes__lost(struct uprobes *g, unsigned slot);
uint64_t uprobes__entered(struct uprobes *g, unsigned slot);
bool uprobe_event__valid(const void *data, size_t size);
int uprobes__check_list(const char *list, char *errbuf, size_t errlen);
const char *gpu_copy_direction(const struct gpu_api *api, const struct uprobe_event *e);
