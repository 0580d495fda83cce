/*
 * pprof.c - a loaded profile (xprofile.h) written as pprof's profile.proto,
 * gzip-compressed: profctl export --format pprof and the Pyroscope push.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "hashmap.h"
#include "pprof.h"
#include "profile.pb-c.h"
#include "util.h"

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

/* Where a thread's labels are in pprof__write()'s array of them. */
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
 * pprof__write() - the profile as pprof's profile.proto, gzip-compressed,
 * as go tool pprof reads it. Sample types: samples/count and cpu/nanoseconds
 * (or EVENT/events for a second sampled event), a period; one Location per
 * frame (address: the ELF address in its module), one Function per
 * (name, module), one Mapping per (module, build ID) with its build ID; a
 * Sample per stack and thread, labelled with the thread's name and tid.
 * The loss counters are in the profile's comments. Returns 0, -ENOMEM, -EIO.
 */
int pprof__write(FILE *f, const struct xprofile *p, int64_t tid)
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
