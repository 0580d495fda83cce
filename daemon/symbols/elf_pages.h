/*
 * elf_pages.h - take the pages profd has read from an ELF file that libelf
 * mapped (elf_begin() with ELF_C_READ_MMAP*: libdwfl maps every file it is
 * given whole) out of its RSS again (elf_pages.c). A symbol table, an
 * .eh_frame, a compressed debug section are read once, at a module's
 * first lookup, and stay resident as long as the module is open: ~13 MiB
 * on a PyTorch job (libtorch_cpu.so's .dynsym, .dynstr, .eh_frame_hdr
 * and .eh_frame, libc's debug file).
 *
 * Only the thread that owns an Elf may drop its pages, while it holds the
 * Elf open: then the mapping cannot go, or another take its place, between
 * the check that it is a file mapping and madvise(). A pass:
 *
 *	struct elf_pages ep;
 *	if (elf_pages__begin(&ep) == 0) {
 *		elf_pages__drop(&ep, elf);	// for each Elf the thread owns
 *		elf_pages__end(&ep);
 *	}
 */
#pragma once

#include <elfutils/libdwfl.h>
#include <libelf.h>
#include <stddef.h>
#include <stdint.h>

/* A private file mapping at offset 0, as /proc/self/maps lists it. */
struct elf_pages_map {
	uint64_t start, end;
};

/* One pass: profd's file mappings, read once; what was dropped. */
struct elf_pages {
	struct elf_pages_map *maps; /* sorted by start */
	size_t n;
	int pagemap_fd;	 /* /proc/self/pagemap, opened on first need; -1 before */
	uint64_t bytes;	 /* resident bytes dropped so far */
	uint64_t images; /* Elf images looked at that are file mappings */
};

/* Documented where they are defined, in elf_pages.c. */
int elf_pages__begin(struct elf_pages *ep);
void elf_pages__drop(struct elf_pages *ep, Elf *e);
void elf_pages__drop_range(struct elf_pages *ep, Elf *e, const void *addr, size_t len);
void elf_pages__drop_dwfl(struct elf_pages *ep, Dwfl *dwfl);
void elf_pages__end(struct elf_pages *ep);
