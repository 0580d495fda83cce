/*
 * cfi_section.c - read a CFI section's CIEs and FDEs, and run an FDE's CFI
 * program (DWARF 5, 6.4) once into the rows of the unwind table
 * (cfi_section.h). The rows are the ones libdw's own interpreter gives
 * (dwarf_cfi_addrframe() and the dwarf_frame_*() accessors, elfutils
 * 0.188, with its x86-64 backend's initial rules), which test-cfi-table
 * checks on every row kind; libdw still splits the section into entries
 * (dwarf_next_cfi()). Running each program once, instead of once per row
 * as dwarf_cfi_addrframe() does, took libtorch_cpu.so's compile from ~560
 * to ~180 ms.
 *
 * Owns: the entry arrays and one FDE's rows. Everything read is untrusted
 * (the CFI of arbitrary binaries): every pointer into the section is
 * checked against its end, remembered states nest at most
 * CFI_MAX_REMEMBERED deep, an FDE gives at most CFI_TABLE_MAX_FDE_ROWS
 * rows, and bad CFI ends an FDE's rows where it is found, never a crash.
 * Thread-safe: no state outside the section being read.
 */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "symbols/cfi_section.h"
#include "util.h"

/* x86-64 DWARF registers (System V psABI, figure 3.36) */
#define REG_BP 6
#define REG_SP 7
#define REG_IP 16

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

/* read_sleb() - a SLEB128 at *@p (< @end) into *@ret; false if it runs past @end or 64 bits. */
static bool read_sleb(const uint8_t **p, const uint8_t *end, int64_t *ret)
{
	uint64_t v = 0;

	for (unsigned shift = 0; *p < end && shift < 64;) {
		uint8_t b = *(*p)++;

		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			*ret = (int64_t)v;
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
 * What a CFI program's rule says of the caller's rbp or return address,
 * as far as a row can tell (DWARF 5, 6.4.1). libdw's x86-64 backend
 * makes rbp and the return address column (16) "same value" before the
 * CIE's instructions run, and a register no rule names "undefined"
 * (elfutils 0.188, backends/x86_64_cfi.c and dwarf_frame_register()).
 */
enum rule {
	RULE_UNDEFINED,
	RULE_SAME,
	RULE_OFFSET, /* saved at CFA + the offset */
	RULE_OTHER,  /* in a register, a value, an expression: nothing a row holds */
};

/* What the CFA is. */
enum cfa {
	CFA_UNDEFINED, /* no rule yet */
	CFA_OFFSET,    /* DW_CFA_def_cfa*: register + offset */
	CFA_EXPR_REG,  /* an expression of one DW_OP_breg: register + offset */
	CFA_EXPR_PLT,  /* the lazy .plt's expression (cfa_expression()) */
	CFA_OTHER,     /* any other expression, or an offset rule changed after one */
};

/* The rules at one PC: a CFI program's state (DWARF 5, 6.4.2). */
struct frame_state {
	uint8_t cfa, bp, ra;	 /* enum cfa, enum rule, enum rule */
	uint8_t plt_k;		 /* CFA_EXPR_PLT: the (pc & 15) threshold */
	uint64_t cfa_reg;	 /* CFA_OFFSET, CFA_EXPR_REG */
	uint64_t cfa_off;	 /* CFA_OFFSET, CFA_EXPR_*: two's complement */
	uint64_t bp_off, ra_off; /* RULE_OFFSET: bytes from the CFA, two's complement */
};

/* One CIE, as its FDEs need it. */
struct cfi_cie {
	uint64_t off;		/* in the section */
	int enc;		/* the FDEs' pointer encoding (DW_EH_PE_*); -1 not understood */
	bool sized;		/* augmentation 'z': each FDE says how long its data is */
	bool signal;		/* augmentation 'S': a signal trampoline's frames */
	uint64_t fde_aug_bytes; /* without 'z': the FDEs' augmentation data (libdw's count) */
	uint64_t code_align;	/* an advance's operand is multiplied by it */
	int64_t data_align;	/* an offset's operand is multiplied by it */
	uint64_t ra;		/* the return address column */
	const uint8_t *insn, *insn_end; /* its initial instructions */
	int ready; /* 0 not run yet, 1 @initial holds their rules, -1 bad CFI */
	struct frame_state initial;
};

/* The rows of the FDE run last, [row.pc, end) each. */
struct cfi_fde_rows {
	struct cfi_fde_row *v; /* CFI_TABLE_MAX_FDE_ROWS of them */
	size_t n;
	size_t fde;	/* the FDE they are of (SIZE_MAX: none) */
	size_t cursor;	/* cfi_section__row_at(): where the last search ended */
	uint64_t loc;	/* while run: the location so far */
	uint64_t start; /* while run: where the row being built starts */
};

/*
 * cie_read() - @c, a CIE at offset @off of an .eh_frame (@eh_frame) or
 * .debug_frame, into @cie. Its augmentation ("zR", "zPLR", "zRS", ...)
 * gives the FDEs' pointer encoding (DW_EH_PE_absptr without 'R', always
 * in .debug_frame) and whether they are signal frames; in .eh_frame, an
 * augmentation not understood leaves the encoding -1 (its FDEs are
 * skipped).
 */
static void cie_read(const Dwarf_CIE *c, uint64_t off, bool eh_frame, struct cfi_cie *cie)
{
	const char *a = c->augmentation;
	const uint8_t *p = c->augmentation_data;
	const uint8_t *end = p ? p + c->augmentation_data_size : NULL;

	*cie = (struct cfi_cie){
	    .off = off,
	    .enc = DW_EH_PE_absptr,
	    .sized = a && a[0] == 'z',
	    .fde_aug_bytes = c->fde_augmentation_data_size,
	    .code_align = c->code_alignment_factor,
	    .data_align = c->data_alignment_factor,
	    .ra = c->return_address_register,
	    .insn = c->initial_instructions,
	    .insn_end = c->initial_instructions_end,
	};
	if (!a || !a[0])
		return;
	if (a[0] != 'z' || !p)
		goto bad;
	for (a++; *a; a++) {
		uint64_t skip;

		switch (*a) {
		case 'R':
			if (p >= end)
				goto bad;
			if (eh_frame)
				cie->enc = *p;
			p++;
			break;
		case 'L':
			if (p >= end)
				goto bad;
			p++;
			break;
		case 'P': {
			uint8_t penc;

			if (p >= end)
				goto bad;
			penc = *p++;
			if ((penc & 0x0f) == DW_EH_PE_uleb128) {
				if (!read_uleb(&p, end, &skip))
					goto bad;
			} else if (!read_encoded(&p, end, penc & 0x0f, 0, &skip)) {
				goto bad;
			}
			break;
		}
		case 'S':
			cie->signal = true;
			break;
		case 'B':
			break;
		default:
			return; /* 'z' says how long the data is: what follows is not ours */
		}
	}
	return;
bad:
	if (eh_frame)
		cie->enc = -1; /* .debug_frame's start is an address whatever it says */
}

/* cie_find() - the index of the CIE at section offset @off in @cies (sorted), or -1. */
static ssize_t cie_find(const struct cfi_cie *cies, size_t n, uint64_t off)
{
	for (size_t lo = 0, hi = n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;

		if (cies[mid].off == off)
			return (ssize_t)mid;
		if (cies[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/*
 * fde_read() - the FDE @e of @sec into @fde: its start, encoded as its
 * CIE says, its address range and where its instructions are (after the
 * augmentation data). False if any of it cannot be decoded, or its range
 * is 4 GiB or more (no real function is).
 */
static bool fde_read(const struct cfi_section *sec, const Dwarf_FDE *e, const struct cfi_cie *cie,
		     struct cfi_fde *fde)
{
	const uint8_t *p = e->start, *end = e->end;
	uint64_t range, skip;

	if (cie->enc < 0 || p < sec->base || p > end || end > sec->base + sec->size ||
	    !read_encoded(&p, end, (uint8_t)cie->enc, sec->addr + (uint64_t)(p - sec->base),
			  &fde->start) ||
	    !read_encoded(&p, end, (uint8_t)cie->enc & 0x0f, 0, &range))
		return false;
	skip = cie->fde_aug_bytes;
	if (cie->sized && !read_uleb(&p, end, &skip))
		return false;
	if (skip > (uint64_t)(end - p) || range > UINT32_MAX)
		return false;
	fde->range = (uint32_t)range;
	fde->insn = (uint32_t)(p + skip - sec->base);
	fde->insn_end = (uint32_t)(end - sec->base);
	return true;
}

static int cmp_fde(const void *a, const void *b)
{
	const struct cfi_fde *x = a, *y = b;

	if (x->start != y->start)
		return (x->start > y->start) - (x->start < y->start);
	return (x->insn > y->insn) - (x->insn < y->insn);
}

/*
 * cfi_section__read() - the CIEs and FDEs of @sec (its base, size and
 * address set), an .eh_frame if @eh_frame, else a .debug_frame, of an ELF
 * file whose e_ident is @ident; libdw's dwarf_next_cfi() splits the
 * entries. FDEs that cannot be decoded are counted in @stats and left out;
 * the entries stop at the first that cannot be split; a section of 4 GiB
 * or more is not read (no entries). Returns 0 or -ENOMEM;
 * cfi_section__done() frees @sec either way.
 */
int cfi_section__read(const unsigned char *ident, bool eh_frame, struct cfi_section *sec,
		      struct cfi_table_stats *stats)
{
	Elf_Data data = {.d_buf = (void *)sec->base, .d_size = sec->size, .d_type = ELF_T_BYTE};
	size_t cap_cies = 0, cap = 0;
	Dwarf_Off off = 0, next;

	if (sec->size > UINT32_MAX)
		return 0; /* struct cfi_fde holds offsets of 32 bits: no CFI read */
	for (;;) {
		Dwarf_CFI_Entry entry;

		if (dwarf_next_cfi(ident, &data, eh_frame, off, &next, &entry) != 0 || next <= off)
			break;
		if (dwarf_cfi_cie_p(&entry)) {
			/* in every linker's output the CIEs come in order, before their FDEs */
			if (grow_array((void **)&sec->cies, &cap_cies, sec->n_cies,
				       sizeof(*sec->cies)) < 0)
				return -ENOMEM;
			cie_read(&entry.cie, off, eh_frame, &sec->cies[sec->n_cies++]);
		} else {
			ssize_t c = cie_find(sec->cies, sec->n_cies, entry.fde.CIE_pointer);
			struct cfi_fde fde;

			if (c < 0 || !fde_read(sec, &entry.fde, &sec->cies[c], &fde)) {
				stats->fdes_skipped++;
			} else {
				if (grow_array((void **)&sec->fdes, &cap, sec->n_fdes,
					       sizeof(*sec->fdes)) < 0)
					return -ENOMEM;
				fde.cie = (uint32_t)c;
				sec->fdes[sec->n_fdes++] = fde;
				stats->fdes++;
			}
		}
		off = next;
	}
	if (sec->n_fdes == 0)
		return 0;
	qsort(sec->fdes, sec->n_fdes, sizeof(*sec->fdes), cmp_fde);
	sec->run = calloc(1, sizeof(*sec->run));
	if (!sec->run)
		return -ENOMEM;
	sec->run->fde = SIZE_MAX;
	sec->run->v = malloc(CFI_TABLE_MAX_FDE_ROWS * sizeof(*sec->run->v));
	return sec->run->v ? 0 : -ENOMEM;
}

/* cfi_section__done() - free what cfi_section__read() allocated in @sec, even when it failed. */
void cfi_section__done(struct cfi_section *sec)
{
	free(sec->cies);
	free(sec->fdes);
	if (sec->run)
		free(sec->run->v);
	free(sec->run);
}

/* ---------------------------------------------------------------------- */
/* Running the CFI programs: one pass per FDE */

/* One DWARF operation of those a row can use (DW_OP_bregN is kept as DW_OP_bregx). */
struct op {
	uint8_t atom;
	uint64_t number;
	int64_t offset; /* DW_OP_bregx */
};

/*
 * expr_ops() - the @len bytes of DWARF expression at @p as up to @max
 * operations in @ops; -1 for more, for an operation no row can use, or
 * for one cut short.
 */
static int expr_ops(const uint8_t *p, uint64_t len, struct op *ops, int max)
{
	const uint8_t *end = p + len;
	int n = 0;

	while (p < end) {
		struct op op = {.atom = *p++};

		if (n == max)
			return -1;
		if (op.atom >= DW_OP_breg0 && op.atom <= DW_OP_breg31) {
			op.number = op.atom - DW_OP_breg0;
			op.atom = DW_OP_bregx;
			if (!read_sleb(&p, end, &op.offset))
				return -1;
		} else if (op.atom == DW_OP_bregx) {
			if (!read_uleb(&p, end, &op.number) || !read_sleb(&p, end, &op.offset))
				return -1;
		} else if (op.atom == DW_OP_plus_uconst) {
			if (!read_uleb(&p, end, &op.number))
				return -1;
		} else if (!(op.atom >= DW_OP_lit0 && op.atom <= DW_OP_lit31) &&
			   op.atom != DW_OP_and && op.atom != DW_OP_ge && op.atom != DW_OP_shl &&
			   op.atom != DW_OP_plus) {
			return -1;
		}
		ops[n++] = op;
	}
	return n;
}

/*
 * cfa_expression() - the CFA rule of DW_CFA_def_cfa_expression's @len
 * bytes at @p, in @s: one DW_OP_breg (a register plus an offset), the
 * expression GNU ld gives a lazy .plt (bfd/elf64-x86-64.c): rsp + A +
 * (((rip & 15) >= K) << 3), the 8 bytes of the index a PLT entry pushes at
 * its byte K (11 for the classic PLT, 10 for the IBT one); else CFA_OTHER.
 */
static void cfa_expression(const uint8_t *p, uint64_t len, struct frame_state *s)
{
	struct op o[9];
	int n = expr_ops(p, len, o, 9);

	s->cfa = CFA_OTHER;
	if (n == 1 && o[0].atom == DW_OP_bregx) {
		s->cfa = CFA_EXPR_REG;
		s->cfa_reg = o[0].number;
		s->cfa_off = (uint64_t)o[0].offset;
	} else if (n == 9 && o[0].atom == DW_OP_bregx && o[0].number == REG_SP &&
		   o[1].atom == DW_OP_bregx && o[1].number == REG_IP && o[1].offset == 0 &&
		   o[2].atom == DW_OP_lit15 && o[3].atom == DW_OP_and && o[4].atom >= DW_OP_lit0 &&
		   o[4].atom <= DW_OP_lit15 && o[5].atom == DW_OP_ge && o[6].atom == DW_OP_lit3 &&
		   o[7].atom == DW_OP_shl && o[8].atom == DW_OP_plus) {
		s->cfa = CFA_EXPR_PLT;
		s->cfa_off = (uint64_t)o[0].offset;
		s->plt_k = (uint8_t)(o[4].atom - DW_OP_lit0);
	}
}

/*
 * register_expression() - the rule of DW_CFA_expression's @len bytes at
 * @p (the CFA is pushed first): saved at CFA + N for no operation or one
 * DW_OP_plus_uconst N, as libdw reads it; else RULE_OTHER.
 */
static enum rule register_expression(const uint8_t *p, uint64_t len, uint64_t *ret_off)
{
	struct op o[1];
	int n = expr_ops(p, len, o, 1);

	if (n == 0) {
		*ret_off = 0;
		return RULE_OFFSET;
	}
	if (n == 1 && o[0].atom == DW_OP_plus_uconst) {
		*ret_off = o[0].number;
		return RULE_OFFSET;
	}
	return RULE_OTHER;
}

/* set_rule() - register @reg's new rule in @s, if it is rbp or the return address (@ra). */
static void set_rule(struct frame_state *s, uint64_t ra, uint64_t reg, enum rule rule, uint64_t off)
{
	if (reg == REG_BP) {
		s->bp = (uint8_t)rule;
		s->bp_off = off;
	}
	if (reg == ra) {
		s->ra = (uint8_t)rule;
		s->ra_off = off;
	}
}

/* Registers are numbered below this (libdw: enough_registers()). */
#define CFI_MAX_REGISTER ((uint64_t)INT32_MAX / 8)

/* DW_CFA_remember_state nests this deep at most; deeper is bad CFI. */
#define CFI_MAX_REMEMBERED 16

static void row_of_state(const struct frame_state *s, bool signal, struct cfi_row *row);

/*
 * advance() - the location moves to @loc: the rules in @s so far hold from
 * the row's start to @loc. False for a location behind the last one, or
 * past the rows an FDE may have.
 */
static bool advance(struct cfi_fde_rows *rows, const struct cfi_cie *cie,
		    const struct frame_state *s, uint64_t loc)
{
	struct cfi_fde_row *r;

	if (loc < rows->loc)
		return false;
	rows->loc = loc;
	if (loc == rows->start)
		return true; /* the rules that follow are this row's too */
	if (rows->n == CFI_TABLE_MAX_FDE_ROWS)
		return false;
	r = &rows->v[rows->n++];
	r->row.pc = rows->start;
	row_of_state(s, cie->signal, &r->row);
	r->end = loc;
	rows->start = loc;
	return true;
}

/*
 * read_offset() - an offset operand at *@p (< @end): a ULEB128, or if
 * @factored a SLEB128 times @cie's data alignment factor (the *_sf
 * instructions), in two's complement. False if it runs past @end.
 */
static bool read_offset(const uint8_t **p, const uint8_t *end, bool factored,
			const struct cfi_cie *cie, uint64_t *ret)
{
	int64_t sv;

	if (!factored)
		return read_uleb(p, end, ret);
	if (!read_sleb(p, end, &sv))
		return false;
	*ret = (uint64_t)sv * (uint64_t)cie->data_align;
	return true;
}

/*
 * run_cfi() - run the CFI program from @p to @end over the rules in @s,
 * with @cie's alignment factors: an FDE's, whose rows go to @rows, or
 * (@rows NULL) a CIE's initial instructions, where a location may not
 * move and no rule may be restored. The instructions are DWARF 5's
 * (6.4.2) and the GNU ones libdw runs, with its rules for what is bad.
 * Returns 0, or -1 at bad CFI (@s is then undefined).
 */
static int run_cfi(const struct cfi_section *sec, const struct cfi_cie *cie, const uint8_t *p,
		   const uint8_t *end, struct frame_state *s, struct cfi_fde_rows *rows)
{
	struct frame_state saved[CFI_MAX_REMEMBERED];
	unsigned depth = 0;

	while (p < end) {
		uint8_t opcode = *p++;
		uint64_t reg = opcode & 0x3f, v = 0, loc;

		switch (opcode & 0xc0) {
		case DW_CFA_advance_loc:
			if (!rows || !advance(rows, cie, s, rows->loc + reg * cie->code_align))
				return -1;
			continue;
		case DW_CFA_offset:
			if (!read_uleb(&p, end, &v))
				return -1;
			set_rule(s, cie->ra, reg, RULE_OFFSET, v * (uint64_t)cie->data_align);
			continue;
		case DW_CFA_restore:
			goto restore;
		}
		switch (opcode) {
		case DW_CFA_nop:
			continue;
		case DW_CFA_set_loc:
			if (!rows || cie->enc < 0 ||
			    !read_encoded(&p, end, (uint8_t)cie->enc,
					  sec->addr + (uint64_t)(p - sec->base), &loc) ||
			    !advance(rows, cie, s, loc))
				return -1;
			continue;
		case DW_CFA_advance_loc1:
		case DW_CFA_advance_loc2:
		case DW_CFA_advance_loc4:
		case DW_CFA_MIPS_advance_loc8: {
			size_t size = opcode == DW_CFA_advance_loc1   ? 1
				      : opcode == DW_CFA_advance_loc2 ? 2
				      : opcode == DW_CFA_advance_loc4 ? 4
								      : 8;

			if (!rows || (size_t)(end - p) < size)
				return -1;
			memcpy(&v, p, size); /* little endian */
			p += size;
			if (!advance(rows, cie, s, rows->loc + v * cie->code_align))
				return -1;
			continue;
		}
		case DW_CFA_def_cfa:
		case DW_CFA_def_cfa_sf:
			if (!read_uleb(&p, end, &reg) ||
			    !read_offset(&p, end, opcode == DW_CFA_def_cfa_sf, cie, &v))
				return -1;
			s->cfa = CFA_OFFSET;
			s->cfa_reg = reg;
			s->cfa_off = v;
			continue;
		case DW_CFA_def_cfa_register:
			if (!read_uleb(&p, end, &reg))
				return -1;
			if (s->cfa != CFA_OFFSET)
				s->cfa = CFA_OTHER;
			s->cfa_reg = reg;
			continue;
		case DW_CFA_def_cfa_offset:
		case DW_CFA_def_cfa_offset_sf:
			if (!read_offset(&p, end, opcode == DW_CFA_def_cfa_offset_sf, cie, &v))
				return -1;
			if (s->cfa != CFA_OFFSET)
				s->cfa = CFA_OTHER;
			s->cfa_off = v;
			continue;
		case DW_CFA_def_cfa_expression:
			if (!read_uleb(&p, end, &v) || v > (uint64_t)(end - p))
				return -1;
			cfa_expression(p, v, s);
			p += v;
			continue;
		case DW_CFA_undefined:
		case DW_CFA_same_value:
			if (!read_uleb(&p, end, &reg) || reg >= CFI_MAX_REGISTER)
				return -1;
			set_rule(s, cie->ra, reg,
				 opcode == DW_CFA_undefined ? RULE_UNDEFINED : RULE_SAME, 0);
			continue;
		case DW_CFA_offset_extended:
		case DW_CFA_val_offset:
		case DW_CFA_GNU_negative_offset_extended:
			if (!read_uleb(&p, end, &reg) || !read_uleb(&p, end, &v) ||
			    reg >= CFI_MAX_REGISTER)
				return -1;
			if (opcode == DW_CFA_GNU_negative_offset_extended)
				v = -v;
			set_rule(s, cie->ra, reg,
				 opcode == DW_CFA_val_offset ? RULE_OTHER : RULE_OFFSET,
				 v * (uint64_t)cie->data_align);
			continue;
		case DW_CFA_offset_extended_sf:
		case DW_CFA_val_offset_sf:
			if (!read_uleb(&p, end, &reg) || !read_offset(&p, end, true, cie, &v) ||
			    reg >= CFI_MAX_REGISTER)
				return -1;
			set_rule(s, cie->ra, reg,
				 opcode == DW_CFA_val_offset_sf ? RULE_OTHER : RULE_OFFSET, v);
			continue;
		case DW_CFA_register:
			if (!read_uleb(&p, end, &reg) || !read_uleb(&p, end, &v) ||
			    reg >= CFI_MAX_REGISTER)
				return -1;
			set_rule(s, cie->ra, reg, RULE_OTHER, 0);
			continue;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			if (!read_uleb(&p, end, &reg) || !read_uleb(&p, end, &v) ||
			    v > (uint64_t)(end - p) || reg >= CFI_MAX_REGISTER)
				return -1;
			if (opcode == DW_CFA_expression) {
				uint64_t off = 0;
				enum rule rule = register_expression(p, v, &off);

				set_rule(s, cie->ra, reg, rule, off);
			} else {
				set_rule(s, cie->ra, reg, RULE_OTHER, 0);
			}
			p += v;
			continue;
		case DW_CFA_restore_extended:
			if (!read_uleb(&p, end, &reg))
				return -1;
			goto restore;
		case DW_CFA_remember_state:
			if (depth == CFI_MAX_REMEMBERED)
				return -1;
			saved[depth++] = *s;
			continue;
		case DW_CFA_restore_state:
			if (depth == 0)
				return -1;
			*s = saved[--depth];
			continue;
		case DW_CFA_GNU_window_save:
			/* SPARC's shorthand, which libdw runs on x86-64 too: %o0-%o7 in
			 * %i0-%i7 (8-15), and 16-31 saved at CFA + (n - 16) * 8 */
			if (cie->ra >= 8 && cie->ra < 16)
				s->ra = RULE_OTHER;
			else if (cie->ra >= 16 && cie->ra < 32)
				set_rule(s, cie->ra, cie->ra, RULE_OFFSET, (cie->ra - 16) * 8);
			continue;
		case DW_CFA_GNU_args_size:
			if (!read_uleb(&p, end, &v))
				return -1;
			continue;
		default:
			return -1;
		}
	restore:
		/* the CIE's rule for @reg; not in the CIE's own instructions */
		if (!rows || reg >= CFI_MAX_REGISTER)
			return -1;
		if (reg == REG_BP) {
			s->bp = cie->initial.bp;
			s->bp_off = cie->initial.bp_off;
		}
		if (reg == cie->ra) {
			s->ra = cie->initial.ra;
			s->ra_off = cie->initial.ra_off;
		}
	}
	return 0;
}

/*
 * cie_ready() - run @cie's initial instructions once, over libdw's x86-64
 * defaults (rbx as libdw numbers it, 0, rbp, r12-r15 and the return
 * address column 16 "same value"). Returns whether its FDEs can run.
 */
static bool cie_ready(const struct cfi_section *sec, struct cfi_cie *cie)
{
	if (cie->ready == 0) {
		bool abi_same =
		    cie->ra == 0 || cie->ra == REG_BP || (cie->ra >= 12 && cie->ra <= 16);

		cie->initial = (struct frame_state){
		    .cfa = CFA_UNDEFINED,
		    .bp = RULE_SAME,
		    .ra = abi_same ? RULE_SAME : RULE_UNDEFINED,
		};
		cie->ready =
		    run_cfi(sec, cie, cie->insn, cie->insn_end, &cie->initial, NULL) == 0 ? 1 : -1;
	}
	return cie->ready > 0;
}

/*
 * fde_run() - run FDE @i of @sec once, its rows into @rows: each from one
 * location to the next, the last to the FDE's end. Bad CFI keeps the rows
 * before it, as libdw, which runs a program only as far as the PC it is
 * asked for, does.
 */
static void fde_run(struct cfi_section *sec, size_t i, struct cfi_fde_rows *rows)
{
	const struct cfi_fde *fde = &sec->fdes[i];
	struct cfi_cie *cie = &sec->cies[fde->cie];
	uint64_t end = cfi_fde_end(fde);
	struct frame_state s;

	rows->n = 0;
	rows->fde = i;
	rows->cursor = 0;
	rows->loc = rows->start = fde->start;
	if (!cie_ready(sec, cie))
		return;
	s = cie->initial;
	if (run_cfi(sec, cie, sec->base + fde->insn, sec->base + fde->insn_end, &s, rows) != 0)
		return;
	if (end > rows->start)
		advance(rows, cie, &s, end);
}

/*
 * cfi_section__row_at() - the row of FDE @i of @sec (read) covering @pc,
 * or NULL (bad CFI there). The FDE's program runs when it is not the one
 * asked for last; then @pc may not be below the one asked for last.
 */
const struct cfi_fde_row *cfi_section__row_at(struct cfi_section *sec, size_t i, uint64_t pc)
{
	struct cfi_fde_rows *rows = sec->run;

	if (rows->fde != i)
		fde_run(sec, i, rows);
	while (rows->cursor < rows->n && rows->v[rows->cursor].end <= pc)
		rows->cursor++;
	if (rows->cursor == rows->n || rows->v[rows->cursor].row.pc > pc)
		return NULL;
	return &rows->v[rows->cursor];
}

/*
 * row_of_state() - the table row for the rules in @s (the pc is set by the
 * caller): a rule when the CFA is rsp or rbp plus an offset (or the PLT
 * expression), the return address at CFA - 8, and rbp unchanged, saved
 * at CFA + offset or undefined; else the kind that says why not.
 */
static void row_of_state(const struct frame_state *s, bool signal, struct cfi_row *row)
{
	int64_t off;

	row->kind = CFI_ROW_EXPR;
	row->flags = 0;
	row->cfa_off = 0;
	row->fp_off = 0;
	if (signal) {
		row->kind = CFI_ROW_SIGNAL;
		return;
	}
	if (s->ra == RULE_UNDEFINED) {
		row->kind = CFI_ROW_OUTERMOST;
		return;
	}
	if (s->ra != RULE_OFFSET || (int64_t)s->ra_off != -8)
		return;
	off = (int64_t)s->cfa_off;
	if (off < INT32_MIN || off > INT32_MAX)
		return;
	if ((s->cfa == CFA_OFFSET || s->cfa == CFA_EXPR_REG) &&
	    (s->cfa_reg == REG_SP || s->cfa_reg == REG_BP)) {
		row->kind = CFI_ROW_CFA;
		row->flags = s->cfa_reg == REG_BP ? CFI_ROW_CFA_BP : 0;
	} else if (s->cfa == CFA_EXPR_PLT) {
		row->kind = CFI_ROW_PLT;
	} else {
		return;
	}
	row->cfa_off = (int32_t)off;

	off = (int64_t)s->bp_off;
	if (s->bp == RULE_UNDEFINED)
		row->flags |= CFI_ROW_FP_UNDEF;
	else if (s->bp == RULE_OFFSET && off >= INT16_MIN && off <= INT16_MAX)
		row->flags |= CFI_ROW_FP_SAVED, row->fp_off = (int16_t)off;
	else if (s->bp != RULE_SAME)
		goto expr;
	if (row->kind == CFI_ROW_PLT) {
		if (row->flags & (CFI_ROW_FP_SAVED | CFI_ROW_FP_UNDEF))
			goto expr;
		row->fp_off = s->plt_k;
	}
	return;
expr:
	*row = (struct cfi_row){.pc = row->pc, .kind = CFI_ROW_EXPR};
}
