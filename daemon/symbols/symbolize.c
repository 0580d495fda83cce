/*
 * symbolize.c - process address spaces read from /proc/PID/maps, user
 * addresses turned into function/file:line with libdwfl (symbol tables,
 * separate debug info found locally or, when asked for, through
 * debuginfod, DWARF lines and inlined calls, C++ demangling; [vdso] from a
 * copy of the daemon's own vDSO), addresses of ELF files without a process
 * (stored frames), kernel addresses turned into symbols from /proc/kallsyms.
 *
 * Everything read here is untrusted: /proc files are parsed with bounds
 * checks and size caps, and an ELF or DWARF file libelf/libdw cannot read is
 * an unsymbolized frame, never an error of the caller's. Not thread-safe:
 * one symbolizer and its address spaces belong to one thread.
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbols/elf_util.h"
#include "hashmap.h"
#include "symbols/addrspace_internal.h"
#include "symbols/debuginfo.h"
#include "symbols/elf_pages.h"
#include "symbols/kallsyms.h"
#include "symbols/strpool.h"
#include "symbols/symbolize.h"
#include "symbols/symbolize_internal.h"
#include "symbols/symindex.h"
#include "util.h"

/* libstdc++'s demangler (the build links libstdc++); <cxxabi.h> is C++ only. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/*
 * Caps on untrusted input. /proc/PID/maps of a process at the default
 * vm.max_map_count (65530) is about 10 MiB; kallsyms is about 15 MiB with
 * all modules. Beyond the caps the rest is ignored (those addresses are
 * then visibly unsymbolized), never an unbounded allocation.
 */
/* x86-64 vDSOs are 2 pages; a [vdso] this big is not one */
/*
 * __cxa_demangle() recurses on nested template arguments; a crafted symbol
 * can exhaust the stack (e.g. GCC PR 87335). Real C++ names stay far below
 * this length.
 */
#define DEMANGLE_MAX_LEN 8192
/* the test makes it small */
#ifndef RESULT_CACHE_MAX
#define RESULT_CACHE_MAX 200000 /* cached lookups, ~20 MiB (more with inlining) */
#endif
/*
 * The string pool (the names handed out, the modules' paths and build IDs)
 * is started over by symbolizer__trim() past this many bytes: an always-on
 * profd otherwise keeps the names of every job it ever profiled (a PyTorch
 * training loop's: 931 strings, in one 64 KiB chunk, after 2 minutes).
 */
#ifndef POOL_MAX_BYTES
#define POOL_MAX_BYTES (16u << 20)
#endif
/*
 * Inlining at one address: DIE nesting followed from the CU down, and
 * inlined calls kept (innermost first). Real code nests a few levels; the
 * caps bound what a crafted DWARF file costs.
 */
#define SCOPE_MAX_DEPTH 128
#define INLINE_MAX 32
/* ---------------------------------------------------------------------- */
/* The symbolizer */

/* One level of inlining at an address: the inlined function and where in it. */
struct inline_frame {
	const char *function, *file; /* interned; NULL where unknown */
	int line;
};

/* A cached lookup of one module address. */
struct result {
	const struct module *mod; /* NULL: free slot */
	uint64_t vaddr;
	/* the function the symbol table names, and the line in it */
	const char *function, *file;
	int line;
	/* the inlined calls at the address, innermost first; malloc'd, owned by the entry */
	struct inline_frame *inlined;
	size_t n_inlined;
};

/*
 * symbolizer__new_with() - an empty symbolizer: modules are opened and
 * kallsyms read on first use.
 * @debuginfod: let libdwfl fetch debug info missing locally through
 *   libdebuginfod when DEBUGINFOD_URLS is set (dwfl_standard_find_debuginfo()),
 *   and symbolizer__file() too. Lookups may then block on the network for
 *   minutes: never for the symbolizer of the sampling path. When false,
 *   libdebuginfod is never loaded on our behalf (find_debuginfo_local()).
 * @debug_path: NULL, or directories separated by colons, searched before
 *   /usr/lib/debug for separate debug files: by build ID as
 *   DIR/.build-id/xx/rest.debug, and by .gnu_debuglink as DIR/<directory of
 *   the file>/NAME (and DIR/<that directory less leading components>/NAME,
 *   as libdwfl does). Only absolute entries are used. Copied.
 *
 * Returns NULL only on out-of-memory. Does not log.
 */
struct symbolizer *symbolizer__new_with(bool debuginfod, const char *debug_path)
{
	struct symbolizer *s;

	elf_version(EV_CURRENT);
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	if (debuginfo__init(&s->debuginfo, debug_path, false) < 0) {
		free(s);
		return NULL;
	}
	s->debuginfod = debuginfod;
	s->kallsyms.pool = &s->pool;
	s->clock_ns = now_ns(CLOCK_MONOTONIC);
	if (debuginfod) {
		s->debuginfo.callbacks.find_elf = dwfl_build_id_find_elf;
		s->debuginfo.callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
	}
	return s;
}

/*
 * symbolizer__new() - symbolizer__new_with(false, $PROFD_DEBUG_PATH): the
 * symbolizer of the sampling path, which never asks debuginfod. NULL only
 * on out-of-memory. Does not log.
 */
struct symbolizer *symbolizer__new(void)
{
	return symbolizer__new_with(false, getenv("PROFD_DEBUG_PATH"));
}

static void module_free(struct module *m)
{
	if (!m)
		return;
	symindex__free(m->index); /* before the Dwfl: it points at libdwfl's strings */
	if (m->dwfl)
		dwfl_end(m->dwfl); /* closes the fd dwfl_report_elf() consumed */
	free(m);
}

static void results_clear(struct symbolizer *s)
{
	for (size_t i = 0; i < s->results.cap; i++) {
		struct result *r = s->results.vals[i];

		if (r)
			free(r->inlined);
		free(r);
	}
	hashmap__clear(&s->results);
}

/* symbolizer__free() - release all modules, caches and strings. Accepts NULL. */
void symbolizer__free(struct symbolizer *s)
{
	if (!s)
		return;
	results_clear(s);
	hashmap__free(&s->results);
	for (size_t i = 0; i < s->modules.cap; i++)
		module_free(s->modules.vals[i]);
	hashmap__free(&s->modules);
	kallsyms__done(&s->kallsyms);
	strpool_done(&s->pool);
	if (s->debuginfod_dwfl)
		dwfl_end(s->debuginfod_dwfl);
	debuginfo__done(&s->debuginfo);
	free(s);
}

static bool module_eq(const void *entry, const void *key)
{
	const struct module *m = entry;
	const struct module_key *k = key;

	return m->path == k->path && m->build_id == k->build_id && m->ino == k->ino &&
	       m->dev_major == k->dev_major && m->dev_minor == k->dev_minor &&
	       m->vdso_bytes == k->vdso_bytes && m->vdso_self == k->vdso_self && m->file == k->file;
}

/*
 * symbolizer__module_intern() - the module of @key, created (fields from the key, not
 * opened, first try at @retry_ns) if new. NULL only on out-of-memory.
 */
struct module *symbolizer__module_intern(struct symbolizer *s, const struct module_key *key,
				    uint64_t retry_ns)
{
	uint64_t h = hash64(HASH64_INIT, key, sizeof(*key));
	struct module *mod = hashmap__find(&s->modules, h, module_eq, key);

	if (mod) {
		mod->used_ns = s->clock_ns;
		return mod;
	}
	mod = calloc(1, sizeof(*mod));
	if (!mod)
		return NULL;
	*mod = (struct module){
	    .path = key->path,
	    .build_id = key->build_id,
	    .dev_major = key->dev_major,
	    .dev_minor = key->dev_minor,
	    .ino = key->ino,
	    .vdso_bytes = key->vdso_bytes,
	    .vdso_self = key->vdso_self,
	    .file = key->file,
	    .retry_ns = retry_ns,
	    .used_ns = s->clock_ns,
	};
	if (hashmap__insert(&s->modules, h, mod) < 0) {
		free(mod);
		return NULL;
	}
	return mod;
}

/*
 * module_key_of() - in @key, the key @m is filed under in s->modules
 * (symbolizer__module_intern()). Not returned by value: a copy need not
 * keep the padding, and the key is hashed as bytes.
 */
static void module_key_of(const struct module *m, struct module_key *key)
{
	memset(key, 0, sizeof(*key));
	key->path = m->path;
	key->build_id = m->build_id;
	key->dev_major = m->dev_major;
	key->dev_minor = m->dev_minor;
	key->ino = m->ino;
	key->vdso_bytes = m->vdso_bytes;
	key->vdso_self = m->vdso_self;
	key->file = m->file;
}

/*
 * pool_renew() - start the string pool over. What held the old pool's
 * strings goes or moves: the cached lookups go, the kernel's symbols go
 * (their module names; read again on first use, with the kernel modules
 * and BPF programs loaded since), and the open modules' paths and build
 * IDs move to the new pool (their key in s->modules is those pointers). A
 * module that cannot move for lack of memory is closed, as
 * symbolizer__trim() closes one.
 */
static void pool_renew(struct symbolizer *s)
{
	struct strpool fresh = {0};
	struct hashmap modules = {0};

	results_clear(s);
	kallsyms__done(&s->kallsyms);
	for (size_t i = 0; i < s->modules.cap; i++) {
		struct module *m = s->modules.vals[i];
		struct module_key key;

		if (!m)
			continue;
		m->path = strpool_intern(&fresh, m->path);
		m->build_id = strpool_intern(&fresh, m->build_id);
		module_key_of(m, &key);
		if (!m->path || !m->build_id ||
		    hashmap__insert(&modules, hash64(HASH64_INIT, &key, sizeof(key)), m) < 0)
			module_free(m);
	}
	hashmap__free(&s->modules);
	s->modules = modules;
	strpool_done(&s->pool);
	s->pool = fresh; /* s->kallsyms.pool points at s->pool: still right */
}

static bool module_idle(const void *entry, const void *ctx)
{
	return ((const struct module *)entry)->used_ns < *(const uint64_t *)ctx;
}

static void module_drop(void *entry)
{
	module_free(entry);
}

/*
 * symbolizer__trim() - close the modules of @s not looked up for @idle_ns
 * or more at @now_ns (CLOCK_MONOTONIC), to within the time between two
 * calls: each lookup stamps its module with the time of the last call. A
 * module closed is opened again by its next lookup, with the same names
 * (its symbol index and debug info are built again: tens to hundreds of ms
 * for a large library). Without it the modules of every file any process
 * ever mapped stay open (their symbol index, libdw's DWARF, the mapped ELF
 * file), for as long as the daemon runs. The cached lookups go too when a
 * module closes: they are keyed by module. Then, if the string pool holds
 * POOL_MAX_BYTES or more, it is started over (pool_renew()): the strings
 * handed out before are valid until this call, no longer. Returns the
 * number of modules closed. Does not log.
 */
size_t symbolizer__trim(struct symbolizer *s, uint64_t now_ns, uint64_t idle_ns)
{
	uint64_t before = now_ns > idle_ns ? now_ns - idle_ns : 0;
	size_t closed;

	closed = hashmap__remove_if(&s->modules, module_idle, &before, module_drop);
	if (closed)
		results_clear(s);
	if (strpool_bytes(&s->pool) >= POOL_MAX_BYTES)
		pool_renew(s);
	s->clock_ns = now_ns;
	return closed;
}

/*
 * symbolizer__module_report() - give @mod a Dwfl of its own, with @s's callbacks, with
 * the ELF file @fd (consumed) named @file_name. Returns 0, -ENOMEM, or
 * -EINVAL if libdwfl cannot use the file.
 */
int symbolizer__module_report(struct symbolizer *s, struct module *mod, const char *file_name, int fd)
{
	Dwarf_Addr bias, dwarf_bias;
	Dwfl_Module *dm;
	Dwfl *dwfl;

	dwfl = dwfl_begin(&s->debuginfo.callbacks);
	if (!dwfl) {
		close(fd);
		return -ENOMEM;
	}
	dwfl_report_begin(dwfl);
	dm = dwfl_report_elf(dwfl, mod->path, file_name, fd, 0, false);
	if (!dm)
		close(fd); /* consumed only on success */
	dwfl_report_end(dwfl, NULL, NULL);
	if (!dm || !dwfl_module_getelf(dm, &bias)) {
		dwfl_end(dwfl);
		return -EINVAL;
	}
	/* the local search (debuginfo.c) reads its path from the module's userdata */
	debuginfo__attach(dm, &s->debuginfo);
	/*
	 * Look for DWARF (in the file or a separate debug file) now, while
	 * /proc/PID/root still leads to it.
	 */
	(void)dwfl_module_getdwarf(dm, &dwarf_bias);
	/* the symbol table libdwfl settled on (the debug file's, if any), sorted once */
	if (symindex__build(dm, &mod->index) < 0)
		mod->index = NULL; /* libdwfl's own search then: slower, same names */
	mod->dwfl = dwfl;
	mod->mod = dm;
	mod->bias = bias;
	s->files_opened++;
	return 0;
}

/*
 * symbolizer__files_opened() - the ELF files @s has opened so far (a
 * module reported, its symbol index built, its DWARF read): each a read of
 * many pages of a file that stay in profd's RSS until
 * symbolizer__drop_pages().
 */
uint64_t symbolizer__files_opened(const struct symbolizer *s)
{
	return s->files_opened;
}

/*
 * symbolizer__drop_pages() - drop from profd's RSS the pages read from the
 * files of @s's open modules and their debug files (elf_pages.h): later
 * lookups read what they need of them again, from the page cache. Must be
 * called on the thread that uses @s. Returns the resident bytes dropped,
 * or -errno if /proc/self/maps cannot be read (-ENOMEM). Does not log.
 */
int64_t symbolizer__drop_pages(struct symbolizer *s)
{
	struct elf_pages ep;
	int r = elf_pages__begin(&ep);

	if (r < 0)
		return r;
	for (size_t i = 0; i < s->modules.cap; i++) {
		const struct module *m = s->modules.vals[i];

		if (m)
			elf_pages__drop_dwfl(&ep, m->dwfl);
	}
	elf_pages__end(&ep);
	return (int64_t)ep.bytes;
}

/*
 * module_open() - open @mod's file for the mapping @m of @as in a Dwfl of
 * its own, as addrspace__open_file() finds it: a file whose build ID
 * differs from the one read with the maps (a library replaced on disk,
 * whose symbols would be silently wrong) is refused. Leaves mod->dwfl NULL
 * if no way works or libdwfl cannot use the file.
 */
static void module_open(struct symbolizer *s, struct module *mod, const struct addrspace *as,
			const struct mapping *m)
{
	char name[PATH_MAX + 64];
	int fd = addrspace__open_file(as, m, name, sizeof(name));

	/*
	 * The name is where .gnu_debuglink files are looked for (next to it,
	 * in .debug/, under /usr/lib/debug): the path the process sees,
	 * through its root while that exists.
	 */
	if (fd >= 0)
		(void)symbolizer__module_report(s, mod, name, fd);
}

/*
 * module_open_vdso() - open the [vdso] module @mod from the copy of our own
 * vDSO, when addrspace found the process's vDSO to be the same image
 * (as_file_load_vdso()). Its symbols are in .dynsym; at one address the
 * vDSO has both a weak (clock_gettime) and a global name
 * (__vdso_clock_gettime), and libdwfl prefers the global one, as perf
 * shows it. Leaves mod->dwfl NULL otherwise.
 */
static void module_open_vdso(struct symbolizer *s, struct module *mod)
{
	_cleanup_close_ int fd = -1;
	uint64_t bytes = 0;

	if (!mod->vdso_self)
		return;
	fd = debuginfo__vdso_open(&bytes);
	if (fd < 0 || mod->vdso_bytes != bytes || !elf_fd_matches(fd, mod->build_id))
		return;
	(void)symbolizer__module_report(s, mod, mod->path, TAKE_FD(fd));
}

/*
 * symbolizer_module() - the module for mapping @idx of @as, opened on first
 * use (and again after MODULE_RETRY_NS while it cannot be). NULL on OOM.
 */
static struct module *symbolizer_module(struct symbolizer *s, const struct addrspace *as,
					size_t idx)
{
	const struct mapping *m = &as->maps[idx];
	const struct as_file *f = as->owners[idx];
	struct module_key key;
	struct module *mod;

	memset(&key, 0, sizeof(key)); /* padding too: the key is hashed as bytes */
	key.path = strpool_intern(&s->pool, m->path);
	key.build_id = strpool_intern(&s->pool, m->build_id);
	if (!key.path || !key.build_id)
		return NULL;
	if (!key.build_id[0]) {
		/* without a build ID, two files at one path (two containers) differ by inode */
		key.dev_major = f->dev_major;
		key.dev_minor = f->dev_minor;
		key.ino = f->ino;
	}
	if (is_vdso(m->path, strlen(m->path))) {
		/* every [vdso] has inode 0: tell images apart by size and by being ours */
		key.vdso_bytes = m->end - m->start;
		key.vdso_self = f->vdso_self;
	}
	/* [vdso] is opened from our own copy, once; nothing else has a file */
	mod = symbolizer__module_intern(s, &key, key.path[0] == '/' || key.vdso_self ? 0 : UINT64_MAX);
	if (!mod)
		return NULL;
	if (!mod->dwfl && mod->retry_ns != UINT64_MAX) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);

		if (now >= mod->retry_ns && mod->path[0] != '/') {
			module_open_vdso(s, mod);
			mod->retry_ns = UINT64_MAX; /* our vDSO does not change */
		} else if (now >= mod->retry_ns) {
			module_open(s, mod, as, m);
			mod->retry_ns = now + MODULE_RETRY_NS;
		}
	}
	return mod;
}

/*
 * intern_symbol() - @name without a symbol version ("memcpy@@GLIBC_2.14",
 * as a library's .symtab spells its versioned symbols: one function, one
 * name), demangled if it is a C++ name, interned. NULL on OOM.
 */
static const char *intern_symbol(struct symbolizer *s, const char *name)
{
	_cleanup_free_ char *unversioned = NULL;
	const char *at = strchr(name, '@');

	if (at && at > name) {
		unversioned = strndup(name, at - name);
		if (!unversioned)
			return NULL;
		name = unversioned;
	}
	if (name[0] == '_' && name[1] == 'Z' &&
	    strnlen(name, DEMANGLE_MAX_LEN + 1) <= DEMANGLE_MAX_LEN) {
		int status = -1;
		_cleanup_free_ char *d = __cxa_demangle(name, NULL, NULL, &status);

		if (d && status == 0)
			return strpool_intern(&s->pool, d);
	}
	return strpool_intern(&s->pool, name);
}

/*
 * scope_chain() - the DW_TAG_subprogram and DW_TAG_inlined_subroutine DIEs
 * of CU @cudie whose ranges hold @pc (a CU address, as dwarf_getscopes()
 * takes), outermost first, into @ret (SCOPE_MAX_DEPTH entries); returns how
 * many.
 *
 * Not dwarf_getscopes(): past the innermost inlined instance it returns the
 * scopes around that function's abstract definition, not the concrete
 * instances the instance sits in (elfutils 0.188 libdw/dwarf_getscopes.c),
 * so a second level of inlining would be lost; eu-addr2line -i goes on with
 * dwarf_getscopes_die(), which walks the whole CU. This descends once from
 * the CU through the one child at each level whose ranges hold @pc, the
 * first pass of dwarf_getscopes() (which likewise does not look into DIEs
 * without ranges: GCC and clang put a namespace's function definitions at
 * CU level). Each step moves forward in the CU, so a corrupt tree ends.
 */
static size_t scope_chain(Dwarf_Die *cudie, Dwarf_Addr pc, Dwarf_Die *ret)
{
	Dwarf_Die die = *cudie, child, next;
	size_t n = 0;

	for (size_t depth = 0; depth < SCOPE_MAX_DEPTH && dwarf_child(&die, &child) == 0; depth++) {
		bool found;
		int tag;

		while (!(found = dwarf_haspc(&child, pc) > 0) &&
		       dwarf_siblingof(&child, &next) == 0)
			child = next;
		if (!found)
			break;
		tag = dwarf_tag(&child);
		if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine)
			ret[n++] = child;
		die = child;
	}
	return n;
}

/*
 * call_site() - DW_AT_call_file (through CU @cudie's file table) and
 * DW_AT_call_line of the inlined instance @die, in *@ret_file (libdw's
 * string) and *@ret_line; false (both untouched) if either is missing or
 * out of range.
 */
static bool call_site(Dwarf_Die *cudie, Dwarf_Die *die, const char **ret_file, int *ret_line)
{
	Dwarf_Attribute attr_mem;
	Dwarf_Word call_file, call_line;
	Dwarf_Files *files;
	size_t n_files;
	const char *src;

	if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &attr_mem), &call_file))
		return false;
	if (dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &attr_mem), &call_line) ||
	    call_line == 0 || call_line > INT_MAX)
		return false;
	if (dwarf_getsrcfiles(cudie, &files, &n_files) != 0 || call_file >= n_files)
		return false;
	src = dwarf_filesrc(files, call_file, NULL, NULL);
	if (!src)
		return false;
	*ret_file = src;
	*ret_line = (int)call_line;
	return true;
}

/*
 * intern_source() - @file made absolute with @comp_dir (DW_AT_comp_dir, may
 * be NULL) as addr2line does, interned; NULL on OOM. Compilers write the
 * name as given on their command line, relative for most build systems.
 */
static const char *intern_source(struct symbolizer *s, const char *comp_dir, const char *file)
{
	_cleanup_free_ char *full = NULL;

	if (file[0] == '/' || !comp_dir || !comp_dir[0])
		return strpool_intern(&s->pool, file);
	if (asprintf(&full, "%s/%s", comp_dir, file) < 0) {
		full = NULL; /* asprintf() leaves it undefined on failure */
		return NULL;
	}
	return strpool_intern(&s->pool, full);
}

/*
 * die_function() - the name of the function @die (an inlined instance) is
 * of, from its abstract origin (dwarf_attr_integrate() follows
 * DW_AT_abstract_origin and DW_AT_specification): the linkage name,
 * demangled as intern_symbol() does, else DW_AT_name; interned into
 * *@ret, NULL when it has neither. Returns 0 or -ENOMEM.
 */
static int die_function(struct symbolizer *s, Dwarf_Die *die, const char **ret)
{
	Dwarf_Attribute attr_mem;
	const char *name;

	name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr_mem));
	if (!name)
		name =
		    dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr_mem));
	if (name && name[0]) {
		*ret = intern_symbol(s, name);
		return *ret ? 0 : -ENOMEM;
	}
	name = dwarf_diename(die);
	if (!name || !name[0]) {
		*ret = NULL;
		return 0;
	}
	*ret = strpool_intern(&s->pool, name);
	return *ret ? 0 : -ENOMEM;
}

/* intern_source_or_null() - intern_source() of @file, NULL for NULL; false on OOM. */
static bool intern_source_or_null(struct symbolizer *s, const char *comp_dir, const char *file,
				  const char **ret)
{
	*ret = file ? intern_source(s, comp_dir, file) : NULL;
	return !file || *ret;
}

/*
 * module_inline() - fill @ret's inline frames for Dwfl address @addr of
 * @mod and, when it is in inlined code, set *@file, *@line and *@comp_dir
 * (libdw's strings) to the call site of the outermost inlined call: the
 * depth-0 frame's place. @line_file, @line_line and @line_comp_dir are what
 * the line table says of @addr (NULL/0 if nothing): the innermost frame's
 * place. Keeps the INLINE_MAX innermost inlined calls. Returns 0 or -ENOMEM
 * (ret->inlined may then be set, for the caller to free).
 */
static int module_inline(struct symbolizer *s, const struct module *mod, Dwarf_Addr addr,
			 const char *line_file, int line_line, const char *line_comp_dir,
			 const char **file, int *line, const char **comp_dir, struct result *ret)
{
	Dwarf_Die chain[SCOPE_MAX_DEPTH], *cudie;
	Dwarf_Attribute attr_mem;
	Dwarf_Addr cu_bias;
	const char *cu_comp_dir;
	size_t n, first, k;

	cudie = dwfl_module_addrdie(mod->mod, addr, &cu_bias);
	if (!cudie)
		return 0;
	n = scope_chain(cudie, addr - cu_bias, chain);
	/* the inlined instances inside the innermost out-of-line function */
	for (first = n; first > 0 && dwarf_tag(&chain[first - 1]) == DW_TAG_inlined_subroutine;)
		first--;
	k = n - first;
	if (k == 0)
		return 0;
	cu_comp_dir = dwarf_formstring(dwarf_attr(cudie, DW_AT_comp_dir, &attr_mem));
	/* the depth-0 frame: where the function called the outermost inlined one */
	if (call_site(cudie, &chain[first], file, line))
		*comp_dir = cu_comp_dir;

	ret->inlined = calloc(MIN(k, (size_t)INLINE_MAX), sizeof(*ret->inlined));
	if (!ret->inlined)
		return -ENOMEM;
	for (size_t i = 0; i < k && i < INLINE_MAX; i++) {
		/* innermost first: chain[n - 1] is the deepest */
		struct inline_frame *f = &ret->inlined[i];
		const char *src = NULL, *dir = cu_comp_dir;
		int src_line = 0;

		if (die_function(s, &chain[n - 1 - i], &f->function) < 0)
			return -ENOMEM;
		if (i == 0) {
			/* the address itself: the line table */
			src = line_file;
			src_line = line_line;
			dir = line_comp_dir;
		} else {
			/* where it was called from, in the next deeper one */
			(void)call_site(cudie, &chain[n - i], &src, &src_line);
		}
		if (!intern_source_or_null(s, dir, src, &f->file))
			return -ENOMEM;
		f->line = src ? src_line : 0;
		ret->n_inlined = i + 1;
	}
	return 0;
}

/*
 * module_symbol() - the name of the symbol that holds Dwfl address @addr
 * of @mod, as dwfl_module_addrinfo() gives it: from the module's sorted
 * index (symindex.c), or from libdwfl's linear search where the index does
 * not decide or could not be built. NULL if no symbol holds it.
 */
static const char *module_symbol(const struct module *mod, Dwarf_Addr addr)
{
	const char *name = NULL;
	Dwarf_Addr start;
	GElf_Off off;
	GElf_Sym sym;

	if (mod->index) {
		switch (symindex__lookup(mod->index, addr, &name, &start)) {
		case SYMINDEX_FOUND:
			return name;
		case SYMINDEX_NONE:
			return NULL;
		case SYMINDEX_ASK_LIBDW:
			break;
		}
	}
	name = dwfl_module_addrinfo(mod->mod, addr, &off, &sym, NULL, NULL, NULL);
	if (!name || !name[0] || GELF_ST_TYPE(sym.st_info) == STT_SECTION ||
	    GELF_ST_TYPE(sym.st_info) == STT_FILE || GELF_ST_TYPE(sym.st_info) == STT_TLS)
		return NULL;
	return name;
}

/*
 * module_lookup() - what ELF virtual address @vaddr of @mod is: the function
 * the symbol table names (demangled), the file and line in it (of the
 * outermost inlined call when @vaddr is in inlined code), and the inlined
 * calls, each string interned; NULL/0 where unknown. Returns 0 or -ENOMEM
 * (nothing to free in @ret then).
 */
static int module_lookup(struct symbolizer *s, const struct module *mod, uint64_t vaddr,
			 struct result *ret)
{
	Dwarf_Addr addr = vaddr + mod->bias;
	const char *name, *src = NULL, *src_comp_dir = NULL, *file, *comp_dir;
	Dwfl_Line *dl;
	int src_line = 0, line, r;

	ret->function = NULL;
	ret->file = NULL;
	ret->line = 0;
	ret->inlined = NULL;
	ret->n_inlined = 0;

	name = module_symbol(mod, addr);
	if (name) {
		ret->function = intern_symbol(s, name);
		if (!ret->function)
			return -ENOMEM;
	}

	dl = dwfl_module_getsrc(mod->mod, addr);
	if (dl) {
		src = dwfl_lineinfo(dl, NULL, &src_line, NULL, NULL, NULL);
		if (src && src_line > 0) {
			src_comp_dir = dwfl_line_comp_dir(dl);
		} else {
			src = NULL;
			src_line = 0;
		}
	}
	file = src;
	line = src_line;
	comp_dir = src_comp_dir;
	r = module_inline(s, mod, addr, src, src_line, src_comp_dir, &file, &line, &comp_dir, ret);
	if (r >= 0 && !intern_source_or_null(s, comp_dir, file, &ret->file))
		r = -ENOMEM;
	if (r < 0) {
		free(ret->inlined);
		ret->inlined = NULL;
		ret->n_inlined = 0;
		return r;
	}
	ret->line = file ? line : 0;
	return 0;
}

static uint64_t result_hash(const struct module *mod, uint64_t vaddr)
{
	return hash64(hash64(HASH64_INIT, &mod, sizeof(mod)), &vaddr, sizeof(vaddr));
}

static bool result_eq(const void *entry, const void *key)
{
	const struct result *a = entry, *b = key;

	return a->mod == b->mod && a->vaddr == b->vaddr;
}

/*
 * results_add() - cache @r, taking its inline frames; failing to (OOM)
 * frees them and only costs a later lookup.
 */
static void results_add(struct symbolizer *s, const struct result *r)
{
	struct result *copy;

	if (s->results.len >= RESULT_CACHE_MAX)
		results_clear(s); /* start over rather than grow without bound */
	copy = malloc(sizeof(*copy));
	if (!copy) {
		free(r->inlined);
		return;
	}
	*copy = *r;
	if (hashmap__insert(&s->results, result_hash(r->mod, r->vaddr), copy) < 0) {
		free(copy->inlined);
		free(copy);
	}
}

/*
 * symbolizer__module_frames() - the frames of ELF virtual address @vaddr of @mod (whose
 * Dwfl is open), looked up at @lookup (@vaddr or @vaddr - 1), into @ret as
 * symbolizer__user_inline() documents, from the result cache or looked up
 * and cached. Returns the number of frames (1..@max, @max >= 1) or -ENOMEM.
 */
int symbolizer__module_frames(struct symbolizer *s, const struct module *mod, uint64_t vaddr,
			 uint64_t lookup, struct frame_info *ret, size_t max)
{
	struct result r = {.mod = mod, .vaddr = lookup}, *cached;
	size_t n_in;
	int err;

	cached = hashmap__find(&s->results, result_hash(mod, lookup), result_eq, &r);
	if (cached) {
		r = *cached;
	} else {
		err = module_lookup(s, mod, lookup, &r);
		if (err < 0)
			return err;
	}
	/* too many: the innermost, and the depth-0 frame last */
	n_in = MIN(r.n_inlined, max - 1);
	for (size_t i = 0; i < n_in; i++)
		ret[i] = (struct frame_info){
		    .module = mod->path,
		    .build_id = mod->build_id,
		    .rel_addr = vaddr,
		    .function = r.inlined[i].function,
		    .file = r.inlined[i].file,
		    .line = r.inlined[i].line,
		    .inline_depth = (int)(n_in - i),
		};
	ret[n_in] = (struct frame_info){
	    .module = mod->path,
	    .build_id = mod->build_id,
	    .rel_addr = vaddr,
	    .function = r.function,
	    .file = r.file,
	    .line = r.line,
	};
	if (!cached)
		results_add(s, &r); /* after the copy: it may free r.inlined */
	return (int)(n_in + 1);
}

/*
 * symbolizer__user_inline() - symbolize user address @addr of a process
 * whose mappings are @as, with inlined calls as frames of their own.
 * @addr: a runtime address in that process.
 * @return_addr: true for a return address from an unwound stack (every frame
 *   but the leaf): the lookup uses the ELF address - 1, so that a call at the
 *   very end of a function is attributed to that function and its line;
 *   rel_addr is still that of @addr.
 * @ret: @max >= 1 frames to fill, innermost first. When DWARF says @addr is
 *   in code inlined into its function (DW_TAG_inlined_subroutine DIEs whose
 *   ranges hold it), ret[0] is the innermost inlined function (named from
 *   its abstract origin's linkage name, demangled, else its DW_AT_name)
 *   with the file:line of the address from the line table; each next one
 *   is the function that inlined the previous one, with the file:line of
 *   that call (DW_AT_call_file/DW_AT_call_line); the last is the frame
 *   symbolizer__user() gives: the function the symbol table names (names
 *   stay those of the symbol table, as on every other path) with the place
 *   where it called the outermost inlined function. inline_depth counts
 *   down to 0 for the last. With more than @max frames the innermost
 *   @max - 1 are kept and the last is still the depth-0 one, whose
 *   inline_depth is 0; the kept ones are numbered @max - 1 .. 1 (the levels
 *   cut away are not counted). At most INLINE_MAX levels are kept per
 *   address. All frames share module, build_id and rel_addr; strings are
 *   owned by @s and valid until the next symbolizer__trim().
 *
 * Files are opened, searched for separate debug info and cached as for
 * symbolizer__user(); lookups are cached per module and address.
 *
 * Returns the number of frames (1..@max): 1 without debug info or without
 * inlining at @addr. Returns -ENOENT if no mapping holds @addr (ret[0] then
 * has module "[unknown]", rel_addr = @addr), -ENOMEM, -EINVAL for @max 0.
 * Blocks on file I/O (and on debuginfod for a symbolizer made with it);
 * does not log.
 */
int symbolizer__user_inline(struct symbolizer *s, const struct addrspace *as, uint64_t addr,
			    bool return_addr, struct frame_info *ret, size_t max)
{
	const struct mapping *m;
	struct module *mod;
	uint64_t rel;
	ssize_t idx;

	if (max < 1)
		return -EINVAL;
	ret[0] = (struct frame_info){.module = "[unknown]", .build_id = "", .rel_addr = addr};
	idx = as ? as_index(as, addr) : -1;
	if (idx < 0)
		return -ENOENT;
	m = &as->maps[idx];
	mod = symbolizer_module(s, as, (size_t)idx);
	if (!mod)
		return -ENOMEM;
	rel = addr - m->load_bias;
	ret[0].module = mod->path;
	ret[0].build_id = mod->build_id;
	ret[0].rel_addr = rel;
	if (!mod->dwfl)
		return 1;
	return symbolizer__module_frames(s, mod, rel, return_addr && rel > 0 ? rel - 1 : rel, ret, max);
}

/*
 * symbolizer__user() - symbolize user address @addr of a process whose
 * mappings are @as.
 * @addr: a runtime address in that process.
 * @return_addr: true for a return address from an unwound stack (every frame
 *   but the leaf): the lookup uses the ELF address - 1, so that a call at the
 *   very end of a function is attributed to that function and its line;
 *   ret->rel_addr is still that of @addr.
 * @ret: filled in; its strings are owned by @s and valid until the next
 *   symbolizer__trim().
 *
 * The file of each mapping is opened once per (path, build ID) and kept
 * open; its symbol table (.symtab, else .dynsym), separate debug info found
 * by build ID or .gnu_debuglink (see symbolizer__new_with()), and DWARF
 * line table are used. When @addr is in inlined code, function is the
 * out-of-line function that holds it and file:line the place in it where
 * the outermost inlined code was called: the last frame of
 * symbolizer__user_inline(). A [vdso] that is the same image as the
 * daemon's own vDSO is symbolized from a copy of that (names from its
 * .dynsym, the __vdso_ ones where it has two, build ID of the image);
 * another [vdso] (a 32-bit process's) gets function NULL.
 *
 * Returns 0 when a mapping holds @addr: module/build_id/rel_addr are set,
 * and function/file/line when the ELF or its debug info know them (function
 * NULL for a stripped file, a file that cannot be opened or is corrupt, or a
 * file replaced on disk by one with another build ID). Returns -ENOENT if no
 * mapping holds @addr (module "[unknown]", rel_addr = @addr), -ENOMEM.
 * Blocks on file I/O (and on debuginfod for a symbolizer made with it).
 * Does not log.
 */
int symbolizer__user(struct symbolizer *s, const struct addrspace *as, uint64_t addr,
		     bool return_addr, struct frame_info *ret)
{
	int r = symbolizer__user_inline(s, as, addr, return_addr, ret, 1);

	return r < 0 ? r : 0;
}

/*
 * symbolizer__kernel() - symbolize kernel address @addr from /proc/kallsyms
 * (read once, on first use; kernel modules or BPF programs loaded later are
 * not seen): kallsyms__lookup(), whose contract it has.
 */
int symbolizer__kernel(struct symbolizer *s, uint64_t addr, bool return_addr,
		       struct frame_info *ret)
{
	return kallsyms__lookup(&s->kallsyms, addr, return_addr, ret);
}
