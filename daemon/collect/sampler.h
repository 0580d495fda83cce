/*
 * sampler.h - CPU sampling through perf events and the profile.bpf.c
 * program: one sampling event per CPU per session slot, the BPF ring buffer
 * that carries samples to user space, and the map of target processes.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/profile.h"
#include "collect/bpf_util.h"
#include "collect/cfi_maps.h"

struct sampler;

/*
 * sample_event__valid() - whether the @size bytes at @data are a well-formed
 * sample record, in either of the ring buffer's layouts (struct
 * sample_event in bpf/profile.h): every length (kstack_len, ustack_len,
 * py_len, stack_size, stack_offset) within its bound and within @size,
 * slot in range. Records that fail are counted
 * (record_reader__bad_records()) and dropped.
 */
bool sample_event__valid(const void *data, size_t size);

/*
 * sample_event__read() - the sample record at @data (@size bytes, as the
 * ring buffer holds it) as a struct sample_event: @data itself for one with
 * SAMPLE_HAS_REGS, else @buf, filled from the compact record (its header,
 * addresses and Python frames; the rest of @buf is left as it was). Sets
 * *@ret_size to the size it has as a struct sample_event: @size, or
 * offsetof(ips) + 8 * (kstack_len + ustack_len) for a compact one. Returns
 * NULL for a malformed record (sample_event__valid()).
 */
const struct sample_event *sample_event__read(const void *data, size_t size,
					      struct sample_event *buf, size_t *ret_size);

/*
 * Called for each well-formed sample read from the ring buffer, as
 * sample_event__read() lays it out. @e (@size bytes) is valid only during
 * the call; its ips[] hold e->kstack_len + e->ustack_len addresses, py[]
 * e->py_len Python frames, and with SAMPLE_HAS_REGS stack[] holds
 * e->stack_size bytes (all already checked against the record's size).
 */
typedef void (*sampler_fn)(void *ctx, const struct sample_event *e, size_t size);

/*
 * sampler__new() - load and verify profile.bpf.c.
 * @ringbuf_bytes: ring buffer size, a power of two >= page size. The
 *   reader's fd polls readable only once 1/16 of it is full: call
 *   record_reader__poll() on a timer too (every 100 ms to 1 s).
 * Returns 0, -EPERM without CAP_BPF/CAP_PERFMON, or the -errno libbpf gave.
 * Does not log (libbpf's own messages go through its print callback).
 */
int sampler__new(size_t ringbuf_bytes, sampler_fn fn, void *ctx, struct sampler **ret);
void sampler__free(struct sampler *s); /* accepts NULL */

/* sampler__targets_fd() - the BPF map of target processes (tgid -> slot + 1), to share. */
int sampler__targets_fd(struct sampler *s);
/* sampler__cfi_fds() - its cfi_procs, cfi_modules, cfi_rows and cfi_row_cache maps
 * (cfi_walk.bpf.h), in that order, to share with another BPF object's walk. */
void sampler__cfi_fds(struct sampler *s, int ret_fds[4]);

/*
 * sampler__reader() - the reader of the samples' ring buffer (owned by @s):
 * its fd polls readable when samples wait; record_reader__poll() calls the
 * sampler_fn for each well-formed one and counts the others.
 */
struct record_reader *sampler__reader(struct sampler *s);

/*
 * sampler__start() - open a sampling event on every online CPU at @freq_hz
 * samples per second, attach the BPF program with @slot as its cookie, and
 * add @pid as a target of @slot. @cfg says what each sample carries: a
 * frame-pointer stack, and/or registers and a copy of the user stack; a
 * nonzero vm_fault_period attaches the address-space programs, if no
 * started slot had them yet. The event is 'cycles' where the CPU has a PMU,
 * 'cpu-clock' otherwise; *@ret_event names the one used (static string).
 * Returns 0, -EBUSY if @slot is in use or @pid is already a target,
 * -EOPNOTSUPP if neither event can be opened, -errno of perf_event_open()
 * or of attaching the address-space programs.
 */
int sampler__start(struct sampler *s, unsigned slot, pid_t pid, unsigned freq_hz,
		   const struct slot_config *cfg, const char **ret_event);

/*
 * sampler__start_extra() - also sample a second event for @slot (started
 * with sampler__start()), @type/@config as perf_event_open(2)'s attr (for
 * example PERF_TYPE_SOFTWARE/PERF_COUNT_SW_PAGE_FAULTS, or a hardware cache
 * event), one sample every @period events. Its samples carry event = 1.
 * Returns 0, -EOPNOTSUPP where the machine cannot count it (no PMU), -EINVAL
 * if @slot is not started or already has one, -errno. On failure what was
 * opened stays until sampler__stop(). Does not log.
 */
int sampler__start_extra(struct sampler *s, unsigned slot, uint32_t type, uint64_t config,
			 uint64_t period);

/* sampler__stop() - close @slot's events and drop its targets (the last slot that follows
 * address-space changes detaches their programs). Idempotent. */
void sampler__stop(struct sampler *s, unsigned slot);

/*
 * sampler__vm_supported() - whether the address-space programs attach
 * (slot_config.vm_fault_period has an effect): the kernel has the
 * syscalls:sys_{enter,exit}_brk, sys_exit_{mmap,munmap,mremap} and
 * exceptions:page_fault_user tracepoints. They are attached while a started
 * slot has a nonzero vm_fault_period, and only then.
 */
bool sampler__vm_supported(const struct sampler *s);

/*
 * sampler__vm_stats() - @slot's address-space changes since sampler__start()
 * (running totals, struct vm_stats). 0 or -errno of the map read.
 */
int sampler__vm_stats(struct sampler *s, unsigned slot, struct vm_stats *ret);

/* sampler__lost() - samples of @slot dropped because the ring buffer was full (running total). */
uint64_t sampler__lost(struct sampler *s, unsigned slot);

/*
 * sampler__tables_add() - load process @pid's CFI tables for the walk of
 * slots with cfi_walk (unwind "auto" or "tables"), on the loading thread
 * (collect/cfi_loader.c, started by the first call): now, and again after
 * its mappings changed. Until the thread has loaded them, the process's
 * samples fall back (CFI_STOP_NO_PROCESS). Returns 0, or -errno if the
 * thread or the mmap of the row map could not be made, -ENOMEM. Does not
 * block on the loading; does not log.
 */
int sampler__tables_add(struct sampler *s, pid_t pid);
/*
 * sampler__set_table_cache() - keep compiled tables on disk in @dir
 * (cfi_cache__new(): created if missing, at most @max_bytes of files) and
 * read them from there, by build ID, before compiling. Before the first
 * sampler__tables_add(). Returns 0, -EBUSY after it (or a second time), or
 * cfi_cache__new()'s -errno (the sampler then compiles every table).
 */
int sampler__set_table_cache(struct sampler *s, const char *dir, uint64_t max_bytes);
/* sampler__has_table_cache() - whether sampler__set_table_cache() succeeded. */
bool sampler__has_table_cache(const struct sampler *s);
/*
 * sampler__tables_load_module() - compile and load, on the loading thread,
 * the table of the module of @pid (added) holding @pc, where a walk
 * stopped at CFI_STOP_NO_TABLE: tables are loaded per module on demand.
 * Returns 0, -ENOENT before any sampler__tables_add(), -ENOMEM.
 */
int sampler__tables_load_module(struct sampler *s, pid_t pid, uint64_t pc);
/* sampler__tables_remove() - drop @pid's tables (on the thread). 0 or -ENOMEM. */
int sampler__tables_remove(struct sampler *s, pid_t pid);
/*
 * sampler__tables_stats() - what the table maps hold and what was refused
 * (cfi_maps_stats), as of the loading thread's last batch of requests.
 */
void sampler__tables_stats(struct sampler *s, struct cfi_maps_stats *ret);
