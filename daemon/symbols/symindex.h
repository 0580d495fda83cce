/*
 * symindex.h - a module's symbol table sorted by address, searched by
 * binary search: the name libdwfl's dwfl_module_addrinfo() would give an
 * address, without its linear scan of every symbol for every address.
 */
#pragma once

#include <elfutils/libdwfl.h>
#include <stddef.h>
#include <stdint.h>

struct symindex;

/* What symindex__lookup() found. */
enum symindex_answer {
	SYMINDEX_FOUND,	    /* *ret_name is the name libdwfl gives */
	SYMINDEX_NONE,	    /* libdwfl finds no symbol either */
	SYMINDEX_ASK_LIBDW, /* a case the index does not decide: ask dwfl_module_addrinfo() */
};

/* Documented where they are defined, in symindex.c. */
int symindex__build(Dwfl_Module *mod, struct symindex **ret);
enum symindex_answer symindex__lookup(const struct symindex *ix, Dwarf_Addr addr,
				      const char **ret_name, Dwarf_Addr *ret_start);
size_t symindex__bytes(const struct symindex *ix);
void symindex__free(struct symindex *ix);
