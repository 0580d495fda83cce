/* sampler.c - perf events per CPU + the profile BPF program + its ring buffer. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "profile.skel.h"
#include "collect/sampler.h"
#include "collect/bpf_util.h"
#include "collect/cfi_cache.h"
#include "collect/cfi_loader.h"
#include "util.h"

struct slot {
	bool used;
	pid_t pid;
	int nr_cpus;
	int *fds;		 /* perf event per CPU, -1 where the CPU is offline */
	struct bpf_link **links; /* BPF program attached to each event */
	int *extra_fds;		 /* the second sampled event per CPU (sampler__start_extra) */
	struct bpf_link **extra_links;
	bool vm; /* follows address-space changes: holds the vm programs attached */
};

struct sampler {
	struct profile_bpf *skel;
	struct bpf_link *fork_link, *exit_link; /* process lifetime tracepoints */
	struct bpf_link *vm_links[6];		/* address-space changes, while vm_slots > 0 */
	bool vm_supported;			/* they attached at sampler__new() */
	unsigned vm_slots;			/* started slots that follow them */
	struct record_reader reader;
	struct cfi_loader *tables; /* made by the first sampler__tables_add() */
	struct cfi_cache *table_cache; /* sampler__set_table_cache(); NULL: none */
	sampler_fn fn;
	void *ctx;
	int nr_cpus;
	struct slot slots[PROFILE_MAX_SLOTS];
	struct sample_event unpacked; /* the compact record being handled, laid out whole */
};

DEFINE_TRIVIAL_CLEANUP_FUNC(struct sampler *, sampler__free)

bool sample_event__valid(const void *data, size_t size)
{
	const struct sample_event *e = data;
	size_t frames;

	/* The record is variable-length: check every length against its size. */
	if (size < SAMPLE_HEAD_BYTES)
		return false;
	frames = (size_t)e->kstack_len + e->ustack_len;
	if (e->kstack_len > PROFILE_MAX_FRAMES || e->ustack_len > PROFILE_MAX_FRAMES ||
	    e->slot >= PROFILE_MAX_SLOTS || e->py_len > PROFILE_MAX_PY_FRAMES)
		return false;
	/* Its own layout: ips[] whole, then stack_size bytes of stack[] (it covers ips[]). */
	if ((e->flags & SAMPLE_HAS_REGS) &&
	    (e->stack_size > PROFILE_MAX_STACK_BYTES ||
	     (e->stack_size && e->stack_offset >= e->stack_size) ||
	     size < offsetof(struct sample_event, stack) + e->stack_size))
		return false;
	if (!(e->flags & SAMPLE_HAS_REGS) && size < SAMPLE_COMPACT_BYTES(frames, e->py_len))
		return false;
	/* The table walk's (unwind "auto" or "tables"): a known stop, frames within ips[]. */
	if ((e->flags & SAMPLE_CFI_TRIED) &&
	    (e->cfi_stop >= CFI_STOP_NR ||
	     (size_t)e->kstack_len + e->cfi_frames > ARRAY_SIZE(e->ips)))
		return false;
	if ((e->flags & SAMPLE_CFI_WALKED) &&
	    (!(e->flags & SAMPLE_CFI_TRIED) || e->ustack_len != e->cfi_frames))
		return false;
	return true;
}

const struct sample_event *sample_event__read(const void *data, size_t size,
					      struct sample_event *buf, size_t *ret_size)
{
	const struct sample_event *e = data;
	const char *p = (const char *)data + SAMPLE_HEAD_BYTES;
	size_t frames;

	if (!sample_event__valid(data, size))
		return NULL;
	if (e->flags & SAMPLE_HAS_REGS) {
		*ret_size = size;
		return e;
	}
	frames = (size_t)e->kstack_len + e->ustack_len;
	memcpy(buf, data, SAMPLE_HEAD_BYTES);
	memcpy(buf->ips, p, frames * sizeof(buf->ips[0]));
	memcpy(buf->py, p + frames * sizeof(buf->ips[0]), e->py_len * sizeof(buf->py[0]));
	*ret_size = offsetof(struct sample_event, ips) + frames * sizeof(buf->ips[0]);
	return buf;
}

/* A bad record is counted and skipped: it must not stop the ring buffer's consumption. */
static bool handle_record(void *ctx, const void *data, size_t size)
{
	struct sampler *s = ctx;
	const struct sample_event *e = sample_event__read(data, size, &s->unpacked, &size);

	if (!e)
		return false;
	s->fn(s->ctx, e, size);
	return true;
}

/* The address-space programs and the kernel functions or tracepoints they attach to. */
static struct bpf_program *vm_program(struct profile_bpf *skel, size_t i)
{
	struct bpf_program *progs[] = {
	    skel->progs.vm_brk_entry,  skel->progs.vm_brk_exit,	   skel->progs.vm_mmap_exit,
	    skel->progs.vm_munmap_exit, skel->progs.vm_mremap_exit, skel->progs.vm_fault,
	};

	return i < ARRAY_SIZE(progs) ? progs[i] : NULL;
}

/*
 * The tracepoints they attach to, under tracefs: syscalls:* need
 * CONFIG_FTRACE_SYSCALLS, and libbpf finds their ids in tracefs, mounted
 * here at /sys/kernel/tracing if it is not (Linux 4.1).
 */
#define TRACEFS "/sys/kernel/tracing"
static const char *const vm_tracepoints[] = {
    "syscalls/sys_enter_brk", "syscalls/sys_exit_brk", "syscalls/sys_exit_mmap",
    "syscalls/sys_exit_munmap", "syscalls/sys_exit_mremap", "exceptions/page_fault_user",
};

/*
 * Load the address-space programs only if every tracepoint they attach to
 * exists: a missing one would fail the whole skeleton's load, and CPU
 * sampling must not depend on them.
 */
static void vm_programs_load(struct sampler *s)
{
	char path[128];
	bool ok = true;

	if (access(TRACEFS "/events", F_OK) < 0)
		mount("tracefs", TRACEFS, "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	for (size_t i = 0; ok && i < ARRAY_SIZE(vm_tracepoints); i++) {
		snprintf(path, sizeof(path), TRACEFS "/events/%s/id", vm_tracepoints[i]);
		ok = access(path, R_OK) == 0;
	}
	for (size_t i = 0; !ok && vm_program(s->skel, i); i++)
		bpf_program__set_autoload(vm_program(s->skel, i), false);
}

static void vm_programs_detach(struct sampler *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(s->vm_links); i++) {
		bpf_link__destroy(s->vm_links[i]);
		s->vm_links[i] = NULL;
	}
}

/*
 * Attach them: all or none. They stay attached only while a started slot
 * follows address-space changes (sampler__start()): page_fault_user and
 * the system calls' tracepoints run for every process of the machine.
 * Returns 0, -EOPNOTSUPP if they were not loaded, or the -errno of the
 * attach that failed.
 */
static int vm_programs_attach(struct sampler *s)
{
	int r = 0;

	for (size_t i = 0; r == 0 && vm_program(s->skel, i); i++) {
		if (!bpf_program__autoload(vm_program(s->skel, i)))
			r = -EOPNOTSUPP;
		else if (!(s->vm_links[i] = bpf_program__attach(vm_program(s->skel, i))))
			r = -errno;
	}
	if (r < 0)
		vm_programs_detach(s);
	return r;
}

bool sampler__vm_supported(const struct sampler *s)
{
	return s->vm_supported;
}

int sampler__vm_stats(struct sampler *s, unsigned slot, struct vm_stats *ret)
{
	return percpu_sum(s->skel->maps.vm_stats, slot, (uint64_t *)ret, U64S(*ret));
}

/* The maps indexed by CPU number (a scratch record and its busy flag) get @nr_cpus entries. */
static int cpu_maps_resize(struct profile_bpf *skel, int nr_cpus)
{
	struct bpf_map *maps[] = {skel->maps.scratch, skel->maps.vm_scratch, skel->maps.vm_busy};

	for (size_t i = 0; i < ARRAY_SIZE(maps); i++) {
		int r = bpf_map__set_max_entries(maps[i], (__u32)nr_cpus);

		if (r < 0)
			return r;
	}
	return 0;
}

int sampler__new(size_t ringbuf_bytes, sampler_fn fn, void *ctx, struct sampler **ret)
{
	_cleanup_(sampler__freep) struct sampler *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->fn = fn;
	s->ctx = ctx;
	r = s->nr_cpus = possible_cpus();
	if (r < 0)
		return r;
	s->skel = profile_bpf__open();
	if (!s->skel)
		return -errno;
	r = cpu_maps_resize(s->skel, s->nr_cpus);
	if (r < 0)
		return r;
	/* A wakeup per sample cost three context switches per sample (the
	 * reader, the unwinding thread, the reader again): about a third of
	 * profd's CPU at 999 Hz. Batches of about 1/16 of the ring instead; the
	 * tick (profd__collect()) reads what is below that. */
	s->skel->rodata->wakeup_bytes = ringbuf_bytes / 16;
	vm_programs_load(s);
	r = collector__load(s->skel->skeleton, s->skel->maps.events, ringbuf_bytes, NULL, -1,
			    handle_record, s, &s->reader);
	if (r < 0)
		return r;
	/* Process lifetime: children of targets become targets (when the slot
	 * follows children), and exited targets are forgotten (PID reuse). */
	s->fork_link = bpf_program__attach(s->skel->progs.profile_fork);
	if (!s->fork_link)
		return -errno;
	s->exit_link = bpf_program__attach(s->skel->progs.profile_exit);
	if (!s->exit_link)
		return -errno;
	/* Attached once here to learn whether they can be (sampler__vm_supported()). */
	s->vm_supported = vm_programs_attach(s) == 0;
	vm_programs_detach(s);
	*ret = TAKE_PTR(s);
	return 0;
}

void sampler__free(struct sampler *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		sampler__stop(s, i);
	cfi_loader__free(s->tables);
	cfi_cache__free(s->table_cache);
	record_reader__close(&s->reader);
	bpf_link__destroy(s->fork_link);
	bpf_link__destroy(s->exit_link);
	vm_programs_detach(s);
	profile_bpf__destroy(s->skel);
	free(s);
}

int sampler__targets_fd(struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.targets);
}

void sampler__cfi_fds(struct sampler *s, int ret_fds[4])
{
	ret_fds[0] = bpf_map__fd(s->skel->maps.cfi_procs);
	ret_fds[1] = bpf_map__fd(s->skel->maps.cfi_modules);
	ret_fds[2] = bpf_map__fd(s->skel->maps.cfi_rows);
	ret_fds[3] = bpf_map__fd(s->skel->maps.cfi_row_cache);
}

struct record_reader *sampler__reader(struct sampler *s)
{
	return &s->reader;
}

static int perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu)
{
	int fd = (int)syscall(SYS_perf_event_open, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/*
 * Open the sampling event on @cpu: cycles if a PMU exists, else cpu-clock.
 * *@event is set by the first CPU and followed by the others.
 */
static int open_sampling_event(int cpu, unsigned freq_hz, const char **event)
{
	struct perf_event_attr attr = {
	    .size = sizeof(attr),
	    .freq = 1,
	    .sample_freq = freq_hz,
	    /* The BPF program reads the stacks; the ring of the event itself is unused. */
	    .sample_type = 0,
	};
	int fd;

	if (!*event || strcmp(*event, "cycles") == 0) {
		attr.type = PERF_TYPE_HARDWARE;
		attr.config = PERF_COUNT_HW_CPU_CYCLES;
		fd = perf_event_open(&attr, -1, cpu);
		/* No PMU (a virtual machine): ENOENT, or EOPNOTSUPP/EINVAL on some kernels. */
		if (fd >= 0 || (fd != -ENOENT && fd != -EOPNOTSUPP && fd != -EINVAL) || *event) {
			if (fd >= 0)
				*event = "cycles";
			return fd;
		}
	}
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	/*
	 * cpu-clock counts nanoseconds: a fixed period of 1e9 / freq is exactly
	 * freq samples per CPU-second. Frequency mode would re-tune the period
	 * on scheduler ticks, which NOHZ stops on idle CPUs, so the period
	 * drifted with the target's busy/idle phases and biased thread shares
	 * (a thread busy 10 ms in 100 ms got 0.20 of the samples for 0.167 of
	 * the CPU time, measured).
	 */
	attr.freq = 0;
	attr.sample_period = NSEC_PER_SEC / freq_hz;
	/*
	 * No overflow, so no run of profile_sample, on a tick that finds the CPU
	 * idle (perf_swevent_hrtimer() honours exclude_idle): the program drops
	 * the idle task's samples anyway, but ran 0.14-0.44 us for each, up to
	 * 999 times a second per idle CPU: 0.7-2.2 us more per kept sample of a
	 * target using a sixth of a CPU on a 2-CPU PVM guest (BPF run-time
	 * statistics, two runs; test-idle-hooks counts the runs). Not set for
	 * cycles, which a halted CPU barely counts.
	 */
	attr.exclude_idle = 1;
	fd = perf_event_open(&attr, -1, cpu);
	if (fd >= 0)
		*event = "cpu-clock";
	return fd;
}

int sampler__start(struct sampler *s, unsigned slot, pid_t pid, unsigned freq_hz,
		   const struct slot_config *cfg, const char **ret_event)
{
	struct slot *sl;
	const char *event = NULL;
	__u32 key = (__u32)pid, val = slot + 1;
	int r, opened = 0;

	if (slot >= PROFILE_MAX_SLOTS || s->slots[slot].used)
		return -EBUSY;
	sl = &s->slots[slot];
	*sl = (struct slot){.used = true, .pid = pid, .nr_cpus = s->nr_cpus};
	sl->fds = malloc(sizeof(*sl->fds) * s->nr_cpus);
	sl->links = calloc(s->nr_cpus, sizeof(*sl->links));
	if (!sl->fds || !sl->links) {
		r = -ENOMEM;
		goto fail;
	}
	for (int cpu = 0; cpu < s->nr_cpus; cpu++)
		sl->fds[cpu] = -1;

	/* The slot's drop counters start from zero for each session. */
	r = percpu_zero(s->skel->maps.drops, slot, sizeof(struct slot_counters));
	if (r == 0)
		r = percpu_zero(s->skel->maps.vm_stats, slot, sizeof(struct vm_stats));
	if (r == 0)
		r = percpu_zero(s->skel->maps.vm_budget, slot, 3 * sizeof(uint64_t));
	if (r < 0)
		goto fail;
	/* Settings before the target: no sample of this slot is taken before both exist. */
	{
		__u32 k = slot;

		if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.slot_configs), &k, cfg, BPF_ANY) <
		    0) {
			r = -errno;
			goto fail;
		}
	}
	if (cfg->vm_fault_period && s->vm_supported) {
		if (s->vm_slots == 0) {
			r = vm_programs_attach(s);
			if (r < 0)
				goto fail;
		}
		s->vm_slots++;
		sl->vm = true;
	}
	r = bpf_map_update_elem(bpf_map__fd(s->skel->maps.targets), &key, &val, BPF_NOEXIST);
	if (r < 0) {
		r = errno == EEXIST ? -EBUSY : -errno;
		goto fail;
	}

	for (int cpu = 0; cpu < s->nr_cpus; cpu++) {
		LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = PROFILE_COOKIE(slot, 0));
		int fd = open_sampling_event(cpu, freq_hz, &event);

		if (fd == -ENODEV) /* possible but offline CPU */
			continue;
		if (fd < 0) {
			r = fd == -ENOENT ? -EOPNOTSUPP : fd;
			goto fail;
		}
		sl->fds[cpu] = fd;
		sl->links[cpu] =
		    bpf_program__attach_perf_event_opts(s->skel->progs.profile_sample, fd, &opts);
		if (!sl->links[cpu]) {
			r = -errno;
			goto fail;
		}
		opened++;
	}
	if (opened == 0) {
		r = -EOPNOTSUPP;
		goto fail;
	}
	*ret_event = event;
	return 0;
fail:
	sampler__stop(s, slot);
	return r;
}

int sampler__start_extra(struct sampler *s, unsigned slot, uint32_t type, uint64_t config,
			 uint64_t period)
{
	struct slot *sl = &s->slots[slot];
	struct perf_event_attr attr = {
	    .size = sizeof(attr),
	    .type = type,
	    .config = config,
	    .sample_period = period,
	};
	int opened = 0;

	if (slot >= PROFILE_MAX_SLOTS || !sl->used || sl->extra_fds)
		return -EINVAL;
	sl->extra_fds = malloc(sizeof(*sl->extra_fds) * sl->nr_cpus);
	sl->extra_links = calloc(sl->nr_cpus, sizeof(*sl->extra_links));
	if (!sl->extra_fds || !sl->extra_links)
		return -ENOMEM;
	for (int cpu = 0; cpu < sl->nr_cpus; cpu++)
		sl->extra_fds[cpu] = -1;
	for (int cpu = 0; cpu < sl->nr_cpus; cpu++) {
		LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = PROFILE_COOKIE(slot, 1));
		int fd = perf_event_open(&attr, -1, cpu);

		if (fd == -ENODEV)
			continue;
		if (fd < 0)
			/* No PMU for a hardware event: ENOENT, EOPNOTSUPP or EINVAL. The
			 * slot's own fds are closed by sampler__stop(). */
			return fd == -ENOENT || fd == -EINVAL ? -EOPNOTSUPP : fd;
		sl->extra_fds[cpu] = fd;
		sl->extra_links[cpu] =
		    bpf_program__attach_perf_event_opts(s->skel->progs.profile_sample, fd, &opts);
		if (!sl->extra_links[cpu])
			return -errno;
		opened++;
	}
	return opened ? 0 : -EOPNOTSUPP;
}

/* map_delete_if()'s test for 'targets': a process of the slot whose targets value is *@ctx. */
static bool target_of(void *ctx, int fd, const void *key)
{
	__u32 val;

	return bpf_map_lookup_elem(fd, key, &val) == 0 && val == *(const __u32 *)ctx;
}

void sampler__stop(struct sampler *s, unsigned slot)
{
	struct slot *sl = &s->slots[slot];
	__u32 target = slot + 1;

	if (slot >= PROFILE_MAX_SLOTS || !sl->used)
		return;
	for (int cpu = 0; sl->links && cpu < sl->nr_cpus; cpu++)
		bpf_link__destroy(sl->links[cpu]);
	for (int cpu = 0; sl->fds && cpu < sl->nr_cpus; cpu++)
		if (sl->fds[cpu] >= 0)
			close(sl->fds[cpu]);
	/* Remove the slot's targets: the process, and children it was following. */
	map_delete_if(bpf_map__fd(s->skel->maps.targets), sizeof(__u32), target_of, &target);
	for (int cpu = 0; sl->extra_links && cpu < sl->nr_cpus; cpu++)
		bpf_link__destroy(sl->extra_links[cpu]);
	for (int cpu = 0; sl->extra_fds && cpu < sl->nr_cpus; cpu++)
		if (sl->extra_fds[cpu] >= 0)
			close(sl->extra_fds[cpu]);
	free(sl->extra_fds);
	free(sl->extra_links);
	free(sl->fds);
	free(sl->links);
	if (sl->vm && --s->vm_slots == 0)
		vm_programs_detach(s);
	*sl = (struct slot){0};
}

uint64_t sampler__lost(struct sampler *s, unsigned slot)
{
	struct slot_counters sum;

	if (percpu_sum(s->skel->maps.drops, slot, (uint64_t *)&sum, U64S(sum)) < 0)
		return 0;
	return sum.ringbuf_full;
}

int sampler__tables_add(struct sampler *s, pid_t pid)
{
	if (!s->tables) {
		int r = cfi_loader__new(bpf_map__fd(s->skel->maps.cfi_procs),
					bpf_map__fd(s->skel->maps.cfi_modules),
					bpf_map__fd(s->skel->maps.cfi_rows), CFI_MAPS_DEFAULT_ROWS,
					s->table_cache, &s->tables);

		if (r < 0)
			return r;
	}
	return cfi_loader__add(s->tables, pid);
}

int sampler__set_table_cache(struct sampler *s, const char *dir, uint64_t max_bytes)
{
	struct cfi_cache *c;
	int r;

	if (s->tables || s->table_cache)
		return -EBUSY;
	r = cfi_cache__new(dir, max_bytes, &c);
	if (r == 0)
		s->table_cache = c;
	return r;
}

bool sampler__has_table_cache(const struct sampler *s)
{
	return s->table_cache != NULL;
}

int sampler__tables_load_module(struct sampler *s, pid_t pid, uint64_t pc)
{
	return s->tables ? cfi_loader__load_module(s->tables, pid, pc) : -ENOENT;
}

int sampler__tables_remove(struct sampler *s, pid_t pid)
{
	return s->tables ? cfi_loader__remove(s->tables, pid) : 0;
}

void sampler__tables_stats(struct sampler *s, struct cfi_maps_stats *ret)
{
	*ret = (struct cfi_maps_stats){.rows_cap = CFI_MAPS_DEFAULT_ROWS};
	if (s->tables)
		cfi_loader__stats(s->tables, ret);
}
