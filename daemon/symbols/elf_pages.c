/*
 * elf_pages.c - drop the pages of libelf's mapped ELF images from profd's
 * RSS (elf_pages.h) with madvise(MADV_DONTNEED). On a private file mapping
 * that loses nothing for a page never written: it "will repopulate the
 * memory contents from the up-to-date contents of the underlying mapped
 * file" (madvise(2)), from the page cache, which keeps it. A page written
 * (a copy on write: libelf writes the section headers of a file whose
 * compressed sections it inflates) would lose what was written, so
 * /proc/self/pagemap says which pages to keep.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "symbols/elf_pages.h"
#include "util.h"

/* pagemap (Documentation/admin-guide/mm/pagemap.rst): bits of a page's 64-bit entry. */
#define PM_PRESENT (1ULL << 63)
#define PM_SWAPPED (1ULL << 62)
#define PM_FILE (1ULL << 61) /* a file page or shared anonymous: not a private copy */
#define PM_BATCH 512

/*
 * elf_pages__begin() - start a pass: the private file mappings at offset 0
 * of /proc/self/maps. Returns 0, -ENOMEM, or -errno if it cannot be read
 * (then there is nothing to end). Does not log.
 */
int elf_pages__begin(struct elf_pages *ep)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/maps", "re");
	char line[4352];
	size_t cap = 0;

	*ep = (struct elf_pages){.pagemap_fd = -1};
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		uint64_t start, end, offset, inode;
		char perms[5];

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %*s %" SCNu64, &start,
			   &end, perms, &offset, &inode) != 5 ||
		    offset != 0 || inode == 0 || perms[3] != 'p')
			continue;
		if (grow_array((void **)&ep->maps, &cap, ep->n, sizeof(*ep->maps)) < 0) {
			elf_pages__end(ep);
			return -ENOMEM;
		}
		ep->maps[ep->n++] = (struct elf_pages_map){.start = start, .end = end};
	}
	return 0;
}

/* map_at() - the mapping of @ep that starts at @addr, or NULL. */
static const struct elf_pages_map *map_at(const struct elf_pages *ep, uint64_t addr)
{
	for (size_t lo = 0, hi = ep->n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;

		if (ep->maps[mid].start == addr)
			return &ep->maps[mid];
		if (ep->maps[mid].start < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* keep_page() - whether a page with pagemap entry @pm holds what only memory has. */
static bool keep_page(uint64_t pm)
{
	return (pm & PM_SWAPPED) || ((pm & PM_PRESENT) && !(pm & PM_FILE));
}

/*
 * drop_runs() - madvise(MADV_DONTNEED) [@start, @end) but the pages
 * keep_page() keeps, as pagemap tells them; adds the present pages dropped
 * to @ep->bytes. A read of pagemap that fails keeps the rest.
 */
static void drop_runs(struct elf_pages *ep, uint64_t start, uint64_t end)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), run = start, present = 0;
	uint64_t pm[PM_BATCH];

	for (uint64_t at = start; at < end;) {
		size_t n = (size_t)MIN((end - at) / page, (uint64_t)PM_BATCH);
		ssize_t got = pread(ep->pagemap_fd, pm, n * sizeof(pm[0]), (off_t)(at / page * 8));

		if (got <= 0) {
			end = at;
			break;
		}
		n = (size_t)got / sizeof(pm[0]);
		for (size_t i = 0; i < n; i++, at += page) {
			if (!keep_page(pm[i])) {
				present += (pm[i] & PM_PRESENT) ? page : 0;
				continue;
			}
			if (at > run)
				(void)madvise((void *)(uintptr_t)run, at - run, MADV_DONTNEED);
			run = at + page;
		}
	}
	if (end > run)
		(void)madvise((void *)(uintptr_t)run, end - run, MADV_DONTNEED);
	ep->bytes += present;
}

/*
 * image_map() - the mapping of @ep that @e's image starts, with the image's
 * start and size in *@ret_start and *@ret_size; NULL when @e is NULL or
 * libelf read its image into memory, or for an empty image.
 */
static const struct elf_pages_map *image_map(const struct elf_pages *ep, Elf *e,
					     uint64_t *ret_start, size_t *ret_size)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	char *image = e ? elf_rawfile(e, ret_size) : NULL;

	*ret_start = (uint64_t)(uintptr_t)image;
	if (!image || *ret_size == 0 || *ret_start % page != 0)
		return NULL;
	return map_at(ep, *ret_start);
}

/* drop() - drop_runs() on [@start, @end), once pagemap is open. */
static void drop(struct elf_pages *ep, uint64_t start, uint64_t end)
{
	if (ep->pagemap_fd < 0)
		ep->pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (ep->pagemap_fd < 0 || start >= end)
		return;
	ep->images++;
	drop_runs(ep, start, end);
}

/*
 * elf_pages__drop() - drop the resident pages of @e's image, if libelf
 * mapped it (its image starts one of @ep's file mappings; an image libelf
 * read into memory is left alone), but the pages written or swapped out.
 * The caller owns @e: no other thread may end it meanwhile. Accepts NULL.
 */
void elf_pages__drop(struct elf_pages *ep, Elf *e)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start;
	const struct elf_pages_map *m;
	size_t size = 0;

	m = image_map(ep, e, &start, &size);
	if (m)
		drop(ep, start, MIN(m->end, (start + size + page - 1) / page * page));
}

/*
 * elf_pages__drop_range() - elf_pages__drop() of the pages of @e's image
 * that hold any of the @len bytes at @addr (a section's data, as
 * elf_getdata() gives it); nothing when @addr is not in the image (data
 * libelf decompressed or converted into memory of its own). The caller
 * owns @e. Accepts NULL.
 */
void elf_pages__drop_range(struct elf_pages *ep, Elf *e, const void *addr, size_t len)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start, at = (uint64_t)(uintptr_t)addr;
	const struct elf_pages_map *m;
	size_t size = 0;

	m = image_map(ep, e, &start, &size);
	if (!m || at < start || len > size || at - start > size - len)
		return;
	drop(ep, at / page * page, MIN(m->end, (at + len + page - 1) / page * page));
}

/* One module of elf_pages__drop_dwfl(): its ELF file, and its debug file if open. */
static int drop_module(Dwfl_Module *mod, void **userdata, const char *name, Dwarf_Addr base,
		       void *arg)
{
	struct elf_pages *ep = arg;
	const char *debug_file = NULL;
	Dwarf_Addr bias;
	Elf *main_elf;
	Dwarf *dw;

	(void)userdata;
	(void)name;
	(void)base;
	main_elf = dwfl_module_getelf(mod, &bias);
	elf_pages__drop(ep, main_elf);
	/* Asked only once libdwfl has the debug file: the question would load it. */
	dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, &debug_file);
	if (debug_file && (dw = dwfl_module_getdwarf(mod, &bias)) && dwarf_getelf(dw) != main_elf)
		elf_pages__drop(ep, dwarf_getelf(dw));
	return DWARF_CB_OK;
}

/*
 * elf_pages__drop_dwfl() - elf_pages__drop() the ELF file of each module of
 * @dwfl, and its separate debug file if libdwfl has opened one. The caller
 * owns @dwfl. Accepts NULL.
 */
void elf_pages__drop_dwfl(struct elf_pages *ep, Dwfl *dwfl)
{
	if (dwfl)
		dwfl_getmodules(dwfl, drop_module, ep, 0);
}

/* elf_pages__end() - end the pass begun by elf_pages__begin(). */
void elf_pages__end(struct elf_pages *ep)
{
	free(ep->maps);
	if (ep->pagemap_fd >= 0)
		close(ep->pagemap_fd);
	ep->maps = NULL;
	ep->n = 0;
	ep->pagemap_fd = -1;
}
