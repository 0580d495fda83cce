/* output-hotpaths.c - the hotpaths report as a call tree, callers first. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "output.h"
#include "output_internal.h"
#include "table.h"

/*
 * Deepest path output__hotpaths() draws: the tree is walked recursively, so
 * an absurd depth from a broken daemon must not overflow the stack. Kernel
 * stacks stop at perf_event_max_stack (127 by default), user stacks at the
 * unwinder's limit; this leaves room for both many times over.
 */
#define MAX_PATH_FRAMES 8192

/*
 * The hot-path call tree. The paths profd returns (leaf first) are merged
 * root first; a node is one function (function name + module) under a given
 * chain of callers. Strings are borrowed from the response.
 */
struct node {
	const char *function;
	const char *module;
	const char *kind;
	const char *file; /* NULL if unknown or if merged frames disagree */
	long long line;	  /* 0 if unknown or if merged frames disagree */
	long long samples;
	size_t order; /* creation order, to break ties between equally hot siblings */
	struct node **children;
	size_t n_children;
	size_t cap_children;
};

static void node__free(struct node *n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n->n_children; i++)
		node__free(n->children[i]);
	free(n->children);
	free(n);
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct node *, node__free);

static bool str_eq(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/*
 * node__child() - the child of @parent for this frame, created if new.
 * Returns NULL only when out of memory.
 */
static struct node *node__child(struct node *parent, const char *function, const char *module,
				const char *kind, const char *file, long long line, size_t *order)
{
	struct node *n;

	for (size_t i = 0; i < parent->n_children; i++) {
		n = parent->children[i];
		if (str_eq(n->function, function) && str_eq(n->module, module)) {
			/* Same function reached by another path: keep only what all agree on. */
			if (!str_eq(n->file, file)) {
				n->file = NULL;
				n->line = 0;
			} else if (n->line != line) {
				n->line = 0;
			}
			return n;
		}
	}

	if (grow_array((void **)&parent->children, &parent->cap_children, parent->n_children,
		       sizeof(*parent->children)) < 0)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	*n = (struct node){.function = function,
			   .module = module,
			   .kind = kind,
			   .file = file,
			   .line = line,
			   .order = (*order)++};
	parent->children[parent->n_children++] = n;
	return n;
}

static int node_cmp(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static void node__sort(struct node *n)
{
	if (n->n_children > 1)
		qsort(n->children, n->n_children, sizeof(*n->children), node_cmp);
	for (size_t i = 0; i < n->n_children; i++)
		node__sort(n->children[i]);
}

/* Tree-drawing strings; each is one column wide per character, three columns in all. */
struct glyphs {
	const char *branch; /* a child with siblings after it */
	const char *last;   /* the last child */
	const char *vert;   /* continues a branch past a child's subtree */
	const char *space;  /* below a last child */
};

static const struct glyphs glyphs_utf8 = {"\u251c\u2500 ", "\u2514\u2500 ", "\u2502  ", "   "};
static const struct glyphs glyphs_ascii = {"|- ", "`- ", "|  ", "   "};

struct tree_printer {
	FILE *f;
	const struct glyphs *g;
	long long total; /* the session's samples: percentages are of this */
	int width;	 /* of the SAMPLES column */
	char *prefix;	 /* drawing to the left of the current node */
	size_t prefix_cap;
};

static void tree_print_children(struct tree_printer *p, const struct node *n, size_t prefix_len);

static void tree_print_node(struct tree_printer *p, const struct node *n, size_t prefix_len,
			    const char *glyph, const char *continuation)
{
	double pct = p->total > 0 ? 100.0 * (double)n->samples / (double)p->total : 0;
	const char *module = n->module;
	size_t len = prefix_len;

	fprintf(p->f, "%*lld  %5.1f%%  %.*s%s%s%s", p->width, n->samples, pct, (int)prefix_len,
		p->prefix, glyph, n->function, str_eq(n->kind, "inline") ? " (inlined)" : "");
	if (module && module[0] == '[')
		fprintf(p->f, " %s", module);
	else if (module)
		fprintf(p->f, " [%s]", module_name(module));
	else if (str_eq(n->kind, "kernel"))
		fprintf(p->f, " [kernel]");
	if (n->file && n->line > 0)
		fprintf(p->f, " %s:%lld", file_name(n->file), n->line);
	else if (n->file)
		fprintf(p->f, " %s", file_name(n->file));
	fputc('\n', p->f);

	/* The prefix buffer holds enough for the deepest path (see output__hotpaths()). */
	memcpy(p->prefix + len, continuation, strlen(continuation));
	len += strlen(continuation);
	tree_print_children(p, n, len);
}

/*
 * tree_print_children() - a child that carries all of its parent's samples
 * (the only callee, and the parent ran none itself on these paths) is drawn
 * straight below the parent at the same indentation, so that deep stacks
 * stay narrow; indentation grows only where paths diverge, as in perf
 * report's call graphs.
 */
static void tree_print_children(struct tree_printer *p, const struct node *n, size_t prefix_len)
{
	if (n->n_children == 1 && n->children[0]->samples == n->samples) {
		tree_print_node(p, n->children[0], prefix_len, "", "");
		return;
	}
	for (size_t i = 0; i < n->n_children; i++) {
		bool last = i + 1 == n->n_children;

		tree_print_node(p, n->children[i], prefix_len, last ? p->g->last : p->g->branch,
				last ? p->g->space : p->g->vert);
	}
}

/*
 * output__hotpaths() - the hottest paths merged into one call tree, callers
 * first, with the sample counters above it.
 * @ascii: draw with |- `- instead of the Unicode box-drawing characters.
 */
int output__hotpaths(FILE *f, const json_t *reply, bool ascii)
{
	_cleanup_(node__freep) struct node *root = NULL;
	const json_t *paths, *frames;
	long long total, covered = 0;
	size_t i, max_depth = 0, order = 0;
	struct tree_printer p = {.f = f, .g = ascii ? &glyphs_ascii : &glyphs_utf8};
	_cleanup_free_ char *prefix = NULL;
	char digits[32];
	int r;

	if ((r = get_int(reply, "total_samples", &total)) < 0 ||
	    (r = get_array(reply, "paths", &paths)) < 0)
		return r;

	root = calloc(1, sizeof(*root));
	if (!root)
		return -ENOMEM;

	for (i = 0; i < json_array_size(paths); i++) {
		const json_t *path = json_array_get(paths, i);
		struct node *n = root;
		long long samples;
		size_t depth;

		if ((r = check_object(path, "paths[]")) < 0 ||
		    (r = get_int(path, "samples", &samples)) < 0 ||
		    (r = get_array(path, "frames", &frames)) < 0)
			return r;
		covered += samples;
		root->samples += samples;
		depth = json_array_size(frames);
		if (depth > MAX_PATH_FRAMES) {
			return bad_message("a path has %zu frames, more than %d", depth,
					   MAX_PATH_FRAMES);
		}
		max_depth = MAX(max_depth, depth);
		/* Frames come leaf first; walk them from the outermost caller in. */
		for (size_t k = depth; k-- > 0;) {
			const json_t *fr = json_array_get(frames, k);
			const char *function, *module, *kind, *file;
			long long line = 0;
			bool has_line;

			if ((r = check_object(fr, "frames[]")) < 0 ||
			    (r = get_str(fr, "function", &function)) < 0 ||
			    (r = get_opt_str(fr, "module", &module)) < 0 ||
			    (r = get_opt_str(fr, "kind", &kind)) < 0 ||
			    (r = get_opt_str(fr, "file", &file)) < 0 ||
			    (r = get_opt_int(fr, "line", &line, &has_line)) < 0)
				return r;
			/* An inlined call is a node of its own, marked when printed. */
			if (json_is_true(json_object_get(fr, "inlined")))
				kind = "inline";
			n = node__child(n, function, module, kind, file, has_line ? line : 0,
					&order);
			if (!n)
				return -ENOMEM;
			n->samples += samples;
		}
	}
	node__sort(root);

	if ((r = print_subject(f, reply)) < 0)
		return r;
	fprintf(f, ": %lld samples", total);
	if (json_array_size(paths) == 1)
		fprintf(f, "; the hottest path holds");
	else if (json_array_size(paths) > 1)
		fprintf(f, "; the %zu hottest paths hold", json_array_size(paths));
	if (json_array_size(paths) > 0)
		fprintf(f, " %lld (%.1f%%)", covered,
			total > 0 ? 100.0 * (double)covered / (double)total : 0.0);
	fputc('\n', f);
	if ((r = print_counters(f, reply)) < 0)
		return r;
	fputc('\n', f);
	if (root->n_children == 0) {
		fprintf(f, "no samples\n");
		return 0;
	}

	/* Each level adds at most one glyph of at most 3 characters of 3 bytes. */
	p.prefix_cap = (max_depth + 1) * 9 + 1;
	prefix = malloc(p.prefix_cap);
	if (!prefix)
		return -ENOMEM;
	p.prefix = prefix;
	p.total = total;
	snprintf(digits, sizeof(digits), "%lld", root->samples);
	p.width = (int)MAX(strlen(digits), strlen("SAMPLES"));
	fprintf(f, "%*s  %6s  %s\n", p.width, "SAMPLES", "TOTAL%", "CALL TREE (callers first)");
	tree_print_children(&p, root, 0);
	return 0;
}
