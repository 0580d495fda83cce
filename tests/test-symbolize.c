/*
 * test-symbolize.c - unit test of daemon/symbols/symbolize.c on real processes and
 * real ELF files: this process's libc, the fixtures of tests/fixtures/ (a
 * PIE, a non-PIE, a stripped PIE, a C++ library loaded by dlopen()), a
 * garbage and a truncated ELF mapped into this process, a child's [vdso] and
 * fake ones of other images, mutated copies of
 * the PIE, a file replaced on disk, a running program whose file was
 * deleted, an -O2 program with nested inlining (frames per inlined call;
 * the file symbolized without its process; stripped copies whose debug
 * info is found by build ID under a root or by .gnu_debuglink), malformed
 * maps and kallsyms text, and the running kernel's /proc/kallsyms. With
 * DEBUGINFOD_URLS set, symbolizers made without debuginfod must not load
 * libdebuginfod; one made with it fetches from a fake server on loopback.
 *
 * Fixture paths come from the environment (set by tests/meson.build from
 * tests/fixtures/meson.build): PROFD_FIXTURE_PIE, PROFD_FIXTURE_NOPIE,
 * PROFD_FIXTURE_PIE_STRIPPED, PROFD_FIXTURE_LIB, PROFD_FIXTURE_LIB_MAIN,
 * PROFD_FIXTURE_INLINE, PROFD_FIXTURE_INLINE_DEBUG,
 * PROFD_FIXTURE_INLINE_STRIPPED, PROFD_FIXTURE_INLINE_DEBUGLINK.
 * PROFD_FUZZ_ITERS sets the number of mutated ELF files (default 300).
 *
 * Over 1,000 lines on purpose: it #includes symbolize.c and its siblings
 * to reach their static parsers (with a small RESULT_CACHE_MAX), so its
 * parts share one translation unit; each part is a function of its own.
 *
 * Exit status: 0 all parts passed, 1 a check failed, 77 nothing failed but
 * a part was skipped (the reason is printed), 99 setup error.
 */
#define RESULT_CACHE_MAX 64 /* so that the cache fills and empties */
#define POOL_MAX_BYTES (256u << 10) /* so that the test can fill the string pool */
#include <stdint.h>
static uint64_t test_self_vdso(uint64_t *ret_start);
#include "../daemon/symbols/addrspace.c" /* the static parsers are tested too */
#include "../daemon/symbols/debuginfo.c"
#include "../daemon/symbols/strpool.c"
#include "../daemon/symbols/kallsyms.c"
#include "../daemon/symbols/symbolize.c"
#include "check.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <time.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

static char debuginfod_cache[] = "/tmp/test-symbolize-debuginfod.XXXXXX";

/* More checks in the shape of check.h's */
#define CHECK_HEX_EQ(a, b)                                                                         \
	do {                                                                                       \
		uint64_t _a = (uint64_t)(a), _b = (uint64_t)(b);                                   \
		if (_a != _b)                                                                      \
			check_fail(__FILE__, __LINE__,                                             \
				   "%s == %s failed: %#" PRIx64 " != %#" PRIx64, #a, #b, _a, _b);  \
	} while (0)

#define CHECK_STR_SUFFIX(a, suffix)                                                                \
	do {                                                                                       \
		const char *_a = (a), *_s = (suffix);                                              \
		if (!_a || strlen(_a) < strlen(_s) || strcmp(_a + strlen(_a) - strlen(_s), _s))    \
			check_fail(__FILE__, __LINE__, "%s ends with \"%s\" failed: \"%s\"", #a,   \
				   _s, _a ? _a : "(null)");                                        \
	} while (0)

/*
 * need_symbolizer() - @s, what symbolizer__new() or symbolizer__new_with()
 * made: a test that could not make one (NULL, out of memory) fails at setup.
 */
static struct symbolizer *need_symbolizer(struct symbolizer *s)
{
	if (!s)
		SETUP_FAIL("symbolizer__new: out of memory");
	return s;
}

/* check_unnamed() - @n frames in @fi are one frame without a name: module found, no debug info. */
static void check_unnamed(int n, const struct frame_info *fi)
{
	CHECK_INT_EQ(n, 1);
	CHECK(fi[0].function == NULL);
}

/* ---------------------------------------------------------------------- */
/* Independent readers of the fixtures, with plain libelf. */

/* elf_symbol_value_in() - st_value of @name in @path's section of type @sh_type, 0 if absent. */
static uint64_t elf_symbol_value_in(const char *path, const char *name, uint32_t sh_type)
{
	uint64_t value = 0;
	Elf_Scn *scn = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;

	if (fd < 0)
		return 0;
	e = elf_begin(fd, ELF_C_READ, NULL);
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != sh_type || !sh.sh_entsize)
			continue;
		d = elf_getdata(scn, NULL);
		for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *n;

			if (!gelf_getsym(d, (int)i, &sym))
				continue;
			n = elf_strptr(e, sh.sh_link, sym.st_name);
			if (n && strcmp(n, name) == 0)
				value = sym.st_value;
		}
	}
	elf_end(e);
	close(fd);
	return value;
}

/* elf_symbol_value() - st_value of @name in @path's .symtab, 0 if absent. */
static uint64_t elf_symbol_value(const char *path, const char *name)
{
	return elf_symbol_value_in(path, name, SHT_SYMTAB);
}

/* elf_first_load_vaddr() - p_vaddr of @path's first PT_LOAD; UINT64_MAX if none. */
static uint64_t elf_first_load_vaddr(const char *path)
{
	uint64_t vaddr = UINT64_MAX;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t phnum = 0;
	Elf *e;

	if (fd < 0)
		return vaddr;
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (e && elf_getphdrnum(e, &phnum) == 0) {
		for (size_t i = 0; i < phnum; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD) {
				vaddr = ph.p_vaddr;
				break;
			}
		}
	}
	elf_end(e);
	close(fd);
	return vaddr;
}

/* elf_note_build_id() - build ID of @path from its SHT_NOTE sections, in hex into @buf. */
static void elf_note_build_id(const char *path, char *buf, size_t size)
{
	Elf_Scn *scn = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;

	buf[0] = '\0';
	if (fd < 0)
		return;
	e = elf_begin(fd, ELF_C_READ, NULL);
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		GElf_Nhdr nh;
		size_t off = 0, name_off, desc_off;
		Elf_Data *d;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
			    memcmp((char *)d->d_buf + name_off, "GNU", 4) != 0 ||
			    nh.n_descsz * 2 + 1 > size)
				continue;
			for (size_t i = 0; i < nh.n_descsz; i++)
				sprintf(buf + 2 * i, "%02x",
					((unsigned char *)d->d_buf)[desc_off + i]);
		}
	}
	elf_end(e);
	close(fd);
}

static bool is_lower_hex(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

/* ---------------------------------------------------------------------- */
/* Child processes talking over pipes */

struct child {
	pid_t pid;
	int in_fd; /* the child's stdin */
	FILE *out; /* the child's stdout */
};

static void child_spawn(struct child *c, const char *path, const char *arg)
{
	int in[2], out[2];

	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		SETUP_FAIL("pipe2: %m");
	c->pid = fork();
	if (c->pid < 0)
		SETUP_FAIL("fork: %m");
	if (c->pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execl(path, path, arg, (char *)NULL);
		fprintf(stderr, "exec %s: %m\n", path);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->in_fd = in[1];
	c->out = fdopen(out[0], "r");
	if (!c->out)
		SETUP_FAIL("fdopen: %m");
}

/* child_expect() - read lines up to one starting with "@key " (or equal to @key); its rest in @buf.
 */
static void child_expect(struct child *c, const char *key, char *buf, size_t size)
{
	char line[512];
	size_t klen = strlen(key);

	while (fgets(line, sizeof(line), c->out)) {
		line[strcspn(line, "\n")] = '\0';
		if (strncmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == '\0')) {
			snprintf(buf, size, "%s", line[klen] ? line + klen + 1 : "");
			return;
		}
	}
	SETUP_FAIL("child %d ended before printing \"%s\"", (int)c->pid, key);
}

/* child_stop() - close the child's stdin (it exits on EOF) and reap it. */
static void child_stop(struct child *c)
{
	int status;

	close(c->in_fd);
	fclose(c->out);
	if (waitpid(c->pid, &status, 0) < 0)
		SETUP_FAIL("waitpid: %m");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		SETUP_FAIL("child %d ended with status %#x", (int)c->pid, status);
}

static char *real_path(const char *path)
{
	char *r = realpath(path, NULL);

	if (!r)
		SETUP_FAIL("realpath %s: %m", path);
	return r;
}

/* ---------------------------------------------------------------------- */
/* Part: /proc/PID/maps parsing */

/*
 * as_read_text() - as_read_maps() of @as from the maps text @maps (a
 * string) instead of /proc/PID/maps: the number of new mappings it
 * returns. A stream that cannot be opened is a setup error.
 */
static int as_read_text(struct addrspace *as, const char *maps)
{
	FILE *f = fmemopen((void *)maps, strlen(maps), "r");
	int r;

	if (!f)
		SETUP_FAIL("fmemopen: %m");
	r = as_read_maps(as, f);
	fclose(f);
	return r;
}

static void test_maps_parser(void)
{
	static const char *const bad[] = {
	    "",
	    "\n",
	    "zzzz-1000 r-xp 00000000 08:01 1 /bin/x\n",
	    "1000 r-xp 00000000 08:01 1 /bin/x\n",
	    "1000-2000\n",
	    "1000-2000 r-x\n",
	    "1000-2000 r-xq 00000000 08:01 1 /bin/x\n",
	    "1000-2000 r-xp\n",
	    "1000-2000 r-xp 0000000g 08:01 1 /bin/x\n",
	    "1000-2000 r-xp 00000000 0801 1 /bin/x\n",
	    "1000-2000 r-xp 00000000 08:01 x /bin/x\n",
	    "1000-2000 r-xp 00000000 08:01 1x /bin/x\n",
	    "2000-1000 r-xp 00000000 08:01 1 /bin/x\n",		       /* start > end */
	    "1000-1000 r-xp 00000000 08:01 1 /bin/x\n",		       /* empty */
	    "11112222333344445-2000 r-xp 00000000 08:01 1 /x\n",       /* 65-bit */
	    "1000-2000 r-xp 00000000 08:01 99999999999999999999 /x\n", /* inode overflow */
	};
	struct maps_line ml;
	const char *good =
	    "7f0000001000-7f0000002000 r-xp 00001000 fd:01 123456    /usr/lib/a b.so\n";

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		if (maps_parse_line(bad[i], strlen(bad[i]), &ml) != -EINVAL)
			check_fail(__FILE__, __LINE__, "bad maps line %zu accepted: %.*s", i,
				   (int)strcspn(bad[i], "\n"), bad[i]);
	}
	/* a NUL inside the line */
	CHECK_INT_EQ(maps_parse_line("1000-2000 r-xp 0 0:0 1 /a\0b\n", 26, &ml), -EINVAL);

	CHECK_INT_EQ(maps_parse_line(good, strlen(good), &ml), 0);
	CHECK_HEX_EQ(ml.start, 0x7f0000001000);
	CHECK_HEX_EQ(ml.end, 0x7f0000002000);
	CHECK_HEX_EQ(ml.offset, 0x1000);
	CHECK_HEX_EQ(ml.dev_major, 0xfd);
	CHECK_HEX_EQ(ml.dev_minor, 1);
	CHECK_INT_EQ(ml.ino, 123456);
	CHECK_INT_EQ(ml.path_len, strlen("/usr/lib/a b.so"));
	CHECK(memcmp(ml.path, "/usr/lib/a b.so", ml.path_len) == 0);
	CHECK(maps_line_wanted(&ml));

	/* anonymous mapping: no path */
	CHECK_INT_EQ(maps_parse_line("1000-2000 rw-p 00000000 00:00 0 \n", 32, &ml), 0);
	CHECK_INT_EQ(ml.path_len, 0);
	CHECK(!maps_line_wanted(&ml));
	CHECK_INT_EQ(maps_parse_line("1000-2000 r-xp 00000000 00:00 0", 31, &ml), 0);
	CHECK(!maps_line_wanted(&ml));

	/* a whole maps text: only executable file mappings and [vdso] are kept */
	static const char maps[] =
	    "00400000-00401000 r--p 00000000 08:01 10 /nonexistent/prog\n"
	    "00401000-00402000 r-xp 00001000 08:01 10 /nonexistent/prog\n"
	    "garbage line\n"
	    "00500000-00600000 r-xp 00000000 00:00 0 \n"
	    "7f0000000000-7f0000010000 r-xp 00002000 08:01 11 /nonexistent/lib.so (deleted)\n"
	    "7f0000008000-7f0000020000 r-xp 00000000 08:01 12 /nonexistent/overlap.so\n"
	    "7f0000100000-7f0000101000 rwxp 00000000 00:00 0 [heap]\n"
	    "7fff00000000-7fff00002000 r-xp 00000000 00:00 0 [vdso]\n"
	    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n";
	struct addrspace *as = calloc(1, sizeof(*as));
	const struct mapping *m;
	size_t n;

	if (!as)
		SETUP_FAIL("calloc");
	CHECK_INT_EQ(as_read_text(as, maps), 3);
	m = addrspace__mappings(as, &n);
	CHECK_INT_EQ(n, 3);
	if (n == 3) {
		CHECK_HEX_EQ(m[0].start, 0x401000);
		CHECK_STR_EQ(m[0].path, "/nonexistent/prog");
		CHECK_STR_EQ(m[0].build_id, "");
		/* no ELF to read: p_vaddr == p_offset assumed */
		CHECK_HEX_EQ(m[0].load_bias, 0x400000);
		CHECK_STR_EQ(m[1].path, "/nonexistent/lib.so (deleted)");
		CHECK_HEX_EQ(m[1].load_bias, 0x7f0000000000 - 0x2000);
		CHECK_STR_EQ(m[2].path, "[vdso]");
	}
	CHECK(addrspace__find(as, 0x400fff) == NULL);
	CHECK(addrspace__find(as, 0x401000) == &m[0]);
	CHECK(addrspace__find(as, 0x401fff) == &m[0]);
	CHECK(addrspace__find(as, 0x402000) == NULL);
	CHECK(addrspace__find(as, 0x7f000000ffff) == &m[1]);
	CHECK(addrspace__find(as, 0x7f0000010000) == NULL);
	CHECK(addrspace__find(as, 0) == NULL);
	CHECK(addrspace__find(as, UINT64_MAX) == NULL);

	/* a second read: same mappings are not new, an overlapping one replaces the old */
	static const char maps2[] =
	    "00401000-00402000 r-xp 00001000 08:01 10 /nonexistent/prog\n"
	    "7f0000008000-7f0000020000 r-xp 00000000 08:01 12 /nonexistent/new.so\n";
	CHECK_INT_EQ(as_read_text(as, maps2), 1);
	m = addrspace__mappings(as, &n);
	CHECK_INT_EQ(n, 3);
	if (n == 3) {
		CHECK_STR_EQ(m[0].path, "/nonexistent/prog");
		CHECK_STR_EQ(m[1].path, "/nonexistent/new.so");
		CHECK_STR_EQ(m[2].path, "[vdso]");
	}

	/* symbolizing without a readable file: module and rel_addr, no function */
	struct symbolizer *s = need_symbolizer(symbolizer__new());
	struct frame_info fi;

	CHECK_INT_EQ(symbolizer__user(s, as, 0x401234, false, &fi), 0);
	CHECK_STR_EQ(fi.module, "/nonexistent/prog");
	CHECK_STR_EQ(fi.build_id, "");
	CHECK_HEX_EQ(fi.rel_addr, 0x1234);
	CHECK(fi.function == NULL && fi.file == NULL && fi.line == 0 && !fi.kernel);
	CHECK_INT_EQ(symbolizer__user(s, as, 0x7fff00000010, true, &fi), 0);
	CHECK_STR_EQ(fi.module, "[vdso]");
	CHECK_HEX_EQ(fi.rel_addr, 0x10);
	CHECK(fi.function == NULL);
	CHECK_INT_EQ(symbolizer__user(s, as, 0x1234, false, &fi), -ENOENT);
	CHECK_STR_EQ(fi.module, "[unknown]");
	CHECK_STR_EQ(fi.build_id, "");
	CHECK_HEX_EQ(fi.rel_addr, 0x1234);
	CHECK(fi.function == NULL);
	symbolizer__free(s);
	addrspace__free(as);

	/* a process that does not exist */
	CHECK_INT_EQ(addrspace__new(0x7ffffff0, &as), -ESRCH);
	CHECK_INT_EQ(addrspace__new(0, &as), -ESRCH);
	addrspace__free(NULL);
	symbolizer__free(NULL);
	printf("ok maps parser\n");
}

/* A symbolizer and this process's address space, in *@ret_as; a setup error if either fails. */
static struct symbolizer *self_symbolizer(struct addrspace **ret_as)
{
	struct symbolizer *s;

	CHECK_INT_EQ(addrspace__new(getpid(), ret_as), 0);
	s = symbolizer__new();
	if (!s || !*ret_as)
		SETUP_FAIL("symbolizer__new/addrspace__new");
	return s;
}

/*
 * This process's libc: a system library with a .dynsym (and a .symtab in
 * separate debug info if libc6-dbg is installed, which spells symbols with
 * their version: "clock_nanosleep@GLIBC_2.2.5").
 */
static void test_self_libc(void)
{
	struct addrspace *as = NULL;
	struct symbolizer *s;
	struct frame_info fi;
	uint64_t addr = (uintptr_t)&clock_nanosleep;

	s = self_symbolizer(&as);
	CHECK_INT_EQ(symbolizer__user(s, as, addr, false, &fi), 0);
	if (!strstr(fi.module, "/libc.so")) {
		check_skip("self libc", "clock_nanosleep() is not in a libc.so (not glibc?)");
	} else {
		CHECK(is_lower_hex(fi.build_id));
		CHECK(fi.function && strstr(fi.function, "clock_nanosleep"));
		CHECK(fi.function && !strchr(fi.function, '@'));
		printf("ok self libc: %s %s:%d\n", fi.function,
		       fi.file ? fi.file : "(no line info)", fi.line);
	}
	symbolizer__free(s);
	addrspace__free(as);
}

/*
 * addrspace__is_code() on this process: libc's code and the [vdso] are code,
 * the heap, the stack and an address past the user half are not; an
 * anonymous executable mapping (as a JIT makes) is code once the maps are
 * read again, and stays code after it is unmapped (samples taken before
 * may still arrive).
 */
static void test_is_code(void)
{
	struct addrspace *as = NULL;
	_cleanup_free_ char *heap = malloc(64);
	int on_stack = 0;
	void *jit;

	CHECK_INT_EQ(addrspace__new(getpid(), &as), 0);
	if (!as || !heap)
		SETUP_FAIL("addrspace__new/malloc");
	CHECK(addrspace__is_code(as, (uintptr_t)&clock_nanosleep));
	CHECK(addrspace__is_code(as, getauxval(AT_SYSINFO_EHDR) + 0x100));
	CHECK(!addrspace__is_code(as, (uintptr_t)heap));
	CHECK(!addrspace__is_code(as, (uintptr_t)&on_stack));
	CHECK(!addrspace__is_code(as, 0x800c6262f5e003fbULL));
	jit = mmap(NULL, 8192, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (jit == MAP_FAILED)
		SETUP_FAIL("mmap");
	CHECK(!addrspace__is_code(as, (uintptr_t)jit + 100));
	CHECK(addrspace__refresh(as) >= 0);
	CHECK(addrspace__is_code(as, (uintptr_t)jit + 100));
	munmap(jit, 8192);
	CHECK(addrspace__refresh(as) >= 0);
	CHECK(addrspace__is_code(as, (uintptr_t)jit + 100));
	printf("ok is_code: libc, vdso, anonymous code; not heap, stack, garbage\n");
	addrspace__free(as);
}

/*
 * symbolizer__trim(): this process's libc and libelf as two modules, on a
 * clock of the test's. A module not looked up for the idle time is closed
 * (the other stays), and the next lookup opens it again with the same
 * name (names are copied: those handed out are valid until a trim).
 */
static void test_trim(void)
{
	uint64_t libc_addr = (uintptr_t)&clock_nanosleep, elf_addr = (uintptr_t)&elf_version;
	uint64_t t0 = now_ns(CLOCK_MONOTONIC) + 1000 * NSEC_PER_SEC, idle = 10 * NSEC_PER_SEC;
	struct frame_info fi;
	struct addrspace *as = NULL;
	struct symbolizer *s;
	char libc_name[256], elf_name[256];

	s = self_symbolizer(&as);
	CHECK_INT_EQ(symbolizer__user(s, as, elf_addr, false, &fi), 0);
	snprintf(elf_name, sizeof(elf_name), "%s", fi.function ? fi.function : "");
	CHECK_INT_EQ(symbolizer__user(s, as, libc_addr, false, &fi), 0);
	snprintf(libc_name, sizeof(libc_name), "%s", fi.function ? fi.function : "");
	if (!libc_name[0] || !elf_name[0] || s->modules.len != 2) {
		check_skip("trim", "libc or libelf of this process has no symbols");
		goto out;
	}
	/* both looked up when the symbolizer was made (now, t0 - 1000 s): kept at
	 * t0 - 999 s, closed at t0 */
	CHECK_INT_EQ(symbolizer__trim(s, t0 - 999 * NSEC_PER_SEC, idle), 0);
	CHECK_INT_EQ(symbolizer__trim(s, t0, idle), 2);
	CHECK_INT_EQ(s->modules.len, 0);
	CHECK_INT_EQ(s->results.len, 0);
	/* opened again by the next lookup: same names */
	CHECK_INT_EQ(symbolizer__user(s, as, libc_addr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, libc_name);
	CHECK_INT_EQ(symbolizer__user(s, as, elf_addr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, elf_name);
	CHECK(strstr(libc_name, "clock_nanosleep") && strstr(elf_name, "elf_version"));
	/* at t0 + 5 s only libc is used: at t0 + 12 s libelf has been idle 12 s, libc 7 */
	CHECK_INT_EQ(symbolizer__trim(s, t0 + 5 * NSEC_PER_SEC, idle), 0);
	CHECK_INT_EQ(symbolizer__user(s, as, libc_addr, false, &fi), 0);
	CHECK_INT_EQ(symbolizer__trim(s, t0 + 12 * NSEC_PER_SEC, idle), 1);
	CHECK_INT_EQ(s->modules.len, 1);
	CHECK_INT_EQ(symbolizer__user(s, as, elf_addr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, elf_name);
	CHECK_INT_EQ(s->modules.len, 2);
	printf("ok trim: idle modules closed and opened again (%s, %s)\n", libc_name, elf_name);
out:
	symbolizer__free(s);
	addrspace__free(as);
}

/*
 * The string pool is started over by symbolizer__trim() once it holds
 * POOL_MAX_BYTES (filled here with strings of the test's): the cached
 * lookups and kernel symbols go, the open module stays open and is found
 * again under its key moved to the new pool (not opened a second time),
 * and names come out as before.
 */
static void test_pool_renew(void)
{
	uint64_t libc_addr = (uintptr_t)&clock_nanosleep, t = now_ns(CLOCK_MONOTONIC);
	uint64_t idle = 3600 * NSEC_PER_SEC; /* no module is closed */
	struct addrspace *as = NULL;
	struct symbolizer *s;
	struct frame_info fi;
	char name[256], junk[32];

	s = self_symbolizer(&as);
	CHECK_INT_EQ(symbolizer__user(s, as, libc_addr, false, &fi), 0);
	if (!fi.function) {
		check_skip("pool", "libc of this process has no symbols");
		goto out;
	}
	snprintf(name, sizeof(name), "%s", fi.function);
	symbolizer__kernel(s, 0xffffffff81000000ull, false, &fi); /* reads kallsyms */
	CHECK(s->kallsyms.loaded);
	/* under the bound, nothing goes */
	CHECK_INT_EQ(symbolizer__trim(s, t, idle), 0);
	CHECK(s->results.len > 0 && s->kallsyms.loaded);
	for (unsigned k = 0; strpool_bytes(&s->pool) < POOL_MAX_BYTES; k++) {
		snprintf(junk, sizeof(junk), "junk %u", k);
		CHECK(strpool_intern(&s->pool, junk) != NULL);
	}
	CHECK_INT_EQ(symbolizer__trim(s, t, idle), 0);
	CHECK(strpool_bytes(&s->pool) < POOL_MAX_BYTES);
	CHECK_INT_EQ(s->results.len, 0);
	CHECK(!s->kallsyms.loaded);
	CHECK_INT_EQ(s->modules.len, 1);
	CHECK_INT_EQ(symbolizer__user(s, as, libc_addr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, name);
	CHECK_INT_EQ(s->modules.len, 1);
	printf("ok pool: started over at %u KiB, %s found again\n", POOL_MAX_BYTES >> 10, name);
out:
	symbolizer__free(s);
	addrspace__free(as);
}

/* ---------------------------------------------------------------------- */
/* Part: the PIE / non-PIE / stripped fixtures as running processes */

struct pie_out {
	uint64_t alpha, beta, ra_alpha, ra_beta;
	int alpha_first, alpha_last, ra_alpha_line, ra_beta_line;
};

static void pie_read(struct child *c, struct pie_out *o)
{
	char buf[256];

	child_expect(c, "alpha", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64 " %d %d", &o->alpha, &o->alpha_first, &o->alpha_last) != 3)
		SETUP_FAIL("bad alpha line: %s", buf);
	child_expect(c, "beta", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64, &o->beta) != 1)
		SETUP_FAIL("bad beta line: %s", buf);
	child_expect(c, "ra_alpha", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64 " %d", &o->ra_alpha, &o->ra_alpha_line) != 2)
		SETUP_FAIL("bad ra_alpha line: %s", buf);
	child_expect(c, "ra_beta", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64 " %d", &o->ra_beta, &o->ra_beta_line) != 2)
		SETUP_FAIL("bad ra_beta line: %s", buf);
	child_expect(c, "ready", buf, sizeof(buf));
}

static void test_pie(const char *env, bool pie)
{
	const char *path = getenv(env);
	_cleanup_free_ char *real = NULL;
	char build_id[2 * BUILD_ID_MAX_BYTES + 1];
	struct addrspace *as = NULL;
	struct symbolizer *s;
	const struct mapping *m;
	struct frame_info fi;
	struct pie_out o;
	struct child c;
	uint64_t alpha_vaddr, beta_vaddr;
	size_t n, n_after;

	if (!path) {
		check_skip(env, "variable not set (run from meson test)");
		return;
	}
	real = real_path(path);
	alpha_vaddr = elf_symbol_value(path, "fixture_alpha");
	beta_vaddr = elf_symbol_value(path, "fixture_beta");
	if (!alpha_vaddr || !beta_vaddr)
		SETUP_FAIL("%s: no fixture_alpha/fixture_beta in .symtab", path);
	elf_note_build_id(path, build_id, sizeof(build_id));

	child_spawn(&c, path, NULL);
	pie_read(&c, &o);

	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	if (!as) {
		child_stop(&c);
		return;
	}
	m = addrspace__find(as, o.alpha);
	CHECK(m != NULL);
	if (m) {
		CHECK_STR_EQ(m->path, real);
		CHECK(is_lower_hex(m->build_id));
		CHECK_STR_EQ(m->build_id, build_id);
		if (pie)
			CHECK(m->load_bias != 0);
		else
			CHECK_HEX_EQ(m->load_bias, 0);
		CHECK_HEX_EQ(o.alpha - m->load_bias, alpha_vaddr);
	}

	s = need_symbolizer(symbolizer__new());

	/* a function's entry */
	CHECK_INT_EQ(symbolizer__user(s, as, o.alpha, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_STR_EQ(fi.module, real);
	CHECK_STR_EQ(fi.build_id, build_id);
	CHECK_HEX_EQ(fi.rel_addr, alpha_vaddr);
	CHECK_STR_SUFFIX(fi.file, "fixture-pie.c");
	CHECK(fi.file && fi.file[0] == '/'); /* joined with DW_AT_comp_dir */
	CHECK(fi.line >= o.alpha_first && fi.line <= o.alpha_last);
	CHECK(!fi.kernel);

	CHECK_INT_EQ(symbolizer__user(s, as, o.beta, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_beta");
	CHECK_HEX_EQ(fi.rel_addr, beta_vaddr);

	/* a return address: the line of the call */
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_alpha, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_STR_SUFFIX(fi.file, "fixture-pie.c");
	CHECK_INT_EQ(fi.line, o.ra_alpha_line);
	CHECK_HEX_EQ(fi.rel_addr, o.ra_alpha - (m ? m->load_bias : 0));
	/* the same again, from the result cache */
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_alpha, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_INT_EQ(fi.line, o.ra_alpha_line);

	/* a return address inside inlined code: the outer function, the line of the inlined call */
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_beta, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_beta");
	CHECK_STR_SUFFIX(fi.file, "fixture-pie.c");
	CHECK(fi.file && fi.file[0] == '/');
	CHECK_INT_EQ(fi.line, o.ra_beta_line);

	/* many addresses: the result cache fills and starts over, results stay right */
	for (uint64_t a = o.alpha; a < o.alpha + 4 * RESULT_CACHE_MAX; a++)
		CHECK_INT_EQ(symbolizer__user(s, as, a, a & 1, &fi), 0);
	CHECK(s->results.len <= RESULT_CACHE_MAX);
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_alpha, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_INT_EQ(fi.line, o.ra_alpha_line);

	/* an address in no mapping */
	CHECK_INT_EQ(symbolizer__user(s, as, 16, false, &fi), -ENOENT);
	CHECK_STR_EQ(fi.module, "[unknown]");
	CHECK_HEX_EQ(fi.rel_addr, 16);
	CHECK(fi.function == NULL);

	/* [vdso], if the kernel maps one: a module, no function */
	m = addrspace__mappings(as, &n);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(m[i].path, "[vdso]") != 0)
			continue;
		CHECK_INT_EQ(symbolizer__user(s, as, m[i].start + 1, false, &fi), 0);
		CHECK_STR_EQ(fi.module, "[vdso]");
		CHECK(fi.function == NULL);
	}

	/* the process exits: its mappings stay and still symbolize */
	child_stop(&c);
	CHECK_INT_EQ(addrspace__refresh(as), -ESRCH);
	addrspace__mappings(as, &n_after);
	CHECK_INT_EQ(n_after, n);
	symbolizer__free(s);
	/* no cached module: the file is opened by its plain path */
	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_alpha, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_INT_EQ(fi.line, o.ra_alpha_line);
	CHECK_STR_EQ(fi.build_id, build_id);

	symbolizer__free(s);
	addrspace__free(as);
	printf("ok %s\n", pie ? "pie" : "non-pie");
}

static void test_stripped(void)
{
	const char *path = getenv("PROFD_FIXTURE_PIE_STRIPPED");
	const char *unstripped = getenv("PROFD_FIXTURE_PIE");
	_cleanup_free_ char *real = NULL;
	struct addrspace *as = NULL;
	struct symbolizer *s;
	struct frame_info fi;
	struct pie_out o;
	struct child c;
	uint64_t alpha_vaddr;

	if (!path || !unstripped) {
		check_skip("stripped", "PROFD_FIXTURE_PIE_STRIPPED or PROFD_FIXTURE_PIE not set");
		return;
	}
	real = real_path(path);
	alpha_vaddr = elf_symbol_value(unstripped, "fixture_alpha");
	if (!alpha_vaddr)
		SETUP_FAIL("%s: no fixture_alpha in .symtab", unstripped);
	if (elf_symbol_value(path, "fixture_alpha"))
		SETUP_FAIL("%s is not stripped", path);

	child_spawn(&c, path, NULL);
	pie_read(&c, &o);
	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	s = need_symbolizer(symbolizer__new());
	if (as) {
		CHECK_INT_EQ(symbolizer__user(s, as, o.alpha, false, &fi), 0);
		CHECK(fi.function == NULL);
		CHECK(fi.file == NULL);
		CHECK_INT_EQ(fi.line, 0);
		CHECK_HEX_EQ(fi.rel_addr, alpha_vaddr);
		CHECK_STR_EQ(fi.module, real);
		CHECK(is_lower_hex(fi.build_id)); /* objcopy keeps the note */
		CHECK_INT_EQ(symbolizer__user(s, as, o.ra_beta, true, &fi), 0);
		CHECK(fi.function == NULL);
	}
	child_stop(&c);
	symbolizer__free(s);
	addrspace__free(as);
	printf("ok stripped\n");
}

/* ---------------------------------------------------------------------- */
/* Part: a C++ shared library loaded by dlopen() after the maps were read */

static void test_lib(void)
{
	const char *lib = getenv("PROFD_FIXTURE_LIB");
	const char *main_path = getenv("PROFD_FIXTURE_LIB_MAIN");
	_cleanup_free_ char *real = NULL;
	char buf[256], build_id[2 * BUILD_ID_MAX_BYTES + 1];
	struct addrspace *as = NULL;
	const struct mapping *m;
	struct symbolizer *s;
	struct frame_info fi;
	uint64_t twirl, spin_ra;
	struct child c;

	if (!lib || !main_path) {
		check_skip("c++ library", "PROFD_FIXTURE_LIB or PROFD_FIXTURE_LIB_MAIN not set "
				    "(no C++ compiler at configure time?)");
		return;
	}
	real = real_path(lib);
	elf_note_build_id(lib, build_id, sizeof(build_id));

	child_spawn(&c, main_path, lib);
	child_expect(&c, "ready0", buf, sizeof(buf));
	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	if (!as) {
		child_stop(&c);
		return;
	}
	if (write(c.in_fd, "go\n", 3) != 3)
		SETUP_FAIL("write: %m");
	child_expect(&c, "twirl", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64, &twirl) != 1)
		SETUP_FAIL("bad twirl line: %s", buf);
	child_expect(&c, "spin_ra", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64, &spin_ra) != 1)
		SETUP_FAIL("bad spin_ra line: %s", buf);
	child_expect(&c, "ready", buf, sizeof(buf));

	/* the library came after the maps were read; a refresh finds it */
	CHECK(addrspace__find(as, twirl) == NULL);
	CHECK(addrspace__refresh(as) > 0);
	CHECK_INT_EQ(addrspace__refresh(as), 0);
	m = addrspace__find(as, twirl);
	CHECK(m != NULL);
	if (m) {
		CHECK_STR_EQ(m->path, real);
		CHECK(m->load_bias != 0);
	}

	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s, as, twirl, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_ns::twirl(double)");
	CHECK_STR_SUFFIX(fi.module, "/fixture-lib.so");
	CHECK_STR_EQ(fi.module, real);
	CHECK(is_lower_hex(fi.build_id));
	CHECK_STR_EQ(fi.build_id, build_id);
	CHECK_INT_EQ(strlen(fi.build_id), 40); /* --build-id=sha1 */
	CHECK_STR_SUFFIX(fi.file, "fixture-lib.cc");
	CHECK(fi.line > 0);
	CHECK_HEX_EQ(fi.rel_addr, elf_symbol_value(lib, "_ZN10fixture_ns5twirlEd"));

	CHECK_INT_EQ(symbolizer__user(s, as, spin_ra, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_ns::Widget::spin(int)");
	CHECK_STR_SUFFIX(fi.file, "fixture-lib.cc");

	child_stop(&c);
	symbolizer__free(s);
	addrspace__free(as);
	printf("ok c++ library\n");
}

/* ---------------------------------------------------------------------- */
/* Part: [vdso], symbolized from a copy of our own vDSO */

/* A process's vDSO, read here without symbolize.c's help. */
struct vdso_copy {
	uint64_t start, size; /* the mapping */
	char *image;	      /* a copy of it */
	char path[64];	      /* /proc/self/fd/N: the copy in a memfd */
	int fd;
	uint64_t text_vaddr; /* p_vaddr of the first PT_LOAD */
	uint64_t cgt_vaddr;  /* __vdso_clock_gettime in .dynsym */
	char build_id[2 * BUILD_ID_MAX_BYTES + 1];
};

/* Set while this process has no vDSO of its own (under valgrind): the child's. */
static const struct vdso_copy *stand_in_vdso;

static uint64_t test_self_vdso(uint64_t *ret_start)
{
	if (!stand_in_vdso)
		return 0;
	*ret_start = (uintptr_t)stand_in_vdso->image;
	return stand_in_vdso->size;
}

/*
 * vdso_copy_read() - fill @v with the [vdso] of process @pid, read through
 * /proc/PID/maps and /proc/PID/mem; false (the reason in @why) if there is
 * nothing to test.
 */
static bool vdso_copy_read(struct vdso_copy *v, pid_t pid, const char **why)
{
	char line[512];
	FILE *f;
	int mem;

	*v = (struct vdso_copy){.fd = -1};
	snprintf(line, sizeof(line), "/proc/%d/maps", (int)pid);
	f = fopen(line, "re");
	if (!f)
		SETUP_FAIL("%s: %m", line);
	while (fgets(line, sizeof(line), f)) {
		uint64_t lo, hi;

		if (strstr(line, "[vdso]") && sscanf(line, "%" SCNx64 "-%" SCNx64, &lo, &hi) == 2) {
			v->start = lo;
			v->size = hi - lo;
		}
	}
	fclose(f);
	if (!v->size) {
		*why = "no [vdso] mapping";
		return false;
	}
	v->image = malloc(v->size);
	v->fd = memfd_create("test-vdso", MFD_CLOEXEC);
	if (!v->image || v->fd < 0)
		SETUP_FAIL("malloc/memfd_create: %m");
	snprintf(line, sizeof(line), "/proc/%d/mem", (int)pid);
	mem = open(line, O_RDONLY | O_CLOEXEC);
	if (mem < 0 || pread(mem, v->image, v->size, (off_t)v->start) != (ssize_t)v->size)
		SETUP_FAIL("read [vdso] from %s: %m", line);
	close(mem);
	if (write(v->fd, v->image, v->size) != (ssize_t)v->size)
		SETUP_FAIL("write memfd: %m");
	snprintf(v->path, sizeof(v->path), "/proc/self/fd/%d", v->fd);
	v->text_vaddr = elf_first_load_vaddr(v->path);
	v->cgt_vaddr = elf_symbol_value_in(v->path, "__vdso_clock_gettime", SHT_DYNSYM);
	elf_note_build_id(v->path, v->build_id, sizeof(v->build_id));
	if (v->text_vaddr == UINT64_MAX || !v->cgt_vaddr) {
		*why = "the vDSO has no PT_LOAD or no __vdso_clock_gettime (not x86-64?)";
		return false;
	}
	return true;
}

static void vdso_copy_free(struct vdso_copy *v)
{
	free(v->image);
	if (v->fd >= 0)
		close(v->fd);
}

/* as_from_text() - an address space read from maps text @maps, as if of process @pid. */
static struct addrspace *as_from_text(pid_t pid, const char *maps)
{
	struct addrspace *as = calloc(1, sizeof(*as));

	if (!as)
		SETUP_FAIL("calloc");
	as->pid = pid;
	CHECK_INT_EQ(as_read_text(as, maps), 1);
	return as;
}

/*
 * vdso_check_fake() - a [vdso] of @size bytes at @start in a maps text of
 * process @pid, symbolized with @s: named __vdso_clock_gettime iff @named.
 */
static void vdso_check_fake(struct symbolizer *s, const struct vdso_copy *v, pid_t pid,
			    uint64_t start, uint64_t size, bool named, const char *what)
{
	char maps[128];
	struct addrspace *as;
	struct frame_info fi;

	snprintf(maps, sizeof(maps), "%" PRIx64 "-%" PRIx64 " r-xp 00000000 00:00 0 [vdso]\n",
		 start, start + size);
	as = as_from_text(pid, maps);
	CHECK_INT_EQ(symbolizer__user(s, as, start + v->cgt_vaddr - v->text_vaddr, false, &fi), 0);
	CHECK_STR_EQ(fi.module, "[vdso]");
	CHECK_HEX_EQ(fi.rel_addr, v->cgt_vaddr);
	if (named) {
		CHECK_STR_EQ(fi.function, "__vdso_clock_gettime");
		CHECK_STR_EQ(fi.build_id, v->build_id);
	} else if (fi.function) {
		check_fail(__FILE__, __LINE__, "%s: [vdso] named \"%s\", not our image", what,
			   fi.function);
	}
	addrspace__free(as);
}

static void test_vdso(void)
{
	const char *path = getenv("PROFD_FIXTURE_PIE"), *why = NULL;
	struct addrspace *as = NULL;
	struct symbolizer *s, *s2;
	const struct mapping *m = NULL, *maps;
	struct frame_info fi;
	struct vdso_copy v;
	struct pie_out o;
	struct child c;
	uint64_t cgt, page = (uint64_t)sysconf(_SC_PAGESIZE);
	unsigned char raw_id[BUILD_ID_MAX_BYTES];
	size_t n, id_len;
	char *fake, *at;
	bool ok, stand_in;

	if (!path) {
		check_skip("vdso", "PROFD_FIXTURE_PIE not set (run from meson test)");
		return;
	}
	child_spawn(&c, path, NULL);
	pie_read(&c, &o);
	if (getauxval(AT_SYSINFO_EHDR)) {
		stand_in = false;
		ok = vdso_copy_read(&v, getpid(), &why);
	} else {
		/* valgrind maps no vDSO for us, but the child runs outside it */
		stand_in = true;
		ok = vdso_copy_read(&v, c.pid, &why);
		if (ok)
			stand_in_vdso = &v;
	}
	if (!ok) {
		check_skip("vdso", why);
		child_stop(&c);
		vdso_copy_free(&v);
		return;
	}

	/* a running process's [vdso]: the kernel maps the image we have */
	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	if (!as)
		SETUP_FAIL("addrspace__new");
	maps = addrspace__mappings(as, &n);
	for (size_t i = 0; i < n; i++)
		if (strcmp(maps[i].path, "[vdso]") == 0)
			m = &maps[i];
	if (!m || m->end - m->start != v.size) {
		check_skip("vdso", "the child has no [vdso] of our vDSO's size");
		child_stop(&c);
		addrspace__free(as);
		stand_in_vdso = NULL;
		vdso_copy_free(&v);
		return;
	}
	CHECK_HEX_EQ(m->load_bias, m->start - v.text_vaddr);
	CHECK_STR_EQ(m->build_id, v.build_id);
	cgt = m->load_bias + v.cgt_vaddr;

	s = need_symbolizer(symbolizer__new());
	/* the entry: both clock_gettime and __vdso_clock_gettime are there, perf's name wins */
	CHECK_INT_EQ(symbolizer__user(s, as, cgt, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "__vdso_clock_gettime");
	CHECK_STR_EQ(fi.module, "[vdso]");
	CHECK_STR_EQ(fi.build_id, v.build_id);
	CHECK_HEX_EQ(fi.rel_addr, v.cgt_vaddr);
	CHECK(!fi.kernel);
	/* a return address inside it */
	CHECK_INT_EQ(symbolizer__user(s, as, cgt + 8, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "__vdso_clock_gettime");
	CHECK_HEX_EQ(fi.rel_addr, v.cgt_vaddr + 8);
	/* the ELF header and the end of the mapping are in no symbol */
	CHECK_INT_EQ(symbolizer__user(s, as, m->start + 1, false, &fi), 0);
	CHECK_STR_EQ(fi.module, "[vdso]");
	CHECK_HEX_EQ(fi.rel_addr, v.text_vaddr + 1);
	CHECK(fi.function == NULL && fi.file == NULL && fi.line == 0);
	CHECK_INT_EQ(symbolizer__user(s, as, m->end - 1, false, &fi), 0);
	CHECK_STR_EQ(fi.module, "[vdso]");
	CHECK(fi.function == NULL);

	/* the process exits: its [vdso] still symbolizes, from our copy, in a new symbolizer */
	child_stop(&c);
	s2 = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s2, as, cgt, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "__vdso_clock_gettime");
	symbolizer__free(s2);
	addrspace__free(as);

	/*
	 * Other [vdso] images, in the symbolizer that has ours cached: none
	 * may be named from it. Without a process to read, the size decides:
	 * one page more is another image (a 32-bit process's), ours is ours.
	 */
	vdso_check_fake(s, &v, 0, 0x7fff00000000, v.size + page, false, "larger, no process");
	vdso_check_fake(s, &v, 0, 0x7fff00000000, v.size, true, "same size, no process");

	/*
	 * With a process to read (this one, a maps text pointing at a buffer),
	 * its bytes decide: our image is ours, one with another build ID or
	 * not an ELF file is not, though of our size.
	 */
	fake = mmap(NULL, v.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (fake == MAP_FAILED)
		SETUP_FAIL("mmap: %m");
	memcpy(fake, v.image, v.size);
	vdso_check_fake(s, &v, getpid(), (uintptr_t)fake, v.size, true, "our bytes");
	id_len = strlen(v.build_id) / 2;
	for (size_t i = 0; i < id_len; i++)
		sscanf(v.build_id + 2 * i, "%2hhx", &raw_id[i]);
	at = id_len ? memmem(fake, v.size, raw_id, id_len) : NULL;
	if (at) {
		char text[128];

		at[0] ^= 0xff;
		vdso_check_fake(s, &v, getpid(), (uintptr_t)fake, v.size, false, "other build ID");
		/* and the mapping reports the image's own build ID */
		snprintf(text, sizeof(text),
			 "%" PRIx64 "-%" PRIx64 " r-xp 00000000 00:00 0 [vdso]\n",
			 (uint64_t)(uintptr_t)fake, (uint64_t)(uintptr_t)fake + v.size);
		as = as_from_text(getpid(), text);
		maps = addrspace__mappings(as, &n);
		CHECK_INT_EQ(n, 1);
		CHECK(n == 1 && is_lower_hex(maps[0].build_id));
		CHECK(n == 1 && strcmp(maps[0].build_id, v.build_id) != 0);
		addrspace__free(as);
	} else {
		check_skip("vdso other build ID", "our vDSO has no build ID");
	}
	memset(fake, 0, v.size);
	vdso_check_fake(s, &v, getpid(), (uintptr_t)fake, v.size, false, "zeros");
	munmap(fake, v.size);

	/* ours again, after all those: still named */
	vdso_check_fake(s, &v, 0, 0x7ffe00000000, v.size, true, "same size, again");

	symbolizer__free(s);
	stand_in_vdso = NULL;
	vdso_copy_free(&v);
	printf("ok vdso: __vdso_clock_gettime at [vdso]+%#" PRIx64 ", build ID %s%s\n",
	       v.cgt_vaddr - v.text_vaddr, v.build_id[0] ? v.build_id : "(none)",
	       stand_in ? " (no vDSO here, valgrind?: the child's stood in for ours)" : "");
}

/* ---------------------------------------------------------------------- */
/* Part: corrupt, replaced and deleted ELF files */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13; /* xorshift64 */
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		SETUP_FAIL("write %s: %m", path);
	close(fd);
}

static void *read_file(const char *path, size_t *ret_len)
{
	struct stat st;
	void *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0)
		SETUP_FAIL("open %s: %m", path);
	buf = malloc(st.st_size);
	if (!buf || read(fd, buf, st.st_size) != st.st_size)
		SETUP_FAIL("read %s: %m", path);
	close(fd);
	*ret_len = st.st_size;
	return buf;
}

/* Garbage, an ELF header over garbage, and a truncated PIE, mapped executable into this process. */
static void test_corrupt_mapped(const char *dir, const void *pie, size_t pie_len)
{
	static const char *const names[] = {"garbage", "elf-header", "truncated"};
	char path[3][PATH_MAX];
	unsigned char buf[16384];
	void *addr[3] = {};
	size_t addr_len[3] = {};
	struct addrspace *as = NULL;
	struct symbolizer *s;
	struct frame_info fi;

	for (int i = 0; i < 3; i++) {
		size_t len = sizeof(buf);
		int fd;

		for (size_t j = 0; j < sizeof(buf); j++)
			buf[j] = (unsigned char)rng();
		if (i == 1)
			memcpy(buf, pie,
			       MIN(pie_len, (size_t)64)); /* phdrs, shdrs point into garbage */
		if (i == 2) {
			len = MIN(pie_len, (size_t)4096 + 100);
			memcpy(buf, pie, len);
		}
		snprintf(path[i], sizeof(path[i]), "%s/%s", dir, names[i]);
		write_file(path[i], buf, len);
		fd = open(path[i], O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			SETUP_FAIL("open %s: %m", path[i]);
		addr[i] = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
		addr_len[i] = len;
		close(fd);
		if (addr[i] == MAP_FAILED) {
			addr[i] = NULL;
			check_skip("corrupt mapped", "cannot map a file executable (noexec?)");
			goto out;
		}
	}

	CHECK_INT_EQ(addrspace__new(getpid(), &as), 0);
	s = need_symbolizer(symbolizer__new());
	for (int i = 0; as && i < 3; i++) {
		const struct mapping *m = addrspace__find(as, (uintptr_t)addr[i] + 16);
		_cleanup_free_ char *real = real_path(path[i]);

		CHECK(m != NULL);
		if (!m)
			continue;
		CHECK_STR_EQ(m->path, real);
		if (i < 2)
			CHECK_STR_EQ(m->build_id, "");
		CHECK_INT_EQ(symbolizer__user(s, as, (uintptr_t)addr[i] + 16, false, &fi), 0);
		CHECK_STR_EQ(fi.module, real);
		CHECK(fi.function == NULL);
		CHECK_INT_EQ(symbolizer__user(s, as, (uintptr_t)addr[i] + 100, true, &fi), 0);
		CHECK(fi.function == NULL);
	}
	symbolizer__free(s);
	addrspace__free(as);
	printf("ok corrupt mapped\n");
out:
	for (int i = 0; i < 3; i++) {
		if (addr[i])
			munmap(addr[i], addr_len[i]);
		unlink(path[i]);
	}
}

/*
 * Mutated copies of the PIE, each behind a made-up mapping: symbolizing must
 * neither crash nor touch invalid memory (run under valgrind).
 */
static void test_corrupt_fuzz(const char *dir, const unsigned char *pie, size_t pie_len,
			      uint64_t alpha_vaddr, uint64_t ra_alpha_vaddr)
{
	const char *env = getenv("PROFD_FUZZ_ITERS");
	int iters = env ? atoi(env) : 300, named = 0;
	unsigned char *buf = malloc(pie_len);
	char path[PATH_MAX];

	if (!buf)
		SETUP_FAIL("malloc");
	snprintf(path, sizeof(path), "%s/fuzz", dir);
	for (int it = 0; it < iters; it++) {
		struct addrspace *as = calloc(1, sizeof(*as));
		struct symbolizer *s = symbolizer__new();
		size_t len = pie_len;
		char maps[PATH_MAX + 128];
		struct frame_info fi;

		if (!as || !s)
			SETUP_FAIL("calloc");
		memcpy(buf, pie, pie_len);
		if (it % 5 == 0) {
			len = rng() % pie_len; /* truncated */
		} else {
			int k = 1 + (int)(rng() % 32);

			for (int j = 0; j < k; j++) {
				size_t pos;

				switch (rng() % 3) {
				case 0: /* ELF and program headers */
					pos = rng() % MIN(pie_len, (size_t)4096);
					break;
				case 1: /* section headers, .symtab, .strtab, DWARF at the end */
					pos = pie_len - 1 - rng() % MIN(pie_len, (size_t)8192);
					break;
				default:
					pos = rng() % pie_len;
					break;
				}
				buf[pos] = (unsigned char)rng();
			}
		}
		write_file(path, buf, len);
		/* mapped at 0x1000 from offset 0x1000: the bias is 0 if the headers survived */
		snprintf(maps, sizeof(maps), "1000-100000 r-xp 00001000 00:00 %d %s\n", it + 1,
			 path);
		CHECK_INT_EQ(as_read_text(as, maps), 1);
		CHECK_INT_EQ(symbolizer__user(s, as, alpha_vaddr, false, &fi), 0);
		if (fi.function && strcmp(fi.function, "fixture_alpha") == 0)
			named++;
		CHECK_INT_EQ(symbolizer__user(s, as, ra_alpha_vaddr, true, &fi), 0);
		CHECK_INT_EQ(symbolizer__user(s, as, 0x1000, false, &fi), 0);
		CHECK_INT_EQ(symbolizer__user(s, as, 0xfffff, true, &fi), 0);
		symbolizer__free(s);
		addrspace__free(as);
	}
	unlink(path);
	free(buf);
	printf("ok corrupt fuzz: %d mutated files, %d still named fixture_alpha\n", iters, named);
}

/*
 * A file replaced on disk after the maps were read by the same code with
 * another build ID (as after a rebuild): symbols read from the new file may
 * be wrong, so none are given.
 */
static void test_replaced(const char *dir, const void *pie, size_t pie_len, uint64_t alpha_vaddr)
{
	char path[PATH_MAX], maps[PATH_MAX + 128], build_id[2 * BUILD_ID_MAX_BYTES + 1];
	unsigned char raw_id[BUILD_ID_MAX_BYTES], *other, *hit;
	struct addrspace *as = calloc(1, sizeof(*as));
	struct symbolizer *s;
	struct frame_info fi;
	size_t id_len;

	other = malloc(pie_len);
	if (!as || !other)
		SETUP_FAIL("calloc");
	snprintf(path, sizeof(path), "%s/replaced", dir);
	write_file(path, pie, pie_len);
	elf_note_build_id(path, build_id, sizeof(build_id));
	id_len = strlen(build_id) / 2;
	for (size_t i = 0; i < id_len; i++)
		sscanf(build_id + 2 * i, "%2hhx", &raw_id[i]);
	memcpy(other, pie, pie_len);
	hit = id_len ? memmem(other, pie_len, raw_id, id_len) : NULL;
	if (!hit)
		SETUP_FAIL("no build ID bytes in the PIE");
	hit[0] ^= 0xff;

	snprintf(maps, sizeof(maps), "1000-100000 r-xp 00001000 00:00 1 %s\n", path);
	CHECK_INT_EQ(as_read_text(as, maps), 1);

	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s, as, alpha_vaddr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	symbolizer__free(s);

	write_file(path, other, pie_len);
	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s, as, alpha_vaddr, false, &fi), 0);
	CHECK(fi.function == NULL);
	CHECK(fi.file == NULL);
	CHECK_STR_EQ(fi.build_id, build_id);
	CHECK_HEX_EQ(fi.rel_addr, alpha_vaddr);
	symbolizer__free(s);
	addrspace__free(as);
	free(other);
	unlink(path);
	printf("ok replaced\n");
}

/*
 * A running copy of the PIE whose file was deleted: the maps path ends in
 * " (deleted)", and only /proc/PID/map_files still leads to the file.
 */
static void test_deleted(const char *dir, const void *pie, size_t pie_len)
{
	char path[PATH_MAX], probe[128];
	struct addrspace *as = NULL;
	const struct mapping *m;
	struct symbolizer *s;
	struct frame_info fi;
	struct pie_out o;
	struct child c;
	int fd;

	snprintf(path, sizeof(path), "%s/deleted-pie", dir);
	write_file(path, pie, pie_len);
	child_spawn(&c, path, NULL);
	pie_read(&c, &o);
	unlink(path);

	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	m = as ? addrspace__find(as, o.alpha) : NULL;
	CHECK(m != NULL);
	if (!m)
		goto out;
	CHECK_STR_SUFFIX(m->path, "/deleted-pie (deleted)");
	snprintf(probe, sizeof(probe), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)c.pid,
		 m->start, m->end);
	fd = open(probe, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		check_skip("deleted", "cannot open /proc/PID/map_files (needs CAP_SYS_ADMIN)");
		goto out;
	}
	close(fd);
	CHECK(is_lower_hex(m->build_id));
	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra_alpha, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "fixture_alpha");
	CHECK_INT_EQ(fi.line, o.ra_alpha_line);
	symbolizer__free(s);
	printf("ok deleted\n");
out:
	child_stop(&c);
	addrspace__free(as);
}

/* test_corrupt() - the parts that need files of their own in a temporary directory. */
static void test_corrupt(void)
{
	const char *pie_path = getenv("PROFD_FIXTURE_PIE");
	char dir[] = "/tmp/test-symbolize.XXXXXX";
	uint64_t alpha_vaddr, ra_vaddr;
	_cleanup_free_ void *pie = NULL;
	size_t pie_len;

	if (!pie_path) {
		check_skip("corrupt", "PROFD_FIXTURE_PIE not set");
		return;
	}
	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	pie = read_file(pie_path, &pie_len);
	alpha_vaddr = elf_symbol_value(pie_path, "fixture_alpha");
	ra_vaddr = elf_symbol_value(pie_path, "fixture_leaf") + 8;
	test_corrupt_mapped(dir, pie, pie_len);
	test_corrupt_fuzz(dir, pie, pie_len, alpha_vaddr, ra_vaddr);
	test_replaced(dir, pie, pie_len, alpha_vaddr);
	test_deleted(dir, pie, pie_len);
	rmdir(dir);
}

/* ---------------------------------------------------------------------- */
/* Part: inlined calls as frames, separate debug info, files without a process */

/* What tests/fixtures/fixture-inline.c prints. */
struct inline_out {
	uint64_t fn, ra;
	int inner_line, outer_line, fn_line;
};

static void inline_read(struct child *c, struct inline_out *o)
{
	char buf[256];

	child_expect(c, "fn", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64, &o->fn) != 1)
		SETUP_FAIL("bad fn line: %s", buf);
	child_expect(c, "ra", buf, sizeof(buf));
	if (sscanf(buf, "%" SCNx64 " %d %d %d", &o->ra, &o->inner_line, &o->outer_line,
		   &o->fn_line) != 4)
		SETUP_FAIL("bad ra line: %s", buf);
	child_expect(c, "ready", buf, sizeof(buf));
}

/*
 * check_inline_frames() - @fi (@n frames) are those of the return address in
 * fixture-inline's inner helper: the inner helper at the leaf call, the outer
 * helper at its call of the inner one, fixture_inline_fn at its call of the
 * outer one; depths 2, 1, 0; one module, build ID and address.
 */
#define check_inline_frames(fi, n, o, want_module, want_build_id, want_rel)                        \
	do {                                                                                       \
		CHECK_INT_EQ(n, 3);                                                                \
		if ((n) != 3)                                                                      \
			break;                                                                     \
		CHECK_STR_EQ((fi)[0].function, "fixture_inline_inner");                            \
		CHECK_STR_SUFFIX((fi)[0].file, "/fixture-inline.c");                               \
		CHECK_INT_EQ((fi)[0].line, (o)->inner_line);                                       \
		CHECK_INT_EQ((fi)[0].inline_depth, 2);                                             \
		CHECK_STR_EQ((fi)[1].function, "fixture_inline_outer");                            \
		CHECK_STR_SUFFIX((fi)[1].file, "/fixture-inline.c");                               \
		CHECK_INT_EQ((fi)[1].line, (o)->outer_line);                                       \
		CHECK_INT_EQ((fi)[1].inline_depth, 1);                                             \
		CHECK_STR_EQ((fi)[2].function, "fixture_inline_fn");                               \
		CHECK_STR_SUFFIX((fi)[2].file, "/fixture-inline.c");                               \
		CHECK((fi)[2].file && (fi)[2].file[0] == '/');                                     \
		CHECK_INT_EQ((fi)[2].line, (o)->fn_line);                                          \
		CHECK_INT_EQ((fi)[2].inline_depth, 0);                                             \
		for (int _i = 0; _i < 3; _i++) {                                                   \
			CHECK_STR_EQ((fi)[_i].module, want_module);                                \
			CHECK_STR_EQ((fi)[_i].build_id, want_build_id);                            \
			CHECK_HEX_EQ((fi)[_i].rel_addr, want_rel);                                 \
			CHECK(!(fi)[_i].kernel);                                                   \
		}                                                                                  \
	} while (0)

static void test_inline(void)
{
	const char *path = getenv("PROFD_FIXTURE_INLINE");
	const char *pie_path = getenv("PROFD_FIXTURE_PIE");
	_cleanup_free_ char *real = NULL;
	char build_id[2 * BUILD_ID_MAX_BYTES + 1], wrong_id[2 * BUILD_ID_MAX_BYTES + 1];
	struct frame_info fi[8], one;
	struct addrspace *as = NULL;
	const struct mapping *m;
	struct symbolizer *s;
	struct inline_out o;
	struct child c;
	uint64_t rel = 0, fn_vaddr;
	int n;

	if (!path) {
		check_skip("inline", "PROFD_FIXTURE_INLINE not set (run from meson test)");
		return;
	}
	real = real_path(path);
	elf_note_build_id(path, build_id, sizeof(build_id));
	fn_vaddr = elf_symbol_value(path, "fixture_inline_fn");
	if (!is_lower_hex(build_id) || !fn_vaddr)
		SETUP_FAIL("%s: no build ID or no fixture_inline_fn", path);
	child_spawn(&c, path, NULL);
	inline_read(&c, &o);
	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	s = symbolizer__new();
	if (!s || !as)
		SETUP_FAIL("symbolizer__new/addrspace__new");
	m = addrspace__find(as, o.ra);
	CHECK(m != NULL);
	if (m)
		rel = o.ra - m->load_bias;

	/* three frames, innermost first; again from the result cache */
	for (int pass = 0; pass < 2; pass++) {
		memset(fi, 0xa5, sizeof(fi));
		n = symbolizer__user_inline(s, as, o.ra, true, fi, ARRAY_SIZE(fi));
		check_inline_frames(fi, n, &o, real, build_id, rel);
	}
	/* symbolizer__user(): exactly the depth-0 frame */
	CHECK_INT_EQ(symbolizer__user(s, as, o.ra, true, &one), 0);
	CHECK_STR_EQ(one.function, "fixture_inline_fn");
	CHECK_INT_EQ(one.line, o.fn_line);
	CHECK_INT_EQ(one.inline_depth, 0);
	CHECK(one.function == fi[2].function && one.file == fi[2].file); /* interned */

	/* too few slots: the innermost, then the depth-0 frame */
	n = symbolizer__user_inline(s, as, o.ra, true, fi, 2);
	CHECK_INT_EQ(n, 2);
	CHECK_STR_EQ(fi[0].function, "fixture_inline_inner");
	CHECK_INT_EQ(fi[0].line, o.inner_line);
	CHECK_INT_EQ(fi[0].inline_depth, 1);
	CHECK_STR_EQ(fi[1].function, "fixture_inline_fn");
	CHECK_INT_EQ(fi[1].line, o.fn_line);
	CHECK_INT_EQ(fi[1].inline_depth, 0);
	n = symbolizer__user_inline(s, as, o.ra, true, fi, 1);
	CHECK_INT_EQ(n, 1);
	CHECK_STR_EQ(fi[0].function, "fixture_inline_fn");
	CHECK_INT_EQ(fi[0].line, o.fn_line);
	CHECK_INT_EQ(fi[0].inline_depth, 0);
	CHECK_INT_EQ(symbolizer__user_inline(s, as, o.ra, true, fi, 0), -EINVAL);

	/* no mapping: one frame, -ENOENT */
	CHECK_INT_EQ(symbolizer__user_inline(s, as, 16, false, fi, 4), -ENOENT);
	CHECK_STR_EQ(fi[0].module, "[unknown]");
	CHECK(fi[0].function == NULL && fi[0].inline_depth == 0);

	/* every address of the function: the last frame is what symbolizer__user() says */
	for (uint64_t a = o.fn; a < o.fn + 4 * RESULT_CACHE_MAX; a++) {
		n = symbolizer__user_inline(s, as, a, a & 1, fi, ARRAY_SIZE(fi));
		CHECK(n >= 1 && n <= (int)ARRAY_SIZE(fi));
		if (n < 1)
			continue;
		CHECK_INT_EQ(symbolizer__user(s, as, a, a & 1, &one), 0);
		CHECK(one.function == fi[n - 1].function && one.file == fi[n - 1].file &&
		      one.line == fi[n - 1].line);
		for (int i = 0; i < n; i++)
			CHECK_INT_EQ(fi[i].inline_depth, n - 1 - i);
	}
	CHECK(s->results.len <= RESULT_CACHE_MAX);

	/* at -O0 with one always_inline level (fixture-pie's fixture_beta): two frames */
	if (pie_path) {
		struct addrspace *pas = NULL;
		struct pie_out po;
		struct child pc;

		child_spawn(&pc, pie_path, NULL);
		pie_read(&pc, &po);
		CHECK_INT_EQ(addrspace__new(pc.pid, &pas), 0);
		if (pas) {
			n = symbolizer__user_inline(s, pas, po.ra_beta, true, fi, ARRAY_SIZE(fi));
			CHECK_INT_EQ(n, 2);
			CHECK_STR_EQ(fi[0].function, "fixture_inlined");
			CHECK_STR_SUFFIX(fi[0].file, "/fixture-pie.c");
			CHECK(fi[0].line > 0 && fi[0].line != po.ra_beta_line);
			CHECK_STR_EQ(fi[1].function, "fixture_beta");
			CHECK_INT_EQ(fi[1].line, po.ra_beta_line);
			/* no inlining: one frame */
			n = symbolizer__user_inline(s, pas, po.ra_alpha, true, fi, ARRAY_SIZE(fi));
			CHECK_INT_EQ(n, 1);
			CHECK_STR_EQ(fi[0].function, "fixture_alpha");
			CHECK_INT_EQ(fi[0].line, po.ra_alpha_line);
		}
		child_stop(&pc);
		addrspace__free(pas);
	}

	/* the file without its process: by path and build ID */
	n = symbolizer__file(s, path, build_id, rel - 1, fi, ARRAY_SIZE(fi));
	check_inline_frames(fi, n, &o, path, build_id, rel - 1);
	n = symbolizer__file(s, path, build_id, fn_vaddr, fi, ARRAY_SIZE(fi));
	CHECK(n >= 1);
	CHECK_STR_EQ(fi[n > 0 ? n - 1 : 0].function, "fixture_inline_fn");
	/* build ID unknown: the file at the path */
	n = symbolizer__file(s, path, "", rel - 1, fi, ARRAY_SIZE(fi));
	check_inline_frames(fi, n, &o, path, "", rel - 1);
	/* another build ID: not this file's names, and no debug file has that ID */
	snprintf(wrong_id, sizeof(wrong_id), "%s", build_id);
	wrong_id[0] = wrong_id[0] == '0' ? '1' : '0';
	for (int pass = 0; pass < 2; pass++) {
		n = symbolizer__file(s, path, wrong_id, rel - 1, fi, ARRAY_SIZE(fi));
		CHECK_INT_EQ(n, -ENOENT);
		CHECK(fi[0].function == NULL);
		CHECK_STR_EQ(fi[0].module, path);
		CHECK_STR_EQ(fi[0].build_id, wrong_id);
		CHECK_HEX_EQ(fi[0].rel_addr, rel - 1);
	}
	CHECK_INT_EQ(symbolizer__file(s, path, "not hex/../x", rel - 1, fi, 4), -ENOENT);
	CHECK(fi[0].function == NULL);
	CHECK_INT_EQ(symbolizer__file(s, "/nonexistent/fixture-inline", build_id, rel - 1, fi, 4),
		     -ENOENT);
	CHECK_INT_EQ(symbolizer__file(s, "/nonexistent/fixture-inline", "", rel - 1, fi, 4),
		     -ENOENT);
	CHECK_INT_EQ(symbolizer__file(s, "fixture-inline", build_id, rel - 1, fi, 4), -ENOENT);
	CHECK_INT_EQ(symbolizer__file(s, path, build_id, rel - 1, fi, 0), -EINVAL);
	/* the process's module is still fine */
	n = symbolizer__user_inline(s, as, o.ra, true, fi, ARRAY_SIZE(fi));
	check_inline_frames(fi, n, &o, real, build_id, rel);

	child_stop(&c);
	symbolizer__free(s);
	addrspace__free(as);
	printf("ok inline: %s:%d < %s:%d < %s:%d\n", "fixture_inline_inner", o.inner_line,
	       "fixture_inline_outer", o.outer_line, "fixture_inline_fn", o.fn_line);
}

/* fmt_path() - snprintf() into @buf, a setup error if it does not fit. */
static __attribute__((format(printf, 3, 4))) void fmt_path(char *buf, size_t size, const char *fmt,
							   ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size)
		SETUP_FAIL("path too long: %s...", buf);
}

static void mkdir_p(const char *path)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			SETUP_FAIL("mkdir %s: %m", buf);
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		SETUP_FAIL("mkdir %s: %m", buf);
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	_cleanup_free_ void *data = read_file(from, &len);

	write_file(to, data, len);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void rm_rf(const char *path)
{
	nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * symbolize_child() - start @path (a fixture-inline build), symbolize its
 * inner return address with @s into @fi (8 frames), stop it; the frame
 * count returned, its output in *@o, the address's rel_addr in *@ret_rel.
 */
static int symbolize_child(struct symbolizer *s, const char *path, struct frame_info *fi,
			   struct inline_out *o, uint64_t *ret_rel)
{
	struct addrspace *as = NULL;
	const struct mapping *m;
	struct child c;
	int n = -1;

	child_spawn(&c, path, NULL);
	inline_read(&c, o);
	CHECK_INT_EQ(addrspace__new(c.pid, &as), 0);
	if (as) {
		m = addrspace__find(as, o->ra);
		CHECK(m != NULL);
		*ret_rel = m ? o->ra - m->load_bias : 0;
		n = symbolizer__user_inline(s, as, o->ra, true, fi, 8);
	}
	child_stop(&c);
	addrspace__free(as);
	return n;
}

/* fd_crc_matches(), search_path_new(): known answers */
static void test_debug_path_helpers(const char *dir)
{
	char path[PATH_MAX];
	char *p;
	int fd;

	snprintf(path, sizeof(path), "%s/crc", dir);
	write_file(path, "123456789", 9);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		SETUP_FAIL("open %s: %m", path);
	CHECK(fd_crc_matches(fd, 0xcbf43926)); /* the CRC-32 check value */
	CHECK(!fd_crc_matches(fd, 0xcbf43927));
	close(fd);
	unlink(path);

	p = search_path_new(NULL);
	CHECK_STR_EQ(p, ":.debug:/usr/lib/debug");
	free(p);
	p = search_path_new("/a:rel::/b/c/:+x");
	CHECK_STR_EQ(p, ":.debug:/a:/b/c/:/usr/lib/debug");
	free(p);
}

/*
 * Stripped copies of fixture-inline whose debug info is in a separate file:
 * found by build ID under a root given to symbolizer__new_with() (and in
 * PROFD_DEBUG_PATH), by .gnu_debuglink next to the file and under a root;
 * and not found without the root.
 */
static void test_separate_debug(void)
{
	const char *debug = getenv("PROFD_FIXTURE_INLINE_DEBUG");
	const char *stripped = getenv("PROFD_FIXTURE_INLINE_STRIPPED");
	const char *debuglink = getenv("PROFD_FIXTURE_INLINE_DEBUGLINK");
	char dir[] = "/tmp/test-symbolize-debug.XXXXXX", root[PATH_MAX], link_root[PATH_MAX],
	     bin_dir[PATH_MAX], path[PATH_MAX + 64], copy[PATH_MAX], list[3 * PATH_MAX],
	     build_id[2 * BUILD_ID_MAX_BYTES + 1];
	_cleanup_free_ char *real_stripped = NULL, *real_debuglink = NULL, *real_copy = NULL;
	_cleanup_free_ char *real_dir = NULL;
	struct frame_info fi[8];
	struct symbolizer *s;
	struct inline_out o;
	uint64_t rel = 0;
	int n;

	if (!debug || !stripped || !debuglink) {
		check_skip("separate debug", "PROFD_FIXTURE_INLINE_DEBUG/_STRIPPED/_DEBUGLINK not set "
				       "(no objcopy?)");
		return;
	}
	if (!mkdtemp(dir))
		SETUP_FAIL("mkdtemp: %m");
	real_dir = real_path(dir);
	test_debug_path_helpers(real_dir);
	real_stripped = real_path(stripped);
	real_debuglink = real_path(debuglink);
	elf_note_build_id(stripped, build_id, sizeof(build_id));
	if (!is_lower_hex(build_id) || elf_symbol_value(stripped, "fixture_inline_fn"))
		SETUP_FAIL("%s: no build ID, or not stripped", stripped);

	/* ROOT/.build-id/xx/rest.debug */
	fmt_path(root, sizeof(root), "%s/root", real_dir);
	fmt_path(path, sizeof(path), "%s/.build-id/%.2s", root, build_id);
	mkdir_p(path);
	fmt_path(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", root, build_id, build_id + 2);
	copy_file(debug, path);

	/* no root: nothing but the module */
	s = need_symbolizer(symbolizer__new_with(false, NULL));
	n = symbolize_child(s, stripped, fi, &o, &rel);
	check_unnamed(n, fi);
	CHECK(fi[0].file == NULL);
	CHECK_STR_EQ(fi[0].module, real_stripped);
	CHECK_STR_EQ(fi[0].build_id, build_id);
	/* the file matches its build ID but knows no names: a frame, function NULL */
	n = symbolizer__file(s, stripped, build_id, rel - 1, fi, 8);
	check_unnamed(n, fi);
	symbolizer__free(s);

	/* the root, among entries that are not used */
	fmt_path(list, sizeof(list), "relative/dir::/nonexistent:%s", root);
	s = need_symbolizer(symbolizer__new_with(false, list));
	n = symbolize_child(s, stripped, fi, &o, &rel);
	check_inline_frames(fi, n, &o, real_stripped, build_id, rel);
	/* without a process: through the stripped file, and from the debug file alone */
	n = symbolizer__file(s, stripped, build_id, rel - 1, fi, 8);
	check_inline_frames(fi, n, &o, stripped, build_id, rel - 1);
	n = symbolizer__file(s, "/nonexistent/fixture-inline", build_id, rel - 1, fi, 8);
	check_inline_frames(fi, n, &o, "/nonexistent/fixture-inline", build_id, rel - 1);
	symbolizer__free(s);

	/* PROFD_DEBUG_PATH is symbolizer__new()'s root */
	setenv("PROFD_DEBUG_PATH", root, 1);
	s = need_symbolizer(symbolizer__new());
	unsetenv("PROFD_DEBUG_PATH");
	n = symbolize_child(s, stripped, fi, &o, &rel);
	check_inline_frames(fi, n, &o, real_stripped, build_id, rel);
	symbolizer__free(s);

	/* .gnu_debuglink to the debug file next to the binary */
	s = need_symbolizer(symbolizer__new_with(false, NULL));
	n = symbolize_child(s, debuglink, fi, &o, &rel);
	check_inline_frames(fi, n, &o, real_debuglink, build_id, rel);
	n = symbolizer__file(s, debuglink, build_id, rel - 1, fi, 8);
	check_inline_frames(fi, n, &o, debuglink, build_id, rel - 1);

	/* a copy of it elsewhere: its debug file is not next to it, but under ROOT/<dir>/ */
	fmt_path(bin_dir, sizeof(bin_dir), "%s/bin", real_dir);
	mkdir_p(bin_dir);
	fmt_path(copy, sizeof(copy), "%s/fixture-inline-debuglink", bin_dir);
	copy_file(debuglink, copy);
	real_copy = real_path(copy);
	fmt_path(link_root, sizeof(link_root), "%s/link-root", real_dir);
	fmt_path(path, sizeof(path), "%s%s", link_root, bin_dir);
	mkdir_p(path);
	fmt_path(path, sizeof(path), "%s%s/fixture-inline.debug", link_root, bin_dir);
	copy_file(debug, path);
	n = symbolize_child(s, copy, fi, &o, &rel); /* @s has no root */
	check_unnamed(n, fi);
	symbolizer__free(s);
	s = need_symbolizer(symbolizer__new_with(false, link_root));
	n = symbolize_child(s, copy, fi, &o, &rel);
	check_inline_frames(fi, n, &o, real_copy, build_id, rel);
	symbolizer__free(s);

	/* a debug file with another build ID at the debuglink's name is not taken */
	fmt_path(path, sizeof(path), "%s%s/fixture-inline.debug", link_root, bin_dir);
	copy_file(getenv("PROFD_FIXTURE_PIE") ?: debuglink, path);
	s = need_symbolizer(symbolizer__new_with(false, link_root));
	n = symbolize_child(s, copy, fi, &o, &rel);
	check_unnamed(n, fi);
	symbolizer__free(s);

	rm_rf(dir);
	printf("ok separate debug: by build ID under a root, by debuglink next to the file and "
	       "under a root\n");
}

/* libdebuginfod_loaded() - whether libdebuginfod is mapped into this process. */
static bool libdebuginfod_loaded(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/maps", "re");
	char line[PATH_MAX + 128];
	bool mapped = false;
	void *h;

	if (!f)
		SETUP_FAIL("/proc/self/maps: %m");
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libdebuginfod"))
			mapped = true;
	h = dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (h)
		dlclose(h);
	CHECK_INT_EQ(mapped, h != NULL);
	return mapped;
}

/*
 * With DEBUGINFOD_URLS set (main() sets it to a closed loopback port), a
 * symbolizer made without debuginfod must not even load libdebuginfod
 * while it looks for debug info it does not find (libdwfl's standard
 * callback would). Runs after every part that uses symbolizer__new().
 */
static void test_debuginfod_off(void)
{
	const char *stripped = getenv("PROFD_FIXTURE_INLINE_STRIPPED");
	char build_id[2 * BUILD_ID_MAX_BYTES + 1];
	struct frame_info fi[8];
	struct symbolizer *s;
	struct inline_out o;
	uint64_t rel = 0;
	int n;

	if (!stripped) {
		check_skip("debuginfod off", "PROFD_FIXTURE_INLINE_STRIPPED not set (no objcopy?)");
		return;
	}
	CHECK(getenv("DEBUGINFOD_URLS") != NULL);
	CHECK(!libdebuginfod_loaded());
	elf_note_build_id(stripped, build_id, sizeof(build_id));
	s = need_symbolizer(symbolizer__new_with(false, NULL));
	n = symbolize_child(s, stripped, fi, &o, &rel);
	check_unnamed(n, fi);
	n = symbolizer__file(s, stripped, build_id, rel - 1, fi, 8);
	check_unnamed(n, fi);
	n = symbolizer__file(s, "/nonexistent/fixture-inline", build_id, rel - 1, fi, 8);
	CHECK_INT_EQ(n, -ENOENT);
	symbolizer__free(s);
	CHECK(!libdebuginfod_loaded());
	printf("ok debuginfod off: DEBUGINFOD_URLS=%s, libdebuginfod not loaded\n",
	       getenv("DEBUGINFOD_URLS"));
}

/*
 * serve_debuginfo() - in a child, a debuginfod server on @listen_fd with
 * one file: GET /buildid/@build_id/debuginfo is @debug; anything else 404.
 * Serves until killed; returns its pid.
 */
static pid_t serve_debuginfo(int listen_fd, const char *build_id, const char *debug)
{
	size_t len;
	void *data = read_file(debug, &len);
	char want[256];
	pid_t pid;

	snprintf(want, sizeof(want), "GET /buildid/%s/debuginfo ", build_id);
	pid = fork();
	if (pid < 0)
		SETUP_FAIL("fork: %m");
	if (pid > 0) {
		free(data);
		return pid;
	}
	for (;;) {
		char req[4096], head[256];
		ssize_t got = 0, r;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0)
			continue;
		/* the request head, up to the blank line */
		while (got < (ssize_t)sizeof(req) - 1 &&
		       (r = read(fd, req + got, sizeof(req) - 1 - got)) > 0) {
			got += r;
			req[got] = '\0';
			if (strstr(req, "\r\n\r\n"))
				break;
		}
		req[got > 0 ? got : 0] = '\0';
		if (strncmp(req, want, strlen(want)) == 0) {
			int hl = snprintf(head, sizeof(head),
					  "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
					  "Content-Type: application/octet-stream\r\n"
					  "Connection: close\r\n\r\n",
					  len);

			if (write(fd, head, hl) == hl && write(fd, data, len) == (ssize_t)len)
				(void)0;
		} else {
			static const char nf[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
						 "Connection: close\r\n\r\n";

			if (write(fd, nf, sizeof(nf) - 1) < 0)
				(void)0;
		}
		close(fd);
	}
}

/*
 * symbolizer__new_with(true, ...) with a debuginfod server (a fake one on
 * loopback, in a child): the stripped fixture gets its debug info fetched,
 * in a process and by build ID alone.
 */
static void test_debuginfod_on(void)
{
	const char *debug = getenv("PROFD_FIXTURE_INLINE_DEBUG");
	const char *stripped = getenv("PROFD_FIXTURE_INLINE_STRIPPED");
	char build_id[2 * BUILD_ID_MAX_BYTES + 1], url[64], unknown[2 * BUILD_ID_MAX_BYTES + 1];
	_cleanup_free_ char *real_stripped = NULL;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sa_len = sizeof(sa);
	struct frame_info fi[8];
	struct symbolizer *s;
	struct inline_out o;
	uint64_t rel = 0;
	pid_t server;
	void *h;
	int n, fd;

	if (!debug || !stripped) {
		check_skip("debuginfod on", "PROFD_FIXTURE_INLINE_DEBUG/_STRIPPED not set (no objcopy?)");
		return;
	}
	h = dlopen("libdebuginfod.so.1", RTLD_LAZY);
	if (!h) {
		check_skip("debuginfod on", "libdebuginfod.so.1 is not installed");
		return;
	}
	dlclose(h);
	real_stripped = real_path(stripped);
	elf_note_build_id(stripped, build_id, sizeof(build_id));
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 16) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sa_len) < 0)
		SETUP_FAIL("loopback socket: %m");
	server = serve_debuginfo(fd, build_id, debug);
	close(fd);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ntohs(sa.sin_port));
	setenv("DEBUGINFOD_URLS", url, 1);

	s = need_symbolizer(symbolizer__new_with(true, NULL));
	/* found by libdwfl's standard callback, which asks debuginfod last */
	n = symbolize_child(s, stripped, fi, &o, &rel);
	check_inline_frames(fi, n, &o, real_stripped, build_id, rel);
	CHECK(libdebuginfod_loaded());
	/* no file: the debug file by build ID (from the client's cache by now) */
	n = symbolizer__file(s, "/nonexistent/fixture-inline", build_id, rel - 1, fi, 8);
	check_inline_frames(fi, n, &o, "/nonexistent/fixture-inline", build_id, rel - 1);
	/* a build ID the server does not have */
	snprintf(unknown, sizeof(unknown), "%s", build_id);
	unknown[0] = unknown[0] == '0' ? '1' : '0';
	n = symbolizer__file(s, "/nonexistent/fixture-inline", unknown, rel - 1, fi, 8);
	CHECK_INT_EQ(n, -ENOENT);
	symbolizer__free(s);

	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	printf("ok debuginfod on: fetched from %s\n", url);
}

/* ---------------------------------------------------------------------- */
/* Part: kernel symbols */

static void test_kallsyms_text(void)
{
	static const char text[] = "ffffffff81000000 T _stext\n"
				   "ffffffff81000000 t alias_local\n"
				   "ffffffff81000100 T func_a\n"
				   "ffffffff81000200 D data_sym\n"
				   "ffffffff81000300 t func_b\n"
				   "ffffffff81000300 t func_b_alias\n"
				   "garbage line\n"
				   "ffffffff81000400 W weak_c\n"
				   "ffffffff81000480 T\n"
				   "zzzz T bad_addr\n"
				   "ffffffff81000490 T bad_module\t[unterminated\n"
				   "ffffffffc0001000 t mod_func\t[mymod]\n"
				   "ffffffffc0001100 T mod_func2\t[mymod]\n"
				   "ffffffffc0002000 t other_func\t[othermod]\n"
				   "ffffffffc0001200 t mod_local\t[mymod]\n";
	static const char hidden[] = "0000000000000000 T _stext\n"
				     "0000000000000000 t func_a\n";
	char path[] = "/tmp/test-symbolize-kallsyms.XXXXXX";
	struct symbolizer *s = need_symbolizer(symbolizer__new());
	struct frame_info fi;
	int fd;

	fd = mkstemp(path);
	if (fd < 0)
		SETUP_FAIL("mkstemp: %m");
	close(fd);
	write_file(path, text, sizeof(text) - 1);
	CHECK_INT_EQ(kallsyms__load_file(&s->kallsyms, path), 0);
	s->kallsyms.loaded = true;
	CHECK_INT_EQ(s->kallsyms.n, 8);

	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000000, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "_stext"); /* the global name of two at one address */
	CHECK_STR_EQ(fi.module, "[kernel.kallsyms]");
	CHECK_STR_EQ(fi.build_id, "");
	CHECK(fi.kernel);
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000150, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "func_a");
	CHECK_HEX_EQ(fi.rel_addr, 0xffffffff81000150);
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000100, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "_stext");
	CHECK_HEX_EQ(fi.rel_addr, 0xffffffff81000100);
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000101, true, &fi), 0);
	CHECK_STR_EQ(fi.function, "func_a");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000250, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "func_a"); /* data symbols are not functions */
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000480, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "weak_c");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffffc0001010, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "mod_func");
	CHECK_STR_EQ(fi.module, "[mymod]");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffffc0001100, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "mod_func2");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000300, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "func_b"); /* of two local names, the first in the file */
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffffc0002010, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "other_func");
	CHECK_STR_EQ(fi.module, "[othermod]");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffffc0001200, false, &fi), 0);
	CHECK_STR_EQ(fi.function, "mod_local"); /* after another module's symbols */
	CHECK_STR_EQ(fi.module, "[mymod]");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff80000000, false, &fi), 0);
	CHECK(fi.function == NULL); /* below every symbol */
	CHECK_STR_EQ(fi.module, "[kernel.kallsyms]");
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffffc0001100 + (2 << 20), false, &fi), 0);
	CHECK(fi.function == NULL); /* far past the last symbol */

	write_file(path, hidden, sizeof(hidden) - 1);
	CHECK_INT_EQ(kallsyms__load_file(&s->kallsyms, path), 0);
	CHECK(s->kallsyms.hidden);
	CHECK_INT_EQ(symbolizer__kernel(s, 0xffffffff81000150, false, &fi), 0);
	CHECK(fi.function == NULL);
	CHECK_STR_EQ(fi.module, "[kernel.kallsyms]");

	CHECK_INT_EQ(kallsyms__load_file(&s->kallsyms, "/nonexistent/kallsyms"), -ENOENT);
	unlink(path);
	symbolizer__free(s);
	printf("ok kallsyms text\n");
}

struct text_sym {
	uint64_t addr;
	char name[128];
	char module[64];
	bool global;
};

static int text_sym_cmp(const void *a, const void *b)
{
	const struct text_sym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* test_kallsyms_real() - the running kernel: "schedule", or another function alone at its address.
 */
static void test_kallsyms_real(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/kallsyms", "re");
	_cleanup_free_ struct text_sym *syms = NULL;
	const struct text_sym *kpick = NULL, *mpick = NULL;
	size_t n = 0, cap = 0;
	char line[512];
	bool nonzero = false;
	struct symbolizer *s;
	struct frame_info fi;

	if (!f) {
		check_skip("kallsyms", "cannot open /proc/kallsyms");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		struct text_sym t = {};
		char type;

		t.module[0] = '\0';
		if (sscanf(line, "%" SCNx64 " %c %127s %63s", &t.addr, &type, t.name, t.module) < 3)
			continue;
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		t.global = type == 'T';
		nonzero |= t.addr != 0;
		if (n == cap) {
			struct text_sym *ns =
			    reallocarray(syms, cap ? cap * 2 : 4096, sizeof(*syms));

			if (!ns)
				SETUP_FAIL("reallocarray");
			syms = ns;
			cap = cap ? cap * 2 : 4096;
		}
		syms[n++] = t;
	}
	if (!nonzero) {
		check_skip("kallsyms", "/proc/kallsyms shows no addresses (kptr_restrict, not root?)");
		return;
	}
	qsort(syms, n, sizeof(*syms), text_sym_cmp);
	for (size_t i = 0; i + 1 < n; i++) {
		const struct text_sym *t = &syms[i];

		if ((i > 0 && syms[i - 1].addr == t->addr) || syms[i + 1].addr == t->addr ||
		    !t->global || syms[i + 1].addr - t->addr < 2)
			continue; /* an alias would be as right as the name we expect */
		if (!t->module[0] && (!kpick || strcmp(t->name, "schedule") == 0))
			kpick = t;
		if (t->module[0] == '[' && !mpick)
			mpick = t;
	}
	if (!kpick)
		SETUP_FAIL("no kernel function alone at its address in /proc/kallsyms");

	s = need_symbolizer(symbolizer__new());
	CHECK_INT_EQ(symbolizer__kernel(s, kpick->addr, false, &fi), 0);
	CHECK_STR_EQ(fi.function, kpick->name);
	CHECK_STR_EQ(fi.module, "[kernel.kallsyms]");
	CHECK(fi.kernel);
	CHECK_HEX_EQ(fi.rel_addr, kpick->addr);
	CHECK_INT_EQ(symbolizer__kernel(s, kpick->addr + 1, false, &fi), 0);
	CHECK_STR_EQ(fi.function, kpick->name);
	CHECK_INT_EQ(symbolizer__kernel(s, kpick->addr + 1, true, &fi), 0);
	CHECK_STR_EQ(fi.function, kpick->name);
	if (mpick) {
		CHECK_INT_EQ(symbolizer__kernel(s, mpick->addr + 1, false, &fi), 0);
		CHECK_STR_EQ(fi.function, mpick->name);
		CHECK_STR_EQ(fi.module, mpick->module);
	}
	printf("ok kallsyms: %s at %#" PRIx64 "%s%s\n", kpick->name, kpick->addr,
	       mpick ? ", module symbol " : "", mpick ? mpick->name : "");
	symbolizer__free(s);
}

int main(void)
{
	/* a child that never prints would hang the test; fail instead */
	alarm(600);
	setvbuf(stdout, NULL, _IOLBF, 0); /* progress survives a crash */
	/* valgrind gives us no vDSO: a child's stands in (stand_in_vdso) */
	debuginfo__self_vdso_override = test_self_vdso;
	signal(SIGPIPE, SIG_IGN);
	elf_version(EV_CURRENT);
	/*
	 * A debuginfod server that does not answer (a closed loopback port):
	 * no symbolizer here but test_debuginfod_on()'s may use it, and
	 * test_debuginfod_off() checks that libdebuginfod was never loaded.
	 * Its client's cache, if it comes to that, in a directory of ours.
	 */
	setenv("DEBUGINFOD_URLS", "http://127.0.0.1:9/", 1);
	if (!mkdtemp(debuginfod_cache))
		SETUP_FAIL("mkdtemp: %m");
	setenv("DEBUGINFOD_CACHE_PATH", debuginfod_cache, 1);

	test_maps_parser();
	test_self_libc();
	test_is_code();
	test_trim();
	test_pool_renew();
	test_pie("PROFD_FIXTURE_PIE", true);
	test_pie("PROFD_FIXTURE_NOPIE", false);
	test_stripped();
	test_lib();
	test_vdso();
	test_corrupt();
	test_inline();
	test_separate_debug();
	test_kallsyms_text();
	test_kallsyms_real();
	test_debuginfod_off(); /* after every part that could have loaded libdebuginfod */
	test_debuginfod_on();
	if (debuginfod_cache[0])
		rm_rf(debuginfod_cache);

	return check_exit_skip("test-symbolize");
}
