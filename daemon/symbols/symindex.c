/*
 * symindex.c - a module's symbol table sorted by address, searched by
 * binary search: the name libdwfl's dwfl_module_addrinfo() would give an
 * address, without its linear scan of every symbol for every address.
 *
 * dwfl_module_addrinfo() (elfutils 0.188, libdwfl/dwfl_module_addrsym.c)
 * reads every symbol of the module for every address: on a library with
 * tens of thousands of symbols (libtorch_cpu.so) that scan was a third of
 * the daemon's CPU time. Its rules, which the index follows:
 *  - only named symbols that are defined (st_shndx != SHN_UNDEF), at or
 *    below the address, and not STT_SECTION, STT_FILE or STT_TLS count;
 *  - the global and weak symbols are searched first; the local ones only
 *    if no global one with a size holds the address;
 *  - of the symbols with a size that hold the address, the one that starts
 *    closest below it wins; at one start, the better binding (global, then
 *    weak, then local), then the smaller size, then the first in the table;
 *  - with no symbol of a size holding the address, a sizeless symbol (an
 *    assembly label) may be chosen if no symbol's end lies above it.
 * The index answers the cases these rules decide alone (an address in a
 * sized symbol; an address no symbol can name); the rare rest (nested
 * symbols of different bindings, the sizeless fallback, a global label
 * exactly at the address) it hands back to libdwfl, so that every name is
 * the one libdwfl gives. tests/test-symindex.c compares the two on every
 * symbol of libc, libstdc++ and libtorch_cpu.
 */
#include <errno.h>
#include <gelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "symbols/addr_bound.h"
#include "symbols/symindex.h"
#include "util.h"

/*
 * How far a lookup walks down from the last symbol that starts at or below
 * the address, looking for the ones that hold it: symbols rarely nest, so
 * one or two steps are the rule; a long symbol that spans many others (a
 * data table) makes walks long, and past this the lookup asks libdwfl.
 */
#define WALK_MAX 64

/* One symbol of the table. 32 bytes. */
struct sym {
	uint64_t start, end; /* Dwfl addresses, [start, end); end == start: sizeless */
	const char *name;    /* libdwfl's string: valid while the module's Dwfl is */
	uint32_t order;	     /* index in libdwfl's table: among equals the first wins */
	uint8_t rank;	     /* binding: 3 global, 2 weak, 1 local, 0 other */
};

/* The symbols one of libdwfl's passes reads (the globals, or the locals). */
struct pass {
	struct sym *sized; /* sorted by start, then order */
	uint64_t *max_end; /* max_end[i]: the highest end of sized[0..i] */
	size_t n_sized;
	uint64_t *labels; /* the starts of the sizeless symbols, sorted */
	size_t n_labels;
};

struct symindex {
	struct pass globals, locals; /* searched in that order */
};

static uint8_t binding_rank(const GElf_Sym *sym)
{
	switch (GELF_ST_BIND(sym->st_info)) {
	case STB_GLOBAL:
		return 3;
	case STB_WEAK:
		return 2;
	case STB_LOCAL:
		return 1;
	default:
		return 0;
	}
}

static int sym_cmp(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void pass_free(struct pass *p)
{
	free(p->sized);
	free(p->max_end);
	free(p->labels);
}

/*
 * pass_build() - read symbols [@first, @end) of @mod's table into @p, the
 * ones libdwfl's search would consider, sorted. Returns 0 or -ENOMEM.
 */
static int pass_build(Dwfl_Module *mod, int first, int end, struct pass *p)
{
	size_t cap = end > first ? (size_t)(end - first) : 0;

	if (!cap)
		return 0;
	p->sized = malloc(cap * sizeof(*p->sized));
	p->labels = malloc(cap * sizeof(*p->labels));
	if (!p->sized || !p->labels)
		return -ENOMEM;
	for (int i = first; i < end; i++) {
		GElf_Sym sym;
		GElf_Addr value;
		const char *name = dwfl_module_getsym_info(mod, i, &sym, &value, NULL, NULL, NULL);
		int type = GELF_ST_TYPE(sym.st_info);

		if (!name || !name[0] || sym.st_shndx == SHN_UNDEF || type == STT_SECTION ||
		    type == STT_FILE || type == STT_TLS)
			continue;
		if (sym.st_size == 0) {
			p->labels[p->n_labels++] = value;
			continue;
		}
		p->sized[p->n_sized++] = (struct sym){
		    .start = value,
		    .end = value + sym.st_size < value ? UINT64_MAX : value + sym.st_size,
		    .name = name,
		    .order = (uint32_t)i,
		    .rank = binding_rank(&sym),
		};
	}
	/* keep only what was read: most of a library's table is often undefined imports */
	p->sized = shrink_alloc(p->sized, p->n_sized * sizeof(*p->sized));
	p->labels = shrink_alloc(p->labels, p->n_labels * sizeof(*p->labels));
	qsort(p->sized, p->n_sized, sizeof(*p->sized), sym_cmp);
	qsort(p->labels, p->n_labels, sizeof(*p->labels), u64_cmp);
	p->max_end = malloc((p->n_sized ? p->n_sized : 1) * sizeof(*p->max_end));
	if (!p->max_end)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_sized; i++)
		p->max_end[i] = i ? MAX(p->max_end[i - 1], p->sized[i].end) : p->sized[i].end;
	return 0;
}

/*
 * symindex__build() - index the symbol table libdwfl reads for @mod (its
 * .symtab, from a separate debug file where libdwfl found one, else its
 * .dynsym, plus the .gnu_debugdata one): every symbol is read once, here.
 * The index points at libdwfl's strings: it must be freed before the Dwfl
 * of @mod is ended.
 *
 * Memory: 40 bytes per symbol with a size, 8 per sizeless one (about
 * 1.4 MiB for libtorch_cpu.so's 35,000 dynamic symbols).
 *
 * Returns 0 and the index in *@ret (an empty one, which finds nothing, for
 * a module without a symbol table, as libdwfl then finds nothing);
 * -EOPNOTSUPP on an architecture with function descriptors (ppc64 ELFv1,
 * where libdwfl also matches descriptor addresses: not modelled); -ENOMEM.
 * Does not log.
 */
int symindex__build(Dwfl_Module *mod, struct symindex **ret)
{
#if !defined(__x86_64__) && !defined(__aarch64__) && !defined(__i386__) && !defined(__riscv)
	(void)mod;
	(void)ret;
	return -EOPNOTSUPP;
#else
	struct symindex *ix = calloc(1, sizeof(*ix));
	int n, first_global, r = 0;

	if (!ix)
		return -ENOMEM;
	n = dwfl_module_getsymtab(mod);
	first_global = n > 0 ? dwfl_module_getsymtab_first_global(mod) : -1;
	if (first_global >= 0) {
		/* entry 0 is the null symbol; with no locals libdwfl's first pass reads all */
		r = pass_build(mod, first_global > 1 ? first_global : 1, n, &ix->globals);
		if (r == 0 && first_global > 1)
			r = pass_build(mod, 1, first_global, &ix->locals);
	}
	if (r < 0) {
		symindex__free(ix);
		return r;
	}
	*ret = ix;
	return 0;
#endif
}

/* syms_at_or_below() - how many of the sized symbols of @p start at or below @addr. */
static size_t syms_at_or_below(const struct pass *p, Dwarf_Addr addr)
{
	return addr_upper_bound(p->sized, p->n_sized, sizeof(*p->sized),
				offsetof(struct sym, start), addr);
}

/* labels_at_or_below() - how many of the sizeless symbols of @p start at or below @addr. */
static size_t labels_at_or_below(const struct pass *p, Dwarf_Addr addr)
{
	return addr_upper_bound(p->labels, p->n_labels, sizeof(*p->labels), 0, addr);
}

/*
 * pass_lookup() - libdwfl's choice among the sized symbols of @p that hold
 * @addr. SYMINDEX_FOUND with *@ret; SYMINDEX_NONE if none holds it;
 * SYMINDEX_ASK_LIBDW when the choice depends on the order libdwfl reads the
 * table in (a farther symbol of a better binding than the closest) or the
 * walk is too long.
 */
static enum symindex_answer pass_lookup(const struct pass *p, Dwarf_Addr addr,
					const struct sym **ret)
{
	size_t i = syms_at_or_below(p, addr);
	const struct sym *best = NULL;
	uint8_t farther_rank = 0;
	unsigned steps = 0;

	while (i-- > 0 && p->max_end[i] > addr) {
		const struct sym *s = &p->sized[i];

		if (++steps > WALK_MAX)
			return SYMINDEX_ASK_LIBDW;
		if (s->end <= addr)
			continue;
		if (!best || s->start == best->start) {
			/* closest start: better binding, then smaller, then first */
			if (!best || s->rank > best->rank ||
			    (s->rank == best->rank &&
			     (s->end - s->start < best->end - best->start ||
			      (s->end - s->start == best->end - best->start &&
			       s->order < best->order))))
				best = s;
		} else {
			farther_rank = MAX(farther_rank, s->rank);
		}
	}
	if (!best)
		return SYMINDEX_NONE;
	if (farther_rank > best->rank)
		return SYMINDEX_ASK_LIBDW;
	*ret = best;
	return SYMINDEX_FOUND;
}

/* pass_labels() - in @p, whether a sizeless symbol starts at @addr, and the highest start <= @addr.
 */
static bool pass_labels(const struct pass *p, Dwarf_Addr addr, bool *at_addr, uint64_t *highest)
{
	size_t i = labels_at_or_below(p, addr);

	if (i == 0)
		return false;
	*at_addr = p->labels[i - 1] == addr;
	*highest = MAX(*highest, p->labels[i - 1]);
	return true;
}

/* pass_max_end() - the highest end of the sized symbols of @p that start at or below @addr, or 0.
 */
static uint64_t pass_max_end(const struct pass *p, Dwarf_Addr addr)
{
	size_t i = syms_at_or_below(p, addr);

	return i ? p->max_end[i - 1] : 0;
}

/*
 * symindex__lookup() - the symbol dwfl_module_addrinfo() gives Dwfl address
 * @addr of the module @ix indexes.
 * Returns SYMINDEX_FOUND with its name in *@ret_name (libdwfl's string) and
 * its start in *@ret_start; SYMINDEX_NONE where libdwfl finds no symbol;
 * SYMINDEX_ASK_LIBDW where the index does not decide (see the top of
 * symindex.c): the caller then calls dwfl_module_addrinfo(). O(log n) and
 * a few steps; allocates nothing.
 */
enum symindex_answer symindex__lookup(const struct symindex *ix, Dwarf_Addr addr,
				      const char **ret_name, Dwarf_Addr *ret_start)
{
	const struct sym *best = NULL;
	enum symindex_answer a;
	bool global_label = false, local_label = false, any;
	uint64_t label = 0;

	a = pass_lookup(&ix->globals, addr, &best);
	if (a == SYMINDEX_NONE) {
		any = pass_labels(&ix->globals, addr, &global_label, &label);
		/* a global label right at @addr keeps libdwfl from reading the locals */
		if (any && global_label)
			return SYMINDEX_ASK_LIBDW;
		a = pass_lookup(&ix->locals, addr, &best);
		if (a == SYMINDEX_NONE) {
			any = pass_labels(&ix->locals, addr, &local_label, &label) || any;
			/* a label is a candidate only above every symbol's end below @addr */
			if (any && label >= MAX(pass_max_end(&ix->globals, addr),
						pass_max_end(&ix->locals, addr)))
				return SYMINDEX_ASK_LIBDW;
			return SYMINDEX_NONE;
		}
	}
	if (a != SYMINDEX_FOUND)
		return a;
	*ret_name = best->name;
	*ret_start = best->start;
	return SYMINDEX_FOUND;
}

/* symindex__bytes() - the heap bytes @ix holds (its arrays; the names are libdwfl's). */
size_t symindex__bytes(const struct symindex *ix)
{
	const struct pass *passes[] = {&ix->globals, &ix->locals};
	size_t bytes = sizeof(*ix);

	for (size_t k = 0; k < 2; k++)
		bytes += passes[k]->n_sized * (sizeof(struct sym) + sizeof(uint64_t)) +
			 passes[k]->n_labels * sizeof(uint64_t);
	return bytes;
}

/* symindex__free() - free @ix. Accepts NULL. */
void symindex__free(struct symindex *ix)
{
	if (!ix)
		return;
	pass_free(&ix->globals);
	pass_free(&ix->locals);
	free(ix);
}
