/*
 * test-elf-pages.c - elf_pages on ELF images of a library this test links
 * (libdw's file, ~1 MiB), as libelf and libdwfl open them: a mapped image read whole goes out of
 * the RSS and reads back the same, a page written to it (a copy on write, as libelf writes section
 * headers) keeps what was written, a range of an image (a section's data) drops the pages holding
 * it and no other, an image libelf read into memory is left alone, and a Dwfl still
 * finds a symbol after its file's pages were dropped. The RSS of a mapping is read from
 * /proc/self/smaps.
 */
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "symbols/elf_pages.h"

/* The resident KiB of the mapping that starts at @p, from /proc/self/smaps; -1 if none does. */
static long rss_kb(const void *p)
{
	char line[4352], start[32];
	bool in = false;
	long kb = -1;
	FILE *f = fopen("/proc/self/smaps", "re");

	CHECK(f != NULL);
	snprintf(start, sizeof(start), "%lx-", (unsigned long)p);
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, start, strlen(start)) == 0)
			in = true;
		else if (in && sscanf(line, "Rss: %ld kB", &kb) == 1)
			break;
	}
	fclose(f);
	return kb;
}

/* Read every page of @p (@len bytes), as a reader of the whole file would. */
static unsigned touch(const unsigned char *p, size_t len)
{
	unsigned sum = 0;

	for (size_t i = 0; i < len; i += 4096)
		sum += *(volatile const unsigned char *)&p[i];
	return sum;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

int main(void)
{
	Dl_info dl;
	const char *path = dladdr((void *)dwfl_begin, &dl) ? dl.dli_fname : NULL;
	int fd_mapped = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	int fd_read = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	size_t size = 0, read_size = 0;
	unsigned char *image, *copy;
	const size_t written = 8192 + 5;
	struct elf_pages ep;
	Elf *mapped, *in_memory;

	elf_version(EV_CURRENT);
	if (fd_mapped < 0 || fd_read < 0)
		SETUP_FAIL("cannot open libdw's file (%s)", path ? path : "not found by dladdr()");
	/* libdwfl's way: the file mapped whole, private and writable. */
	mapped = elf_begin(fd_mapped, ELF_C_READ_MMAP_PRIVATE, NULL);
	in_memory = elf_begin(fd_read, ELF_C_READ, NULL);
	image = mapped ? (unsigned char *)elf_rawfile(mapped, &size) : NULL;
	copy = in_memory ? (unsigned char *)elf_rawfile(in_memory, &read_size) : NULL;
	if (!image || !copy || size != read_size || size <= written)
		SETUP_FAIL("libelf cannot read %s: %s", path, elf_errmsg(-1));
	touch(image, size);
	touch(copy, size);
	image[written] ^= 0xff; /* one page copied on write */
	CHECK(rss_kb(image) >= (long)(size / 1024));

	CHECK_INT_EQ(elf_pages__begin(&ep), 0);
	elf_pages__drop(&ep, mapped);
	elf_pages__drop(&ep, in_memory);
	elf_pages__drop(&ep, NULL);
	elf_pages__end(&ep);
	printf("file of %zu KiB: dropped %llu KiB of %llu image(s); %ld KiB still resident\n",
	       size >> 10, (unsigned long long)(ep.bytes >> 10), (unsigned long long)ep.images,
	       rss_kb(image));
	CHECK_INT_EQ(ep.images, 1); /* the copy in memory is not a mapping */
	CHECK(ep.bytes + 2 * 4096 >= size);
	/* Only the page written stays: dropping it would lose the write. */
	CHECK_INT_EQ(rss_kb(image), 4);

	/* What was dropped reads back from the file; what was written is still there. */
	CHECK_INT_EQ(image[written], copy[written] ^ 0xff);
	for (size_t i = 0; i < size; i++)
		if (i != written && image[i] != copy[i]) {
			fprintf(stderr, "byte %zu reads %u, the file has %u\n", i, image[i],
				copy[i]);
			CHECK(0);
			break; /* the first is enough: not one line per byte of the file */
		}

	/* A range (a section's data): the pages holding any of its bytes go, and only those. */
	{
		long whole = rss_kb(image); /* read back whole by the comparison above */

		CHECK_INT_EQ(whole, (long)((size + 4095) / 4096 * 4));
		CHECK_INT_EQ(elf_pages__begin(&ep), 0);
		elf_pages__drop_range(&ep, mapped, image + 3 * 4096 + 100, 2 * 4096);
		CHECK_INT_EQ(rss_kb(image), whole - 12); /* pages 3, 4 and 5 */
		/* bytes that are not in the image (data libelf inflated elsewhere): nothing */
		elf_pages__drop_range(&ep, mapped, copy, 4096);
		elf_pages__drop_range(&ep, in_memory, copy, 4096);
		elf_pages__drop_range(&ep, mapped, image + size - 10, 20);
		CHECK_INT_EQ(ep.images, 1);
		CHECK_INT_EQ(rss_kb(image), whole - 12);
		/* pages 0-3: the page written (2) stays, in a range as in a whole image */
		elf_pages__drop_range(&ep, mapped, image, 4 * 4096);
		elf_pages__end(&ep);
		CHECK_INT_EQ(rss_kb(image), whole - 12 - 8); /* pages 0 and 1: 2 was written */
		CHECK_INT_EQ(image[written], copy[written] ^ 0xff);
		CHECK_INT_EQ(image[3 * 4096 + 200], copy[3 * 4096 + 200]);
	}
	elf_end(mapped);
	elf_end(in_memory);
	close(fd_mapped);
	close(fd_read);

	/* A Dwfl's file after the drop: libdw reads its symbols again from the page cache. */
	{
		Dwfl *dwfl = dwfl_begin(&callbacks);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		Dwfl_Module *mod;
		Dwarf_Addr bias, addr;
		GElf_Sym sym;
		GElf_Off off;
		const char *name;
		Elf *e;

		if (!dwfl || fd < 0)
			SETUP_FAIL("dwfl_begin() or open(%s) failed", path);
		dwfl_report_begin(dwfl);
		mod = dwfl_report_elf(dwfl, "libdw", path, fd, 0, false);
		dwfl_report_end(dwfl, NULL, NULL);
		e = mod ? dwfl_module_getelf(mod, &bias) : NULL;
		if (!e)
			SETUP_FAIL("libdwfl cannot read %s: %s", path, dwfl_errmsg(-1));
		image = (unsigned char *)elf_rawfile(e, &size);
		touch(image, size);
		CHECK_INT_EQ(elf_pages__begin(&ep), 0);
		elf_pages__drop_dwfl(&ep, dwfl);
		elf_pages__end(&ep);
		CHECK_INT_EQ(ep.images, 1);
		CHECK(rss_kb(image) < 64);
		name = NULL;
		for (int i = 0; i < dwfl_module_getsymtab(mod) && !name; i++) {
			const char *n =
			    dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);

			if (n && strcmp(n, "dwfl_begin") == 0)
				name =
				    dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);
		}
		CHECK(name != NULL);
		CHECK_STR_EQ(name, "dwfl_begin");
		CHECK(rss_kb(image) > 0); /* read again */
		dwfl_end(dwfl);
	}
	return check_exit("test-elf-pages");
}
