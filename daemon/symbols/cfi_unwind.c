/*
 * cfi_unwind.c - unwind a copied user stack with compiled CFI tables
 * (cfi_unwind.h): per frame, the module of the PC (addrspace.c), its table
 * (compiled on first use, cached by build ID), the row (binary search), and
 * three loads from the stack copy at most. A row the table cannot express
 * stops the walk with a status; the walk never guesses a caller.
 *
 * Owns: the cache of tables and the debug-file search it compiles with.
 * Registers and stack bytes are untrusted: every load is checked against
 * the copy, the SP must grow from frame to frame, and the walk is bounded by
 * @max. Not thread-safe: one cfi_unwinder per thread.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbols/cfi_unwind.h"
#include "symbols/debuginfo.h"
#include "util.h"

/* As unwind.c: only the first 64 KiB of a stack copy are read. */
#define STACK_MAX_BYTES 65536

/* One cached table: the module's key, and the table (NULL: it could not be compiled). */
struct table_entry {
	char *key; /* build ID (hex), else "path:" + path; NULL: free slot */
	struct cfi_table *table;
	uint64_t last_use;
};

struct cfi_unwinder {
	struct table_entry cache[CFI_UNWINDER_MAX_TABLES];
	struct table_entry *mru; /* the entry found last */
	uint64_t use_clock;
	struct debuginfo debuginfo;
};

/*
 * cfi_unwinder__new() - an unwinder with an empty cache, looking for
 * separate debug files as unwinder__new() does ($PROFD_DEBUG_PATH, then
 * /usr/lib/debug; only for files whose .eh_frame does not cover their code).
 * NULL only on out-of-memory. Does not log.
 */
struct cfi_unwinder *cfi_unwinder__new(void)
{
	struct cfi_unwinder *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	if (debuginfo__init(&u->debuginfo, getenv("PROFD_DEBUG_PATH"), true) < 0) {
		free(u);
		return NULL;
	}
	return u;
}

static void entry_clear(struct table_entry *e)
{
	free(e->key);
	cfi_table__free(e->table);
	*e = (struct table_entry){};
}

/* cfi_unwinder__free() - free @u and every table it holds. Accepts NULL. */
void cfi_unwinder__free(struct cfi_unwinder *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < CFI_UNWINDER_MAX_TABLES; i++)
		entry_clear(&u->cache[i]);
	debuginfo__done(&u->debuginfo);
	free(u);
}

/*
 * cfi_table__key() - the key a table of mapping @m is cached and shared by:
 * its build ID (hex), else "path:" + its path, written in @buf (@size bytes)
 * then. Points into @m or @buf.
 */
const char *cfi_table__key(const struct mapping *m, char *buf, size_t size)
{
	if (m->build_id[0])
		return m->build_id;
	snprintf(buf, size, "path:%s", m->path);
	return buf;
}

/*
 * cfi_table__compile_mapping() - the table of the file behind mapping @m of
 * @as, opened as the symbolizer opens it (build ID checked; [vdso] from the
 * daemon's own copy when the sizes agree: addrspace__open_image()), separate
 * debug files found through @d. NULL when there is none (no file, not ELF,
 * too many rows, out of memory). Blocks on file I/O; does not log.
 */
struct cfi_table *cfi_table__compile_mapping(const struct addrspace *as, const struct mapping *m,
					     const struct debuginfo *d)
{
	char path[PATH_MAX + 64];
	struct cfi_table *t = NULL;
	int fd = addrspace__open_image(as, m, path, sizeof(path));

	if (fd < 0)
		return NULL;
	if (cfi_table__compile(fd, path, d, &t) < 0)
		t = NULL;
	close(fd);
	return t;
}

/*
 * cfi_table__compile_mapping_rows() - cfi_table__compile_rows() of the file
 * behind mapping @m of @as, opened as cfi_table__compile_mapping() opens
 * it. Returns its -errno, or addrspace__open_image()'s when there is no
 * file.
 */
int cfi_table__compile_mapping_rows(const struct addrspace *as, const struct mapping *m,
				    const struct debuginfo *d, cfi_row_fn *fn, void *ctx,
				    struct cfi_table_stats *ret_stats)
{
	char path[PATH_MAX + 64];
	int fd = addrspace__open_image(as, m, path, sizeof(path)), r;

	*ret_stats = (struct cfi_table_stats){};
	if (fd < 0)
		return fd;
	r = cfi_table__compile_rows(fd, path, d, fn, ctx, ret_stats);
	close(fd);
	return r;
}

/*
 * cfi_unwinder__table() - the table of the module mapped at @m of @as,
 * compiled on first use (cached by build ID, else by path, up to
 * CFI_UNWINDER_MAX_TABLES, least recently used dropped). NULL when the file
 * has no usable table (could not be opened or compiled) or on OOM; a
 * failure is remembered as the table would be. The table is valid until
 * the next call or cfi_unwinder__free(). Blocks on file I/O on a miss;
 * does not log.
 */
const struct cfi_table *cfi_unwinder__table(struct cfi_unwinder *u, const struct addrspace *as,
					    const struct mapping *m)
{
	char buf[PATH_MAX + 8];
	const char *key = cfi_table__key(m, buf, sizeof(buf));
	struct table_entry *e = NULL, *victim = NULL;

	if (u->mru && strcmp(u->mru->key, key) == 0) {
		e = u->mru;
	} else {
		for (size_t i = 0; i < CFI_UNWINDER_MAX_TABLES; i++) {
			struct table_entry *c = &u->cache[i];

			if (c->key && strcmp(c->key, key) == 0) {
				e = c;
				break;
			}
			if (!victim || (victim->key && (!c->key || c->last_use < victim->last_use)))
				victim = c;
		}
	}
	if (!e) {
		e = victim;
		entry_clear(e);
		e->key = strdup(key);
		if (!e->key)
			return NULL;
		e->table = cfi_table__compile_mapping(as, m, &u->debuginfo);
	}
	e->last_use = ++u->use_clock;
	u->mru = e;
	return e->table;
}

/* load() - the 8 bytes at @addr from the stack copy; false outside it. */
static bool load(const unsigned char *stack, uint64_t start, size_t len, uint64_t addr,
		 uint64_t *ret)
{
	uint64_t off = addr - start;

	if (addr < start || off > len || len - off < sizeof(*ret))
		return false;
	memcpy(ret, stack + off, sizeof(*ret));
	return true;
}

/*
 * cfi_unwinder__unwind() - unwind one sample with the tables, as
 * unwinder__unwind() does with libdw, and with the same output.
 * @as: the process's mappings. @regs: UNWIND_NREGS user registers, DWARF
 *   numbering (only rip, rsp and rbp are used). @stack, @stack_len: the
 *   bytes copied from regs[UNWIND_REG_SP] up; only the first 64 KiB are
 *   read. @ret_pcs: up to @max PCs, leaf first: ret_pcs[0] is regs[IP], the
 *   others return addresses (looked up at - 1).
 * *@ret_status: UNWIND_END at a row whose return address is undefined
 *   (_start, clone3); UNWIND_TRUNCATED beyond @max frames; UNWIND_NO_CFI at
 *   a PC in no mapping, in a module without a table, or where its table has
 *   no CFI (the PC is the last stored); UNWIND_NO_STACK when a load falls
 *   outside the copy (also a CFA in rbp whose saved value was outside it);
 *   UNWIND_ERROR at a row the table cannot express (a DWARF expression, a
 *   signal frame, stored as its PC + 1 as unwinder__unwind() stores it:
 *   *@ret_stop_kind says which), a CFA in rbp when CFI left rbp undefined,
 *   a return address of 0, or an SP that does not grow.
 * @ret_stop_kind: NULL, or the kind of the last row looked up
 *   (CFI_ROW_NONE when there was none).
 *
 * Returns the number of PCs (>= 1 when regs[IP] != 0 and @max > 0). Never
 * fails on bad input. Compiles tables on first use (blocks on file I/O,
 * allocates); else does not allocate. Does not log.
 */
int cfi_unwinder__unwind(struct cfi_unwinder *u, const struct addrspace *as, const uint64_t *regs,
			 const void *stack, size_t stack_len, uint64_t *ret_pcs, size_t max,
			 enum unwind_status *ret_status, enum cfi_row_kind *ret_stop_kind)
{
	uint64_t pc = regs[UNWIND_REG_IP], sp = regs[UNWIND_REG_SP], bp = regs[UNWIND_REG_BP];
	uint64_t start = sp;
	enum cfi_row_kind kind = CFI_ROW_NONE;
	/* rbp: known; undefined by CFI; or saved outside the stack copy */
	enum { BP_KNOWN, BP_UNDEF, BP_NO_STACK } bp_state = BP_KNOWN;
	size_t n = 0;

	stack_len = stack ? MIN(stack_len, (size_t)STACK_MAX_BYTES) : 0;
	if (ret_stop_kind)
		*ret_stop_kind = CFI_ROW_NONE;
	if (pc == 0) {
		*ret_status = UNWIND_NO_CFI;
		return 0;
	}
	for (;;) {
		uint64_t lookup = n == 0 ? pc : pc - 1, cfa, ra, saved_bp;
		const struct mapping *m;
		const struct cfi_table *t;
		const struct cfi_row *row;

		if (n == max) {
			*ret_status = UNWIND_TRUNCATED;
			break;
		}
		ret_pcs[n++] = pc;
		m = addrspace__find(as, lookup);
		t = m ? cfi_unwinder__table(u, as, m) : NULL;
		row = t ? cfi_table__find(t, lookup - m->load_bias) : NULL;
		kind = row ? (enum cfi_row_kind)row->kind : CFI_ROW_NONE;
		if (kind == CFI_ROW_NONE) {
			*ret_status = UNWIND_NO_CFI;
			break;
		}
		if (kind == CFI_ROW_OUTERMOST) {
			*ret_status = UNWIND_END;
			break;
		}
		if (kind == CFI_ROW_CFA) {
			if ((row->flags & CFI_ROW_CFA_BP) && bp_state != BP_KNOWN) {
				*ret_status =
				    bp_state == BP_NO_STACK ? UNWIND_NO_STACK : UNWIND_ERROR;
				break;
			}
			cfa = ((row->flags & CFI_ROW_CFA_BP) ? bp : sp) +
			      (uint64_t)(int64_t)row->cfa_off;
		} else if (kind == CFI_ROW_PLT) {
			/* the index the entry pushed at its byte fp_off is on the stack */
			cfa = sp + (uint64_t)(int64_t)row->cfa_off +
			      ((int64_t)(pc & 15) >= row->fp_off ? 8 : 0);
		} else {
			/*
			 * EXPR, SIGNAL. A signal frame's PC (the trampoline, which the
			 * handler "returns" to) is stored + 1 as libdw stores it: the
			 * symbolizer's - 1 then lands on __restore_rt itself.
			 */
			if (kind == CFI_ROW_SIGNAL && n > 1)
				ret_pcs[n - 1] = pc + 1;
			*ret_status = UNWIND_ERROR;
			break;
		}
		if (!load(stack, start, stack_len, cfa - 8, &ra)) {
			*ret_status = UNWIND_NO_STACK;
			break;
		}
		if (row->flags & CFI_ROW_FP_SAVED) {
			/* a saved rbp outside the copy is lost, as libdw has it: only
			 * a CFA that needs it later stops the walk */
			if (load(stack, start, stack_len, cfa + (uint64_t)(int64_t)row->fp_off,
				 &saved_bp)) {
				bp = saved_bp;
				bp_state = BP_KNOWN;
			} else {
				bp_state = BP_NO_STACK;
			}
		} else if (row->flags & CFI_ROW_FP_UNDEF) {
			bp_state = BP_UNDEF;
		}
		if (ra == 0 || cfa <= sp) {
			*ret_status = UNWIND_ERROR;
			break;
		}
		pc = ra;
		sp = cfa;
	}
	if (ret_stop_kind)
		*ret_stop_kind = kind;
	return (int)MIN(n, (size_t)INT_MAX);
}
