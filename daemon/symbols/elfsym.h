/*
 * elfsym.h - the function symbols of an ELF file, by name, with their file
 * offsets: where uprobes go (the allocation probes, the CUDA/NVTX/--uprobe
 * probes); and whether it has SDT (USDT) probes of a provider.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A function symbol found in a file: its name, and its entry's offset in the file. */
struct elf_sym {
	char name[128];
	uint64_t offset;
};

/* A growing array of them; zero-initialized when empty, free(v) when done. */
struct elf_sym_list {
	struct elf_sym *v;
	size_t n, cap;
};

/* Documented where it is defined, in elfsym.c. */
int elfsym__scan(int fd, bool (*keep)(const char *name, void *ctx), void *ctx,
		 struct elf_sym_list *out);
int elfsym__has_usdt_provider(int fd, const char *provider);
