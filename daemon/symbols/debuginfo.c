/*
 * debuginfo.c - where the debug information of a binary is (debuginfo.h):
 * the local search for separate debug files shared by the symbolizer and
 * the unwinder, and the copy of the daemon's own vDSO.
 */
#include <elf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symbols/elf_util.h"
#include "symbols/debuginfo.h"
#include "symbols/symbolize.h"
#include "util.h"

/* x86-64 vDSOs are 2 pages; a [vdso] this big is not one. */
#define VDSO_MAX_BYTES (1ULL << 20)

/*
 * eh_frame_covers_code() - whether @mod's .eh_frame describes its code: at
 * least one FDE per 2 KiB of executable sections (libc has one per 460
 * bytes; code built with -fno-asynchronous-unwind-tables has none, or the C
 * runtime's few). Counts FDEs with dwarf_next_cfi(), at most once per
 * module and Dwfl (libdw asks for debug info once).
 */
static bool eh_frame_covers_code(Dwfl_Module *mod)
{
	GElf_Addr bias;
	Elf *elf = dwfl_module_getelf(mod, &bias);
	const unsigned char *ident;
	Elf_Data *eh_frame = NULL;
	uint64_t code_bytes = 0, fdes = 0;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	Dwarf_Off off = 0, next;

	if (!elf || elf_getshdrstrndx(elf, &shstrndx) < 0)
		return false;
	ident = (const unsigned char *)elf_getident(elf, NULL);
	if (!ident)
		return false;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr shdr;
		const char *name;

		if (!gelf_getshdr(scn, &shdr))
			continue;
		if ((shdr.sh_flags & SHF_ALLOC) && (shdr.sh_flags & SHF_EXECINSTR))
			code_bytes += shdr.sh_size;
		name = elf_strptr(elf, shstrndx, shdr.sh_name);
		if (name && strcmp(name, ".eh_frame") == 0 && shdr.sh_type == SHT_PROGBITS)
			eh_frame = elf_getdata(scn, NULL);
	}
	if (!eh_frame || !eh_frame->d_buf)
		return false;
	for (;;) {
		Dwarf_CFI_Entry entry;

		if (dwarf_next_cfi(ident, eh_frame, true, off, &next, &entry) != 0 || next <= off)
			break;
		if (!dwarf_cfi_cie_p(&entry))
			fdes++;
		if (fdes * 2048 >= code_bytes)
			return true;
		off = next;
	}
	return false;
}

/*
 * Caps on the debug files looked for by name: a file without a build ID is
 * checked by the CRC of its contents, read whole.
 */
#define DEBUGLINK_CRC_MAX_BYTES (4ULL << 30)

/*
 * find_elf_none() - Dwfl_Callbacks.find_elf: every module comes with its
 * file already open, so libdwfl never needs to look for a main file; the
 * standard dwfl_build_id_find_elf() would ask debuginfod.
 */
static int find_elf_none(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			 char **file_name, Elf **elfp)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)file_name, (void)elfp;
	return -1;
}

/* debuginfo__path_next() - next colon-separated entry of *@p in *@ret; its length, -1 at the end.
 */
ssize_t debuginfo__path_next(const char **p, const char **ret)
{
	const char *end;

	if (!*p)
		return -1;
	end = strchrnul(*p, ':');
	*ret = *p;
	*p = *end ? end + 1 : NULL;
	return end - *ret;
}

/* fd_same_file() - whether @fd is the file @path names. */
static bool fd_same_file(int fd, const char *path)
{
	struct stat a, b;

	return path && fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* debuginfo__fd_has_build_id() - whether @fd is an ELF file whose GNU build ID is the @len bytes at
 * @id. */
bool debuginfo__fd_has_build_id(int fd, const unsigned char *id, int len)
{
	_cleanup_(elf_endp) Elf *e = elf_begin(
	    fd, ELF_C_READ, NULL); /* not mmap: a file truncated under us would raise SIGBUS */
	const void *fid = NULL;

	return e && len > 0 && dwelf_elf_gnu_build_id(e, &fid) == len && fid &&
	       memcmp(fid, id, (size_t)len) == 0;
}

/*
 * fd_crc_matches() - whether the CRC-32 (as .gnu_debuglink has it: the
 * zlib/IEEE one) of all of @fd is @crc. Reads the file, at most
 * DEBUGLINK_CRC_MAX_BYTES of it (a bigger one does not match).
 */
static bool fd_crc_matches(int fd, uint32_t crc)
{
	uint32_t table[256], c = 0xffffffffU;
	unsigned char buf[16384];
	uint64_t total = 0;
	ssize_t n;

	for (uint32_t i = 0; i < 256; i++) {
		uint32_t v = i;

		for (int k = 0; k < 8; k++)
			v = v & 1 ? 0xedb88320U ^ (v >> 1) : v >> 1;
		table[i] = v;
	}
	while ((n = pread(fd, buf, sizeof(buf), (off_t)total)) > 0) {
		total += (uint64_t)n;
		if (total > DEBUGLINK_CRC_MAX_BYTES)
			return false;
		for (ssize_t i = 0; i < n; i++)
			c = table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
	}
	return n == 0 && (c ^ 0xffffffffU) == crc;
}

/*
 * debuglink_try() - open @path as the debug file of @dm (main file
 * @file_name): not the main file itself, and with the module's build ID, or
 * for a module without one the debuglink's CRC @crc (0: nothing to check it
 * by, refused). Returns the fd and *@ret_name (malloc'd), or -1.
 */
static int debuglink_try(Dwfl_Module *dm, const char *path, const char *file_name, uint32_t crc,
			 char **ret_name)
{
	_cleanup_close_ int fd = -1;
	const unsigned char *id;
	GElf_Addr id_vaddr;
	int id_len = dwfl_module_build_id(dm, &id, &id_vaddr);

	fd = open_regular(path);
	if (fd < 0 || fd_same_file(fd, file_name))
		return -1;
	if (id_len > 0 ? !debuginfo__fd_has_build_id(fd, id, id_len)
		       : !crc || !fd_crc_matches(fd, crc))
		return -1;
	*ret_name = strdup(path);
	if (!*ret_name)
		return -1;
	return TAKE_FD(fd);
}

/*
 * debuglink_find() - the debug file named @debuglink (from .gnu_debuglink)
 * of module @dm whose main file is @file_name, looked for along
 * @debuginfo_path where libdwfl's find_debuginfo_in_path() looks: an empty
 * entry is the file's directory, a relative one a subdirectory of it, an
 * absolute ROOT is ROOT/<file's directory>/ and then, as libdwfl does (for
 * a file opened through /proc/PID/root/...), the same with the leading
 * directories dropped one at a time. Returns an fd and *@ret_name, or -1.
 */
static int debuglink_find(Dwfl_Module *dm, const char *debuginfo_path, const char *file_name,
			  const char *debuglink, uint32_t crc, char **ret_name)
{
	const char *slash = strrchr(file_name, '/'), *p = debuginfo_path, *entry;
	int dir_len = slash ? (int)(slash - file_name) : 0;
	ssize_t len;

	if (!slash || dir_len >= PATH_MAX)
		return -1;
	while ((len = debuginfo__path_next(&p, &entry)) >= 0) {
		char path[PATH_MAX];
		int n, fd;

		if (len >= PATH_MAX)
			continue;
		if (len == 0 || entry[0] != '/') {
			/* the file's directory, or a subdirectory of it */
			n = snprintf(path, sizeof(path), "%.*s/%.*s%s%s", dir_len, file_name,
				     (int)len, entry, len ? "/" : "", debuglink);
			if (n < 0 || (size_t)n >= sizeof(path))
				continue;
			fd = debuglink_try(dm, path, file_name, crc, ret_name);
			if (fd >= 0)
				return fd;
			continue;
		}
		if (file_name[0] != '/')
			continue;
		/* ROOT/usr/lib/x/, ROOT/lib/x/, ROOT/x/ for a file in /usr/lib/x/ */
		for (const char *sub = file_name + 1; sub && sub <= slash;) {
			n = snprintf(path, sizeof(path), "%.*s/%.*s%s", (int)len, entry,
				     (int)(slash + 1 - sub), sub, debuglink);
			if (n >= 0 && (size_t)n < sizeof(path)) {
				fd = debuglink_try(dm, path, file_name, crc, ret_name);
				if (fd >= 0)
					return fd;
			}
			sub = sub < slash ? strchr(sub, '/') : NULL;
			if (sub)
				sub++;
		}
	}
	return -1;
}

/*
 * find_debuginfo_local() - Dwfl_Callbacks.find_debuginfo of a struct
 * debuginfo: dwfl_standard_find_debuginfo() less its last
 * resort. libdwfl's standard callback (elfutils 0.188, find-debuginfo.c)
 * asks libdebuginfod (dlopen()ed on first use) whenever DEBUGINFOD_URLS is
 * set and the local search failed, which may block on the network for
 * minutes; the environment of a multithreaded daemon cannot be changed
 * around the call, so the local search is done here instead: by build ID
 * under the absolute entries of the path (dwfl_build_id_find_debuginfo(),
 * which never asks debuginfod), then by .gnu_debuglink as in
 * debuglink_find(), for the file name and for its realpath(). An alternate
 * (dwz) file named by a path is left to libdw, which opens it itself
 * (dwarf_getalt()). The module's userdata is its struct debuginfo
 * (debuginfo__attach()).
 *
 * For the unwinder (only_without_eh_frame), only a module whose .eh_frame
 * does not cover its code is looked for: libdw looks for .debug_frame
 * whenever .eh_frame has no entry for a PC, which for a module built with
 * unwind tables (the x86-64 default) means a garbage PC, since compilers
 * emit the same CFI into both; yet opening the debug file costs dearly:
 * libdw decompresses every debug section of it, about 80 ms and 14 MiB of
 * RSS for Debian 12's libc6-dbg (measured), once per Dwfl.
 */
static int find_debuginfo_local(Dwfl_Module *dm, void **userdata, const char *modname,
				GElf_Addr base, const char *file_name, const char *debuglink,
				GElf_Word crc, char **ret_name)
{
	const struct debuginfo *d = *userdata;
	_cleanup_free_ char *canon = NULL, *invented = NULL;
	int fd;

	if (d && d->only_without_eh_frame && eh_frame_covers_code(dm))
		return -1;
	fd = dwfl_build_id_find_debuginfo(dm, userdata, modname, base, file_name, debuglink, crc,
					  ret_name);
	if (fd >= 0 || !d || !file_name)
		return fd;
	if (!debuglink) {
		/* libdwfl tries FILE.debug then (checked by build ID only) */
		const char *base_name = strrchr(file_name, '/');

		if (asprintf(&invented, "%s.debug", base_name ? base_name + 1 : file_name) < 0) {
			invented = NULL;
			return -1;
		}
		debuglink = invented;
		crc = 0;
	}
	if (!debuglink[0] || strchr(debuglink, '/'))
		return -1;
	fd = debuglink_find(dm, d->path, file_name, debuglink, crc, ret_name);
	if (fd >= 0)
		return fd;
	canon = realpath(file_name, NULL);
	if (!canon || strcmp(canon, file_name) == 0)
		return -1;
	return debuglink_find(dm, d->path, canon, debuglink, crc, ret_name);
}

/*
 * search_path_new() - libdwfl's search path for @debug_path (absolute
 * directories separated by colons; relative and empty entries are ignored,
 * as libdwfl would take them for subdirectories of the file's directory):
 * ":.debug:ROOT...:/usr/lib/debug", malloc'd; NULL on OOM.
 */
static char *search_path_new(const char *debug_path)
{
	const char *p = debug_path, *entry;
	size_t size = sizeof(":.debug::/usr/lib/debug") + (debug_path ? strlen(debug_path) : 0);
	char *path = malloc(size), *w;
	ssize_t len;

	if (!path)
		return NULL;
	w = stpcpy(path, ":.debug");
	while ((len = debuginfo__path_next(&p, &entry)) >= 0) {
		if (len == 0 || entry[0] != '/')
			continue;
		*w++ = ':';
		w = mempcpy(w, entry, (size_t)len);
	}
	strcpy(w, ":/usr/lib/debug");
	return path;
}

int debuginfo__init(struct debuginfo *d, const char *debug_path, bool only_without_eh_frame)
{
	*d = (struct debuginfo){.only_without_eh_frame = only_without_eh_frame};
	d->path = search_path_new(debug_path);
	if (!d->path)
		return -ENOMEM;
	d->callbacks = (Dwfl_Callbacks){
	    .find_elf = find_elf_none,
	    .find_debuginfo = find_debuginfo_local,
	    .section_address = dwfl_offline_section_address,
	    .debuginfo_path = &d->path,
	};
	return 0;
}

void debuginfo__done(struct debuginfo *d)
{
	free(d->path);
	d->path = NULL;
}

void debuginfo__attach(Dwfl_Module *dm, const struct debuginfo *d)
{
	void **userdata;

	if (dwfl_module_info(dm, &userdata, NULL, NULL, NULL, NULL, NULL, NULL))
		*userdata = (void *)d;
}

uint64_t (*debuginfo__self_vdso_override)(uint64_t *ret_start);

uint64_t debuginfo__self_vdso(uint64_t *ret_start)
{
	uint64_t start = getauxval(AT_SYSINFO_EHDR);
	_cleanup_fclose_ FILE *f = NULL;
	char line[512];

	if (debuginfo__self_vdso_override) {
		uint64_t size = debuginfo__self_vdso_override(ret_start);

		if (size)
			return size;
	}
	if (!start)
		return 0;
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;

		if (!strstr(line, "[vdso]") || sscanf(line, "%llx-%llx", &lo, &hi) != 2 ||
		    lo != start)
			continue;
		if (hi <= lo || hi - lo > VDSO_MAX_BYTES || hi - lo < SELFMAG ||
		    memcmp((const void *)(uintptr_t)start, ELFMAG, SELFMAG) != 0)
			return 0;
		*ret_start = start;
		return hi - lo;
	}
	return 0;
}

static pthread_once_t vdso_once = PTHREAD_ONCE_INIT;
static int vdso_fd = -1;
static uint64_t vdso_bytes;

static void vdso_copy(void)
{
	uint64_t start = 0, size = debuginfo__self_vdso(&start);
	_cleanup_close_ int fd = -1;

	if (!size)
		return;
	fd = memfd_create("profd-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return;
	for (uint64_t done = 0; done < size;) {
		ssize_t w = write(fd, (const char *)(uintptr_t)start + done, size - done);

		if (w <= 0)
			return;
		done += (uint64_t)w;
	}
	vdso_bytes = size;
	vdso_fd = TAKE_FD(fd);
}

int debuginfo__vdso_open(uint64_t *ret_bytes)
{
	/* A test's stand-in may change between calls: a fresh copy each time. */
	if (debuginfo__self_vdso_override) {
		if (vdso_fd >= 0)
			close(vdso_fd);
		vdso_fd = -1;
		vdso_copy();
	} else {
		pthread_once(&vdso_once, vdso_copy);
	}
	if (vdso_fd < 0)
		return -1;
	*ret_bytes = vdso_bytes;
	/* libelf reads with pread/mmap, so the offset shared with vdso_fd does not matter */
	return fcntl(vdso_fd, F_DUPFD_CLOEXEC, 3);
}
