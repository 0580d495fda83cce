/*
 * export.c - profd's "profile" response loaded into arrays, and written as
 * folded stacks, pprof (profile.proto, gzip), Chrome trace event JSON and
 * speedscope JSON for the tools that read those.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "export.h"
#include "hashmap.h"
#include "profile.pb-c.h"
#include "util.h"

static int64_t int_of(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *str_of(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* xprofile__free() - free what xprofile__load() allocated; @p is left empty. Accepts an empty @p.
 */
void xprofile__free(struct xprofile *p)
{
	for (size_t i = 0; i < p->n_frames; i++)
		if (p->frames[i].name != p->frames[i].function)
			free((char *)p->frames[i].name);
	for (size_t i = 0; i < p->n_stacks; i++)
		free(p->stacks[i].frames);
	free(p->frames);
	free(p->stacks);
	free(p->samples);
	free(p->threads);
	json_decref(p->json);
	json_decref(p->session_json);
	*p = (struct xprofile){};
}

/* Orders frame indexes by (name, module), to number the functions. */
static int frame_func_cmp(const void *a, const void *b, void *arg)
{
	const struct xframe *frames = arg;
	const struct xframe *x = &frames[*(const size_t *)a], *y = &frames[*(const size_t *)b];
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->module, y->module);
}

/*
 * xprofile__load() - load profd's "profile" response @profile (a reference
 * is taken) and the SESSION object @session (for pid, comm and elapsed
 * time). Returns 0, -EBADMSG if a field is missing or out of range, -ENOMEM.
 * On failure @p is left empty.
 */
static size_t count_char(const char *s, char c)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == c;
	return n;
}

/*
 * The "samples_packed" rows (docs/protocol.md: "STACK,TID,WINDOW,COUNT"
 * separated by ';') into @p->samples (@p->n_samples of them, allocated).
 * -EBADMSG for a malformed row or a stack index out of range.
 */
static int parse_packed(const char *s, struct xprofile *p)
{
	for (size_t i = 0; i < p->n_samples; i++) {
		long long f[4];
		char *end;

		for (int k = 0; k < 4; k++) {
			errno = 0;
			f[k] = strtoll(s, &end, 10);
			if (end == s || errno ||
			    *end != (k < 3		    ? ','
				     : i + 1 < p->n_samples ? ';'
							    : '\0'))
				return -EBADMSG;
			s = end + (*end != '\0');
		}
		if (f[0] < 0 || (size_t)f[0] >= p->n_stacks)
			return -EBADMSG;
		p->samples[i] = (struct xsample){
		    .stack = (size_t)f[0], .tid = f[1], .window_ns = f[2], .count = f[3]};
	}
	return 0;
}

int xprofile__load(struct xprofile *p, json_t *profile, const json_t *session)
{
	_cleanup_free_ size_t *order = NULL;
	const json_t *frames = json_object_get(profile, "frames");
	const json_t *stacks = json_object_get(profile, "stacks");
	const json_t *samples = json_object_get(profile, "samples");
	const char *packed = json_string_value(json_object_get(profile, "samples_packed"));
	const json_t *threads = json_object_get(profile, "threads");
	const json_t *v;
	size_t i;
	int r = -EBADMSG;

	*p = (struct xprofile){.json = json_incref(profile),
			       .session_json = json_incref((json_t *)session)};
	if (!json_is_array(frames) || !json_is_array(stacks) ||
	    !(json_is_array(samples) || packed) || !json_is_array(threads))
		goto fail;
	p->session = int_of(profile, "session");
	p->event = str_of(profile, "event") ?: "?";
	p->period = int_of(profile, "period");
	p->period_unit = str_of(profile, "period_unit") ?: "nanoseconds";
	p->started_at_ns = int_of(profile, "started_at_ns");
	p->total_samples = int_of(profile, "total_samples");
	p->lost_samples = int_of(profile, "lost_samples");
	p->truncated_stacks = int_of(profile, "truncated_stacks");
	p->unsymbolized_frames = int_of(profile, "unsymbolized_frames");
	p->pid = int_of(session, "pid");
	p->comm = str_of(session, "comm") ?: "?";
	p->exe = str_of(session, "exe") ?: "";
	p->elapsed_ns = (int64_t)(json_number_value(json_object_get(session, "elapsed_s")) * 1e9);

	p->n_frames = json_array_size(frames);
	p->frames = calloc(p->n_frames ?: 1, sizeof(*p->frames));
	p->n_stacks = json_array_size(stacks);
	p->stacks = calloc(p->n_stacks ?: 1, sizeof(*p->stacks));
	p->n_samples =
	    packed ? (*packed != '\0') + count_char(packed, ';') : json_array_size(samples);
	p->samples = calloc(p->n_samples ?: 1, sizeof(*p->samples));
	p->n_threads = json_array_size(threads);
	p->threads = calloc(p->n_threads ?: 1, sizeof(*p->threads));
	order = calloc(p->n_frames ?: 1, sizeof(*order));
	if (!p->frames || !p->stacks || !p->samples || !p->threads || !order) {
		r = -ENOMEM;
		goto fail;
	}
	json_array_foreach(frames, i, v)
	{
		struct xframe *f = &p->frames[i];
		const char *addr = str_of(v, "address");

		f->function = str_of(v, "function");
		f->module = str_of(v, "module") ?: "";
		f->build_id = str_of(v, "build_id") ?: "";
		f->file = str_of(v, "file");
		f->line = int_of(v, "line");
		f->address = addr ? strtoull(addr, NULL, 16) : 0;
		f->kernel = str_of(v, "kind") && strcmp(str_of(v, "kind"), "kernel") == 0;
		f->inlined = json_is_true(json_object_get(v, "inlined"));
		if (f->function) {
			f->name = f->function;
		} else {
			const char *base = strrchr(f->module, '/');
			char *name;

			if (asprintf(&name, "%s+0x%" PRIx64, base ? base + 1 : f->module,
				     f->address) < 0) {
				r = -ENOMEM;
				goto fail;
			}
			f->name = name;
		}
		order[i] = i;
	}
	/* Functions: runs of frames with the same (name, module). */
	if (p->n_frames)
		qsort_r(order, p->n_frames, sizeof(*order), frame_func_cmp, p->frames);
	for (i = 0; i < p->n_frames; i++) {
		if (i > 0 && frame_func_cmp(&order[i - 1], &order[i], p->frames) != 0)
			p->n_funcs++;
		p->frames[order[i]].func = p->n_funcs;
	}
	if (p->n_frames)
		p->n_funcs++;

	json_array_foreach(stacks, i, v)
	{
		struct xstack *s = &p->stacks[i];
		size_t j;
		const json_t *idx;

		if (!json_is_array(v))
			goto fail;
		s->len = json_array_size(v);
		s->frames = calloc(s->len ?: 1, sizeof(*s->frames));
		if (!s->frames) {
			r = -ENOMEM;
			goto fail;
		}
		json_array_foreach(v, j, idx)
		{
			json_int_t k = json_integer_value(idx);

			if (!json_is_integer(idx) || k < 0 || (size_t)k >= p->n_frames)
				goto fail;
			s->frames[j] = (size_t)k;
		}
	}
	if (packed && parse_packed(packed, p) < 0)
		goto fail;
	json_array_foreach(samples, i, v)
	{
		json_int_t k = json_integer_value(json_array_get(v, 0));

		if (json_array_size(v) != 4 || k < 0 || (size_t)k >= p->n_stacks)
			goto fail;
		p->samples[i] = (struct xsample){
		    .stack = (size_t)k,
		    .tid = json_integer_value(json_array_get(v, 1)),
		    .window_ns = json_integer_value(json_array_get(v, 2)),
		    .count = json_integer_value(json_array_get(v, 3)),
		};
	}
	json_array_foreach(threads, i, v)
	{
		p->threads[i] = (struct xthread){.tid = int_of(v, "tid"),
						 .pid = int_of(v, "pid") ?: p->pid,
						 .name = str_of(v, "name") ?: "?"};
	}
	return 0;
fail:
	xprofile__free(p);
	return r;
}

/* The name of thread @tid, or "?" if profd has no threads row for it. */
const char *xprofile__thread_name(const struct xprofile *p, int64_t tid)
{
	for (size_t i = 0; i < p->n_threads; i++)
		if (p->threads[i].tid == tid)
			return p->threads[i].name;
	return "?";
}

static int64_t xprofile__thread_pid(const struct xprofile *p, int64_t tid)
{
	for (size_t i = 0; i < p->n_threads; i++)
		if (p->threads[i].tid == tid)
			return p->threads[i].pid;
	return p->pid;
}

/* A folded line: the stack's names root first, ';'-joined. */
struct folded {
	char *line;
	int64_t count;
};

static int folded_cmp(const void *a, const void *b)
{
	return strcmp(((const struct folded *)a)->line, ((const struct folded *)b)->line);
}

/* Writes @name with the separators of the folded format (';', newline) made '_'. */
static void put_folded_name(FILE *f, const char *name)
{
	for (const char *c = name; *c; c++)
		fputc(*c == ';' || *c == '\n' ? '_' : *c, f);
}

/*
 * export__folded() - one line per distinct call stack, "root;...;leaf COUNT",
 * sorted, as FlameGraph's flamegraph.pl and inferno read: the counts add up
 * to the samples of @tid (0: of all threads). An empty stack is "[no frames]".
 * Returns 0 or -ENOMEM.
 */
int export__folded(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_free_ struct folded *lines = calloc(p->n_stacks ?: 1, sizeof(*lines));
	_cleanup_free_ int64_t *counts = calloc(p->n_stacks ?: 1, sizeof(*counts));
	size_t n = 0;
	int r = 0;

	if (!lines || !counts)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			counts[p->samples[i].stack] += p->samples[i].count;
	for (size_t i = 0; i < p->n_stacks; i++) {
		const struct xstack *s = &p->stacks[i];
		size_t size = 0;
		FILE *m;

		if (!counts[i])
			continue;
		m = open_memstream(&lines[n].line, &size);
		if (!m) {
			r = -ENOMEM;
			break;
		}
		for (size_t j = s->len; j-- > 0;) {
			put_folded_name(m, p->frames[s->frames[j]].name);
			if (j)
				fputc(';', m);
		}
		if (s->len == 0)
			fputs("[no frames]", m);
		if (fclose(m) != 0) {
			r = -ENOMEM;
			break;
		}
		lines[n++].count = counts[i];
	}
	if (r == 0 && n > 0)
		qsort(lines, n, sizeof(*lines), folded_cmp);
	for (size_t i = 0; i < n; i++) {
		int64_t c = lines[i].count;

		/* Different stacks can print the same (inlined frames, equal names): merge. */
		while (i + 1 < n && strcmp(lines[i].line, lines[i + 1].line) == 0) {
			free(lines[i].line);
			c += lines[++i].count;
		}
		if (r == 0)
			fprintf(f, "%s %" PRId64 "\n", lines[i].line, c);
		free(lines[i].line);
	}
	return r;
}

/* The string table of a pprof profile: each string once, "" first. */
struct strtab {
	char **s;
	size_t n, cap;
	struct hashmap index; /* the strings, by content: 1 + index into s, as a pointer */
};

/* A string looked up in strtab.index: the table its entries index. */
struct strtab_key {
	const struct strtab *t;
	const char *s;
};

static bool strtab_eq(const void *entry, const void *key)
{
	const struct strtab_key *k = key;

	return strcmp(k->t->s[(uintptr_t)entry - 1], k->s) == 0;
}

/* Index of @s in @t, added if new; -ENOMEM. */
static int64_t strtab__intern(struct strtab *t, const char *s)
{
	struct strtab_key key;
	uint64_t h;
	void *found;

	if (!s)
		s = "";
	key = (struct strtab_key){t, s};
	h = hash64(HASH64_INIT, s, strlen(s));
	found = hashmap__find(&t->index, h, strtab_eq, &key);
	if (found)
		return (int64_t)(uintptr_t)found - 1;
	if (grow_array((void **)&t->s, &t->cap, t->n, sizeof(*t->s)) < 0)
		return -ENOMEM;
	t->s[t->n] = strdup(s);
	if (!t->s[t->n] || hashmap__insert(&t->index, h, (void *)(uintptr_t)(t->n + 1)) < 0) {
		free(t->s[t->n]);
		return -ENOMEM;
	}
	return (int64_t)t->n++;
}

static void strtab__free(struct strtab *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->s[i]);
	free(t->s);
	hashmap__free(&t->index);
}

/*
 * A gzip stream into a FILE that protobuf-c packs into (base.append): the
 * profile is compressed as it is packed, never held whole (28 MB for a
 * 10-hour session of 64 threads, each page of it a fault). zlib's output
 * does not depend on how the input is split, so the bytes are those of
 * compressing the packed profile in one piece.
 */
struct gz_writer {
	ProtobufCBuffer base; /* first: protobuf-c passes &base */
	FILE *f;
	z_stream z;
	int r;	    /* 0, or the first error: -ENOMEM, -EIO */
	size_t len; /* bytes in @in */
	uint8_t in[65536];
	uint8_t out[65536];
};

/* Compresses @w->in (all of it), and finishes the stream if @flush is Z_FINISH. */
static void gz_writer__deflate(struct gz_writer *w, int flush)
{
	int zr;

	w->z.next_in = w->in;
	w->z.avail_in = (uInt)w->len;
	do {
		size_t n;

		w->z.next_out = w->out;
		w->z.avail_out = sizeof(w->out);
		zr = deflate(&w->z, flush);
		if (zr == Z_STREAM_ERROR) {
			w->r = -EIO;
			return;
		}
		n = sizeof(w->out) - w->z.avail_out;
		if (w->r == 0 && fwrite(w->out, 1, n, w->f) != n)
			w->r = -EIO;
	} while (flush == Z_FINISH ? zr != Z_STREAM_END : w->z.avail_out == 0);
	w->len = 0;
}

static void gz_writer__append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	struct gz_writer *w = (struct gz_writer *)b;

	while (len > 0) {
		size_t n = MIN(len, sizeof(w->in) - w->len);

		memcpy(w->in + w->len, data, n);
		w->len += n;
		data += n;
		len -= n;
		if (w->len == sizeof(w->in))
			gz_writer__deflate(w, Z_NO_FLUSH);
	}
}

/* gz_writer__init() - start a gzip stream into @f. Returns 0 or -ENOMEM. */
static int gz_writer__init(struct gz_writer *w, FILE *f)
{
	w->base.append = gz_writer__append;
	w->f = f;
	w->r = 0;
	w->len = 0;
	w->z = (z_stream){};
	/* windowBits 15 + 16: a gzip header and trailer, not a zlib one. */
	if (deflateInit2(&w->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	return 0;
}

/* gz_writer__finish() - end the stream and free it. Returns 0 or the first error, -EIO. */
static int gz_writer__finish(struct gz_writer *w)
{
	gz_writer__deflate(w, Z_FINISH);
	deflateEnd(&w->z);
	return w->r;
}

/* A pprof sample: one stack of one thread, its samples summed over the windows. */
struct psample {
	size_t stack;
	int64_t tid;
	int64_t count;
};

/*
 * A pprof Location and its one Line: profd's frames are one function each
 * (an inlined call is a frame of its own).
 */
struct pb_location {
	Perftools__Profiles__Location loc;
	Perftools__Profiles__Line line;
	Perftools__Profiles__Line *line_ptr; /* loc.line: an array of one */
};

/* A thread's labels, "thread" (its name) and "tid": made once, shared by its samples. */
struct pb_labels {
	Perftools__Profiles__Label label[2];
	Perftools__Profiles__Label *ptrs[2]; /* sample.label */
};

/* Where a thread's labels are in export__pprof()'s array of them. */
struct tid_pair {
	int64_t tid;
	size_t pair;
};

static int psample_cmp(const void *a, const void *b)
{
	const struct psample *x = a, *y = b;

	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

/*
 * The mapping index of each frame: one mapping per (module, build ID), the
 * target's executable first (pprof takes the first mapping for the main
 * binary), the kernel last.
 */
static int module_cmp(const void *a, const void *b, void *arg)
{
	const struct xprofile *p = arg;
	const struct xframe *x = &p->frames[*(const size_t *)a],
			    *y = &p->frames[*(const size_t *)b];
	bool xe = strcmp(x->module, p->exe) == 0, ye = strcmp(y->module, p->exe) == 0;
	int c;

	if (xe != ye)
		return xe ? -1 : 1;
	if (x->kernel != y->kernel)
		return x->kernel ? 1 : -1;
	c = strcmp(x->module, y->module);
	return c ? c : strcmp(x->build_id, y->build_id);
}

/*
 * export__pprof() - the profile as pprof's profile.proto, gzip-compressed,
 * as go tool pprof reads it. Sample types: samples/count and cpu/nanoseconds
 * (or EVENT/events for a second sampled event), a period; one Location per
 * frame (address: the ELF address in its module), one Function per
 * (name, module), one Mapping per (module, build ID) with its build ID; a
 * Sample per stack and thread, labelled with the thread's name and tid.
 * The loss counters are in the profile's comments. Returns 0, -ENOMEM, -EIO.
 */
int export__pprof(FILE *f, const struct xprofile *p, int64_t tid)
{
	Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	Perftools__Profiles__ValueType types[2] = {PERFTOOLS__PROFILES__VALUE_TYPE__INIT,
						   PERFTOOLS__PROFILES__VALUE_TYPE__INIT};
	Perftools__Profiles__ValueType period_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	Perftools__Profiles__ValueType *type_ptrs[2] = {&types[0], &types[1]};
	_cleanup_free_ struct pb_location *locs = NULL;
	_cleanup_free_ Perftools__Profiles__Location **loc_ptrs = NULL;
	_cleanup_free_ Perftools__Profiles__Function *funcs = NULL;
	_cleanup_free_ Perftools__Profiles__Function **func_ptrs = NULL;
	_cleanup_free_ Perftools__Profiles__Mapping *maps = NULL;
	_cleanup_free_ Perftools__Profiles__Mapping **map_ptrs = NULL;
	_cleanup_free_ struct pb_labels *labels = NULL;
	_cleanup_free_ uint64_t *loc_ids = NULL;
	_cleanup_free_ size_t *order = NULL, *map_of = NULL;
	_cleanup_free_ struct psample *ps = NULL;
	_cleanup_free_ struct tid_pair *tp = NULL;
	_cleanup_free_ size_t *pair_of = NULL; /* the labels of sample i: labels[pair_of[i]] */
	_cleanup_free_ size_t *bucket = NULL;  /* where each stack's samples end in ps */
	_cleanup_free_ uint8_t *packed = NULL;   /* one sample, packed */
	size_t packed_cap = 0;
	struct strtab st = {};
	size_t n_ps = 0, n_maps = 0, n_locs_total = 0;
	bool cpu = strcmp(p->period_unit, "nanoseconds") == 0;
	int64_t k;
	int r = -ENOMEM;

	locs = calloc(p->n_frames + 1, sizeof(*locs));
	loc_ptrs = calloc(p->n_frames + 1, sizeof(*loc_ptrs));
	funcs = calloc(p->n_funcs + 1, sizeof(*funcs));
	func_ptrs = calloc(p->n_funcs + 1, sizeof(*func_ptrs));
	maps = calloc(p->n_frames + 1, sizeof(*maps));
	map_ptrs = calloc(p->n_frames + 1, sizeof(*map_ptrs));
	order = calloc(p->n_frames + 1, sizeof(*order));
	map_of = calloc(p->n_frames + 1, sizeof(*map_of));
	ps = calloc(p->n_samples + 1, sizeof(*ps));
	if (!locs || !loc_ptrs || !funcs || !func_ptrs || !maps || !map_ptrs || !order || !map_of ||
	    !ps)
		goto out;
	if (strtab__intern(&st, "") < 0)
		goto out;

	/* Mappings. */
	for (size_t i = 0; i < p->n_frames; i++)
		order[i] = i;
	if (p->n_frames)
		qsort_r(order, p->n_frames, sizeof(*order), module_cmp, (void *)p);
	for (size_t i = 0; i < p->n_frames; i++) {
		const struct xframe *fr = &p->frames[order[i]];

		if (i == 0 || module_cmp(&order[i - 1], &order[i], (void *)p) != 0) {
			Perftools__Profiles__Mapping *m = &maps[n_maps];

			perftools__profiles__mapping__init(m);
			m->id = n_maps + 1;
			if ((k = strtab__intern(&st, fr->module)) < 0)
				goto out;
			m->filename = k;
			if ((k = strtab__intern(&st, fr->build_id)) < 0)
				goto out;
			m->build_id = k;
			/* Symbolized by profd: pprof need not (and cannot) look the binary up. */
			m->has_functions = m->has_filenames = m->has_line_numbers = true;
			m->has_inline_frames = true;
			map_ptrs[n_maps] = m;
			n_maps++;
		}
		map_of[order[i]] = n_maps;
	}

	/* Functions, then one location per frame. */
	for (size_t i = 0; i < p->n_frames; i++) {
		const struct xframe *fr = &p->frames[i];
		Perftools__Profiles__Function *fn = &funcs[fr->func];
		struct pb_location *l = &locs[i];

		if (!func_ptrs[fr->func]) {
			perftools__profiles__function__init(fn);
			fn->id = fr->func + 1;
			if ((k = strtab__intern(&st, fr->name)) < 0)
				goto out;
			fn->name = fn->system_name = k;
			if ((k = strtab__intern(&st, fr->file)) < 0)
				goto out;
			fn->filename = k;
			func_ptrs[fr->func] = fn;
		}
		perftools__profiles__line__init(&l->line);
		l->line.function_id = fr->func + 1;
		l->line.line = fr->line;
		l->line_ptr = &l->line;
		perftools__profiles__location__init(&l->loc);
		l->loc.id = i + 1;
		l->loc.mapping_id = map_of[i];
		l->loc.address = fr->address;
		l->loc.n_line = 1;
		l->loc.line = &l->line_ptr;
		loc_ptrs[i] = &l->loc;
	}

	/*
	 * Samples: per stack and thread. Placed by stack first (a counting
	 * sort), then each stack's few by thread: a third of the time of one
	 * sort of all (320,000 rows for a 10-hour session of 64 threads).
	 */
	bucket = calloc(p->n_stacks + 1, sizeof(*bucket));
	if (!bucket)
		goto out;
	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			bucket[p->samples[i].stack + 1]++;
	for (size_t j = 0; j < p->n_stacks; j++)
		bucket[j + 1] += bucket[j];
	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			ps[bucket[p->samples[i].stack]++] = (struct psample){
			    p->samples[i].stack, p->samples[i].tid, p->samples[i].count};
	n_ps = p->n_stacks ? bucket[p->n_stacks - 1] : 0;
	for (size_t j = 0, lo = 0; j < p->n_stacks; lo = bucket[j++])
		if (bucket[j] - lo > 1)
			qsort(ps + lo, bucket[j] - lo, sizeof(*ps), psample_cmp);
	{
		size_t w = 0;

		for (size_t i = 0; i < n_ps; i++) {
			if (w > 0 && psample_cmp(&ps[w - 1], &ps[i]) == 0)
				ps[w - 1].count += ps[i].count;
			else
				ps[w++] = ps[i];
		}
		n_ps = w;
	}
	/* The samples of one stack (adjacent: sorted by stack) share its location ids. */
	for (size_t i = 0; i < n_ps; i++)
		if (i == 0 || ps[i].stack != ps[i - 1].stack)
			n_locs_total += p->stacks[ps[i].stack].len;
	labels = calloc(n_ps + 1, sizeof(*labels));
	loc_ids = calloc(n_locs_total + 1, sizeof(*loc_ids));
	tp = calloc(n_ps + 1, sizeof(*tp));
	pair_of = calloc(n_ps + 1, sizeof(*pair_of));
	if (!labels || !loc_ids || !tp || !pair_of)
		goto out;
	/*
	 * Each thread's labels, made where its first sample is (tp sorted by
	 * tid), so that its name takes its place in the string table then;
	 * each sample's labels and location ids.
	 */
	{
		int64_t key_thread, key_tid;
		size_t off = 0, n_tp = 0;

		if ((key_thread = strtab__intern(&st, "thread")) < 0 ||
		    (key_tid = strtab__intern(&st, "tid")) < 0)
			goto out;
		for (size_t i = 0; i < n_ps; i++) {
			const struct xstack *s = &p->stacks[ps[i].stack];
			size_t lo = 0, hi = n_tp;

			if (i == 0 || ps[i].stack != ps[i - 1].stack) {
				for (size_t j = 0; j < s->len; j++)
					loc_ids[off + j] = s->frames[j] + 1;
				off += s->len;
			}
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;

				if (tp[mid].tid < ps[i].tid)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo == n_tp || tp[lo].tid != ps[i].tid) {
				struct pb_labels *l = &labels[n_tp];

				memmove(&tp[lo + 1], &tp[lo], (n_tp - lo) * sizeof(*tp));
				tp[lo] = (struct tid_pair){ps[i].tid, n_tp};
				perftools__profiles__label__init(&l->label[0]);
				perftools__profiles__label__init(&l->label[1]);
				l->label[0].key = key_thread;
				if ((k = strtab__intern(&st, xprofile__thread_name(p, ps[i].tid))) < 0)
					goto out;
				l->label[0].str = k;
				l->label[1].key = key_tid;
				l->label[1].num = ps[i].tid;
				l->ptrs[0] = &l->label[0];
				l->ptrs[1] = &l->label[1];
				n_tp++;
			}
			pair_of[i] = tp[lo].pair;
		}
	}

	/* Sample types, period, time, and the loss counters as comments. */
	{
		char text[3][96];
		int64_t cidx[3];
		Perftools__Profiles__Profile head = PERFTOOLS__PROFILES__PROFILE__INIT;
		struct gz_writer *gz;
		size_t off = 0;

		if ((k = strtab__intern(&st, "samples")) < 0)
			goto out;
		types[0].type = k;
		if ((k = strtab__intern(&st, "count")) < 0)
			goto out;
		types[0].unit = k;
		if ((k = strtab__intern(&st, cpu ? "cpu" : p->event)) < 0)
			goto out;
		types[1].type = period_type.type = k;
		if ((k = strtab__intern(&st, cpu ? "nanoseconds" : "events")) < 0)
			goto out;
		types[1].unit = period_type.unit = k;
		snprintf(text[0], sizeof(text[0]),
			 "profd session %" PRId64 ": %s (PID %" PRId64 "), event %s", p->session,
			 p->comm, p->pid, p->event);
		snprintf(text[1], sizeof(text[1]),
			 "lost samples %" PRId64 ", truncated stacks %" PRId64, p->lost_samples,
			 p->truncated_stacks);
		snprintf(text[2], sizeof(text[2]), "unsymbolized frames %" PRId64,
			 p->unsymbolized_frames);
		for (int i = 0; i < 3; i++) {
			if ((k = strtab__intern(&st, text[i])) < 0)
				goto out;
			cidx[i] = k;
		}
		prof.comment = cidx;
		prof.n_comment = 3;
		prof.period_type = &period_type;
		prof.period = p->period;
		prof.time_nanos = p->started_at_ns;
		prof.duration_nanos = p->elapsed_ns;
		prof.mapping = map_ptrs;
		prof.n_mapping = n_maps;
		prof.location = loc_ptrs;
		prof.n_location = p->n_frames;
		prof.function = func_ptrs;
		prof.n_function = p->n_funcs;
		prof.string_table = st.s;
		prof.n_string_table = st.n;

		/*
		 * protobuf-c writes a message's fields by number: sample_type (1),
		 * each sample (2), then the rest (3...). So the profile is written
		 * as those three parts, each sample made and packed on its own
		 * rather than all of them held as messages (88 bytes each, 320,000
		 * in a 10-hour session of 64 threads): the same bytes.
		 */
		head.sample_type = type_ptrs;
		head.n_sample_type = 2;
		gz = malloc(sizeof(*gz));
		if (!gz)
			goto out;
		r = gz_writer__init(gz, f);
		if (r < 0) {
			free(gz);
			goto out;
		}
		perftools__profiles__profile__pack_to_buffer(&head, &gz->base);
		for (size_t i = 0; i < n_ps; i++) {
			Perftools__Profiles__Sample sa = PERFTOOLS__PROFILES__SAMPLE__INIT;
			const struct xstack *s = &p->stacks[ps[i].stack];
			int64_t values[2] = {ps[i].count, ps[i].count * p->period};
			uint8_t tag_len[1 + 10];
			size_t n = 0, size;
			uint64_t len;

			if (i > 0 && ps[i].stack != ps[i - 1].stack)
				off += p->stacks[ps[i - 1].stack].len;
			sa.location_id = &loc_ids[off];
			sa.n_location_id = s->len;
			sa.value = values;
			sa.n_value = 2;
			sa.label = labels[pair_of[i]].ptrs;
			sa.n_label = 2;
			/* Field 2, length-delimited: the tag, the length as a varint, the message. */
			size = perftools__profiles__sample__get_packed_size(&sa);
			tag_len[n++] = (2 << 3) | 2;
			for (len = size; len >= 0x80; len >>= 7)
				tag_len[n++] = (uint8_t)(len | 0x80);
			tag_len[n++] = (uint8_t)len;
			gz->base.append(&gz->base, n, tag_len);
			/* Packed whole, then appended: pack_to_buffer() appends each number alone. */
			if (grow_array_to((void **)&packed, &packed_cap, size, 1) < 0) {
				gz->r = -ENOMEM;
				break;
			}
			gz->base.append(&gz->base, perftools__profiles__sample__pack(&sa, packed),
					packed);
		}
		perftools__profiles__profile__pack_to_buffer(&prof, &gz->base);
		r = gz_writer__finish(gz);
		free(gz);
	}
out:
	strtab__free(&st);
	return r;
}

/* A stack's names root first, for ordering stacks into a flame chart. */
static int stack_names_cmp(const struct xprofile *p, size_t a, size_t b)
{
	const struct xstack *x = &p->stacks[a], *y = &p->stacks[b];
	size_t i = x->len, j = y->len;

	while (i > 0 && j > 0) {
		int c = strcmp(p->frames[x->frames[--i]].name, p->frames[y->frames[--j]].name);

		if (c)
			return c;
	}
	return (i > 0) - (j > 0);
}

static int chrome_sample_cmp(const void *a, const void *b, void *arg)
{
	const struct xprofile *p = arg;
	const struct xsample *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->window_ns != y->window_ns)
		return x->window_ns < y->window_ns ? -1 : 1;
	return stack_names_cmp(p, x->stack, y->stack);
}

static int append_event(json_t *events, json_t *e)
{
	return e && json_array_append_new(events, e) == 0 ? 0 : -ENOMEM;
}

/*
 * export__chrome_trace() - Chrome's trace event JSON (chrome://tracing,
 * ui.perfetto.dev): a track per thread, named, with the samples of each
 * 1-second window as a flame chart of complete ("X") events. profd stores
 * samples aggregated per window, so within a window the stacks are laid out
 * one after the other, each as long as its samples times the period, the
 * stacks sorted by name so that common callers merge. ts is in
 * microseconds from the session's start. Returns 0, -ENOMEM, -EIO.
 */
int export__chrome_trace(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_free_ struct xsample *s = NULL;
	_cleanup_free_ size_t *open_frames = NULL;
	_cleanup_free_ double *open_ts = NULL;
	json_t *events;
	size_t n = 0, depth = 0, max_depth = 1;
	double cursor = 0;
	int64_t cur_tid = -1, cur_window = -1;

	root = json_pack("{s:[], s:s, s:{s:I, s:s, s:I, s:I, s:I, s:I}}", "traceEvents",
			 "displayTimeUnit", "ms", "otherData", "session", (json_int_t)p->session,
			 "event", p->event, "total_samples", (json_int_t)p->total_samples,
			 "lost_samples", (json_int_t)p->lost_samples, "truncated_stacks",
			 (json_int_t)p->truncated_stacks, "unsymbolized_frames",
			 (json_int_t)p->unsymbolized_frames);
	s = calloc(p->n_samples + 1, sizeof(*s));
	if (!root || !s)
		return -ENOMEM;
	events = json_object_get(root, "traceEvents");
	for (size_t i = 0; i < p->n_stacks; i++)
		max_depth = MAX(max_depth, p->stacks[i].len);
	open_frames = calloc(max_depth + 1, sizeof(*open_frames));
	open_ts = calloc(max_depth + 1, sizeof(*open_ts));
	if (!open_frames || !open_ts)
		return -ENOMEM;

	if (append_event(events, json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "process_name",
					   "ph", "M", "pid", (json_int_t)p->pid, "tid",
					   (json_int_t)0, "args", "name", p->comm)) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_threads; i++)
		if ((!tid || p->threads[i].tid == tid) &&
		    append_event(events,
				 json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "name", "thread_name",
					   "ph", "M", "pid", (json_int_t)p->threads[i].pid, "tid",
					   (json_int_t)p->threads[i].tid, "args", "name",
					   p->threads[i].name)) < 0)
			return -ENOMEM;

	for (size_t i = 0; i < p->n_samples; i++)
		if (!tid || p->samples[i].tid == tid)
			s[n++] = p->samples[i];
	if (n)
		qsort_r(s, n, sizeof(*s), chrome_sample_cmp, (void *)p);

	/* One pass; frames stay open while consecutive stacks share them. */
	for (size_t i = 0; i <= n; i++) {
		const struct xstack *st = i < n ? &p->stacks[s[i].stack] : NULL;
		size_t common = 0;
		bool same_track = i < n && s[i].tid == cur_tid && s[i].window_ns == cur_window;

		if (same_track)
			while (common < depth && common < st->len &&
			       strcmp(p->frames[open_frames[common]].name,
				      p->frames[st->frames[st->len - 1 - common]].name) == 0)
				common++;
		/* Close the frames the next stack does not share. */
		while (depth > common) {
			const struct xframe *fr = &p->frames[open_frames[--depth]];
			int64_t pid = xprofile__thread_pid(p, cur_tid);

			if (append_event(
				events,
				json_pack("{s:s, s:s, s:s, s:f, s:f, s:I, s:I, s:{s:s, s:s?}}",
					  "name", fr->name, "cat", fr->kernel ? "kernel" : "user",
					  "ph", "X", "ts", open_ts[depth], "dur",
					  cursor - open_ts[depth], "pid", (json_int_t)pid, "tid",
					  (json_int_t)cur_tid, "args", "module", fr->module, "file",
					  fr->file)) < 0)
				return -ENOMEM;
		}
		if (i == n)
			break;
		if (!same_track) {
			double start_us = (double)s[i].window_ns / 1e3;

			/* A window can hold a little more than 1 s of samples (timer jitter):
			 * the next one then starts after it, so that events stay nested. */
			cursor = s[i].tid == cur_tid ? MAX(start_us, cursor) : start_us;
			cur_tid = s[i].tid;
			cur_window = s[i].window_ns;
		}
		for (; depth < st->len; depth++) {
			open_frames[depth] = st->frames[st->len - 1 - depth];
			open_ts[depth] = cursor;
		}
		/* cpu-clock: the samples' CPU time; another event: 1 us per sample. */
		cursor += strcmp(p->period_unit, "nanoseconds") == 0
			      ? (double)(s[i].count * p->period) / 1e3
			      : (double)s[i].count;
	}
	if (json_dumpf(root, f, JSON_COMPACT) < 0)
		return -EIO;
	fputc('\n', f);
	return 0;
}

/*
 * export__speedscope() - speedscope's file format (speedscope.app): one
 * "sampled" profile per thread, frames shared (one per function), each
 * sample a stack root first weighted by its samples times the period (ns
 * for cpu-clock, events otherwise). Returns 0, -ENOMEM, -EIO.
 */
int export__speedscope(FILE *f, const struct xprofile *p, int64_t tid)
{
	_cleanup_(json_decrefp) json_t *root = NULL;
	_cleanup_free_ bool *have = calloc(p->n_funcs + 1, sizeof(*have));
	json_t *frames, *profiles;
	char name[256];

	snprintf(name, sizeof(name),
		 "profd session %" PRId64 ": %s (PID %" PRId64 "); lost samples %" PRId64
		 ", truncated stacks %" PRId64 ", unsymbolized frames %" PRId64,
		 p->session, p->comm, p->pid, p->lost_samples, p->truncated_stacks,
		 p->unsymbolized_frames);
	root = json_pack("{s:s, s:s, s:s, s:{s:[]}, s:[]}", "$schema",
			 "https://www.speedscope.app/file-format-schema.json", "name", name,
			 "exporter", "profctl " PROFD_VERSION, "shared", "frames", "profiles");
	if (!root || !have)
		return -ENOMEM;
	frames = json_object_get(json_object_get(root, "shared"), "frames");
	profiles = json_object_get(root, "profiles");
	/* frames[func index] = that function, so the indexes are the functions'. */
	for (size_t i = 0; i < p->n_funcs; i++)
		if (json_array_append_new(frames, json_object()) < 0)
			return -ENOMEM;
	for (size_t i = 0; i < p->n_frames; i++) {
		const struct xframe *fr = &p->frames[i];
		json_t *o = json_array_get(frames, fr->func);

		if (have[fr->func])
			continue;
		have[fr->func] = true;
		if (json_object_set_new(o, "name", json_string(fr->name)) < 0 ||
		    (fr->file && json_object_set_new(o, "file", json_string(fr->file)) < 0) ||
		    (fr->line && json_object_set_new(o, "line", json_integer(fr->line)) < 0))
			return -ENOMEM;
	}
	for (size_t t = 0; t < p->n_threads; t++) {
		const struct xthread *th = &p->threads[t];
		json_t *prof, *samples, *weights;
		int64_t total = 0;
		char pname[96];

		if (tid && th->tid != tid)
			continue;
		snprintf(pname, sizeof(pname), "%s (TID %" PRId64 ")", th->name, th->tid);
		prof = json_pack(
		    "{s:s, s:s, s:s, s:i, s:I, s:[], s:[]}", "type", "sampled", "name", pname,
		    "unit", strcmp(p->period_unit, "nanoseconds") == 0 ? "nanoseconds" : "none",
		    "startValue", 0, "endValue", (json_int_t)0, "samples", "weights");
		if (!prof || json_array_append_new(profiles, prof) < 0)
			return -ENOMEM;
		samples = json_object_get(prof, "samples");
		weights = json_object_get(prof, "weights");
		for (size_t i = 0; i < p->n_samples; i++) {
			const struct xsample *sa = &p->samples[i];
			const struct xstack *st = &p->stacks[sa->stack];
			json_t *list = json_array();

			if (sa->tid != th->tid) {
				json_decref(list);
				continue;
			}
			if (json_array_append_new(samples, list) < 0)
				return -ENOMEM;
			for (size_t j = st->len; j-- > 0;)
				if (json_array_append_new(
					list, json_integer(
						  (json_int_t)p->frames[st->frames[j]].func)) < 0)
					return -ENOMEM;
			if (json_array_append_new(weights, json_integer(sa->count * p->period)) < 0)
				return -ENOMEM;
			total += sa->count * p->period;
		}
		/* A thread without samples (the main thread, waiting) is no profile. */
		if (total == 0)
			json_array_remove(profiles, json_array_size(profiles) - 1);
		else if (json_object_set_new(prof, "endValue", json_integer(total)) < 0)
			return -ENOMEM;
	}
	if (json_dumpf(root, f, JSON_COMPACT) < 0)
		return -EIO;
	fputc('\n', f);
	return 0;
}
