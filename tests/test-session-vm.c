/*
 * test-session-vm.c - a session's address-space changes
 * (session__on_vm(), daemon/session/memory.c) as `profctl memory` and the
 * vm_changes table show them, from the PROFILE_EVENT_VM records the BPF
 * programs would send: brk growth on its stack; an munmap or mremap of a
 * mapping made in the session counted against the stack that mapped it;
 * one made before the session against the caller (or, sent without a
 * stack, against "[missing stack]"); sampled faults as
 * "touch"; bad records (an unknown kind, lengths that overflow) counted
 * as changes without a stack, never stored, never a crash, and nothing
 * stored before them lost; and file mmaps of the kind BPF judged (a
 * device, or a kind out of range, by the fd's path). Needs neither root
 * nor BPF.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "check_json.h"
#include "check_session.h"
#include "check_store.h"
#include "service/request.h"
#include "session/session.h"
#include "store/store.h"
#include "util.h"

#define MiB (1024 * 1024LL)

static volatile int sink;

__attribute__((noinline)) void vm_test_grower(void)
{
	sink++;
}

__attribute__((noinline)) void vm_test_mapper(void)
{
	sink--;
}

static struct session_env env;
static struct session *s;
static int64_t sid;

/*
 * One change of @kind by @leaf's stack; with @leaf NULL, sent without a
 * stack (SAMPLE_NO_STACK), as the BPF side sends shrinking changes and
 * growth over its stack budget. An mmap of file descriptor @fd (-1: none)
 * whose file BPF judged @file_kind (VM_FILE_*).
 */
static void feed_fd(void (*leaf)(void), uint32_t kind, uint64_t addr, uint64_t len,
		    uint64_t old_addr, uint64_t old_len, uint32_t flags, int fd, uint32_t file_kind)
{
	test_session_vm(s, leaf ? (uint64_t)(uintptr_t)leaf + 4 : 0,
			&(struct vm_change){.addr = addr,
					    .len = len,
					    .old_addr = old_addr,
					    .old_len = old_len,
					    .kind = kind,
					    .flags = flags,
					    .fd = fd,
					    .file_kind = file_kind});
}

static void feed(void (*leaf)(void), uint32_t kind, uint64_t addr, uint64_t len, uint64_t old_addr,
		 uint64_t old_len, uint32_t flags)
{
	feed_fd(leaf, kind, addr, len, old_addr, old_len, flags, -1, VM_FILE_UNKNOWN);
}

static int flush(void)
{
	return test_session_flush(s, &env);
}

/* The net bytes of @change on @mapping by stacks whose leaf is @function (0 if none). */
static long long vm_bytes(const char *change, const char *mapping, const char *function)
{
	static const char sql[] =
	    "SELECT coalesce(sum(v.bytes), 0) FROM vm_changes v "
	    "JOIN stack_frames sf ON sf.stack_id = v.stack_id AND sf.pos = 0 "
	    "JOIN frames f ON f.id = sf.frame_id "
	    "WHERE v.session_id = ?1 AND v.change = ?2 AND v.mapping = ?3 AND f.function = ?4";
	sqlite3_stmt *st;
	long long v = -1;

	if (sqlite3_prepare_v2(store__db(env.store), sql, -1, &st, NULL) != SQLITE_OK) {
		fprintf(stderr, "%s\n", sqlite3_errmsg(store__db(env.store)));
		return -2;
	}
	sqlite3_bind_int64(st, 1, sid);
	sqlite3_bind_text(st, 2, change, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, mapping, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, function, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

int main(void)
{
	char dir[] = "/tmp/test-session-vm-XXXXXX", path[64];
	struct session_params params = test_session_params("cpu,rss", EVENT_CPU | EVENT_RSS);
	const uint64_t a = 0x7f0000000000, b = 0x7f0010000000, c = 0x7f0020000000;

	params.memory_interval_ns = 3600 * NSEC_PER_SEC; /* no readings during the test */
	test_db_path(dir, path, sizeof(path));
	test_session_open(path, &params, &env, &s);
	if (!s)
		return 1;
	sid = session__id(s);

	/* brk: the heap grows by 1 MiB then shrinks by 256 KiB, on the grower's stack */
	feed(vm_test_grower, VM_BRK, 0x1100000, 0, 0x1000000, 0, 0);
	feed(vm_test_grower, VM_BRK, 0x10c0000, 0, 0x1100000, 0, 0);
	/* an anonymous 4 MiB mapping by the mapper, unmapped by the grower: the mapper's */
	feed(vm_test_mapper, VM_MMAP, a, 4 * MiB, 0, 0, MAP_PRIVATE | MAP_ANONYMOUS);
	feed(vm_test_grower, VM_MUNMAP, a, 4 * MiB, 0, 0, 0);
	/* 2 MiB by the mapper, grown to 6 MiB and moved by the grower: +4 MiB, the mapper's */
	feed(vm_test_mapper, VM_MMAP, b, 2 * MiB, 0, 0, MAP_PRIVATE | MAP_ANONYMOUS);
	feed(vm_test_grower, VM_MREMAP, c, 6 * MiB, b, 2 * MiB, 0);
	/* a mapping from before the session, unmapped: against the caller */
	feed(vm_test_grower, VM_MUNMAP, 0x7f0030000000, MiB, 0, 0, 0);
	/* two sampled write faults, 256 KiB each */
	feed(vm_test_grower, VM_FAULT, 0x7f0040000000, 256 * 1024, 0, 0, 2);
	feed(vm_test_grower, VM_FAULT, 0x7f0040100000, 256 * 1024, 0, 0, 2);
	CHECK_INT_EQ(flush(), 0);

	CHECK_INT_EQ(vm_bytes("brk", "heap", "vm_test_grower"), 768 * 1024);
	CHECK_INT_EQ(vm_bytes("mmap", "anon", "vm_test_mapper"), 6 * MiB);
	CHECK_INT_EQ(vm_bytes("munmap", "anon", "vm_test_mapper"), -4 * MiB);
	CHECK_INT_EQ(vm_bytes("mremap", "anon", "vm_test_mapper"), 4 * MiB);
	CHECK_INT_EQ(vm_bytes("munmap", "anon", "vm_test_grower"), -MiB);
	CHECK_INT_EQ(vm_bytes("fault", "touch", "vm_test_grower"), 512 * 1024);
	CHECK_INT_EQ(
	    test_session_scalar(env.store, sid, "SELECT vm_unsent FROM sessions WHERE id = ?1"), 0);

	/* Records without a stack: an munmap of the mapper's 1 MiB is still the mapper's;
	 * one of a mapping from before the session, and growth over the stack budget, go
	 * on the "[missing stack]" frame, and the first counts as a change without a
	 * stack (the BPF side counts the second). */
	feed(vm_test_mapper, VM_MMAP, a, MiB, 0, 0, MAP_PRIVATE | MAP_ANONYMOUS);
	feed(NULL, VM_MUNMAP, a, MiB, 0, 0, 0);
	feed(NULL, VM_MUNMAP, 0x7f0080000000, 2 * MiB, 0, 0, 0);
	feed(NULL, VM_MMAP, 0x7f0090000000, 3 * MiB, 0, 0, MAP_PRIVATE | MAP_ANONYMOUS);
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(vm_bytes("munmap", "anon", "vm_test_mapper"), -5 * MiB);
	CHECK_INT_EQ(vm_bytes("munmap", "anon", "[missing stack]"), -2 * MiB);
	CHECK_INT_EQ(vm_bytes("mmap", "anon", "[missing stack]"), 3 * MiB);
	CHECK_INT_EQ(
	    test_session_scalar(env.store, sid, "SELECT vm_unsent FROM sessions WHERE id = ?1"), 1);

	/* Bad records: an unknown kind is counted without a stack and stored nowhere;
	 * lengths that overflow a page rounding cost nothing and break nothing. */
	feed(vm_test_grower, 99, a, MiB, 0, 0, 0);
	feed(vm_test_grower, VM_NR_KINDS, a, MiB, 0, 0, 0);
	feed(vm_test_mapper, VM_MMAP, 0x7f0050000000, UINT64_MAX, 0, 0,
	     MAP_PRIVATE | MAP_ANONYMOUS);
	feed(vm_test_grower, VM_MUNMAP, 0x7f0050000000, UINT64_MAX - 4095, 0, 0, 0);
	feed(vm_test_grower, VM_MREMAP, 0x7f0060000000, UINT64_MAX, 0x7f0070000000, UINT64_MAX, 0);
	CHECK_INT_EQ(flush(), 0);
	CHECK_INT_EQ(
	    test_session_scalar(env.store, sid, "SELECT vm_unsent FROM sessions WHERE id = ?1"), 3);
	CHECK_INT_EQ(
	    test_session_scalar(env.store, sid,
				"SELECT count(*) FROM vm_changes WHERE session_id = ?1 AND "
				"change NOT IN ('brk','mmap','munmap','mremap','fault')"),
	    0);
	/* what was stored before is all still there */
	CHECK_INT_EQ(vm_bytes("brk", "heap", "vm_test_grower"), 768 * 1024);
	CHECK_INT_EQ(vm_bytes("mremap", "anon", "vm_test_mapper"), 4 * MiB);
	CHECK_INT_EQ(vm_bytes("fault", "touch", "vm_test_grower"), 512 * 1024);

	/* File mmaps: the kind BPF judged while the fd was open wins over what the fd
	 * names now (here the database, a file); a device, or a kind out of range (a bad
	 * record), is judged by the path (/dev/zero shared: shmem; the database: file). */
	{
		int db = open(path, O_RDONLY | O_CLOEXEC), zero = open("/dev/zero", O_RDWR);
		const uint32_t shared = MAP_SHARED;

		if (db < 0 || zero < 0)
			SETUP_FAIL("open %s, /dev/zero: %s", path, strerror(errno));
		feed_fd(vm_test_mapper, VM_MMAP, 0x7f00a0000000, MiB, 0, 0, shared, db,
			VM_FILE_SHMEM);
		feed_fd(vm_test_mapper, VM_MMAP, 0x7f00b0000000, 2 * MiB, 0, 0, shared, db,
			VM_FILE_REGULAR);
		feed_fd(vm_test_mapper, VM_MMAP, 0x7f00c0000000, 16 * MiB, 0, 0, shared, db,
			VM_FILE_OTHER);
		feed_fd(vm_test_mapper, VM_MMAP, 0x7f00d0000000, 4 * MiB, 0, 0, shared, db, 99);
		feed_fd(vm_test_mapper, VM_MMAP, 0x7f00e0000000, 8 * MiB, 0, 0, shared, zero,
			VM_FILE_DEVICE);
		CHECK_INT_EQ(flush(), 0);
		CHECK_INT_EQ(vm_bytes("mmap", "shmem", "vm_test_mapper"), 9 * MiB);
		CHECK_INT_EQ(vm_bytes("mmap", "file", "vm_test_mapper"), 6 * MiB);
		CHECK_INT_EQ(vm_bytes("mmap", "other", "vm_test_mapper"), 16 * MiB);
		close(db);
		close(zero);
	}

	test_session_close(&env, s, dir, path);
	return check_exit("session-vm");
}
