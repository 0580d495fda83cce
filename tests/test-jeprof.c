/*
 * test-jeprof.c - jemalloc's heap profiles read from outside (collect/jeprof.c):
 * - MALLOC_CONF: jemalloc's defaults, every profiler key, values it refuses;
 * - a heap_v2 profile: totals per stack, the profiler's own frames cut down
 *   to one allocator frame by the libjemalloc mapping, stacks without live
 *   objects or without a caller left out; every prefix of it parses or is
 *   refused (-EBADMSG), and only the whole one is complete; malformed ones
 *   are refused;
 * - the reader on profiles this test writes as jemalloc names them: the
 *   first is the baseline (no record), then objects that appear become
 *   ALLOC + RETURN records weighed as jeprof unbiases them, objects and
 *   stacks that go become FREE records of the oldest, a profile still being
 *   written waits, a profile that does not parse is said once (-EBADMSG),
 *   counted and skipped, as are an oversized one and (as root) a file of
 *   another user; stacks that
 *   differ only in the profiler's frames count as one;
 * - read_all() reads to the end of a pipe, or to its bound, NUL-terminated;
 * - where libjemalloc is installed, a real profile of alloc-pattern's leak
 *   (ALLOC_PATTERN) names leak_chunk's caller frames after one jemalloc frame.
 * Needs nothing else.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "io.h"
#include "collect/jeprof.h"

#define JE "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"

static void test_conf(void)
{
	struct jeprof_conf c;

	CHECK_INT_EQ(jeprof__parse_conf(NULL, &c), 0);
	CHECK(!c.prof && c.active && c.lg_interval == -1 && c.lg_sample == 19);
	CHECK_STR_EQ(c.prefix, "jeprof");
	CHECK(!jeprof__dumps_periodically(&c));
	CHECK_INT_EQ(jeprof__parse_conf("narenas:4,prof:true,prof_prefix:/tmp/x/je,"
					"lg_prof_interval:20,lg_prof_sample:17,abort_conf:false",
					&c),
		     0);
	CHECK(c.prof && c.active && c.lg_interval == 20 && c.lg_sample == 17);
	CHECK_STR_EQ(c.prefix, "/tmp/x/je");
	CHECK(jeprof__dumps_periodically(&c));
	CHECK_INT_EQ(jeprof__parse_conf("prof:true,prof_active:false,lg_prof_interval:20", &c), 0);
	CHECK(!jeprof__dumps_periodically(&c));
	CHECK_INT_EQ(jeprof__parse_conf("prof:true", &c), 0);
	CHECK(!jeprof__dumps_periodically(&c)); /* no interval dumps: nothing to read */
	CHECK_INT_EQ(jeprof__parse_conf("prof:yes", &c), -EINVAL);
	CHECK_INT_EQ(jeprof__parse_conf("prof:true,lg_prof_interval:x", &c), -EINVAL);
	CHECK_INT_EQ(jeprof__parse_conf("prof:true,lg_prof_interval:99", &c), -EINVAL);
	CHECK_INT_EQ(jeprof__parse_conf("prof", &c), -EINVAL);
	CHECK_INT_EQ(jeprof__parse_conf("prof:true,prof_prefix:", &c), -EINVAL);
}

/* A profile as jemalloc 5 writes it: frames at 0x7f00... are libjemalloc's. */
static const char profile[] =
    "heap_v2/131072\n"
    "  t*: 43: 3000000 [0: 0]\n"
    "  t0: 43: 3000000 [0: 0]\n"
    "@ 0x7f0000001000 0x7f0000002000 0x7f0000003000 0x555500001100 0x555500001200\n"
    "  t*: 40: 2621440 [0: 0]\n"
    "  t0: 40: 2621440 [0: 0]\n"
    "@ 0x7f0000001000 0x7f0000003000 0x555500001300\n"
    "  t*: 3: 378560 [0: 0]\n"
    "  t0: 3: 378560 [0: 0]\n"
    "@ 0x7f0000001000 0x555500001400\n"
    "  t*: 0: 0 [0: 0]\n"
    "@ 0x7f0000001000 0x7f0000002000\n"
    "  t*: 1: 64 [0: 0]\n"
    "  t1: 1: 64 [0: 0]\n"
    "\n"
    "MAPPED_LIBRARIES:\n"
    "555500000000-555500002000 r-xp 00000000 fe:00 1  /usr/bin/app\n"
    "7f0000000000-7f0000010000 r-xp 00000000 fe:00 2  /usr/lib/libjemalloc.so.2\n"
    "7ffe00000000-7ffe00021000 rw-p 00000000 00:00 0  [stack]\n";

static void test_parse(void)
{
	struct jeprof_profile p;
	size_t len = strlen(profile), complete = 0;

	CHECK_INT_EQ(jeprof__parse(profile, len, "libjemalloc", &p), 0);
	CHECK(p.complete);
	CHECK_INT_EQ(p.period, 131072);
	CHECK_INT_EQ(p.n, 2); /* no live object; only the allocator: left out */
	if (p.n == 2) {
		CHECK_INT_EQ(p.stacks[0].n, 3); /* one allocator frame, then the callers */
		CHECK_INT_EQ(p.stacks[0].ips[0], 0x7f0000003000);
		CHECK_INT_EQ(p.stacks[0].ips[1], 0x555500001100);
		CHECK_INT_EQ(p.stacks[0].objects, 40);
		CHECK_INT_EQ(p.stacks[0].bytes, 2621440);
		CHECK_INT_EQ(p.stacks[1].n, 2);
		CHECK_INT_EQ(p.stacks[1].ips[1], 0x555500001300);
		CHECK_INT_EQ(p.stacks[1].objects, 3);
	}
	jeprof_profile__done(&p);
	/* Every prefix, as a profile jemalloc is still writing: parsed or refused, complete
	 * only once the allocator's mapping line is there. */
	for (size_t cut = 0; cut < len; cut++) {
		int r = jeprof__parse(profile, cut, "libjemalloc", &p);

		if (r != 0 && r != -EBADMSG)
			check_fail(__FILE__, __LINE__, "cut at %zu: %d", cut, r);
		if (r == 0) {
			complete += p.complete;
			if (p.complete && cut < (size_t)(strstr(profile, "7f0000010000") - profile))
				check_fail(__FILE__, __LINE__, "cut at %zu: complete", cut);
			jeprof_profile__done(&p);
		}
	}
	CHECK(complete > 0);
	CHECK_INT_EQ(jeprof__parse("heap profile: 1: 2 [3: 4] @ heapprofile\n", 40, "je", &p),
		     -EBADMSG);
	CHECK_INT_EQ(jeprof__parse("heap_v2/0\n", 10, "je", &p), -EBADMSG);
	CHECK_INT_EQ(jeprof__parse("heap_v2/8\n@ zz\n", 15, "je", &p), -EBADMSG);
	CHECK_INT_EQ(jeprof__parse("heap_v2/8\n@ 0x1\n@ 0x2\n", 22, "je", &p), -EBADMSG);
	CHECK_INT_EQ(jeprof__parse("heap_v2/8\n@ 0x1\n  t*: x: 1 [0: 0]\n", 33, "je", &p),
		     -EBADMSG);
	CHECK_INT_EQ(jeprof__parse("heap_v2/8\ngarbage\n", 18, "je", &p), -EBADMSG);
}

/* What the reader sent. */
static struct {
	unsigned allocs, returns, frees, invalid;
	uint64_t weight, size;
	uint64_t addrs[256];
	unsigned naddrs;
} got;

static void on_record(void *ctx, const struct malloc_event *e, size_t size)
{
	(void)ctx;
	if (!malloc_event__valid(e, size) || e->func != MALLOC_FUNC_JEMALLOC_PROF) {
		got.invalid++;
		return;
	}
	if (e->kind == MALLOC_EV_ALLOC) {
		got.allocs++;
		got.weight = e->weight;
		got.size = e->size;
	} else if (e->kind == MALLOC_EV_RETURN) {
		got.returns++;
		CHECK(e->addr >> 63);
		if (got.naddrs < 256)
			got.addrs[got.naddrs++] = e->addr;
	} else {
		got.frees++;
		CHECK(got.naddrs > 0 && e->addr == got.addrs[0]); /* the oldest first */
		if (got.naddrs > 0)
			memmove(got.addrs, got.addrs + 1, --got.naddrs * sizeof(got.addrs[0]));
	}
}

/*
 * Write PREFIX.PID.SEQ.iSEQ.heap in @dir: @objects objects of 64 KiB from one caller, split
 * between two stacks that differ only in the profiler's frames (one stack to the reader).
 */
static void write_profile(const char *dir, int seq, unsigned objects, bool whole)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/je.%d.%d.i%d.heap", dir, (int)getpid(), seq, seq);
	f = fopen(path, "w");
	if (!f)
		SETUP_FAIL("%s: %m", path);
	fprintf(f, "heap_v2/524288\n  t*: %u: %u [0: 0]\n", objects, objects * 65536);
	if (objects / 2)
		fprintf(f, "@ 0x7f0000001000 0x7f0000005000 0x555500001100\n  t*: %u: %u [0: 0]\n",
			objects / 2, objects / 2 * 65536);
	if (objects - objects / 2)
		fprintf(f, "@ 0x7f0000002000 0x7f0000005000 0x555500001100\n  t*: %u: %u [0: 0]\n",
			objects - objects / 2, (objects - objects / 2) * 65536);
	if (whole)
		fprintf(f,
			"\nMAPPED_LIBRARIES:\n"
			"7f0000000000-7f0000010000 r-xp 00000000 fe:00 2  /x/libjemalloc.so.2\n");
	fclose(f);
}

static void test_reader(void)
{
	char dir[] = "/tmp/test-jeprof-XXXXXX", conf_text[PATH_MAX + 64], name[PATH_MAX];
	struct jeprof_reader *r;
	struct jeprof_conf conf;
	struct jeprof_counts c;

	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	snprintf(conf_text, sizeof(conf_text), "prof:true,lg_prof_interval:20,prof_prefix:%s/je",
		 dir);
	CHECK_INT_EQ(jeprof__parse_conf(conf_text, &conf), 0);
	CHECK_INT_EQ(jeprof_reader__new(getpid(), &conf, &r), 0);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0); /* no profile yet */
	/* An earlier process of this PID left a higher number, an hour before this one
	 * started: read first, it would be the baseline and hide seq 0..50. */
	write_profile(dir, 50, 7, true);
	snprintf(name, sizeof(name), "%s/je.%d.50.i50.heap", dir, (int)getpid());
	{
		time_t then = time(NULL) - 3600;
		struct timespec old[2] = { { .tv_sec = then }, { .tv_sec = then } };

		CHECK(utimensat(AT_FDCWD, name, old, 0) == 0);
	}
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0);
	write_profile(dir, 0, 2, true);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0); /* the baseline */
	CHECK_INT_EQ(got.allocs, 0);
	write_profile(dir, 1, 5, true);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 6); /* 3 appeared */
	CHECK_INT_EQ(got.allocs, 3);
	CHECK_INT_EQ(got.returns, 3);
	CHECK_INT_EQ(got.size, 65536);
	/* 64 KiB at a 512 KiB mean: 65536 / (1 - exp(-1/8)) = 557,738.5 bytes. */
	CHECK(got.weight >= 557738 && got.weight <= 557739);
	write_profile(dir, 2, 5, true);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0); /* nothing changed */
	write_profile(dir, 3, 4, false);			     /* still being written */
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0);
	write_profile(dir, 3, 4, true);
	/* 5 -> 4: one gone. The baseline's two are the oldest, and were never sent: the
	 * first of the session's own goes only when fewer than the baseline's remain. */
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0);
	write_profile(dir, 4, 1, true);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 2);
	CHECK_INT_EQ(got.frees, 2);
	write_profile(dir, 5, 0, true); /* the stack is gone */
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 1);
	CHECK_INT_EQ(got.frees, 3);
	snprintf(name, sizeof(name), "%s/je.%d.6.i6.heap", dir, (int)getpid());
	FILE *f = fopen(name, "w");
	if (f) {
		fputs("heap_v2/8\n@ garbage\n", f);
		fclose(f);
	}
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), -EBADMSG); /* said once */
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), 0);	    /* and skipped */
	/* As root: a file of another user is not read (a prefix may point anywhere). */
	if (geteuid() == 0) {
		write_profile(dir, 7, 9, true);
		snprintf(name, sizeof(name), "%s/je.%d.7.i7.heap", dir, (int)getpid());
		CHECK(chown(name, 65534, 65534) == 0);
		CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), -EPERM);
		CHECK_INT_EQ(got.allocs, 3);
	}
	/* Oversized (a sparse file over the 64 MiB bound): not read. */
	snprintf(name, sizeof(name), "%s/je.%d.8.i8.heap", dir, (int)getpid());
	f = fopen(name, "w");
	if (!f || ftruncate(fileno(f), (off_t)65 << 20) < 0)
		SETUP_FAIL("%s: %m", name);
	fclose(f);
	CHECK_INT_EQ(jeprof_reader__poll(r, 3, on_record, NULL), -EFBIG);
	jeprof_reader__counts(r, &c);
	CHECK_INT_EQ(c.profiles, 6);
	CHECK_INT_EQ(c.bad, geteuid() == 0 ? 3 : 2);
	CHECK_INT_EQ(c.allocs, 3);
	CHECK_INT_EQ(c.frees, 3);
	CHECK_INT_EQ(got.invalid, 0);
	jeprof_reader__free(r);
	for (int i = 0; i <= 50; i++) {
		snprintf(name, sizeof(name), "%s/je.%d.%d.i%d.heap", dir, (int)getpid(), i, i);
		unlink(name);
	}
	rmdir(dir);
}

/* A real profile: alloc-pattern's leak under jemalloc with its profiler on. */
static void test_real(void)
{
	const char *alloc = getenv("ALLOC_PATTERN");
	char dir[] = "/tmp/test-jeprof-XXXXXX", conf[PATH_MAX + 96], cmd[2 * PATH_MAX + 256];
	struct jeprof_profile p;
	char *text = NULL;
	size_t len = 0;
	bool named = false;
	FILE *f;

	if (!alloc || access(JE, R_OK) != 0) {
		printf("libjemalloc or ALLOC_PATTERN missing: no real profile read\n");
		return;
	}
	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	snprintf(
	    conf, sizeof(conf),
	    "prof:true,prof_prefix:%s/je,lg_prof_interval:30,lg_prof_sample:14,prof_final:true",
	    dir);
	snprintf(cmd, sizeof(cmd),
		 "LD_PRELOAD=%s MALLOC_CONF=%s %s leak --seconds 1 --rate-kib 4096 >/dev/null && "
		 "cat %s/je.*.f.heap",
		 JE, conf, alloc, dir);
	f = popen(cmd, "r");
	if (!f)
		SETUP_FAIL("popen: %m");
	if (getdelim(&text, &len, '\0', f) < 0 || pclose(f) != 0)
		SETUP_FAIL("no final profile from: %s", cmd);
	CHECK_INT_EQ(jeprof__parse(text, strlen(text), "libjemalloc", &p), 0);
	CHECK(p.complete);
	/* ~64 blocks of 64 KiB leaked, nearly all sampled at a 16 KiB mean: one stack holds
	 * them, one jemalloc frame then leak_chunk, run_leak, main, ... */
	for (size_t i = 0; i < p.n; i++)
		named |= p.stacks[i].n >= 4 && p.stacks[i].objects >= 32;
	CHECK(named);
	printf("real profile: %zu stacks, period %llu\n", p.n, (unsigned long long)p.period);
	jeprof_profile__done(&p);
	free(text);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

/* read_all(), which profiles (and the environment) are read with: to the end, or to its bound. */
static void test_read_all(void)
{
	char text[10000], *buf;
	size_t len;
	int fds[2];

	memset(text, 'x', sizeof(text));
	for (size_t max = 5000; max <= 20000; max += 15000) {
		if (pipe(fds) < 0 || write(fds[1], text, sizeof(text)) != (ssize_t)sizeof(text))
			SETUP_FAIL("pipe: %m");
		close(fds[1]);
		CHECK_INT_EQ(read_all(fds[0], max, &buf, &len), 0);
		CHECK_INT_EQ(len, max < sizeof(text) ? max : sizeof(text));
		CHECK(buf[len] == '\0' && memchr(buf, '\0', len) == NULL);
		free(buf);
		close(fds[0]);
	}
	CHECK_INT_EQ(read_all(-1, 10, &buf, &len), -EBADF);
}

int main(void)
{
	test_read_all();
	test_conf();
	test_parse();
	test_reader();
	test_real();
	return check_exit("test-jeprof");
}
