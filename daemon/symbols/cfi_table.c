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
 * them. Not for a section below CFI_DROP_MIN_BYTES (libc's is 150 KiB):
 * the read of /proc/self/maps that a drop starts with costs more than it
 * gives back.
 */
#define CFI_DROP_FDES 8192
#define CFI_DROP_MIN_BYTES (1u << 20)

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

/* rowvec_append() - a cfi_row_fn that appends @r to the rowvec @ctx. */
static int rowvec_append(void *ctx, const struct cfi_row *r)
{
	struct rowvec *v = ctx;

	if (grow_array_gently((void **)&v->rows, &v->cap, v->n, sizeof(*v->rows)) < 0)
		return -ENOMEM;
	v->rows[v->n++] = *r;
	return 0;
}

/*
 * Where the rows of a table go as they are found (rows_put()), merged: a
 * row with the rule of the row before it adds nothing; a row at the pc of
 * the row before it replaces that one. So the last row is held (@pending)
 * until the next one, or rows_end(), says it stays; then it goes to @fn.
 */
struct rows_out {
	cfi_row_fn *fn;
	void *ctx;
	struct cfi_table_stats *stats; /* rows_by_kind counted in; NULL: not counted */
	struct cfi_row last, pending;  /* the last row given to @fn; the row held */
	bool has_last, has_pending;
	size_t n; /* rows given to @fn */
};

static bool row_same_rule(const struct cfi_row *a, const struct cfi_row *b)
{
	return a->kind == b->kind && a->flags == b->flags && a->cfa_off == b->cfa_off &&
	       a->fp_off == b->fp_off;
}

/* rows_emit() - give @r to @o's function. Returns 0, -E2BIG beyond CFI_TABLE_MAX_ROWS, or its
 * -errno. */
static int rows_emit(struct rows_out *o, const struct cfi_row *r)
{
	int ret;

	if (o->n >= CFI_TABLE_MAX_ROWS)
		return -E2BIG;
	ret = o->fn(o->ctx, r);
	if (ret < 0)
		return ret;
	o->last = *r;
	o->has_last = true;
	o->n++;
	if (o->stats)
		o->stats->rows_by_kind[r->kind]++;
	return 0;
}

/*
 * rows_put() - the next row @r (its pc at or after the last one's), merged
 * as struct rows_out says. Returns 0 or rows_emit()'s -errno.
 */
static int rows_put(struct rows_out *o, const struct cfi_row *r)
{
	const struct cfi_row *last;
	int ret;

	/* pcs only grow: the row given before the held one is below @r */
	if (o->has_pending && o->pending.pc == r->pc)
		o->has_pending = false; /* replaced; @r compared with the row before */
	last = o->has_pending ? &o->pending : o->has_last ? &o->last : NULL;
	if (last && row_same_rule(last, r))
		return 0;
	if (!last && r->kind == CFI_ROW_NONE)
		return 0; /* below the first row is no CFI anyway */
	if (o->has_pending) {
		ret = rows_emit(o, &o->pending);
		if (ret < 0)
			return ret;
	}
	o->pending = *r;
	o->has_pending = true;
	return 0;
}

/* rows_end() - give @o's held row to its function: the table is complete. */
static int rows_end(struct rows_out *o)
{
	if (!o->has_pending)
		return 0;
	o->has_pending = false;
	return rows_emit(o, &o->pending);
}

/*
 * compile_fdes() - the rows of @sec's FDEs: from each FDE's start, the
 * rows of the FDE each PC is in (the last to start at or before it, as
 * libdw's search of .eh_frame_hdr finds it), one after the other and into
 * the next FDE when it follows without a gap, until no FDE covers the PC,
 * which starts a CFI_ROW_NONE row. PCs are the section's, shifted by
 * @shift into the module's. @pages: the section's file pages, dropped as
 * the walk goes (NULL: none). Returns 0 or rows_put()'s -errno.
 */
static int compile_fdes(struct cfi_section *sec, int64_t shift, struct section_pages *pages,
			struct cfi_table_stats *stats, struct rows_out *out)
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
				r = rows_put(out, &row);
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
			r = rows_put(out, &row);
			if (r < 0)
				break;
			any = true;
			pc = x->end;
			if (fde + 1 < n && fdes[fde + 1].start < pc)
				pc = fdes[fde + 1].start; /* a bad range: the next FDE takes over */
		}
		if (any && r == 0) {
			struct cfi_row none = {.pc = pc + (uint64_t)shift, .kind = CFI_ROW_NONE};

			r = rows_put(out, &none);
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
 * unwinder looks (unwind.c, cfi_frame()). Returns 0 or rows_put()'s -errno.
 */
static int merge(const struct rowvec *eh, const struct rowvec *dbg, struct rows_out *out)
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
		r = rows_put(out, &row);
		if (r < 0)
			return r;
	}
	return 0;
}

/* One CFI section to compile. */
struct cfi_src {
	const void *data; /* NULL: none */
	size_t bytes;
	uint64_t addr; /* the section's address: pc-relative pointers are from it */
	int64_t shift; /* added to its PCs, into the module's addresses */
	Elf *elf;      /* the file it is mapped from, its pages dropped as it goes; NULL: none */
};

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

/* elf_src() - the section named @name of @elf, its PCs shifted by @shift; .data NULL if none. */
static struct cfi_src elf_src(Elf *elf, const char *name, int64_t shift)
{
	uint64_t addr = 0;
	Elf_Data *data = section_data(elf, name, &addr);

	if (!data)
		return (struct cfi_src){};
	return (struct cfi_src){
	    .data = data->d_buf, .bytes = data->d_size, .addr = addr, .shift = shift, .elf = elf};
}

/* x86_64_elf() - whether @elf is a 64-bit little-endian x86-64 ELF file. */
static bool x86_64_elf(Elf *elf)
{
	GElf_Ehdr ehdr;

	return elf && gelf_getehdr(elf, &ehdr) && ehdr.e_ident[EI_CLASS] == ELFCLASS64 &&
	       ehdr.e_ident[EI_DATA] == ELFDATA2LSB && ehdr.e_machine == EM_X86_64;
}

/*
 * compile_section() - the rows of the CFI section @src, an .eh_frame if
 * @eh_frame, else a .debug_frame, of an ELF file whose e_ident is @ident,
 * into @out (not ended). The pages of its file it reads are dropped as it
 * goes. Returns 0 or rows_put()'s -errno.
 */
static int compile_section(const unsigned char *ident, const struct cfi_src *src, bool eh_frame,
			   struct cfi_table_stats *stats, struct rows_out *out)
{
	struct cfi_section sec = {.base = src->data, .size = src->bytes, .addr = src->addr};
	struct section_pages pages = {.elf = src->elf, .data = src->data, .bytes = src->bytes};
	struct section_pages *drop = NULL;
	int r;

	if (!src->data || src->bytes == 0)
		return 0;
	if (src->elf && src->bytes >= CFI_DROP_MIN_BYTES && elf_pages__begin(&pages.ep) == 0)
		drop = &pages;
	r = cfi_section__read(ident, eh_frame, &sec, stats);
	section_pages_drop(drop); /* reading every entry's header touched every page */
	if (r >= 0)
		r = compile_fdes(&sec, src->shift, drop, stats, out);
	cfi_section__done(&sec);
	if (drop) {
		section_pages_drop(drop);
		elf_pages__end(&drop->ep);
	}
	return r;
}

/*
 * compile_sources() - the rows of @eh (an .eh_frame) and, where it has no
 * CFI, of @dbg (a .debug_frame), into @out, ended. Without @dbg, the rows
 * go to @out as the FDEs are walked; with it, both sections' rows are held
 * (16 bytes each) and merged. Returns 0 or rows_put()'s -errno.
 */
static int compile_sources(const unsigned char *ident, const struct cfi_src *eh,
			   const struct cfi_src *dbg, struct cfi_table_stats *stats,
			   struct rows_out *out)
{
	struct rowvec veh = {}, vdbg = {};
	struct rows_out oeh = {.fn = rowvec_append, .ctx = &veh};
	struct rows_out odbg = {.fn = rowvec_append, .ctx = &vdbg};
	int r;

	if (!dbg->data || dbg->bytes == 0) {
		r = compile_section(ident, eh, true, stats, out);
	} else {
		r = compile_section(ident, eh, true, stats, &oeh);
		if (r >= 0)
			r = rows_end(&oeh);
		if (r >= 0)
			r = compile_section(ident, dbg, false, stats, &odbg);
		if (r >= 0)
			r = rows_end(&odbg);
		stats->debug_frame = vdbg.n > 0;
		if (r >= 0)
			r = merge(&veh, &vdbg, out);
	}
	rowvec_done(&veh);
	rowvec_done(&vdbg);
	return r < 0 ? r : rows_end(out);
}

/* table_make() - a table of the rows of @v (taken) and @stats, in *@ret. */
static int table_make(struct rowvec *v, const struct cfi_table_stats *stats, struct cfi_table **ret)
{
	struct cfi_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->rows = shrink_alloc(v->rows, v->n * sizeof(*v->rows));
	t->n = v->n;
	t->stats = *stats;
	*v = (struct rowvec){};
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
 * cfi_table__compile_rows() - compile the CFI of the x86-64 ELF file open
 * at @fd: its .eh_frame, and .debug_frame where .eh_frame has no CFI, from
 * the file itself or from its separate debug file, looked for with @d as
 * the unwinder looks (debuginfo.h; with d->only_without_eh_frame only for
 * a file whose .eh_frame does not cover its code), giving each row of the
 * table to @fn(@ctx, row), in order, once. A file without a separate
 * .debug_frame holds no rows meanwhile: what @fn keeps is the table.
 * @fd: not consumed (the file is read through a dup); @name: the file's
 *   path, where the debug file is looked for by .gnu_debuglink; @d: NULL
 *   for no separate debug file; *@ret_stats: what the compilation found,
 *   also when it fails.
 * Rows are in the file's ELF virtual addresses. A section of bad CFI gives
 * the rows libdw could read in it, and CFI_ROW_NONE elsewhere.
 *
 * Returns 0 (even with no rows: a file without CFI), -EBADF for a file
 * that is not ELF, -EPROTONOSUPPORT for an ELF file that is not x86-64,
 * -E2BIG beyond CFI_TABLE_MAX_ROWS, -ENOMEM, or the first -errno of @fn
 * (which ends the compilation). Blocks on file I/O (reads the sections
 * whole, decompresses a debug file's); allocates; does not log; never
 * asks debuginfod.
 */
int cfi_table__compile_rows(int fd, const char *name, const struct debuginfo *d, cfi_row_fn *fn,
			    void *ctx, struct cfi_table_stats *ret_stats)
{
	static const Dwfl_Callbacks no_debuginfo = {
	    .find_elf = no_elf,
	    .find_debuginfo = no_debuginfo_file,
	    .section_address = dwfl_offline_section_address, /* ET_REL files: libdwfl calls it */
	};
	struct rows_out out = {.fn = fn, .ctx = ctx, .stats = ret_stats};
	GElf_Addr main_bias = 0, dbg_bias = 0;
	struct cfi_src eh, dbg = {};
	Dwfl_Module *mod;
	Dwarf *dw = NULL;
	Dwfl *dwfl;
	Elf *elf;
	int dfd, r;

	*ret_stats = (struct cfi_table_stats){};
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
	eh = elf_src(elf, ".eh_frame", 0);
	if (d && dwfl_module_dwarf_cfi(mod, &dbg_bias))
		dw = dwfl_module_getdwarf(mod, &dbg_bias);
	if (dw)
		dbg = elf_src(dwarf_getelf(dw), ".debug_frame", (int64_t)(dbg_bias - main_bias));
	r = compile_sources((const unsigned char *)elf_getident(elf, NULL), &eh, &dbg, ret_stats,
			    &out);
	dwfl_end(dwfl);
	return r;
}

/*
 * cfi_table__compile() - cfi_table__compile_rows() into a table: 0 and
 * *@ret, or its -errno.
 */
int cfi_table__compile(int fd, const char *name, const struct debuginfo *d, struct cfi_table **ret)
{
	struct cfi_table_stats stats;
	struct rowvec v = {};
	int r;

	r = cfi_table__compile_rows(fd, name, d, rowvec_append, &v, &stats);
	if (r >= 0)
		r = table_make(&v, &stats, ret);
	rowvec_done(&v);
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
	const struct cfi_src eh = {
	    .data = eh_frame, .bytes = eh_frame_bytes, .addr = eh_frame_addr};
	const struct cfi_src dbg = {.data = debug_frame, .bytes = debug_frame_bytes};
	struct cfi_table_stats stats = {};
	struct rowvec v = {};
	struct rows_out out = {.fn = rowvec_append, .ctx = &v, .stats = &stats};
	int r;

	r = compile_sources(ident, &eh, &dbg, &stats, &out);
	if (r >= 0)
		r = table_make(&v, &stats, ret);
	rowvec_done(&v);
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
