/*
 * cfi_table.c - compile one module's CFI into a sorted table of fixed-size
 * rows (cfi_table.h): the rows of each FDE (cfi_section.c runs their CFI
 * programs) walked one after the other, .eh_frame and .debug_frame merged,
 * and the sections found in the file or in its separate debug file.
 *
 * Owns: the tables (one malloc'd array each). Everything read is untrusted
 * (the CFI of arbitrary binaries): every pointer into a section is checked
 * against its end, the rows and the rows per FDE are capped, and bad CFI
 * gives fewer rows (no CFI there), never a crash. Thread-safe: no state
 * outside the table being built.
 */
#include <elf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols/cfi_section.h"
#include "symbols/cfi_table.h"
#include "symbols/debuginfo.h"
#include "symbols/elf_pages.h"
#include "util.h"

/*
 * A section's pages are dropped from RSS every CFI_DROP_FDES FDEs walked:
 * libtorch_cpu.so's .eh_frame is 11 MiB, all resident by the end of its
 * compile, while its FDEs are walked in about the order the section holds
 * them.
 */
#define CFI_DROP_FDES 8192

struct cfi_table {
	struct cfi_row *rows; /* sorted by pc, strictly increasing; the last is CFI_ROW_NONE */
	size_t n;
	struct cfi_table_stats stats;
};

/* A section mapped from its file (libdwfl maps files whole), and the pass that drops its pages. */
struct section_pages {
	struct elf_pages ep;
	Elf *elf;
	const void *data;
	size_t bytes;
};

/* section_pages_drop() - take what @sp's section has read of its file out of RSS; NULL: none. */
static void section_pages_drop(struct section_pages *sp)
{
	if (sp)
		elf_pages__drop_range(&sp->ep, sp->elf, sp->data, sp->bytes);
}

/* A growing array of rows. */
struct rowvec {
	struct cfi_row *rows;
	size_t n, cap;
};

static void rowvec_done(struct rowvec *v)
{
	free(v->rows);
	*v = (struct rowvec){};
}

static bool row_same_rule(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->kind == b->kind && a->flags == b->flags && a->cfa_off == b->cfa_off &&
	       a->fp_off == b->fp_off;
}

/*
 * rowvec_put() - append @r, merged: a row with the rule of the row before it
 * adds nothing; a row at the pc of the row before it replaces that one.
 * Returns 0, -E2BIG beyond CFI_TABLE_MAX_ROWS, -ENOMEM.
 */
static int rowvec_put(struct rowvec *v, const struct cfi_row *r)
{
	while (v->n > 0) {
		struct cfi_row *last = &v->rows[v->n - 1];

		if (last->pc == r->pc) {
			v->n--; /* replaced, and the one before compared again */
			continue;
		}
		if (row_same_rule(last, r))
			return 0;
		break;
	}
	if (v->n == 0 && r->kind == CFI_ROW_NONE)
		return 0; /* below the first row is no CFI anyway */
	if (v->n == v->cap) {
		/* By a quarter once large: doubling took libtorch_cpu.so's rows to a
		 * 32 MiB array, profd's largest allocation on a PyTorch job. */
		size_t cap = v->cap < 65536 ? MAX(v->cap * 2, (size_t)256) : v->cap + v->cap / 4;
		struct cfi_row *rows;

		if (v->n >= CFI_TABLE_MAX_ROWS)
			return -E2BIG;
		cap = MIN(cap, (size_t)CFI_TABLE_MAX_ROWS);
		rows = realloc(v->rows, cap * sizeof(*rows));
		if (!rows)
			return -ENOMEM;
		v->rows = rows;
		v->cap = cap;
	}
	v->rows[v->n++] = *r;
	return 0;
}

/*
 * compile_fdes() - the rows of @sec's FDEs: from each FDE's start, the
 * rows of the FDE each PC is in (the last to start at or before it, as
 * libdw's search of .eh_frame_hdr finds it), one after the other and into
 * the next FDE when it follows without a gap, until no FDE covers the PC,
 * which starts a CFI_ROW_NONE row. PCs are the section's, shifted by
 * @shift into the module's. @pages: the section's file pages, dropped as
 * the walk goes (NULL: none). Returns 0, -E2BIG, -ENOMEM.
 */
static int compile_fdes(struct cfi_section *sec, int64_t shift, struct section_pages *pages,
			struct cfi_table_stats *stats, struct rowvec *out)
{
	const struct cfi_fde *fdes = sec->fdes;
	size_t n = sec->n_fdes;
	uint64_t pc = 0;
	int r = 0;

	for (size_t i = 0; i < n && r == 0; i++) {
		size_t fde = i; /* the FDE pc is in: the last start <= pc */
		unsigned walked = 0;
		bool any = false;

		if (i % CFI_DROP_FDES == CFI_DROP_FDES - 1)
			section_pages_drop(pages);
		if (fdes[i].start < pc)
			continue; /* inside what the rows so far cover (or overlapping FDEs) */
		pc = fdes[i].start;
		for (;;) {
			const struct cfi_fde_row *x;
			struct cfi_row row = {.pc = pc + (uint64_t)shift};

			while (fde + 1 < n && fdes[fde + 1].start <= pc) {
				fde++;
				walked = 0;
			}
			if (walked == CFI_TABLE_MAX_FDE_ROWS) {
				/* the rest of this FDE is a rule we did not read */
				row.kind = CFI_ROW_EXPR;
				r = rowvec_put(out, &row);
				if (r < 0)
					break;
				stats->fdes_cut++;
				if (fde + 1 == n)
					return 0; /* no CFI known after it: stays EXPR */
				pc = fdes[fde + 1].start;
				continue;
			}
			if (pc >= cfi_fde_end(&fdes[fde]))
				break;
			x = cfi_section__row_at(sec, fde, pc);
			if (!x)
				break;
			stats->rows_read++;
			walked++;
			row = x->row; /* its rule; the row may start before pc */
			row.pc = pc + (uint64_t)shift;
			r = rowvec_put(out, &row);
			if (r < 0)
				break;
			any = true;
			pc = x->end;
			if (fde + 1 < n && fdes[fde + 1].start < pc)
				pc = fdes[fde + 1].start; /* a bad range: the next FDE takes over */
		}
		if (any && r == 0) {
			struct cfi_row none = {.pc = pc + (uint64_t)shift, .kind = CFI_ROW_NONE};

			r = rowvec_put(out, &none);
		}
	}
	return r;
}

/* rows_find() - the row of @rows (@n, sorted) covering @pc, NULL below the first. */
static const struct cfi_row *rows_find(const struct cfi_row *rows, size_t n, uint64_t pc)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rows[mid].pc <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &rows[lo - 1] : NULL;
}

/*
 * merge() - @eh's rows, and @dbg's where @eh has no CFI: the order libdw's
 * unwinder looks (unwind.c, cfi_frame()). Returns 0, -E2BIG, -ENOMEM.
 */
static int merge(const struct rowvec *eh, const struct rowvec *dbg, struct rowvec *out)
{
	size_t i = 0, j = 0;

	while (i < eh->n || j < dbg->n) {
		uint64_t pc;
		const struct cfi_row *a, *b;
		struct cfi_row row;
		int r;

		if (j >= dbg->n || (i < eh->n && eh->rows[i].pc <= dbg->rows[j].pc))
			pc = eh->rows[i].pc;
		else
			pc = dbg->rows[j].pc;
		while (i < eh->n && eh->rows[i].pc == pc)
			i++;
		while (j < dbg->n && dbg->rows[j].pc == pc)
			j++;
		a = rows_find(eh->rows, eh->n, pc);
		b = rows_find(dbg->rows, dbg->n, pc);
		if (a && a->kind != CFI_ROW_NONE)
			row = *a;
		else if (b)
			row = *b;
		else
			row = (struct cfi_row){.kind = CFI_ROW_NONE};
		row.pc = pc;
		r = rowvec_put(out, &row);
		if (r < 0)
			return r;
	}
	return 0;
}

/* section_data() - the data of the section named @name of @elf (decompressed), or NULL. */
static Elf_Data *section_data(Elf *elf, const char *name, uint64_t *ret_addr)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (!elf || elf_getshdrstrndx(elf, &shstrndx) < 0)
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr shdr;
		const char *s;
		Elf_Data *data;

		/* lld and gold give .eh_frame the x86-64 psABI's own type */
		if (!gelf_getshdr(scn, &shdr) ||
		    (shdr.sh_type != SHT_PROGBITS && shdr.sh_type != SHT_X86_64_UNWIND))
			continue;
		s = elf_strptr(elf, shstrndx, shdr.sh_name);
		if (!s || strcmp(s, name) != 0)
			continue;
		if ((shdr.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0)
			return NULL;
		data = elf_getdata(scn, NULL);
		if (!data || !data->d_buf || data->d_size == 0)
			return NULL;
		*ret_addr = shdr.sh_addr;
		return data;
	}
	return NULL;
}

/* x86_64_elf() - whether @elf is a 64-bit little-endian x86-64 ELF file. */
static bool x86_64_elf(Elf *elf)
{
	GElf_Ehdr ehdr;

	return elf && gelf_getehdr(elf, &ehdr) && ehdr.e_ident[EI_CLASS] == ELFCLASS64 &&
	       ehdr.e_ident[EI_DATA] == ELFDATA2LSB && ehdr.e_machine == EM_X86_64;
}

/*
 * compile_section() - the rows of the CFI section @data at address @addr,
 * an .eh_frame if @eh_frame, else a .debug_frame, of an ELF file whose
 * e_ident is @ident; @shift added to its PCs; @pages: its file pages, to
 * drop (NULL: none). Returns 0, -E2BIG, -ENOMEM.
 */
static int compile_section(const unsigned char *ident, const void *data, size_t bytes,
			   uint64_t addr, bool eh_frame, int64_t shift, struct section_pages *pages,
			   struct cfi_table_stats *stats, struct rowvec *out)
{
	struct cfi_section sec = {.base = data, .size = bytes, .addr = addr};
	int r;

	if (!data || bytes == 0)
		return 0;
	r = cfi_section__read(ident, eh_frame, &sec, stats);
	section_pages_drop(pages); /* reading every entry's header touched every page */
	if (r >= 0)
		r = compile_fdes(&sec, shift, pages, stats, out);
	cfi_section__done(&sec);
	return r;
}

/* compile_elf_section() - compile_section() of the section named @name of @elf, if it has one. */
static int compile_elf_section(Elf *elf, const char *name, int64_t shift,
			       struct cfi_table_stats *stats, struct rowvec *out)
{
	uint64_t addr = 0;
	Elf_Data *data = section_data(elf, name, &addr);
	struct section_pages pages = {.elf = elf};
	bool drop;
	int r;

	if (!data)
		return 0;
	pages.data = data->d_buf;
	pages.bytes = data->d_size;
	drop = elf_pages__begin(&pages.ep) == 0;
	r = compile_section((const unsigned char *)elf_getident(elf, NULL), data->d_buf,
			    data->d_size, addr, strcmp(name, ".eh_frame") == 0, shift,
			    drop ? &pages : NULL, stats, out);
	if (drop) {
		section_pages_drop(&pages);
		elf_pages__end(&pages.ep);
	}
	return r;
}

/* table_finish() - the table of @eh and @dbg merged, in *@ret. */
static int table_finish(struct rowvec *eh, struct rowvec *dbg, struct cfi_table_stats *stats,
			struct cfi_table **ret)
{
	struct rowvec all = {};
	struct cfi_table *t;
	int r;

	if (dbg->n == 0) {
		all = *eh;
		*eh = (struct rowvec){};
	} else {
		r = merge(eh, dbg, &all);
		if (r < 0) {
			rowvec_done(&all);
			return r;
		}
		stats->debug_frame = true;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		rowvec_done(&all);
		return -ENOMEM;
	}
	if (all.n < all.cap)
		all.rows = shrink_alloc(all.rows, all.n * sizeof(*all.rows));
	t->rows = all.rows;
	t->n = all.n;
	for (size_t i = 0; i < t->n; i++)
		stats->rows_by_kind[t->rows[i].kind]++;
	t->stats = *stats;
	*ret = t;
	return 0;
}

/* Dwfl_Callbacks that find nothing: the file comes open, and no debug file is wanted. */
static int no_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
		  char **file_name, Elf **elfp)
{
	return -1;
}

static int no_debuginfo_file(Dwfl_Module *mod, void **userdata, const char *modname, GElf_Addr base,
			     const char *file_name, const char *debuglink, GElf_Word crc,
			     char **ret_name)
{
	return -1;
}

/*
 * cfi_table__compile() - compile the CFI of the x86-64 ELF file open at
 * @fd: its .eh_frame, and .debug_frame where .eh_frame has no CFI, from the
 * file itself or from its separate debug file, looked for with @d as the
 * unwinder looks (debuginfo.h; with d->only_without_eh_frame only for a
 * file whose .eh_frame does not cover its code).
 * @fd: not consumed (the file is read through a dup); @name: the file's
 *   path, where the debug file is looked for by .gnu_debuglink; @d: NULL
 *   for no separate debug file.
 * Rows are in the file's ELF virtual addresses. A section of bad CFI gives
 * the rows libdw could read in it, and CFI_ROW_NONE elsewhere.
 *
 * Returns 0 and *@ret (even with no rows: a file without CFI), -EBADF for
 * a file that is not ELF, -EPROTONOSUPPORT for an ELF file that is not
 * x86-64, -E2BIG beyond CFI_TABLE_MAX_ROWS, -ENOMEM. Blocks on file I/O
 * (reads the sections whole, decompresses a debug file's); allocates; does
 * not log; never asks debuginfod.
 */
int cfi_table__compile(int fd, const char *name, const struct debuginfo *d, struct cfi_table **ret)
{
	static const Dwfl_Callbacks no_debuginfo = {
	    .find_elf = no_elf,
	    .find_debuginfo = no_debuginfo_file,
	    .section_address = dwfl_offline_section_address, /* ET_REL files: libdwfl calls it */
	};
	struct cfi_table_stats stats = {};
	struct rowvec eh = {}, dbg = {};
	GElf_Addr main_bias = 0, dbg_bias = 0;
	Dwfl_Module *mod;
	Dwarf *dw = NULL;
	Dwfl *dwfl;
	Elf *elf;
	int dfd, r;

	elf_version(EV_CURRENT);
	dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	dwfl = dwfl_begin(d ? &d->callbacks : &no_debuginfo);
	if (!dwfl) {
		close(dfd);
		return -ENOMEM;
	}
	dwfl_report_begin(dwfl);
	mod = dwfl_report_elf(dwfl, name ? name : "", name ? name : "", dfd, 0, true);
	dwfl_report_end(dwfl, NULL, NULL);
	if (!mod) {
		close(dfd); /* not consumed on failure */
		dwfl_end(dwfl);
		return -EBADF;
	}
	if (d)
		debuginfo__attach(mod, d);
	elf = dwfl_module_getelf(mod, &main_bias);
	if (!x86_64_elf(elf)) {
		dwfl_end(dwfl);
		return elf ? -EPROTONOSUPPORT : -EBADF;
	}
	r = compile_elf_section(elf, ".eh_frame", 0, &stats, &eh);
	if (r >= 0 && d && dwfl_module_dwarf_cfi(mod, &dbg_bias))
		dw = dwfl_module_getdwarf(mod, &dbg_bias);
	if (r >= 0 && dw)
		r = compile_elf_section(dwarf_getelf(dw), ".debug_frame",
					(int64_t)(dbg_bias - main_bias), &stats, &dbg);
	dwfl_end(dwfl);
	if (r >= 0)
		r = table_finish(&eh, &dbg, &stats, ret);
	rowvec_done(&eh);
	rowvec_done(&dbg);
	return r;
}

/*
 * cfi_table__from_sections() - compile raw CFI sections, for tests and the
 * fuzzer: @eh_frame (@eh_frame_bytes, NULL/0 for none) as loaded at
 * address @eh_frame_addr, and @debug_frame (NULL/0 for none). The same
 * compilation as cfi_table__compile() on a file with those two sections.
 * Returns 0 and *@ret, -ENOMEM. Does not log.
 */
int cfi_table__from_sections(const void *eh_frame, size_t eh_frame_bytes, uint64_t eh_frame_addr,
			     const void *debug_frame, size_t debug_frame_bytes,
			     struct cfi_table **ret)
{
	static const unsigned char ident[EI_NIDENT] = {
	    ELFMAG0, ELFMAG1, ELFMAG2, ELFMAG3, ELFCLASS64, ELFDATA2LSB, EV_CURRENT,
	};
	struct cfi_table_stats stats = {};
	struct rowvec eh = {}, dbg = {};
	int r;

	r = compile_section(ident, eh_frame, eh_frame_bytes, eh_frame_addr, true, 0, NULL, &stats,
			    &eh);
	if (r >= 0)
		r = compile_section(ident, debug_frame, debug_frame_bytes, 0, false, 0, NULL,
				    &stats, &dbg);
	if (r >= 0)
		r = table_finish(&eh, &dbg, &stats, ret);
	rowvec_done(&eh);
	rowvec_done(&dbg);
	return r;
}

/*
 * cfi_table__find() - the row covering module-relative @pc (ELF virtual
 * address), by binary search; NULL below the first row (no CFI there).
 * Past the last FDE the last row, CFI_ROW_NONE. Does not allocate.
 */
const struct cfi_row *cfi_table__find(const struct cfi_table *t, uint64_t pc)
{
	return rows_find(t->rows, t->n, pc);
}

/* cfi_table__rows() - the rows, sorted by pc, and their number in *@ret_n. */
const struct cfi_row *cfi_table__rows(const struct cfi_table *t, size_t *ret_n)
{
	*ret_n = t->n;
	return t->rows;
}

/*
 * cfi_table__take_rows() - the rows of @t, as cfi_table__rows() gives them,
 * now the caller's to free(); @t has none left, and only cfi_table__stats()
 * and cfi_table__free() may follow. For a caller that narrows them in
 * place (cfi_maps.c) rather than hold both forms.
 */
struct cfi_row *cfi_table__take_rows(struct cfi_table *t, size_t *ret_n)
{
	struct cfi_row *rows = t->rows;

	*ret_n = t->n;
	t->rows = NULL;
	t->n = 0;
	return rows;
}

/* cfi_table__stats() - what the compilation found (cfi_table.h). */
const struct cfi_table_stats *cfi_table__stats(const struct cfi_table *t)
{
	return &t->stats;
}

/* cfi_table__bytes() - the memory the table holds, in bytes. */
size_t cfi_table__bytes(const struct cfi_table *t)
{
	return sizeof(*t) + t->n * sizeof(struct cfi_row);
}

void cfi_table__free(struct cfi_table *t)
{
	if (!t)
		return;
	free(t->rows);
	free(t);
}
