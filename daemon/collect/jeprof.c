/* jeprof.c - jemalloc's MALLOC_CONF profiler settings and its heap_v2 heap profiles (jeprof.h). */
#include "collect/jeprof.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hashmap.h"
#include "io.h"
#include "procfs.h"
#include "util.h"

static int parse_bool(const char *v, size_t len, bool *ret)
{
	if (len == 4 && memcmp(v, "true", 4) == 0)
		*ret = true;
	else if (len == 5 && memcmp(v, "false", 5) == 0)
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

/* A decimal integer in [@min, @max] spelling all of @v (@len bytes). */
static int parse_int(const char *v, size_t len, long min, long max, long *ret)
{
	char buf[24], *end;
	long x;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, v, len);
	buf[len] = '\0';
	errno = 0;
	x = strtol(buf, &end, 10);
	if (errno || *end || x < min || x > max)
		return -EINVAL;
	*ret = x;
	return 0;
}

int jeprof__parse_conf(const char *malloc_conf, struct jeprof_conf *ret)
{
	const char *p = malloc_conf ? malloc_conf : "";

	*ret = (struct jeprof_conf){.active = true, .lg_interval = -1, .lg_sample = 19};
	snprintf(ret->prefix, sizeof(ret->prefix), "jeprof");
	while (*p) {
		const char *end = strchrnul(p, ','), *colon = memchr(p, ':', (size_t)(end - p));
		size_t klen, vlen;
		const char *v;
		long x;
		int r = 0;

		if (!colon)
			return -EINVAL; /* jemalloc too refuses a key without a value */
		klen = (size_t)(colon - p);
		v = colon + 1;
		vlen = (size_t)(end - v);
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(p, k, klen) == 0)
		if (KEY("prof")) {
			r = parse_bool(v, vlen, &ret->prof);
		} else if (KEY("prof_active")) {
			r = parse_bool(v, vlen, &ret->active);
		} else if (KEY("lg_prof_interval")) {
			r = parse_int(v, vlen, -1, 63, &x);
			ret->lg_interval = r == 0 ? (int)x : ret->lg_interval;
		} else if (KEY("lg_prof_sample")) {
			r = parse_int(v, vlen, 0, 62, &x);
			ret->lg_sample = r == 0 ? (unsigned)x : ret->lg_sample;
		} else if (KEY("prof_prefix")) {
			if (vlen == 0 || vlen >= sizeof(ret->prefix))
				return -EINVAL;
			memcpy(ret->prefix, v, vlen);
			ret->prefix[vlen] = '\0';
		}
#undef KEY
		if (r < 0)
			return r;
		p = *end ? end + 1 : end;
	}
	return 0;
}

void jeprof_profile__done(struct jeprof_profile *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->stacks[i].ips);
	free(p->stacks);
	*p = (struct jeprof_profile){};
}

/* One line of @text: [*@pos, its end), *@pos moved past its newline; false at the end. */
static bool next_line(const char *text, size_t len, size_t *pos, const char **ret, size_t *ret_len)
{
	const char *nl;

	if (*pos >= len)
		return false;
	*ret = text + *pos;
	nl = memchr(*ret, '\n', len - *pos);
	*ret_len = nl ? (size_t)(nl - *ret) : len - *pos;
	*pos += *ret_len + (nl ? 1 : 0);
	return true;
}

/* The line as a NUL-terminated copy in @buf (@size bytes); false if it does not fit. */
static bool line_copy(const char *line, size_t n, char *buf, size_t size)
{
	if (n >= size)
		return false;
	memcpy(buf, line, n);
	buf[n] = '\0';
	return true;
}

/* "@ 0x... 0x..." into @s (at most JEPROF_MAX_FRAMES kept). */
static int parse_stack(const char *line, struct jeprof_stack *s)
{
	const char *p = line + 1;
	uint64_t ips[JEPROF_MAX_FRAMES];
	unsigned n = 0;

	for (;;) {
		char *end;
		unsigned long long a;

		while (*p == ' ')
			p++;
		if (!*p)
			break;
		if (p[0] != '0' || p[1] != 'x')
			return -EBADMSG;
		errno = 0;
		a = strtoull(p, &end, 16);
		if (errno || end == p + 2 || (*end && *end != ' '))
			return -EBADMSG;
		if (n < JEPROF_MAX_FRAMES)
			ips[n++] = a;
		else
			s->truncated = true;
		p = end;
	}
	if (n == 0)
		return -EBADMSG;
	s->ips = malloc(n * sizeof(*ips));
	if (!s->ips)
		return -ENOMEM;
	memcpy(s->ips, ips, n * sizeof(*ips));
	s->n = n;
	return 0;
}

/* An address range of the allocator's mappings. */
struct range {
	uint64_t start, end;
};

/* Drop the profiler's own frames from @s: keep the allocator's outermost frame as the leaf. */
static void trim_allocator(struct jeprof_stack *s, const struct range *r, size_t nr)
{
	unsigned k = 0;

	for (; k < s->n; k++) {
		bool inside = false;

		for (size_t i = 0; i < nr && !inside; i++)
			inside = s->ips[k] >= r[i].start && s->ips[k] < r[i].end;
		if (!inside)
			break;
	}
	if (k == s->n) { /* nothing but the allocator: no caller to name */
		s->n = 0;
		return;
	}
	if (k > 1) {
		memmove(s->ips, s->ips + k - 1, (s->n - k + 1) * sizeof(*s->ips));
		s->n -= k - 1;
	}
}

int jeprof__parse(const char *text, size_t len, const char *allocator, struct jeprof_profile *ret)
{
	struct jeprof_profile p = {};
	struct range ranges[64];
	size_t pos = 0, n, nr = 0, cap = 0;
	const char *line;
	bool want_totals = false, maps = false;
	char buf[4096];
	int r = -EBADMSG;

	if (!next_line(text, len, &pos, &line, &n) || !line_copy(line, n, buf, sizeof(buf)) ||
	    sscanf(buf, "heap_v2/%" SCNu64, &p.period) != 1 || p.period == 0)
		return -EBADMSG;
	while (next_line(text, len, &pos, &line, &n)) {
		if (maps) {
			unsigned long long start, end;
			char path[PATH_MAX];

			/* The last line may be cut short while jemalloc still writes it. */
			if (line_copy(line, n, buf, sizeof(buf)) && nr < ARRAY_SIZE(ranges) &&
			    sscanf(buf, "%llx-%llx %*s %*s %*s %*s %4095s", &start, &end, path) ==
				3 &&
			    strstr(path, allocator))
				ranges[nr++] = (struct range){start, end};
			continue;
		}
		if (!line_copy(line, n, buf, sizeof(buf)))
			goto fail;
		if (buf[0] == '@') {
			if (want_totals)
				goto fail;
			if (p.n == cap) {
				size_t c = cap ? cap * 2 : 64;
				void *s = realloc(p.stacks, c * sizeof(*p.stacks));

				if (!s) {
					r = -ENOMEM;
					goto fail;
				}
				p.stacks = s;
				cap = c;
			}
			p.stacks[p.n] = (struct jeprof_stack){};
			r = parse_stack(buf, &p.stacks[p.n]);
			if (r < 0)
				goto fail;
			p.n++;
			r = -EBADMSG;
			want_totals = true;
		} else if (strncmp(buf, "  t*: ", 6) == 0) {
			uint64_t objects, bytes;

			if (sscanf(buf, "  t*: %" SCNu64 ": %" SCNu64 " [", &objects, &bytes) != 2)
				goto fail;
			if (want_totals) {
				p.stacks[p.n - 1].objects = objects;
				p.stacks[p.n - 1].bytes = bytes;
				want_totals = false;
			}
		} else if (strcmp(buf, "MAPPED_LIBRARIES:") == 0) {
			if (want_totals)
				goto fail;
			maps = true;
		} else if (buf[0] != '\0' && strncmp(buf, "  t", 3) != 0) {
			goto fail; /* not a per-thread line, nor the blank line before the maps */
		}
	}
	if (want_totals) { /* cut short after a stack line: jemalloc is still writing */
		free(p.stacks[--p.n].ips);
	}
	p.complete = maps && nr > 0;
	/* Keep the stacks with live objects and a caller. */
	n = 0;
	for (size_t i = 0; i < p.n; i++) {
		trim_allocator(&p.stacks[i], ranges, nr);
		if (p.stacks[i].objects == 0 || p.stacks[i].n == 0) {
			free(p.stacks[i].ips);
			continue;
		}
		p.stacks[n++] = p.stacks[i];
	}
	p.n = n;
	*ret = p;
	return 0;
fail:
	jeprof_profile__done(&p);
	return r;
}

/* The sampled objects of one call stack still live at the last profile, oldest first. */
struct live_stack {
	uint64_t hash;
	unsigned gen;		 /* the profile that last had this stack */
	uint64_t objects, bytes; /* in that profile */
	bool truncated;
	unsigned n;
	uint64_t *ips;
	uint64_t *addrs; /* their numbers (bit 63 set), a FIFO: [head, len) */
	size_t head, len, cap;
};

struct jeprof_reader {
	pid_t pid;
	uid_t uid;	    /* the process's (/proc/PID's owner) */
	char dir[PATH_MAX]; /* relative to /proc/PID/cwd or, starting with '/', to /proc/PID/root */
	char base[NAME_MAX]; /* "PREFIXBASE.PID." */
	long long last_seq;  /* the newest profile read; -1: none */
	uint64_t start_ns;   /* when the process started (CLOCK_REALTIME ns) */
	bool baseline;	     /* the first profile read: the state, no records */
	unsigned gen;
	uint64_t next_addr;
	struct hashmap stacks; /* struct live_stack by ips */
	struct jeprof_counts counts;
};

#define JEPROF_ADDR_TAG (1ULL << 63)
/* A profile larger than this is not read (counted bad): ~400,000 stacks of 16 frames. */
#define JEPROF_MAX_BYTES (64u << 20)

struct stack_key {
	const uint64_t *ips;
	unsigned n;
};

static bool live_stack_eq(const void *entry, const void *key)
{
	const struct live_stack *s = entry;
	const struct stack_key *k = key;

	return s->n == k->n && memcmp(s->ips, k->ips, k->n * sizeof(*k->ips)) == 0;
}

static void live_stack_free(void *entry)
{
	struct live_stack *s = entry;

	free(s->ips);
	free(s->addrs);
	free(s);
}

int jeprof_reader__new(pid_t pid, const struct jeprof_conf *conf, struct jeprof_reader **ret)
{
	struct jeprof_reader *r;
	const char *slash = strrchr(conf->prefix, '/');
	const char *base = slash ? slash + 1 : conf->prefix;

	struct stat st;
	char proc[32];

	if (pid <= 0 || !*base)
		return -EINVAL;
	snprintf(proc, sizeof(proc), "/proc/%d", (int)pid);
	if (stat(proc, &st) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->pid = pid;
	r->uid = st.st_uid;
	r->last_seq = -1;
	if (proc_start_realtime_ns(pid, &r->start_ns) < 0) {
		free(r);
		return -ESRCH;
	}
	r->baseline = true;
	if (!slash)
		snprintf(r->dir, sizeof(r->dir), ".");
	else if (slash == conf->prefix)
		snprintf(r->dir, sizeof(r->dir), "/");
	else
		snprintf(r->dir, sizeof(r->dir), "%.*s", (int)(slash - conf->prefix), conf->prefix);
	if ((size_t)snprintf(r->base, sizeof(r->base), "%s.%d.", base, (int)pid) >=
	    sizeof(r->base)) {
		free(r);
		return -EINVAL;
	}
	*ret = r;
	return 0;
}

void jeprof_reader__free(struct jeprof_reader *r)
{
	struct live_stack *ls;

	if (!r)
		return;
	hashmap__for_each(&r->stacks, i, ls) live_stack_free(ls);
	hashmap__free(&r->stacks);
	free(r);
}

void jeprof_reader__counts(const struct jeprof_reader *r, struct jeprof_counts *ret)
{
	*ret = r->counts;
}

/* The directory of the profiles, seen from profd: through /proc/PID/cwd or /proc/PID/root. */
static void dir_path(const struct jeprof_reader *r, char *buf, size_t size)
{
	if (r->dir[0] == '/')
		snprintf(buf, size, "/proc/%d/root%s", (int)r->pid, r->dir);
	else
		snprintf(buf, size, "/proc/%d/cwd/%s", (int)r->pid, r->dir);
}

/*
 * Profiles last written this long before the process started are an
 * earlier process's of the same PID: its start time is known to a clock
 * tick (10 ms), a file's mtime to the kernel's coarse clock (a few ms).
 */
#define JEPROF_START_SLACK_NS (50 * NSEC_PER_MSEC)

/*
 * The newest profile's SEQ (> r->last_seq) and name in @name; -1 if none.
 * Files written before the process started are left out: left by an
 * earlier process of the same PID with higher numbers, they would be read
 * first and hide the process's own until its numbers passed theirs.
 */
static long long newest_profile(const struct jeprof_reader *r, DIR *d, char *name, size_t size)
{
	size_t blen = strlen(r->base);
	long long best = -1;
	struct dirent *de;
	struct stat st;

	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char *end;
		long long seq;

		if (len <= blen + 5 || strncmp(de->d_name, r->base, blen) != 0 ||
		    strcmp(de->d_name + len - 5, ".heap") != 0 || de->d_name[blen] < '0' ||
		    de->d_name[blen] > '9')
			continue;
		errno = 0;
		seq = strtoll(de->d_name + blen, &end, 10);
		if (errno || *end != '.' || seq <= r->last_seq || seq <= best)
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    (uint64_t)st.st_mtim.tv_sec * NSEC_PER_SEC + (uint64_t)st.st_mtim.tv_nsec +
			    JEPROF_START_SLACK_NS <
			r->start_ns)
			continue;
		best = seq;
		snprintf(name, size, "%s", de->d_name);
	}
	return best;
}

/*
 * The whole of file @name in directory @dfd, NUL-terminated, in *@ret (*@ret_len bytes).
 * Only a regular file of @uid (the process writes its profiles as itself): profd, as root,
 * reads nothing else a target's prefix may point it at (-EPERM).
 */
static int read_profile(int dfd, const char *name, uid_t uid, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || st.st_uid != uid)
		return -EPERM;
	if (st.st_size > JEPROF_MAX_BYTES)
		return -EFBIG;
	/* A profile still growing is read as far as it got: it parses as not complete. */
	return read_all(fd, JEPROF_MAX_BYTES, ret, ret_len);
}

/* Records of one profile's stack: ALLOC + RETURN per object that appeared, FREE per one gone. */
static int sync_stack(struct jeprof_reader *r, struct live_stack *ls, uint64_t objects,
		      uint64_t bytes, uint64_t period, unsigned slot, malloc_probes_fn fn,
		      void *ctx)
{
	struct malloc_alloc_event a = {};
	struct malloc_event *e = &a.h;
	uint64_t size = objects ? bytes / objects : 0;
	int sent = 0;

	e->time_ns = now_ns(CLOCK_MONOTONIC);
	e->pid = e->tid = (__u32)r->pid;
	e->slot = slot;
	e->func = MALLOC_FUNC_JEMALLOC_PROF;
	while (ls->len - ls->head < objects) {
		double w = malloc_probes__weight(size, period);

		if (ls->len == ls->cap &&
		    grow_array((void **)&ls->addrs, &ls->cap, ls->len, sizeof(*ls->addrs)) < 0)
			return -ENOMEM;
		e->kind = MALLOC_EV_ALLOC;
		e->size = size;
		e->weight = w >= 1 ? (uint64_t)(w + 0.5) : 1;
		e->flags = ls->truncated ? MALLOC_USER_TRUNCATED : 0;
		e->ustack_len = (__u16)ls->n;
		memcpy(a.ips, ls->ips, ls->n * sizeof(*ls->ips));
		fn(ctx, e, sizeof(a));
		e->kind = MALLOC_EV_RETURN;
		e->addr = JEPROF_ADDR_TAG | r->next_addr++;
		e->ustack_len = 0;
		fn(ctx, e, sizeof(*e));
		ls->addrs[ls->len++] = e->addr;
		r->counts.allocs++;
		sent += 2;
	}
	while (ls->len - ls->head > objects) {
		e->kind = MALLOC_EV_FREE;
		e->addr = ls->addrs[ls->head++];
		e->ustack_len = 0;
		if (!e->addr)
			continue; /* live before the session: never sent */
		fn(ctx, e, sizeof(*e));
		r->counts.frees++;
		sent++;
	}
	/* The objects gone leave the front: a stack that keeps a few live while others come
	 * and go would otherwise grow its array by every object it ever had. */
	if (ls->head > ls->len / 2) {
		memmove(ls->addrs, ls->addrs + ls->head, (ls->len - ls->head) * sizeof(*ls->addrs));
		ls->len -= ls->head;
		ls->head = 0;
	}
	return sent;
}

/* The live_stack of @s, made if new; NULL on out-of-memory. */
static struct live_stack *live_stack_get(struct jeprof_reader *r, const struct jeprof_stack *s)
{
	struct stack_key k = {s->ips, s->n};
	uint64_t h = hash64(HASH64_INIT, s->ips, s->n * sizeof(*s->ips));
	struct live_stack *ls = hashmap__find(&r->stacks, h, live_stack_eq, &k);

	if (ls)
		return ls;
	ls = calloc(1, sizeof(*ls));
	if (!ls)
		return NULL;
	ls->hash = h;
	ls->n = s->n;
	ls->ips = malloc(s->n * sizeof(*s->ips));
	if (!ls->ips || hashmap__insert(&r->stacks, h, ls) < 0) {
		free(ls->ips);
		free(ls);
		return NULL;
	}
	memcpy(ls->ips, s->ips, s->n * sizeof(*s->ips));
	return ls;
}

static bool stale(const void *entry, const void *ctx)
{
	return ((const struct live_stack *)entry)->gen != *(const unsigned *)ctx;
}

int jeprof_reader__poll(struct jeprof_reader *r, unsigned slot, malloc_probes_fn fn, void *ctx)
{
	char path[PATH_MAX + 32], name[NAME_MAX + 1];
	struct jeprof_profile p = {};
	struct live_stack *ls;
	_cleanup_free_ char *text = NULL;
	long long seq;
	size_t len = 0;
	int dfd, sent = 0, k;
	DIR *d;

	dir_path(r, path, sizeof(path));
	d = opendir(path);
	if (!d)
		return 0; /* the process is gone, or has not written a profile yet */
	seq = newest_profile(r, d, name, sizeof(name));
	dfd = dirfd(d);
	k = seq < 0 ? 0 : read_profile(dfd, name, r->uid, &text, &len);
	closedir(d);
	if (seq < 0)
		return 0;
	if (k == -ENOMEM)
		return k;
	if (k == 0)
		k = jeprof__parse(text, len, "libjemalloc", &p);
	if (k == -ENOMEM)
		return k;
	if (k < 0) {
		r->counts.bad++;
		r->last_seq = seq; /* not read again */
		return k;
	}
	if (!p.complete) { /* jemalloc is still writing it: the next poll */
		jeprof_profile__done(&p);
		return 0;
	}
	r->last_seq = seq;
	r->counts.profiles++;
	r->gen++;
	/* The profile's objects per stack: stacks that differ only in the profiler's own frames
	 * are one stack here. */
	for (size_t i = 0; i < p.n; i++) {
		const struct jeprof_stack *s = &p.stacks[i];

		ls = live_stack_get(r, s);
		if (!ls) {
			jeprof_profile__done(&p);
			return -ENOMEM;
		}
		if (ls->gen != r->gen) {
			ls->gen = r->gen;
			ls->objects = ls->bytes = 0;
			ls->truncated = false;
		}
		ls->objects += s->objects;
		ls->bytes += s->bytes;
		ls->truncated |= s->truncated;
	}
	/* Each stack's objects brought to the profile's (0 for a stack it no longer has). */
	hashmap__for_each(&r->stacks, i, ls)
	{
		uint64_t want = ls->gen == r->gen ? ls->objects : 0;

		if (r->baseline) { /* objects live before the session: its starting point */
			while (ls->len - ls->head < want &&
			       (ls->len < ls->cap || grow_array((void **)&ls->addrs, &ls->cap,
								ls->len, sizeof(*ls->addrs)) == 0))
				ls->addrs[ls->len++] = 0; /* never sent: freeing it sends nothing */
			continue;
		}
		k = sync_stack(r, ls, want, ls->bytes, p.period, slot, fn, ctx);
		if (k < 0) {
			jeprof_profile__done(&p);
			return k;
		}
		sent += k;
	}
	hashmap__remove_if(&r->stacks, stale, &r->gen, live_stack_free);
	r->baseline = false;
	jeprof_profile__done(&p);
	return sent;
}
