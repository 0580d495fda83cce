/* kallsyms.c - kernel addresses to function names, from /proc/kallsyms (or a file in its format).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbols/addr_bound.h"
#include "symbols/addrspace_internal.h"
#include "symbols/kallsyms.h"
#include "util.h"

/*
 * kallsyms_parse_line() - parse "address type name[\t[module]]". Returns 0,
 * or -EINVAL for a malformed line. @name and @module point into @line;
 * *@module_len is 0 for the kernel image.
 */
static int kallsyms_parse_line(const char *line, size_t len, uint64_t *addr, char *type,
			       const char **name, size_t *name_len, const char **module,
			       size_t *module_len)
{
	const char *p = line, *end = line + len, *q;

	if (len > 0 && end[-1] == '\n')
		end--;
	if (!parse_hex(&p, end, addr) || !parse_char(&p, end, ' ') || p >= end)
		return -EINVAL;
	*type = *p++;
	if (!parse_char(&p, end, ' '))
		return -EINVAL;
	for (q = p; q < end && *q != '\t' && *q != ' ' && *q != '\0'; q++)
		;
	if (q == p || q - p > KSYM_NAME_MAX)
		return -EINVAL;
	*name = p;
	*name_len = q - p;
	*module = NULL;
	*module_len = 0;
	p = q;
	skip_blanks(&p, end);
	if (p < end) {
		/* "[module]", possibly followed by more columns we do not use */
		if (*p != '[')
			return -EINVAL;
		for (q = p; q < end && *q != ']' && *q != '\0'; q++)
			;
		if (q >= end || q - p > KSYM_NAME_MAX)
			return -EINVAL;
		*module = p;
		*module_len = q - p + 1;
	}
	return 0;
}

static int ksym_cmp(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->global != y->global)
		return x->global ? -1 : 1; /* at one address, prefer the global name */
	/* then the first in the file: names are stored in file order */
	return (x->name > y->name) - (x->name < y->name);
}

/* What kallsyms__load_file() builds before it replaces what @k had. */
struct ksym_load {
	struct ksym *syms;
	size_t n, cap;
	char *names;
	size_t names_len, names_cap;
	const char **modules;
	size_t n_modules, modules_cap;
};

static void ksym_load_done(struct ksym_load *l)
{
	free(l->syms);
	free(l->names);
	free(l->modules);
}

/* The index + 1 of module @name (interned in @pool) in @l, added if new; -ENOMEM, -E2BIG. */
static int ksym_module(struct ksym_load *l, struct strpool *pool, const char *name)
{
	const char *m = strpool_intern(pool, name);

	if (!m)
		return -ENOMEM;
	/* a module's symbols come together: look from the newest */
	for (size_t i = l->n_modules; i > 0; i--)
		if (l->modules[i - 1] == m)
			return (int)i;
	if (l->n_modules >= UINT16_MAX)
		return -E2BIG;
	if (grow_array((void **)&l->modules, &l->modules_cap, l->n_modules, sizeof(*l->modules)) < 0)
		return -ENOMEM;
	l->modules[l->n_modules++] = m;
	return (int)l->n_modules;
}

/* Append @name (@len bytes) and a NUL to @l's names; its offset in *@ret. */
static int ksym_name(struct ksym_load *l, const char *name, size_t len, uint32_t *ret)
{
	/* KALLSYMS_MAX_BYTES keeps every offset within 32 bits */
	if (grow_array_to((void **)&l->names, &l->names_cap, l->names_len + len + 1, 1) < 0)
		return -ENOMEM;
	memcpy(l->names + l->names_len, name, len);
	l->names[l->names_len + len] = '\0';
	*ret = (uint32_t)l->names_len;
	l->names_len += len + 1;
	return 0;
}

/*
 * kallsyms__load_file() - read the text symbols (types t, T, w, W) of a
 * kallsyms-format file @path into @k, sorted, one per address. Malformed
 * lines are skipped; bytes past KALLSYMS_MAX_BYTES ignored. Returns 0 or
 * -errno (open/read failure, -ENOMEM; -E2BIG past 65535 modules), @k
 * unchanged on failure.
 */
int kallsyms__load_file(struct kallsyms *k, const char *path)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	struct ksym_load l = {0};
	size_t line_cap = 0, out;
	uint64_t total = 0;
	bool all_zero = true;
	ssize_t len;
	int r = 0;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	while ((len = getline(&line, &line_cap, f)) > 0) {
		const char *name, *module;
		size_t name_len, module_len;
		uint64_t addr;
		char type, mod_name[KSYM_NAME_MAX + 2];
		struct ksym sym;

		total += (uint64_t)len;
		if (total > KALLSYMS_MAX_BYTES)
			break;
		if ((size_t)len > LINE_MAX_BYTES ||
		    kallsyms_parse_line(line, (size_t)len, &addr, &type, &name, &name_len, &module,
					&module_len) < 0)
			continue;
		if (type != 't' && type != 'T' && type != 'w' && type != 'W')
			continue;
		if (addr)
			all_zero = false;
		sym = (struct ksym){.addr = addr, .global = type == 'T' || type == 'W'};
		r = ksym_name(&l, name, name_len, &sym.name);
		if (r == 0 && module_len) {
			/* kallsyms_parse_line() bounds module_len by KSYM_NAME_MAX + 1 */
			memcpy(mod_name, module, module_len);
			mod_name[module_len] = '\0';
			r = ksym_module(&l, k->pool, mod_name);
			sym.module = (uint16_t)(r > 0 ? r : 0);
		}
		if (r >= 0)
			r = grow_array((void **)&l.syms, &l.cap, l.n, sizeof(*l.syms));
		if (r < 0)
			goto fail;
		l.syms[l.n++] = sym;
	}
	if (ferror(f)) {
		r = -EIO;
		goto fail;
	}

	qsort(l.syms, l.n, sizeof(*l.syms), ksym_cmp);
	for (size_t i = out = 0; i < l.n; i++)
		if (out == 0 || l.syms[i].addr != l.syms[out - 1].addr)
			l.syms[out++] = l.syms[i];
	free(k->syms);
	free(k->names);
	free(k->modules);
	/* Kept for the daemon's life: without the room grown for. */
	k->syms = shrink_alloc(l.syms, out * sizeof(*l.syms));
	k->n = out;
	k->names = shrink_alloc(l.names, l.names_len);
	k->names_len = l.names_len;
	k->modules = l.modules;
	k->n_modules = l.n_modules;
	k->hidden = l.n > 0 && all_zero;
	return 0;
fail:
	ksym_load_done(&l);
	return r;
}

/*
 * kallsyms__lookup() - symbolize kernel address @addr from /proc/kallsyms
 * (read once, on first use; kernel modules or BPF programs loaded later are
 * not seen).
 * @return_addr: as for symbolizer__user(): look up @addr - 1.
 *
 * Returns 0 with function set (module "[kernel.kallsyms]" or "[modname]",
 * rel_addr = @addr), or 0 with function NULL when kallsyms hides addresses
 * (kptr_restrict), cannot be read, or has no symbol at most KSYM_MAX_DISTANCE
 * below @addr. -ENOMEM if kallsyms could not be loaded for lack of memory
 * (tried again next call). Reads a large /proc file on first use; does not
 * log.
 */
int kallsyms__lookup(struct kallsyms *ks, uint64_t addr, bool return_addr, struct frame_info *ret)
{
	uint64_t lookup = return_addr && addr > 0 ? addr - 1 : addr;
	const struct ksym *k;
	size_t lo;

	*ret = (struct frame_info){
	    .kernel = true,
	    .module = "[kernel.kallsyms]",
	    .build_id = "",
	    .rel_addr = addr,
	};
	if (!ks->loaded) {
		int r = kallsyms__load_file(ks, "/proc/kallsyms");

		if (r == -ENOMEM)
			return r;
		ks->loaded = true; /* other failures: no kernel symbols, don't retry */
	}
	if (ks->hidden)
		return 0;
	lo = addr_upper_bound(ks->syms, ks->n, sizeof(*ks->syms), offsetof(struct ksym, addr),
			      lookup);
	if (lo == 0)
		return 0;
	k = &ks->syms[lo - 1];
	if (lookup - k->addr >= KSYM_MAX_DISTANCE)
		return 0;
	ret->function = ks->names + k->name;
	if (k->module)
		ret->module = ks->modules[k->module - 1];
	return 0;
}

/* kallsyms__done() - free what @k holds; it may be loaded again. */
void kallsyms__done(struct kallsyms *k)
{
	free(k->syms);
	free(k->names);
	free(k->modules);
	k->syms = NULL;
	k->names = NULL;
	k->modules = NULL;
	k->n = k->names_len = k->n_modules = 0;
	k->loaded = false;
}
