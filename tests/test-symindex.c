/*
 * test-symindex.c - the sorted symbol index gives the name (and the start)
 * libdwfl's dwfl_module_addrinfo() gives, on real libraries: libc,
 * libstdc++ and a large C++ library (libtorch_cpu.so, where Debian's
 * python3-torch is installed). The test set of each: the first byte, the
 * middle, the last byte and the byte past the end of every sized symbol
 * (every Nth on a large table, which keeps libdwfl's linear scans to a few
 * seconds), each sizeless symbol and the byte after it, and random
 * addresses across the symbols' span. Also prints how many lookups the
 * index answered alone, and the time per lookup of each.
 *
 * Usage: test-symindex [LIBRARY...]   (default: the three above)
 */
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "symbols/symindex.h"

/* At most this many symbols of a table give addresses: libdwfl scans the whole table per lookup. */
#define SYMS_TESTED 2500
#define RANDOM_ADDRS 2500

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The addresses to test in @mod: see the top of the file. Returns how many, in *@ret (malloc'd). */
static size_t test_addresses(Dwfl_Module *mod, Dwarf_Addr **ret)
{
	int n = dwfl_module_getsymtab(mod);
	size_t stride = n > SYMS_TESTED ? ((size_t)n + SYMS_TESTED - 1) / SYMS_TESTED : 1, len = 0;
	Dwarf_Addr lo = UINT64_MAX, hi = 0,
		   *v = malloc((4 * SYMS_TESTED + RANDOM_ADDRS + 8) * sizeof(*v));

	if (!v)
		SETUP_FAIL("out of memory");
	for (int i = 1; i < n; i += (int)stride) {
		GElf_Sym sym;
		GElf_Addr value;

		if (!dwfl_module_getsym_info(mod, i, &sym, &value, NULL, NULL, NULL) ||
		    sym.st_shndx == SHN_UNDEF || value == 0)
			continue;
		v[len++] = value;
		v[len++] = value + (sym.st_size ? sym.st_size / 2 : 1);
		if (sym.st_size) {
			v[len++] = value + sym.st_size - 1;
			v[len++] = value + sym.st_size;
		}
		if (GELF_ST_TYPE(sym.st_info) == STT_FUNC) {
			lo = value < lo ? value : lo;
			hi = value + sym.st_size > hi ? value + sym.st_size : hi;
		}
	}
	srandom(1);
	for (int i = 0; i < RANDOM_ADDRS && hi > lo; i++)
		v[len++] = lo + (Dwarf_Addr)(((double)random() / RAND_MAX) * (double)(hi - lo));
	*ret = v;
	return len;
}

/* check_library() - compare the index with libdwfl on @path; false if it cannot be opened. */
static bool check_library(const char *path)
{
	Dwfl *dwfl = dwfl_begin(&callbacks);
	Dwfl_Module *mod;
	struct symindex *ix = NULL;
	Dwarf_Addr *addrs = NULL;
	size_t n, asked = 0, none = 0, mismatches = 0;
	double t0, t_index, t_libdw;

	if (!dwfl)
		SETUP_FAIL("dwfl_begin: %s", dwfl_errmsg(-1));
	dwfl_report_begin(dwfl);
	mod = dwfl_report_offline(dwfl, path, path, -1);
	dwfl_report_end(dwfl, NULL, NULL);
	if (!mod || dwfl_module_getsymtab(mod) <= 0) {
		printf("%s: not readable here (%s), skipped\n", path, dwfl_errmsg(-1));
		dwfl_end(dwfl);
		return false;
	}
	t0 = now_s();
	CHECK_INT_EQ(symindex__build(mod, &ix), 0);
	if (!ix)
		return true;
	printf("%s: %d symbols, index built in %.1f ms, %zu KiB\n", path,
	       dwfl_module_getsymtab(mod), 1e3 * (now_s() - t0), symindex__bytes(ix) / 1024);

	n = test_addresses(mod, &addrs);
	t0 = now_s();
	for (size_t i = 0; i < n; i++) {
		const char *name;
		Dwarf_Addr start;

		(void)symindex__lookup(ix, addrs[i], &name, &start);
	}
	t_index = now_s() - t0;
	t_libdw = 0;
	for (size_t i = 0; i < n; i++) {
		const char *name = NULL, *want;
		Dwarf_Addr start = 0;
		GElf_Off off = 0;
		GElf_Sym sym;
		enum symindex_answer a = symindex__lookup(ix, addrs[i], &name, &start);

		t0 = now_s();
		want = dwfl_module_addrinfo(mod, addrs[i], &off, &sym, NULL, NULL, NULL);
		t_libdw += now_s() - t0;
		if (a == SYMINDEX_ASK_LIBDW) {
			asked++;
			continue;
		}
		none += a == SYMINDEX_NONE;
		if (a == SYMINDEX_NONE ? want == NULL
				       : want && !strcmp(name, want) && start == addrs[i] - off)
			continue;
		if (mismatches++ < 10)
			fprintf(stderr,
				"%s: at %#" PRIx64 " the index says %s%s+%#" PRIx64
				", libdwfl %s+%#" PRIx64 "\n",
				path, (uint64_t)addrs[i], a == SYMINDEX_NONE ? "no symbol" : "",
				a == SYMINDEX_NONE ? "" : name, (uint64_t)(addrs[i] - start),
				want ? want : "no symbol", (uint64_t)off);
	}
	printf("%s: %zu addresses, %zu answered by the index (%zu with no symbol), %zu asked of "
	       "libdwfl, %zu differ; per lookup: index %.2f us, libdwfl %.2f us\n",
	       path, n, n - asked, none, asked, mismatches, 1e6 * t_index / (double)n,
	       1e6 * t_libdw / (double)n);
	CHECK_INT_EQ(mismatches, 0);
	/* the index is what answers: libdwfl is asked only for the rare undecided case */
	CHECK(asked * 100 <= n);
	free(addrs);
	symindex__free(ix);
	dwfl_end(dwfl);
	return true;
}

/* The file behind a library the dynamic linker finds by @soname, or NULL. */
static const char *library_path(const char *soname, char buf[static PATH_MAX])
{
	const char *dirs[] = {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
			      "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"};

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(buf, PATH_MAX, "%s/%s", dirs[i], soname);
		if (access(buf, R_OK) == 0)
			return buf;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *libs[] = {"libc.so.6", "libstdc++.so.6", "libtorch_cpu.so.1.13"};
	char buf[PATH_MAX];
	int tested = 0;

	unsetenv("DEBUGINFOD_URLS"); /* local files only: the test must not wait on a network */
	elf_version(EV_CURRENT);
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			tested += check_library(argv[i]);
	} else {
		for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
			const char *path = library_path(libs[i], buf);

			if (path)
				tested += check_library(path);
			else
				printf("%s: not installed, skipped\n", libs[i]);
		}
	}
	if (!tested)
		SETUP_FAIL("no library could be read");
	return check_exit("test-symindex");
}
