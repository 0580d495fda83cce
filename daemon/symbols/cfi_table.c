/*
 * cfi_table.c - compile one module's CFI into a sorted table of fixed-size
 * rows (cfi_table.h). libdw interprets the CFI (dwarf_cfi_addrframe() and
 * the dwarf_frame_*() accessors); this file only finds where each FDE
 * starts, asks libdw for the rows from there on, and classifies each row
 * as a rule the table can hold or as a kind that stops an unwind.
 *
 * Owns: the tables (one malloc'd array each). Everything read is untrusted
 * (the CFI of arbitrary binaries): every pointer into a section is checked
 * against its end, the rows and the rows per FDE are capped, and bad CFI
 * gives fewer rows (no CFI there), never a crash. Thread-safe: no state
 * outside the table being built.
 */
#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols/cfi_table.h"
#include "symbols/debuginfo.h"
#include "util.h"

/* x86-64 DWARF registers (System V psABI, figure 3.36) */
#define REG_BP 6
#define REG_SP 7
#define REG_IP 16

struct cfi_table {
	struct cfi_row *rows; /* sorted by pc, strictly increasing; the last is CFI_ROW_NONE */
	size_t n;
	struct cfi_table_stats stats;
};

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

/* ---------------------------------------------------------------------- */
/* Where FDEs start */

/* read_uleb() - a ULEB128 at *@p (< @end) into *@ret; false if it runs past @end or 64 bits. */
static bool read_uleb(const uint8_t **p, const uint8_t *end, uint64_t *ret)
{
	uint64_t v = 0;

	for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;

		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*ret = v;
			return true;
		}
	}
	return false;
}

/*
 * read_encoded() - the pointer at *@p encoded as @enc (DW_EH_PE_*), whose
 * own address is @addr: absolute or pc-relative, 2, 4 or 8 bytes, signed or
 * not. Other encodings (data-relative, indirect, LEB128) are not used for an
 * FDE's start by the linkers we know: false, as for a pointer past @end.
 */
static bool read_encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, uint64_t addr,
			 uint64_t *ret)
{
	size_t size;
	uint64_t v = 0;

	switch (enc & 0x0f) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		size = 8;
		break;
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		size = 4;
		break;
	case DW_EH_PE_udata2:
	case DW_EH_PE_sdata2:
		size = 2;
		break;
	default:
		return false;
	}
	if ((size_t)(end - *p) < size)
		return false;
	memcpy(&v, *p, size); /* x86-64: little endian, as the ELF file (checked) */
	if ((enc & 0x0f) == DW_EH_PE_sdata4)
		v = (uint64_t)(int64_t)(int32_t)v;
	else if ((enc & 0x0f) == DW_EH_PE_sdata2)
		v = (uint64_t)(int64_t)(int16_t)v;
	*p += size;
	switch (enc & 0x70) {
	case DW_EH_PE_absptr:
		break;
	case DW_EH_PE_pcrel:
		v += addr;
		break;
	default:
		return false;
	}
	if (enc & DW_EH_PE_indirect)
		return false;
	*ret = v;
	return true;
}

/*
 * cie_fde_encoding() - how the FDEs of CIE @cie encode their start: the 'R'
 * augmentation of an .eh_frame CIE ("zR", "zPLR", ...; DW_EH_PE_absptr
 * without one). -1 for an augmentation not understood.
 */
static int cie_fde_encoding(const Dwarf_CIE *cie)
{
	const char *a = cie->augmentation;
	const uint8_t *p = cie->augmentation_data;
	const uint8_t *end = p ? p + cie->augmentation_data_size : NULL;
	int enc = DW_EH_PE_absptr;

	if (!a || !a[0])
		return enc;
	if (a[0] != 'z' || !p)
		return -1;
	for (a++; *a; a++) {
		uint64_t skip;

		switch (*a) {
		case 'R':
			if (p >= end)
				return -1;
			enc = *p++;
			break;
		case 'L':
			if (p >= end)
				return -1;
			p++;
			break;
		case 'P': {
			uint8_t penc;

			if (p >= end)
				return -1;
			penc = *p++;
			if ((penc & 0x0f) == DW_EH_PE_uleb128) {
				if (!read_uleb(&p, end, &skip))
					return -1;
			} else if (!read_encoded(&p, end, penc & 0x0f, 0, &skip)) {
				return -1;
			}
			break;
		}
		case 'S':
		case 'B':
			break;
		default:
			return enc; /* 'z' says how long the data is: what follows is not ours */
		}
	}
	return enc;
}

/* One CIE: its section offset and its FDEs' start encoding (-1: not understood). */
struct cie_enc {
	uint64_t off;
	int enc;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * fde_starts() - the start of every FDE of section @data (.eh_frame if
 * @eh_frame, else .debug_frame) whose address is @sec_addr, sorted, in
 * *@ret_starts (malloc'd) and *@ret_n. FDEs whose start cannot be decoded
 * are counted in @stats and left out. Returns 0 or -ENOMEM.
 */
static int fde_starts(const unsigned char *ident, Elf_Data *data, bool eh_frame, uint64_t sec_addr,
		      struct cfi_table_stats *stats, uint64_t **ret_starts, size_t *ret_n)
{
	_cleanup_free_ struct cie_enc *cies = NULL;
	_cleanup_free_ uint64_t *starts = NULL;
	size_t n_cies = 0, cap_cies = 0, n = 0, cap = 0;
	const uint8_t *base = data->d_buf;
	Dwarf_Off off = 0, next;

	for (;;) {
		Dwarf_CFI_Entry entry;

		if (dwarf_next_cfi(ident, data, eh_frame, off, &next, &entry) != 0 || next <= off)
			break;
		if (dwarf_cfi_cie_p(&entry)) {
			if (n_cies == cap_cies) {
				struct cie_enc *c;

				cap_cies = cap_cies ? cap_cies * 2 : 16;
				c = realloc(cies, cap_cies * sizeof(*cies));
				if (!c)
					return -ENOMEM;
				cies = c;
			}
			cies[n_cies++] = (struct cie_enc){
			    .off = off,
			    .enc = eh_frame ? cie_fde_encoding(&entry.cie) : DW_EH_PE_absptr,
			};
		} else {
			const uint8_t *p = entry.fde.start, *end = entry.fde.end;
			int enc = -1;
			uint64_t start;

			/* CIEs come before their FDEs in every linker's output; else not found */
			for (size_t lo = 0, hi = n_cies; lo < hi;) {
				size_t mid = lo + (hi - lo) / 2;

				if (cies[mid].off == entry.fde.CIE_pointer) {
					enc = cies[mid].enc;
					break;
				}
				if (cies[mid].off < entry.fde.CIE_pointer)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (enc < 0 || p < base || p > end || end > base + data->d_size ||
			    !read_encoded(&p, end, (uint8_t)enc,
					  sec_addr + (uint64_t)(entry.fde.start - base), &start)) {
				stats->fdes_skipped++;
			} else {
				if (n == cap) {
					uint64_t *s;

					cap = cap ? cap * 2 : 1024;
					s = realloc(starts, cap * sizeof(*starts));
					if (!s)
						return -ENOMEM;
					starts = s;
				}
				starts[n++] = start;
				stats->fdes++;
			}
		}
		off = next;
	}
	if (n)
		qsort(starts, n, sizeof(*starts), cmp_u64);
	*ret_starts = TAKE_PTR(starts);
	*ret_n = n;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* One libdw row to one table row */

/* cfa_plus() - whether @ops is a location CFA + *@ret_off (libdw: call_frame_cfa [plus_uconst]). */
static bool cfa_plus(const Dwarf_Op *ops, size_t nops, int64_t *ret_off)
{
	if (nops < 1 || nops > 2 || ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	if (nops == 1) {
		*ret_off = 0;
		return true;
	}
	if (ops[1].atom != DW_OP_plus_uconst)
		return false;
	*ret_off =
	    (int64_t)ops[1].number; /* libdw stores a negative offset as its 2's complement */
	return true;
}

/* breg() - whether @op is DW_OP_bregN/bregx: register in *@ret_reg, offset in *@ret_off. */
static bool breg(const Dwarf_Op *op, uint64_t *ret_reg, int64_t *ret_off)
{
	if (op->atom >= DW_OP_breg0 && op->atom <= DW_OP_breg31) {
		*ret_reg = op->atom - DW_OP_breg0;
		*ret_off = (int64_t)op->number;
		return true;
	}
	if (op->atom == DW_OP_bregx) {
		*ret_reg = op->number;
		*ret_off = (int64_t)op->number2;
		return true;
	}
	return false;
}

/*
 * plt_expression() - whether @ops is the CFA expression GNU ld gives a lazy
 * .plt (bfd/elf64-x86-64.c): rsp + A + (((rip & 15) >= K) << 3), the 8
 * bytes of the index a PLT entry pushes at its byte K. A in *@ret_off, K
 * in *@ret_threshold (11 for the classic PLT, 10 for the IBT one).
 */
static bool plt_expression(const Dwarf_Op *ops, size_t nops, int64_t *ret_off,
			   int64_t *ret_threshold)
{
	uint64_t reg;
	int64_t off;

	if (nops != 9 || !breg(&ops[0], &reg, ret_off) || reg != REG_SP ||
	    !breg(&ops[1], &reg, &off) || reg != REG_IP || off != 0 || ops[2].atom != DW_OP_lit15 ||
	    ops[3].atom != DW_OP_and || ops[4].atom < DW_OP_lit0 || ops[4].atom > DW_OP_lit15 ||
	    ops[5].atom != DW_OP_ge || ops[6].atom != DW_OP_lit3 || ops[7].atom != DW_OP_shl ||
	    ops[8].atom != DW_OP_plus)
		return false;
	*ret_threshold = ops[4].atom - DW_OP_lit0;
	return true;
}

/*
 * row_classify() - the table row for libdw's row @frame (the pc is set by
 * the caller): a rule when the CFA is rsp or rbp plus an offset (or the
 * PLT expression), the return address at CFA - 8, and rbp unchanged, saved
 * at CFA + offset or undefined; else the kind that says why not.
 */
static void row_classify(Dwarf_Frame *frame, struct cfi_row *row)
{
	Dwarf_Op ops_mem[3], *ops = NULL;
	size_t nops = 0;
	bool signal = false;
	int64_t off, threshold = 0;
	uint64_t reg;
	int ra = dwarf_frame_info(frame, NULL, NULL, &signal);

	row->kind = CFI_ROW_EXPR;
	row->flags = 0;
	row->cfa_off = 0;
	row->fp_off = 0;
	if (ra < 0)
		return;
	if (signal) {
		row->kind = CFI_ROW_SIGNAL;
		return;
	}
	if (dwarf_frame_register(frame, ra, ops_mem, &ops, &nops) != 0)
		return;
	if (nops == 0 && ops == ops_mem) {
		row->kind = CFI_ROW_OUTERMOST;
		return;
	}
	if (!cfa_plus(ops, nops, &off) || off != -8)
		return;

	if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops == 0)
		return;
	if (nops == 1 && breg(&ops[0], &reg, &off) && (reg == REG_SP || reg == REG_BP)) {
		if (off < INT32_MIN || off > INT32_MAX)
			return;
		row->kind = CFI_ROW_CFA;
		row->flags = reg == REG_BP ? CFI_ROW_CFA_BP : 0;
	} else if (plt_expression(ops, nops, &off, &threshold)) {
		if (off < INT32_MIN || off > INT32_MAX)
			return;
		row->kind = CFI_ROW_PLT;
	} else {
		return;
	}
	row->cfa_off = (int32_t)off;

	if (dwarf_frame_register(frame, REG_BP, ops_mem, &ops, &nops) != 0)
		goto expr;
	if (nops == 0 && ops == ops_mem) {
		row->flags |= CFI_ROW_FP_UNDEF;
	} else if (nops == 0) {
		/* same value */
	} else if (cfa_plus(ops, nops, &off) && off >= INT16_MIN && off <= INT16_MAX) {
		row->flags |= CFI_ROW_FP_SAVED;
		row->fp_off = (int16_t)off;
	} else {
		goto expr;
	}
	if (row->kind == CFI_ROW_PLT) {
		if (row->flags & (CFI_ROW_FP_SAVED | CFI_ROW_FP_UNDEF))
			goto expr;
		row->fp_off = (int16_t)threshold;
	}
	return;
expr:
	*row = (struct cfi_row){.pc = row->pc, .kind = CFI_ROW_EXPR};
}

/*
 * Where compile_cfi() reads the CFI: @cfi, or a fresh one from @renew
 * every CFI_RENEW_FDES FDEs. libdw keeps every FDE it has looked up in a
 * search tree (tsearch()) that each lookup walks first; a new Dwarf_CFI
 * starts with an empty one. On libtorch_cpu.so (219,903 FDEs) renewing cut
 * the compile from ~634 to ~433 ms (test-cfi-table), and profd's peak
 * anonymous RSS while it compiled from 68 to 53 MiB. 256 or 512 FDEs a
 * tree did best; 2,048 took ~463 ms.
 */
struct cfi_source {
	Dwarf_CFI *cfi;			/* NULL: no CFI */
	Dwarf_CFI *(*renew)(void *arg); /* NULL: keep @cfi; else frees the last one */
	void *arg;
};

/* FDEs read from one Dwarf_CFI before it is renewed. */
#define CFI_RENEW_FDES 512

/*
 * compile_cfi() - the rows of @src's CFI: from each FDE start in @starts,
 * libdw's rows one after the other (into the next FDE when it follows
 * without a gap) until no CFI covers the PC, which starts a CFI_ROW_NONE
 * row. PCs are the CFI's, shifted by @shift into the module's. Returns 0,
 * -E2BIG, -ENOMEM (also when a renewal fails).
 */
static int compile_cfi(struct cfi_source *src, const uint64_t *starts, size_t n_starts,
		       int64_t shift, struct cfi_table_stats *stats, struct rowvec *out)
{
	Dwarf_CFI *cfi = src->cfi;
	uint64_t pc = 0;
	size_t fdes = 0;
	int r;

	for (size_t i = 0; i < n_starts; i++) {
		size_t fde = i; /* the FDE pc is in: the last start <= pc */
		unsigned rows = 0;
		bool any = false;

		if (starts[i] < pc)
			continue; /* inside what the rows so far cover (or overlapping FDEs) */
		pc = starts[i];
		if (src->renew && ++fdes % CFI_RENEW_FDES == 0) {
			cfi = src->renew(src->arg);
			if (!cfi)
				return -ENOMEM;
		}
		for (;;) {
			Dwarf_Frame *frame = NULL;
			Dwarf_Addr start, end;
			struct cfi_row row = {.pc = pc + (uint64_t)shift};

			while (fde + 1 < n_starts && starts[fde + 1] <= pc) {
				fde++;
				rows = 0;
			}
			if (rows == CFI_TABLE_MAX_FDE_ROWS) {
				/* the rest of this FDE is a rule we did not read */
				row.kind = CFI_ROW_EXPR;
				r = rowvec_put(out, &row);
				if (r < 0)
					return r;
				stats->fdes_cut++;
				if (fde + 1 == n_starts)
					return 0; /* no CFI known after it: stays EXPR */
				pc = starts[fde + 1];
				continue;
			}
			if (dwarf_cfi_addrframe(cfi, pc, &frame) != 0)
				break;
			if (dwarf_frame_info(frame, &start, &end, NULL) < 0 || start > pc ||
			    end <= pc) {
				free(frame);
				break;
			}
			stats->rows_libdw++;
			rows++;
			row_classify(frame, &row);
			free(frame);
			r = rowvec_put(out, &row);
			if (r < 0)
				return r;
			any = true;
			pc = end;
		}
		if (any) {
			struct cfi_row none = {.pc = pc + (uint64_t)shift, .kind = CFI_ROW_NONE};

			r = rowvec_put(out, &none);
			if (r < 0)
				return r;
		}
	}
	return 0;
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
 * compile_section() - the rows of the CFI of @src whose section, named
 * @name, is in @elf; @shift added to its PCs. No section or no CFI: no rows.
 */
static int compile_section(Elf *elf, struct cfi_source *src, const char *name, int64_t shift,
			   struct cfi_table_stats *stats, struct rowvec *out)
{
	_cleanup_free_ uint64_t *starts = NULL;
	uint64_t addr = 0;
	size_t n = 0;
	Elf_Data *data;
	int r;

	if (!src->cfi || !elf)
		return 0;
	data = section_data(elf, name, &addr);
	if (!data)
		return 0;
	r = fde_starts((const unsigned char *)elf_getident(elf, NULL), data,
		       strcmp(name, ".eh_frame") == 0, addr, stats, &starts, &n);
	if (r < 0)
		return r;
	return compile_cfi(src, starts, n, shift, stats, out);
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
 * The .eh_frame CFI of the file open at @fd, renewed for compile_cfi():
 * each time from a Dwfl of its own, so that libdw reads it with its x86-64
 * backend's rules, as it read the first one (dwfl_module_eh_cfi()).
 */
struct eh_renewal {
	int fd; /* not owned */
	const char *name;
	Dwfl *dwfl; /* the last one, ended by the next renewal or the caller */
};

static Dwarf_CFI *eh_renew(void *arg)
{
	static const Dwfl_Callbacks no_debuginfo = {
	    .find_elf = no_elf,
	    .find_debuginfo = no_debuginfo_file,
	};
	struct eh_renewal *e = arg;
	Dwfl_Module *mod;
	GElf_Addr bias;
	int dfd;

	if (e->dwfl)
		dwfl_end(e->dwfl);
	e->dwfl = dwfl_begin(&no_debuginfo);
	dfd = e->dwfl ? fcntl(e->fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (dfd < 0)
		return NULL;
	dwfl_report_begin(e->dwfl);
	mod = dwfl_report_elf(e->dwfl, e->name, e->name, dfd, 0, true);
	dwfl_report_end(e->dwfl, NULL, NULL);
	if (!mod) {
		close(dfd); /* not consumed on failure */
		return NULL;
	}
	return dwfl_module_eh_cfi(mod, &bias);
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
	};
	struct cfi_table_stats stats = {};
	struct rowvec eh = {}, dbg = {};
	GElf_Addr main_bias = 0, eh_bias = 0, dbg_bias = 0;
	struct eh_renewal renewal = {.fd = fd, .name = name ? name : ""};
	struct cfi_source eh_src = {.renew = eh_renew, .arg = &renewal}, dbg_src = {};
	Dwfl_Module *mod;
	Dwarf *dw;
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
	eh_src.cfi = dwfl_module_eh_cfi(mod, &eh_bias);
	r = compile_section(elf, &eh_src, ".eh_frame", (int64_t)(eh_bias - main_bias), &stats, &eh);
	if (renewal.dwfl)
		dwfl_end(renewal.dwfl);
	if (r >= 0) {
		dbg_src.cfi = d ? dwfl_module_dwarf_cfi(mod, &dbg_bias) : NULL;
		dw = dbg_src.cfi ? dwfl_module_getdwarf(mod, &dbg_bias) : NULL;
		if (dw)
			r = compile_section(dwarf_getelf(dw), &dbg_src, ".debug_frame",
					    (int64_t)(dbg_bias - main_bias), &stats, &dbg);
	}
	dwfl_end(dwfl);
	if (r >= 0)
		r = table_finish(&eh, &dbg, &stats, ret);
	rowvec_done(&eh);
	rowvec_done(&dbg);
	return r;
}

/*
 * elf_image_new() - an x86-64 ELF image in memory, of section headers only:
 * [1] .eh_frame at address @eh_addr with @eh's bytes, [2] .debug_frame with
 * @dbg's, [3] .shstrtab. NULL on OOM; *@ret_bytes its size.
 */
static void *elf_image_new(const void *eh, size_t eh_bytes, uint64_t eh_addr, const void *dbg,
			   size_t dbg_bytes, size_t *ret_bytes)
{
	static const char names[] = "\0.eh_frame\0.debug_frame\0.shstrtab";
	size_t eh_at = sizeof(Elf64_Ehdr), dbg_at = eh_at + eh_bytes, names_at = dbg_at + dbg_bytes;
	size_t sh_at = (names_at + sizeof(names) + 7) & ~(size_t)7;
	size_t bytes = sh_at + 4 * sizeof(Elf64_Shdr);
	unsigned char *img = calloc(1, bytes);
	Elf64_Ehdr *eh_hdr = (Elf64_Ehdr *)img;
	Elf64_Shdr sh[4] = {};

	if (!img)
		return NULL;
	memcpy(eh_hdr->e_ident, ELFMAG, SELFMAG);
	eh_hdr->e_ident[EI_CLASS] = ELFCLASS64;
	eh_hdr->e_ident[EI_DATA] = ELFDATA2LSB;
	eh_hdr->e_ident[EI_VERSION] = EV_CURRENT;
	eh_hdr->e_type = ET_DYN;
	eh_hdr->e_machine = EM_X86_64;
	eh_hdr->e_version = EV_CURRENT;
	eh_hdr->e_ehsize = sizeof(Elf64_Ehdr);
	eh_hdr->e_shoff = sh_at;
	eh_hdr->e_shentsize = sizeof(Elf64_Shdr);
	eh_hdr->e_shnum = 4;
	eh_hdr->e_shstrndx = 3;
	if (eh_bytes)
		memcpy(img + eh_at, eh, eh_bytes);
	if (dbg_bytes)
		memcpy(img + dbg_at, dbg, dbg_bytes);
	memcpy(img + names_at, names, sizeof(names));
	sh[1] = (Elf64_Shdr){.sh_name = 1,
			     .sh_type = SHT_PROGBITS,
			     .sh_flags = SHF_ALLOC,
			     .sh_addr = eh_addr,
			     .sh_offset = eh_at,
			     .sh_size = eh_bytes,
			     .sh_addralign = 1};
	sh[2] = (Elf64_Shdr){.sh_name = 11,
			     .sh_type = SHT_PROGBITS,
			     .sh_offset = dbg_at,
			     .sh_size = dbg_bytes,
			     .sh_addralign = 1};
	sh[3] = (Elf64_Shdr){.sh_name = 24,
			     .sh_type = SHT_STRTAB,
			     .sh_offset = names_at,
			     .sh_size = sizeof(names),
			     .sh_addralign = 1};
	memcpy(img + sh_at, sh, sizeof(sh));
	*ret_bytes = bytes;
	return img;
}

/* The .eh_frame CFI of an ELF image, renewed for compile_cfi() (no ABI rules, no Dwfl). */
struct elf_renewal {
	Elf *elf;
	Dwarf_CFI *cfi; /* the last one, ended by the next renewal or the caller */
};

static Dwarf_CFI *elf_renew(void *arg)
{
	struct elf_renewal *e = arg;

	if (e->cfi)
		dwarf_cfi_end(e->cfi);
	e->cfi = dwarf_getcfi_elf(e->elf);
	return e->cfi;
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
	struct cfi_table_stats stats = {};
	struct rowvec eh = {}, dbg = {};
	_cleanup_free_ void *img = NULL;
	size_t bytes = 0;
	struct elf_renewal renewal = {};
	struct cfi_source eh_src = {.renew = elf_renew, .arg = &renewal}, dbg_src = {};
	Dwarf *dw = NULL;
	Elf *elf;
	int r;

	elf_version(EV_CURRENT);
	img = elf_image_new(eh_frame, eh_frame_bytes, eh_frame_addr, debug_frame, debug_frame_bytes,
			    &bytes);
	if (!img)
		return -ENOMEM;
	elf = elf_memory(img, bytes);
	if (!elf)
		return -ENOMEM;
	renewal.elf = elf;
	eh_src.cfi = eh_frame_bytes ? elf_renew(&renewal) : NULL;
	r = compile_section(elf, &eh_src, ".eh_frame", 0, &stats, &eh);
	if (r >= 0 && debug_frame_bytes) {
		dw = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
		dbg_src.cfi = dw ? dwarf_getcfi(dw) : NULL;
		r = compile_section(elf, &dbg_src, ".debug_frame", 0, &stats, &dbg);
	}
	if (r >= 0)
		r = table_finish(&eh, &dbg, &stats, ret);
	rowvec_done(&eh);
	rowvec_done(&dbg);
	if (dw)
		dwarf_end(dw);
	if (renewal.cfi)
		dwarf_cfi_end(renewal.cfi);
	elf_end(elf);
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
