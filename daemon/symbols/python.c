/*
 * python.c - CPython stacks: finds the interpreter of a target, reads the
 * code objects of the Python frames the BPF program sampled, and merges
 * those frames into the native stack (see python.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hashmap.h"
#include "symbols/python.h"
#include "util.h"

/* Generated at build time for each interpreter found with its headers (daemon/meson.build). */
#if __has_include("python_offsets_311.h")
#include "python_offsets_311.h"
#endif
#if __has_include("python_offsets_312.h")
#include "python_offsets_312.h"
#endif
#if __has_include("python_offsets_313.h")
#include "python_offsets_313.h"
#endif

static const struct python_offsets known_offsets[] = {
#ifdef PYTHON_OFFSETS_311
    PYTHON_OFFSETS_311,
#endif
#ifdef PYTHON_OFFSETS_312
    PYTHON_OFFSETS_312,
#endif
#ifdef PYTHON_OFFSETS_313
    PYTHON_OFFSETS_313,
#endif
    {0}, /* the end (and the array is never empty) */
};

/* Read @len bytes at @addr of process @pid. 0, or -EFAULT on a short read, -ESRCH, -EPERM. */
static int mem_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

/* The symbols python__find() needs from one ELF file. */
struct py_symbols {
	uint64_t runtime, eval, eval_size, code_type, version;
};

static void elf_find_symbols(Elf *elf, struct py_symbols *ret)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) ||
		    (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    !sym.st_value)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || (name[0] != '_' && name[0] != 'P'))
				continue;
			if (strcmp(name, "_PyRuntime") == 0) {
				ret->runtime = sym.st_value;
			} else if (strcmp(name, "_PyEval_EvalFrameDefault") == 0) {
				ret->eval = sym.st_value;
				ret->eval_size = sym.st_size;
			} else if (strcmp(name, "PyCode_Type") == 0) {
				ret->code_type = sym.st_value;
			} else if (strcmp(name, "Py_Version") == 0) {
				ret->version = sym.st_value;
			}
		}
	}
}

/* A mapped file whose name says it may hold the interpreter: python3.X or libpython3.X.so. */
static bool interpreter_candidate(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strncmp(base, "python3", 7) == 0 || strncmp(base, "libpython3", 10) == 0;
}

int python__find(pid_t pid, const struct addrspace *as, struct python_interp *ret)
{
	const struct mapping *maps;
	size_t n;

	maps = addrspace__mappings(as, &n);
	for (size_t i = 0; i < n; i++) {
		const struct mapping *m = &maps[i];
		struct py_symbols sym = {0};
		_cleanup_close_ int fd = -1;
		char path[PATH_MAX];
		uint32_t hex;
		Elf *elf;
		int r;

		if (!interpreter_candidate(m->path) || (i > 0 && maps[i - 1].path == m->path))
			continue;
		fd = addrspace__open_file(as, m, path, sizeof(path));
		if (fd < 0)
			continue;
		elf_version(EV_CURRENT);
		elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
		if (!elf)
			continue;
		elf_find_symbols(elf, &sym);
		elf_end(elf);
		if (!sym.runtime || !sym.eval || !sym.version)
			continue;
		/* Py_Version (3.11+) holds PY_VERSION_HEX: 0x030b07f0 is 3.11.7 final. */
		r = mem_read(pid, sym.version + m->load_bias, &hex, sizeof(hex));
		if (r < 0)
			return r == -EFAULT ? -ENOENT : r;
		if ((hex >> 24) != 3 || ((hex >> 16) & 0xff) < 11)
			continue;
		memset(ret, 0, sizeof(*ret));
		snprintf(ret->version, sizeof(ret->version), "%u.%u.%u", hex >> 24,
			 (hex >> 16) & 0xff, (hex >> 8) & 0xff);
		ret->runtime_addr = sym.runtime + m->load_bias;
		ret->eval_start = sym.eval + m->load_bias;
		ret->eval_end = ret->eval_start + (sym.eval_size ? sym.eval_size : 1);
		ret->code_type_addr = sym.code_type ? sym.code_type + m->load_bias : 0;
		for (size_t k = 0; known_offsets[k].version_hex; k++)
			if (known_offsets[k].version_hex == (hex & 0xffff0000))
				ret->offsets = &known_offsets[k];
		return 0;
	}
	return -ENOENT;
}

/* Lines cached per code object (struct py_code.line_key): 4 x 8 bytes. */
#define PY_LINE_CACHE 4

/* A code object of a process, as read; kept until the reader is freed (tokens point at it). */
struct py_code {
	struct py_code *next_all;
	struct py_code *prev_at; /* the code seen at the same address before this one */
	/* What the code object's head held when read: a change means new code at the address. */
	uint64_t type, qualname_ptr, filename_ptr, linetable_ptr;
	int32_t firstlineno;
	uint32_t tag; /* py_code_tag() of the above, as the BPF walk computes it */
	char *qualname; /* NULL if unreadable */
	char *filename;
	uint8_t *linetable;
	size_t linetable_len;
	/* The lines of code units looked up last (code_line()), direct-mapped by unit:
	 * a frame waiting in a call is sampled at the same unit again and again. */
	uint32_t line_key[PY_LINE_CACHE]; /* the unit + 2; 0: empty */
	int32_t line_of[PY_LINE_CACHE];
};

/*
 * The code object last seen at an address, in any process of the session:
 * a child forked from the target has its parent's code objects at the same
 * addresses (a DataLoader worker), so they are read once, not once per
 * child. A frame whose tag (computed by the BPF walk from the identity
 * fields) is that of the code, or of one of the PY_CODES_PER_ADDR seen at
 * the address before it, is that code, with no read of the target's memory;
 * any other is read again and code_get() checks the head's identity fields.
 * A head read whose tag is not the frame's means the code object was freed
 * and another made at its place between the sample and the read (samples
 * are read in batches, up to a few hundred ms late): the frame is then
 * unknown ("[python]"), not named after the new code.
 */
#define PY_CODES_PER_ADDR 8
struct py_code_slot {
	uint64_t addr;
	struct py_code *code;
};

/* A Python frame location: what a token stands for. */
struct py_loc {
	const struct py_code *code;
	int line;
	uint32_t index;
};

struct python_reader {
	struct python_interp interp;
	struct hashmap codes;	  /* struct py_code_slot */
	struct hashmap locs;	  /* struct py_loc, by (code, line) */
	struct py_loc **loc_list; /* by index: token - PYTHON_TOKEN_TAG */
	size_t nlocs, cap_locs;
	struct py_code *all;
	struct py_code unknown; /* frames whose code object could not be read */
	unsigned char *heads;	/* PROFILE_MAX_PY_FRAMES code object heads, read per sample */
};

struct python_reader *python_reader__new(const struct python_interp *interp)
{
	struct python_reader *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->interp = *interp;
	r->unknown.filename = (char *)"[python]";
	r->heads =
	    malloc(PROFILE_MAX_PY_FRAMES * (interp->offsets ? interp->offsets->code_adaptive : 1));
	if (!r->heads) {
		free(r);
		return NULL;
	}
	return r;
}

void python_reader__free(struct python_reader *r)
{
	struct py_code_slot *slot;
	struct py_code *c;

	if (!r)
		return;
	hashmap__for_each(&r->codes, i, slot) free(slot);
	hashmap__free(&r->codes);
	for (size_t i = 0; i < r->nlocs; i++)
		free(r->loc_list[i]);
	free(r->loc_list);
	hashmap__free(&r->locs);
	while ((c = r->all)) {
		r->all = c->next_all;
		free(c->qualname);
		free(c->filename);
		free(c->linetable);
		free(c);
	}
	free(r->heads);
	free(r);
}

static void put_utf8(char **p, uint32_t cp)
{
	unsigned char *o = (unsigned char *)*p;

	if (cp < 0x80) {
		*o++ = (unsigned char)cp;
	} else if (cp < 0x800) {
		*o++ = 0xc0 | cp >> 6;
		*o++ = 0x80 | (cp & 0x3f);
	} else if (cp < 0x10000) {
		*o++ = 0xe0 | cp >> 12;
		*o++ = 0x80 | ((cp >> 6) & 0x3f);
		*o++ = 0x80 | (cp & 0x3f);
	} else {
		*o++ = 0xf0 | (cp >> 18 & 0x07);
		*o++ = 0x80 | ((cp >> 12) & 0x3f);
		*o++ = 0x80 | ((cp >> 6) & 0x3f);
		*o++ = 0x80 | (cp & 0x3f);
	}
	*p = (char *)o;
}

/* Longest name or path read from a target (characters). */
#define MAX_STR_CHARS 4096

/* A str object of the target as a new UTF-8 string; NULL if unreadable or not a compact str. */
static char *read_str(pid_t pid, const struct python_offsets *o, uint64_t addr)
{
	unsigned char head[128];
	_cleanup_free_ unsigned char *data = NULL;
	uint32_t state, kind;
	int64_t len;
	char *out, *p;

	if (!addr || o->unicode_compact_size > sizeof(head) ||
	    mem_read(pid, addr, head, o->unicode_compact_size) < 0)
		return NULL;
	memcpy(&state, head + o->unicode_state, sizeof(state));
	memcpy(&len, head + o->unicode_length, sizeof(len));
	kind = (state >> o->unicode_kind_shift) & o->unicode_kind_mask;
	if (!(state >> o->unicode_compact_bit & 1) || len < 0 || len > MAX_STR_CHARS ||
	    (kind != 1 && kind != 2 && kind != 4))
		return NULL;
	data = malloc((size_t)len * kind + 1);
	out = malloc((size_t)len * 4 + 1);
	if (!data || !out ||
	    mem_read(pid,
		     addr + (state >> o->unicode_ascii_bit & 1 ? o->unicode_ascii_size
							       : o->unicode_compact_size),
		     data, (size_t)len * kind) < 0) {
		free(out);
		return NULL;
	}
	p = out;
	for (int64_t i = 0; i < len; i++) {
		uint32_t cp;

		if (kind == 1) {
			cp = data[i];
		} else if (kind == 2) {
			uint16_t v;

			memcpy(&v, data + 2 * i, 2);
			cp = v;
		} else {
			memcpy(&cp, data + 4 * i, 4);
			if (cp > 0x10ffff)
				cp = 0xfffd;
		}
		put_utf8(&p, cp);
	}
	*p = '\0';
	return out;
}

/* Largest line table read (bytes); longer ones give line 0. */
#define MAX_LINETABLE_BYTES (256 * 1024)

static uint8_t *read_bytes(pid_t pid, const struct python_offsets *o, uint64_t addr,
			   size_t *ret_len)
{
	int64_t size;
	uint8_t *buf;

	if (!addr || mem_read(pid, addr + o->bytes_size, &size, sizeof(size)) < 0 || size < 0 ||
	    size > MAX_LINETABLE_BYTES)
		return NULL;
	buf = malloc(size ? (size_t)size : 1);
	if (!buf)
		return NULL;
	if (mem_read(pid, addr + o->bytes_data, buf, (size_t)size) < 0) {
		free(buf);
		return NULL;
	}
	*ret_len = (size_t)size;
	return buf;
}

static uint64_t get_u64(const unsigned char *head, unsigned off)
{
	uint64_t v;

	memcpy(&v, head + off, sizeof(v));
	return v;
}

static unsigned varint(const uint8_t *t, size_t n, size_t *i)
{
	unsigned v = 0, shift = 0;
	uint8_t b;

	do {
		if (*i >= n || shift > 28)
			return 0;
		b = t[(*i)++];
		v |= (unsigned)(b & 63) << shift;
		shift += 6;
	} while (b & 64);
	return v;
}

static int svarint(const uint8_t *t, size_t n, size_t *i)
{
	unsigned v = varint(t, n, i);

	return v & 1 ? -(int)(v >> 1) : (int)(v >> 1);
}

/*
 * The line of code unit @unit (2-byte instructions from the first one) from a
 * CPython 3.11 to 3.13 location table (Objects/locations.md): entries of 1..8 code
 * units, each with a line delta in one of five forms. 0 if unknown.
 */
int python_linetable_line(const uint8_t *t, size_t n, int firstlineno, int64_t unit)
{
	int line = firstlineno;
	int64_t addr = 0;
	size_t i = 0;

	if (unit < 0)
		return firstlineno; /* the frame has not started its first instruction */
	while (i < n) {
		uint8_t b = t[i++];
		int code = (b >> 3) & 15, len = (b & 7) + 1, delta = 0;
		bool none = false;

		if (!(b & 0x80))
			return 0; /* not at the start of an entry: a corrupt table */
		if (code == 15) {
			none = true;
		} else if (code == 14) {
			delta = svarint(t, n, &i);
			varint(t, n, &i); /* end line delta */
			varint(t, n, &i); /* column + 1 */
			varint(t, n, &i); /* end column + 1 */
		} else if (code == 13) {
			delta = svarint(t, n, &i);
		} else if (code >= 10) {
			delta = code - 10;
			i += 2; /* column, end column */
		} else {
			i += 1; /* columns */
		}
		line += delta;
		if (unit < addr + len)
			return none || line < 0 ? 0 : line;
		addr += len;
	}
	return 0;
}

/*
 * The line of code unit @unit of @c (-1: before the first instruction), from
 * its cache, else from its location table (python_linetable_line(), which
 * decodes the table from its start: a few hundred bytes for a long function,
 * once per frame per sample before this cache: 7% of profd's CPU on a
 * PyTorch loop).
 */
static int code_line(struct py_code *c, int64_t unit)
{
	bool keyed = unit >= -1 && unit < INT32_MAX; /* fits line_key as unit + 2 */
	size_t k = (size_t)(unit + 1) % PY_LINE_CACHE;
	int line;

	if (keyed && c->line_key[k] == (uint32_t)(unit + 2))
		return c->line_of[k];
	line = python_linetable_line(c->linetable, c->linetable_len, c->firstlineno, unit);
	if (keyed) {
		c->line_key[k] = (uint32_t)(unit + 2);
		c->line_of[k] = line;
	}
	return line;
}

static bool code_slot_eq(const void *entry, const void *key)
{
	const struct py_code_slot *a = entry, *b = key;

	return a->addr == b->addr;
}

/* The code object at @addr of @pid whose head (code_adaptive bytes) is @head; NULL on OOM. */
static struct py_code *code_get(struct python_reader *r, pid_t pid, uint64_t addr,
				const unsigned char *head)
{
	const struct python_config *o = &r->interp.offsets->bpf;
	struct py_code_slot key = {.addr = addr}, *slot;
	uint64_t h = hash64(HASH64_INIT, &addr, sizeof(addr));
	struct py_code fp =
			   {
			       .type = get_u64(head, o->code_type),
			       .qualname_ptr = get_u64(head, o->code_qualname),
			       .filename_ptr = get_u64(head, o->code_filename),
			       .linetable_ptr = get_u64(head, o->code_linetable),
			   },
		       *c;

	memcpy(&fp.firstlineno, head + o->code_firstlineno, sizeof(fp.firstlineno));
	/* the head holds the bytes the BPF walk read (python-offsets.c checks they fit) */
	fp.tag = py_code_tag_of(head + o->code_filename, o);
	slot = hashmap__find(&r->codes, h, code_slot_eq, &key);
	if (slot && slot->code->type == fp.type && slot->code->qualname_ptr == fp.qualname_ptr &&
	    slot->code->filename_ptr == fp.filename_ptr &&
	    slot->code->linetable_ptr == fp.linetable_ptr &&
	    slot->code->firstlineno == fp.firstlineno)
		return slot->code;
	if (r->interp.code_type_addr && fp.type != r->interp.code_type_addr)
		return &r->unknown; /* not a code object: a frame torn while we read it */

	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = fp;
	c->qualname = read_str(pid, r->interp.offsets, fp.qualname_ptr);
	c->filename = read_str(pid, r->interp.offsets, fp.filename_ptr);
	c->linetable = read_bytes(pid, r->interp.offsets, fp.linetable_ptr, &c->linetable_len);
	c->next_all = r->all;
	r->all = c;
	if (!c->filename) {
		free(c->qualname);
		c->qualname = NULL;
		c->filename = strdup("[python]");
		if (!c->filename)
			return NULL;
	}
	c->prev_at = slot ? slot->code : NULL;
	if (!slot) {
		slot = malloc(sizeof(*slot));
		if (!slot || hashmap__insert(&r->codes, h, slot) < 0) {
			free(slot);
			return NULL;
		}
		*slot = key;
	}
	slot->code = c;
	return c;
}

static bool loc_eq(const void *entry, const void *key)
{
	const struct py_loc *a = entry, *b = key;

	return a->code == b->code && a->line == b->line;
}

/* The token of (@code, @line); 0 on out-of-memory. */
static uint64_t loc_token(struct python_reader *r, const struct py_code *code, int line)
{
	struct py_loc key = {.code = code, .line = line}, *loc;
	uint64_t h = hash64(hash64(HASH64_INIT, &code, sizeof(code)), &line, sizeof(line));

	loc = hashmap__find(&r->locs, h, loc_eq, &key);
	if (loc)
		return PYTHON_TOKEN_TAG | loc->index;
	if (r->nlocs == r->cap_locs) {
		size_t cap = r->cap_locs ? 2 * r->cap_locs : 256;
		struct py_loc **l = realloc(r->loc_list, cap * sizeof(*l));

		if (!l)
			return 0;
		r->loc_list = l;
		r->cap_locs = cap;
	}
	loc = malloc(sizeof(*loc));
	if (!loc || hashmap__insert(&r->locs, h, loc) < 0) {
		free(loc);
		return 0;
	}
	*loc = key;
	loc->index = (uint32_t)r->nlocs;
	r->loc_list[r->nlocs++] = loc;
	return PYTHON_TOKEN_TAG | loc->index;
}

int python_reader__frame(struct python_reader *r, uint64_t token, struct frame_info *ret)
{
	uint64_t i = token & ~PYTHON_TOKEN_TAG;
	const struct py_loc *loc;
	uint64_t h;

	if (!python_token(token) || i >= r->nlocs)
		return -ENOENT;
	loc = r->loc_list[i];
	memset(ret, 0, sizeof(*ret));
	ret->module = loc->code->filename;
	ret->file = loc->code->filename;
	ret->build_id = "";
	ret->function = loc->code->qualname;
	ret->line = loc->line;
	/* Frames of one .py file differ by function and line: both are in the key. */
	h = fnv1a64(HASH64_INIT, loc->code->qualname ? loc->code->qualname : "",
		    loc->code->qualname ? strlen(loc->code->qualname) : 0);
	ret->rel_addr = ((h & 0xffffffffu) << 24) | ((uint64_t)loc->line & 0xffffff);
	return 0;
}

/* The code object seen at @addr whose tag is @tag (non-zero), else NULL. */
static struct py_code *code_known(struct python_reader *r, uint64_t addr, uint32_t tag)
{
	struct py_code_slot key = {.addr = addr}, *slot;
	struct py_code *c;
	int k = 0;

	if (!tag)
		return NULL;
	slot = hashmap__find(&r->codes, hash64(HASH64_INIT, &addr, sizeof(addr)), code_slot_eq,
			     &key);
	for (c = slot ? slot->code : NULL; c && k < PY_CODES_PER_ADDR; c = c->prev_at, k++)
		if (c->tag == tag)
			return c;
	return NULL;
}

/*
 * Tokens for the Python frames of @e, innermost first, in @tok (e->py_len
 * of them). A frame whose code object is known by its tag (code_known())
 * costs no read; the heads of the others are read with one
 * process_vm_readv(), which stops at the first head it cannot read, so the
 * heads after that one are read one by one.
 */
static int frame_tokens(struct python_reader *r, const struct sample_event *e, uint64_t *tok)
{
	const struct python_offsets *o = r->interp.offsets;
	size_t head = o->code_adaptive, n = e->py_len, nio = 0;
	struct iovec local[PROFILE_MAX_PY_FRAMES], remote[PROFILE_MAX_PY_FRAMES];
	struct py_code *code[PROFILE_MAX_PY_FRAMES];
	unsigned char *buf = r->heads;
	size_t iov_of[PROFILE_MAX_PY_FRAMES];
	ssize_t got;

	for (size_t i = 0; i < n; i++) {
		uint64_t addr = e->py[i].code & ~PY_FRAME_ENTRY;

		code[i] = addr ? code_known(r, addr, e->py[i].tag) : &r->unknown;
		if (code[i])
			continue;
		code[i] = &r->unknown;
		iov_of[nio] = i;
		local[nio] = (struct iovec){.iov_base = buf + i * head, .iov_len = head};
		remote[nio] = (struct iovec){.iov_base = (void *)(uintptr_t)addr, .iov_len = head};
		nio++;
	}
	got = nio ? process_vm_readv((pid_t)e->pid, local, nio, remote, nio, 0) : 0;
	for (size_t k = 0; k < nio; k++) {
		size_t i = iov_of[k];
		bool ok = got >= 0 && (size_t)got >= (k + 1) * head;

		if (!ok && got >= 0)
			ok = mem_read((pid_t)e->pid, (uint64_t)(uintptr_t)remote[k].iov_base,
				      buf + i * head, head) == 0;
		if (ok) {
			code[i] = code_get(r, (pid_t)e->pid, (uint64_t)(uintptr_t)remote[k].iov_base,
					   buf + i * head);
			if (!code[i])
				return -ENOMEM;
			/* other code at the address now than when sampled: not this frame's */
			if (e->py[i].tag && code[i]->tag != e->py[i].tag)
				code[i] = &r->unknown;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct py_code *c = code[i];
		uint32_t off = e->py[i].instr_off;
		int line = 0;

		if (c != &r->unknown && c->linetable)
			/* before the first instruction (or unknown): the function's first line */
			line = code_line(c, off == PY_NO_INSTR || off < head
						? -1
						: (int64_t)(off - head) / 2);
		tok[i] = loc_token(r, c, line);
		if (!tok[i])
			return -ENOMEM;
	}
	return 0;
}

int python_reader__merge(struct python_reader *r, const struct sample_event *e, uint64_t *out,
			 size_t max, size_t *ret_n, bool *ret_cut)
{
	const uint64_t *u = (const uint64_t *)e->ips + e->kstack_len;
	size_t ulen = e->ustack_len, evals = 0, segs = 0, n = 0, f = 0;
	uint64_t tok[PROFILE_MAX_PY_FRAMES];
	int r2;

	*ret_cut = false;
	for (size_t i = 0; i < ulen && i < max; i++)
		out[i] = u[i];
	*ret_n = MIN(ulen, max);
	if (!r->interp.offsets || e->py_len == 0 || e->py_len > PROFILE_MAX_PY_FRAMES)
		return 0;

	/* A return address may be just past the end of its call: look one byte back. */
	for (size_t i = 0; i < ulen; i++) {
		uint64_t a = i > 0 || e->kstack_len ? u[i] - 1 : u[i];

		evals += a >= r->interp.eval_start && a < r->interp.eval_end;
	}
	for (size_t i = 0; i < e->py_len; i++)
		segs += (e->py[i].code & PY_FRAME_ENTRY) != 0;
	/* The outermost frame starts the first interpreter call; the walk was cut if it is not an
	 * entry. */
	if (evals == 0 || segs != evals || !(e->py[e->py_len - 1].code & PY_FRAME_ENTRY))
		return -EPROTO;

	r2 = frame_tokens(r, e, tok);
	if (r2 < 0)
		return r2;
	for (size_t i = 0; i < ulen; i++) {
		uint64_t a = i > 0 || e->kstack_len ? u[i] - 1 : u[i];

		if (a >= r->interp.eval_start && a < r->interp.eval_end) {
			/* This call ran frames f.. up to and including the next entry frame. */
			for (; f < e->py_len; f++) {
				if (n == max) {
					*ret_cut = true;
					break;
				}
				out[n++] = tok[f];
				if (e->py[f].code & PY_FRAME_ENTRY) {
					f++;
					break;
				}
			}
		} else if (n < max) {
			out[n++] = u[i];
		} else {
			*ret_cut = true;
		}
	}
	*ret_n = n;
	return 1;
}
