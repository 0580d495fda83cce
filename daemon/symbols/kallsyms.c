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
	return x->order < y->order ? -1 : x->order > y->order;
}

/*
 * kallsyms__load_file() - read the text symbols (types t, T, w, W) of a
 * kallsyms-format file @path into @k, sorted, one per address. Malformed
 * lines are skipped; bytes past KALLSYMS_MAX_BYTES ignored. Returns 0 or
 * -errno (open/read failure, -ENOMEM).
 */
int kallsyms__load_file(struct kallsyms *k, const char *path)
{
	_cleanup_fclose_ FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	_cleanup_free_ struct ksym *syms = NULL;
	size_t line_cap = 0, n = 0, cap = 0, out;
	uint64_t total = 0;
	bool all_zero = true;
	ssize_t len;

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
		sym = (struct ksym){
		    .addr = addr,
		    .order = (uint32_t)MIN(n, (size_t)UINT32_MAX),
		    .global = type == 'T' || type == 'W',
		};
		sym.name = arena_strndup(&k->names, name, name_len);
		if (!sym.name)
			return -ENOMEM;
		if (module_len) {
			/* kallsyms_parse_line() bounds module_len by KSYM_NAME_MAX + 1 */
			memcpy(mod_name, module, module_len);
			mod_name[module_len] = '\0';
			sym.module = strpool_intern(k->pool, mod_name);
			if (!sym.module)
				return -ENOMEM;
		}
		if (grow_array((void **)&syms, &cap, n, sizeof(*syms)) < 0)
			return -ENOMEM;
		syms[n++] = sym;
	}
	if (ferror(f))
		return -EIO;

	qsort(syms, n, sizeof(*syms), ksym_cmp);
	for (size_t i = out = 0; i < n; i++)
		if (out == 0 || syms[i].addr != syms[out - 1].addr)
			syms[out++] = syms[i];
	free(k->syms);
	k->syms = TAKE_PTR(syms);
	k->n = out;
	k->hidden = n > 0 && all_zero;
	return 0;
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
	ret->function = k->name;
	if (k->module)
		ret->module = k->module;
	return 0;
}

/* kallsyms__done() - free what @k holds; it may be loaded again. */
void kallsyms__done(struct kallsyms *k)
{
	free(k->syms);
	arena_done(&k->names);
	k->syms = NULL;
	k->n = 0;
	k->loaded = false;
}
