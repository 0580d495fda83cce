/*
 * check_samples.h - real perf samples of a workload for the C unit tests:
 * user registers (DWARF numbering) and a copy of the user stack per
 * sample, from perf_event_open(2) rings, every record checked against its
 * end (perf's evsel.c manner), and self_sample(): this process's own
 * registers and stack, taken in place. Shared by test-unwind and
 * test-cfi-table.
 * One workload at a time (check_workload.h).
 */
#pragma once

#include <asm/perf_regs.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <ucontext.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "check_workload.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

/* status_name() - @s as unwind.h spells it: "END", "NO_CFI", ...; "?" if unknown. */
static inline const char *status_name(enum unwind_status s)
{
	static const char *const names[] = {"END", "TRUNCATED", "NO_CFI", "NO_STACK", "ERROR"};

	return (unsigned)s < ARRAY_SIZE(names) ? names[s] : "?";
}

#define SAMPLES_STACK_USER_BYTES 16384
#define SAMPLES_PERIOD_NS 3000000ULL /* task-clock: one sample per 3 ms of CPU per thread */
#define SAMPLES_RING_PAGES 256	     /* 1 MiB of data per ring: ~60 samples between two drains */
#define SAMPLES_MAX_RINGS 256	     /* CPUs, or threads */
#define SAMPLES_TIMEOUT_NS (20 * NSEC_PER_SEC)

struct sample {
	uint32_t pid, tid;
	uint64_t regs[UNWIND_NREGS]; /* DWARF numbering */
	unsigned char *stack;
	size_t stack_len;
};

/* The perf registers asked for, in the order the record holds them (bit order). */
static const struct {
	int perf, dwarf;
} reg_map[] = {
    {PERF_REG_X86_AX, 0},   {PERF_REG_X86_BX, 3},   {PERF_REG_X86_CX, 2},   {PERF_REG_X86_DX, 1},
    {PERF_REG_X86_SI, 4},   {PERF_REG_X86_DI, 5},   {PERF_REG_X86_BP, 6},   {PERF_REG_X86_SP, 7},
    {PERF_REG_X86_IP, 16},  {PERF_REG_X86_R8, 8},   {PERF_REG_X86_R9, 9},   {PERF_REG_X86_R10, 10},
    {PERF_REG_X86_R11, 11}, {PERF_REG_X86_R12, 12}, {PERF_REG_X86_R13, 13}, {PERF_REG_X86_R14, 14},
    {PERF_REG_X86_R15, 15},
};

static inline uint64_t regs_mask(void)
{
	uint64_t mask = 0;

	for (size_t i = 0; i < ARRAY_SIZE(reg_map); i++)
		mask |= 1ULL << reg_map[i].perf;
	return mask;
}

struct ring {
	int fd;
	struct perf_event_mmap_page *meta;
	unsigned char *data;
	size_t data_size;
	unsigned long bad, lost, no_regs;
};

/* ring_copy() - @len bytes at ring offset @pos, unwrapped. */
static inline void ring_copy(const struct ring *r, uint64_t pos, void *dst, size_t len)
{
	size_t off = (size_t)(pos % r->data_size), first = MIN(len, r->data_size - off);

	memcpy(dst, r->data + off, first);
	memcpy((unsigned char *)dst + first, r->data, len - first);
}

/*
 * parse_sample() - a PERF_RECORD_SAMPLE with sample_type TID | REGS_USER |
 * STACK_USER: pid, tid; abi, regs[17] (absent when abi is NONE); size,
 * data[size], dyn_size (absent when size is 0). Every field is checked
 * against the record's end. Returns 1 with @ret filled, 0 for a sample
 * without user registers, -EBADMSG for a malformed record.
 */
static inline int parse_sample(const unsigned char *rec, size_t len, struct sample *ret)
{
	const unsigned char *p = rec + sizeof(struct perf_event_header), *end = rec + len;
	uint64_t abi, regs[ARRAY_SIZE(reg_map)], size, dyn_size;

#define TAKE(dst, n)                                                                               \
	do {                                                                                       \
		if ((size_t)(end - p) < (size_t)(n))                                               \
			return -EBADMSG;                                                           \
		memcpy((dst), p, (n));                                                             \
		p += (n);                                                                          \
	} while (0)
	TAKE(&ret->pid, 4);
	TAKE(&ret->tid, 4);
	TAKE(&abi, 8);
	if (abi == PERF_SAMPLE_REGS_ABI_NONE)
		return 0;
	TAKE(regs, sizeof(regs));
	TAKE(&size, 8);
	if (size > (uint64_t)(end - p))
		return -EBADMSG;
	if (size == 0)
		return 0;
	ret->stack = (unsigned char *)p; /* copied by the caller */
	p += size;
	TAKE(&dyn_size, 8);
#undef TAKE
	if (dyn_size > size || abi != PERF_SAMPLE_REGS_ABI_64)
		return abi != PERF_SAMPLE_REGS_ABI_64 ? 0 : -EBADMSG;
	for (size_t i = 0; i < ARRAY_SIZE(reg_map); i++)
		ret->regs[reg_map[i].dwarf] = regs[i];
	ret->stack_len = (size_t)dyn_size;
	return 1;
}

/* ring_drain() - parse every record in @r into @samples (up to @cap); returns the new count. */
static inline size_t ring_drain(struct ring *r, struct sample *samples, size_t n, size_t cap)
{
	uint64_t head = __atomic_load_n(&r->meta->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = r->meta->data_tail;
	static unsigned char rec[65536];

	while (tail < head) {
		struct perf_event_header h;
		struct sample s = {};

		ring_copy(r, tail, &h, sizeof(h));
		if (h.size < sizeof(h) || h.size > head - tail) {
			r->bad++;
			tail = head; /* cannot resynchronize: drop the rest */
			break;
		}
		ring_copy(r, tail, rec, h.size);
		tail += h.size;
		if (h.type == PERF_RECORD_LOST) {
			r->lost++;
			continue;
		}
		if (h.type != PERF_RECORD_SAMPLE || n >= cap)
			continue;
		switch (parse_sample(rec, h.size, &s)) {
		case 1:
			samples[n] = s;
			samples[n].stack = malloc(s.stack_len ? s.stack_len : 1);
			if (!samples[n].stack)
				SETUP_FAIL("out of memory");
			memcpy(samples[n].stack, s.stack, s.stack_len);
			n++;
			break;
		case 0:
			r->no_regs++;
			break;
		default:
			r->bad++;
			break;
		}
	}
	__atomic_store_n(&r->meta->data_tail, tail, __ATOMIC_RELEASE);
	return n;
}

static inline long perf_event_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group,
				   unsigned long flags)
{
	return syscall(SYS_perf_event_open, attr, pid, cpu, group, flags);
}

/* Counters of what the rings held besides good samples. */
struct ring_stats {
	unsigned long bad, lost, no_regs;
};

/* How collect() starts sampling the workload. */
enum collect_mode {
	/* the workload waits for a byte on stdin before it starts threads and
	 * work: one ring per CPU with inherit, which follows threads created later */
	COLLECT_STDIN_GO,
	/* the workload runs at once: after @settle_ms, one ring per thread it has
	 * then (/proc/PID/task); threads created later are not sampled */
	COLLECT_THREADS,
};

/* samples_free() - free the stack copies of @n samples. */
static inline void samples_free(struct sample *samples, int n)
{
	for (int i = 0; i < n; i++)
		free(samples[i].stack);
}

/* ring_open() - one sampling event for (@pid, @cpu) and its ring mapped into @ring; -errno. */
static inline int ring_open(struct perf_event_attr *attr, pid_t pid, int cpu, struct ring *ring)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), map_size = (SAMPLES_RING_PAGES + 1) * page;
	int fd = (int)perf_event_open(attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	void *base;

	if (fd < 0)
		return -errno;
	base = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (base == MAP_FAILED)
		SETUP_FAIL("mmap of a perf ring: %m");
	*ring = (struct ring){
	    .fd = fd,
	    .meta = base,
	    .data = (unsigned char *)base + page,
	    .data_size = SAMPLES_RING_PAGES * page,
	};
	return 0;
}

/*
 * collect() - start @argv (argv[0] the program, @env "NAME=value" or NULL
 * added to its environment), sample it as @mode says until @cap samples or
 * SAMPLES_TIMEOUT_NS, stop it (SIGSTOP: its /proc files stay for the
 * unwinder) and return the samples (their stacks malloc'd: samples_free())
 * and its address space in *@ret_as. With COLLECT_STDIN_GO, one event and
 * ring per CPU: the kernel refuses to mmap an inherited per-task event
 * (perf_mmap(): cpu == -1 with attr.inherit), and inherit is what follows
 * threads created after the event. Returns the number of samples, or
 * -errno of perf_event_open when it is refused (the caller skips). The
 * workload runs until workload_kill().
 */
static inline int collect(char *const argv[], const char *env, enum collect_mode mode,
			  int settle_ms, struct sample *samples, int cap, struct addrspace **ret_as,
			  struct ring_stats *stats)
{
	struct perf_event_attr attr = {
	    .size = sizeof(attr),
	    .type = PERF_TYPE_SOFTWARE,
	    .config = PERF_COUNT_SW_TASK_CLOCK,
	    .sample_period = SAMPLES_PERIOD_NS,
	    .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER,
	    .sample_regs_user = regs_mask(),
	    .sample_stack_user = SAMPLES_STACK_USER_BYTES,
	    .disabled = 1,
	    .inherit = mode == COLLECT_STDIN_GO, /* threads created after the event */
	    .exclude_kernel = 1,
	    .exclude_hv = 1,
	};
	static struct ring rings[SAMPLES_MAX_RINGS];
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 0,
	       map_size = (SAMPLES_RING_PAGES + 1) * page;
	long n_cpus = sysconf(_SC_NPROCESSORS_CONF);
	int go, r, first_err = 0;
	size_t n_rings = 0;
	uint64_t deadline;
	pid_t pid;

	go = workload_start(argv, env, STDIN_FILENO);
	pid = workload_pid;
	if (mode == COLLECT_STDIN_GO) {
		if (!wait_blocked_in_read(pid, 10))
			SETUP_FAIL("%s did not start (or does not wait on stdin)", argv[0]);
	} else {
		usleep((useconds_t)settle_ms * 1000);
	}
	r = addrspace__new(pid, ret_as);
	if (r < 0)
		SETUP_FAIL("addrspace__new(%d) of %s: %s", (int)pid, argv[0], strerror(-r));

	if (mode == COLLECT_STDIN_GO) {
		for (long cpu = 0; cpu < MIN(n_cpus, (long)SAMPLES_MAX_RINGS); cpu++) {
			r = ring_open(&attr, pid, (int)cpu, &rings[n_rings]);
			if (r < 0)
				first_err = first_err ? first_err : r; /* an offline CPU */
			else
				n_rings++;
		}
	} else {
		pid_t tids[SAMPLES_MAX_RINGS];
		size_t n_tids = workload_tids(pid, tids, SAMPLES_MAX_RINGS);

		for (size_t i = 0; i < n_tids; i++) {
			r = ring_open(&attr, tids[i], -1, &rings[n_rings]);
			if (r < 0)
				first_err = first_err ? first_err : r;
			else
				n_rings++;
		}
	}
	if (n_rings == 0) {
		close(go);
		workload_kill();
		return first_err ? first_err : -ESRCH;
	}
	for (size_t i = 0; i < n_rings; i++)
		if (ioctl(rings[i].fd, PERF_EVENT_IOC_ENABLE, 0) < 0)
			SETUP_FAIL("PERF_EVENT_IOC_ENABLE: %m");
	if (mode == COLLECT_STDIN_GO && write(go, "g", 1) != 1)
		SETUP_FAIL("write to the workload: %m");
	close(go);

	deadline = now_ns(CLOCK_MONOTONIC) + SAMPLES_TIMEOUT_NS;
	while (n < (size_t)cap && now_ns(CLOCK_MONOTONIC) < deadline) {
		struct pollfd pfd[SAMPLES_MAX_RINGS];

		for (size_t i = 0; i < n_rings; i++)
			pfd[i] = (struct pollfd){.fd = rings[i].fd, .events = POLLIN};
		poll(pfd, n_rings, 20);
		for (size_t i = 0; i < n_rings; i++)
			n = ring_drain(&rings[i], samples, n, (size_t)cap);
	}
	kill(pid, SIGSTOP);
	for (size_t i = 0; i < n_rings; i++) {
		ioctl(rings[i].fd, PERF_EVENT_IOC_DISABLE, 0);
		n = ring_drain(&rings[i], samples, n, (size_t)cap);
		stats->bad += rings[i].bad;
		stats->lost += rings[i].lost;
		stats->no_regs += rings[i].no_regs;
		munmap(rings[i].meta, map_size);
		close(rings[i].fd);
	}
	return (int)n;
}

/* ---------------------------------------------------------------------- */
/* A sample of this very process, taken in place */

extern void *__libc_stack_end; /* glibc: the stack pointer at process start */

/*
 * self_sample() - this function's registers, DWARF numbering, in @regs, and
 * the stack from its SP up to where the process's stack began in @stack
 * (at most @cap bytes). Returns the bytes copied. The registers are read in
 * one asm block in which nothing moves the SP, so the CFI row of the
 * captured IP describes the captured SP.
 */
__attribute__((noipa)) static size_t self_sample(uint64_t regs[UNWIND_NREGS], void *stack,
						 size_t cap)
{
	uint64_t top = (uint64_t)(uintptr_t)__libc_stack_end;
	struct iovec local, remote;
	ssize_t got;
	size_t len;

	__asm__ volatile("movq %%rax, 0(%0)\n\t"
			 "movq %%rdx, 8(%0)\n\t"
			 "movq %%rcx, 16(%0)\n\t"
			 "movq %%rbx, 24(%0)\n\t"
			 "movq %%rsi, 32(%0)\n\t"
			 "movq %%rdi, 40(%0)\n\t"
			 "movq %%rbp, 48(%0)\n\t"
			 "movq %%rsp, 56(%0)\n\t"
			 "movq %%r8, 64(%0)\n\t"
			 "movq %%r9, 72(%0)\n\t"
			 "movq %%r10, 80(%0)\n\t"
			 "movq %%r11, 88(%0)\n\t"
			 "movq %%r12, 96(%0)\n\t"
			 "movq %%r13, 104(%0)\n\t"
			 "movq %%r14, 112(%0)\n\t"
			 "movq %%r15, 120(%0)\n\t"
			 "leaq 0(%%rip), %%rax\n\t"
			 "movq %%rax, 128(%0)\n\t"
			 :
			 : "r"(regs)
			 : "rax", "memory");
	if (top <= regs[UNWIND_REG_SP])
		return 0;
	len = MIN(cap, (size_t)(top - regs[UNWIND_REG_SP]));
	/*
	 * Copied the way the kernel copies a sample's stack, from outside:
	 * in a signal handler under valgrind, a memcpy() would trip over the
	 * red zone valgrind poisons below the interrupted SP.
	 */
	local = (struct iovec){.iov_base = stack, .iov_len = len};
	remote = (struct iovec){.iov_base = (void *)(uintptr_t)regs[UNWIND_REG_SP], .iov_len = len};
	got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
	return got > 0 ? (size_t)got : 0;
}

static unsigned char self_stack[32768];

/* self_caller() - a frame of known name between self_sample() and test_self(). */
__attribute__((noipa)) static size_t self_caller(uint64_t regs[UNWIND_NREGS])
{
	size_t len = self_sample(regs, self_stack, sizeof(self_stack));

	__asm__ volatile("" ::: "memory"); /* no tail call */
	return len;
}

/* Filled by signal_sample(): the registers and stack length self_sample()
 * took inside signal_handler(), and the PC the signal interrupted. */
static uint64_t sig_regs[UNWIND_NREGS], sig_interrupted_ip;

static volatile size_t sig_len; /* volatile: written by the handler behind raise()'s back */

__attribute__((noipa)) static void signal_handler(int sig, siginfo_t *si, void *ucontext)
{
	const ucontext_t *uc = ucontext;

	sig_interrupted_ip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	sig_len = self_caller(sig_regs);
	__asm__ volatile("" ::: "memory");
}

/*
 * signal_sample() - raise SIGUSR1 at this very thread and take a sample in
 * its handler: the stack is self_sample(), self_caller(), signal_handler(),
 * __restore_rt (the kernel's signal trampoline), then the code that raised
 * it. Returns the bytes of stack copied into self_stack, 0 on failure;
 * the registers are in sig_regs. Exits 99 if the handler cannot be set.
 */
static inline size_t signal_sample(void)
{
	struct sigaction sa = {.sa_sigaction = signal_handler, .sa_flags = SA_SIGINFO}, old;

	sig_len = 0;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, &old) < 0)
		SETUP_FAIL("sigaction: %m");
	raise(SIGUSR1);
	sigaction(SIGUSR1, &old, NULL);
	return sig_len;
}
