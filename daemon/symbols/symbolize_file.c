/*
 * symbolize_file.c - symbolizer__file(): addresses of ELF files without a
 * process, for frames stored earlier (profctl resymbolize): the file by
 * path if its build ID still matches, else its separate debug file by build
 * ID, found locally or fetched through libdebuginfod.
 */
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "symbols/addrspace_internal.h"
#include "symbols/symbolize_internal.h"
#include "util.h"

/* build_id_bytes() - lowercase hex @hex as bytes into @buf; their count, 0 if not such hex. */
static size_t build_id_bytes(const char *hex, unsigned char buf[static BUILD_ID_MAX_BYTES])
{
	size_t len = strnlen(hex, 2 * BUILD_ID_MAX_BYTES + 1);

	if (len < 2 || len % 2 || len > 2 * BUILD_ID_MAX_BYTES)
		return 0;
	for (size_t i = 0; i < len; i++) {
		int d = hex[i] >= '0' && hex[i] <= '9'	 ? hex[i] - '0'
			: hex[i] >= 'a' && hex[i] <= 'f' ? hex[i] - 'a' + 10
							 : -1;

		if (d < 0)
			return 0;
		if (i % 2)
			buf[i / 2] |= (unsigned char)d;
		else
			buf[i / 2] = (unsigned char)(d << 4);
	}
	return len / 2;
}

/* The libdebuginfod call we make ourselves (elfutils debuginfod/debuginfod.h). */
typedef int debuginfod_find_fn(debuginfod_client *client, const unsigned char *build_id,
			       int build_id_len, char **path);

/*
 * debuginfod_fetch() - the debug file with build ID @id (@len bytes) from
 * libdebuginfod, as an fd; -1 if there is no client (no DEBUGINFOD_URLS, no
 * libdebuginfod) or it has nothing. libdwfl loads libdebuginfod with
 * dlopen() for its own client (dwfl_get_debuginfod_client()); we borrow
 * that client, from a Dwfl kept for it, and look the function up in the
 * library already loaded. Blocks on the network.
 */
static int debuginfod_fetch(struct symbolizer *s, const unsigned char *id, size_t len)
{
	debuginfod_find_fn *find;
	debuginfod_client *client;
	char *path = NULL;
	void *so;
	int fd;

	if (!s->debuginfod_dwfl) {
		s->debuginfod_dwfl = dwfl_begin(&s->debuginfo.callbacks);
		if (!s->debuginfod_dwfl)
			return -1;
	}
	client = dwfl_get_debuginfod_client(s->debuginfod_dwfl);
	if (!client)
		return -1;
	so = dlopen("libdebuginfod.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!so)
		return -1;
	find = (debuginfod_find_fn *)dlsym(so, "debuginfod_find_debuginfo");
	fd = find ? find(client, id, (int)len, &path) : -1;
	free(path);
	dlclose(so);
	return fd;
}

/*
 * module_open_file() - open the file module @mod (symbolizer__file()): the
 * file at its path if its build ID is the module's (any ELF when the module
 * has none), its separate debug info found from there as for a mapping;
 * else the debug file with the module's build ID, under each root's
 * .build-id/ (@s's debug path, then /usr/lib/debug), then from debuginfod
 * when @s may use it. The debug file alone has the symbol table and DWARF
 * (objcopy --only-keep-debug keeps .symtab and the program headers). Leaves
 * mod->dwfl NULL when nothing is found.
 */
static void module_open_file(struct symbolizer *s, struct module *mod)
{
	unsigned char id[BUILD_ID_MAX_BYTES];
	const char *p = s->debuginfo.path, *root;
	size_t id_len;
	ssize_t len;
	int fd;

	fd = open_regular(mod->path);
	if (fd >= 0 && elf_fd_matches(fd, mod->build_id)) {
		int r = symbolizer__module_report(s, mod, mod->path, fd);

		if (r == 0 || r == -ENOMEM)
			return;
	} else if (fd >= 0) {
		close(fd);
	}
	id_len = build_id_bytes(mod->build_id, id);
	if (id_len == 0)
		return;
	while ((len = debuginfo__path_next(&p, &root)) >= 0) {
		char path[PATH_MAX];
		int n;

		if (len == 0 || root[0] != '/')
			continue;
		n = snprintf(path, sizeof(path), "%.*s/.build-id/%.2s/%s.debug", (int)len, root,
			     mod->build_id, mod->build_id + 2);
		if (n < 0 || (size_t)n >= sizeof(path))
			continue;
		fd = open_regular(path);
		if (fd >= 0 && elf_fd_matches(fd, mod->build_id)) {
			int r = symbolizer__module_report(s, mod, path, fd);

			if (r == 0 || r == -ENOMEM)
				return;
		} else if (fd >= 0) {
			close(fd);
		}
	}
	if (!s->debuginfod)
		return;
	fd = debuginfod_fetch(s, id, id_len);
	if (fd >= 0 && elf_fd_matches(fd, mod->build_id))
		(void)symbolizer__module_report(s, mod, mod->path, fd);
	else if (fd >= 0)
		close(fd);
}

/*
 * symbolizer_file_module() - the module of file @path with build ID
 * @build_id for symbolizer__file(), opened on first use (and again after
 * MODULE_RETRY_NS while it cannot be); NULL on OOM. Without a build ID the
 * file's inode is part of the key, as for mappings. Kept apart from the
 * modules of mappings, which are opened only from the file.
 */
static struct module *symbolizer_file_module(struct symbolizer *s, const char *path,
					     const char *build_id)
{
	struct module_key key;
	struct module *mod;

	memset(&key, 0, sizeof(key)); /* padding too: the key is hashed as bytes */
	key.path = strpool_intern(&s->pool, path);
	key.build_id = strpool_intern(&s->pool, build_id);
	key.file = true;
	if (!key.path || !key.build_id)
		return NULL;
	if (!key.build_id[0]) {
		struct stat st;

		if (stat(path, &st) == 0) {
			key.dev_major = major(st.st_dev);
			key.dev_minor = minor(st.st_dev);
			key.ino = st.st_ino;
		}
	}
	mod = symbolizer__module_intern(s, &key, 0);
	if (!mod)
		return NULL;
	if (!mod->dwfl) {
		uint64_t now = now_ns(CLOCK_MONOTONIC);

		if (now >= mod->retry_ns) {
			module_open_file(s, mod);
			mod->retry_ns = now + MODULE_RETRY_NS;
		}
	}
	return mod;
}

/*
 * symbolizer__file() - symbolize ELF virtual address @rel_addr of the file
 * @path whose GNU build ID is @build_id, without a process: for frames
 * stored earlier (profctl resymbolize).
 * @path: absolute path of the file in our mount namespace.
 * @build_id: lowercase hex, "" if unknown (then any ELF file at @path is
 *   taken, and nothing else).
 * @rel_addr: looked up as given: for a return address the caller passes the
 *   stored rel_addr - 1 if it wants the call's line (there is no
 *   return_addr here).
 * @ret, @max: as symbolizer__user_inline(); module is @path, build_id
 *   @build_id (interned), rel_addr @rel_addr.
 *
 * The file is used only if its build ID is @build_id (a file rebuilt or
 * upgraded since would give silently wrong names); else, and for a file
 * gone, the separate debug file with that build ID is used alone: under
 * DIR/.build-id/ of the symbolizer's debug path and /usr/lib/debug, then
 * fetched by libdebuginfod when the symbolizer was made with debuginfod.
 * Opened files are cached by (path, build ID) like those of mappings; one
 * not found is looked for again after MODULE_RETRY_NS.
 *
 * Returns the number of frames (1..@max; function NULL when the file has no
 * symbol there), -ENOENT when neither a matching file nor its debug info
 * was found (ret[0] has module, build_id, rel_addr and function NULL),
 * -ENOMEM, -EINVAL for @max 0. Blocks on file I/O (and on the network with
 * debuginfod); does not log.
 */
int symbolizer__file(struct symbolizer *s, const char *path, const char *build_id,
		     uint64_t rel_addr, struct frame_info *ret, size_t max)
{
	struct module *mod;

	if (max < 1)
		return -EINVAL;
	ret[0] = (struct frame_info){.module = "[unknown]", .build_id = "", .rel_addr = rel_addr};
	if (!path || path[0] != '/' || strnlen(path, PATH_MAX) >= PATH_MAX)
		return -ENOENT;
	mod = symbolizer_file_module(s, path, build_id ? build_id : "");
	if (!mod)
		return -ENOMEM;
	ret[0].module = mod->path;
	ret[0].build_id = mod->build_id;
	if (!mod->dwfl)
		return -ENOENT;
	return symbolizer__module_frames(s, mod, rel_addr, rel_addr, ret, max);
}
