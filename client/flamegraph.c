/*
 * flamegraph.c - a self-contained SVG flame graph of a session's call
 * stacks: one box per function in a call path, as wide as its samples,
 * callers below callees (or above them with --inverted: an icicle graph of
 * callers), a hover title with the figures, click to zoom (a small script
 * inside the SVG), no external files.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "util.h"

#define SVG_WIDTH_PX 1200.0
#define PAD_PX 10.0
#define ROW_PX 17.0
#define HEAD_PX 56.0
#define FOOT_PX 28.0
#define FONT_PX 12
#define CHAR_PX 7.0    /* average glyph width of the 12 px sans-serif font */
#define MIN_BOX_PX 0.3 /* narrower boxes are not drawn (they merge into the parent) */

/* A node of the call tree: a function reached by one call path. */
struct fnode {
	size_t func;  /* function index (xframe.func) */
	size_t frame; /* a frame of it (name, module, kernel) */
	int64_t total;
	int64_t self;
	struct fnode *child; /* first child */
	struct fnode *next;  /* next sibling */
};

static void fnode__free(struct fnode *n)
{
	while (n) {
		struct fnode *next = n->next;

		fnode__free(n->child);
		free(n);
		n = next;
	}
}

/* Child of @parent for function @func, added if new. NULL on out-of-memory. */
static struct fnode *fnode__child(struct fnode *parent, size_t func, size_t frame)
{
	struct fnode *c;

	for (c = parent->child; c; c = c->next)
		if (c->func == func)
			return c;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->func = func;
	c->frame = frame;
	c->next = parent->child;
	parent->child = c;
	return c;
}

static int name_cmp_p(const struct xprofile *p, const struct fnode *a, const struct fnode *b)
{
	return strcmp(p->frames[a->frame].name, p->frames[b->frame].name);
}

/* Sorts each node's children by name (the flame graph convention: x order means nothing). */
static void fnode__sort(const struct xprofile *p, struct fnode *n)
{
	for (; n; n = n->next) {
		struct fnode *sorted = NULL, *c = n->child;

		while (c) {
			struct fnode *next = c->next, **pp = &sorted;

			while (*pp && name_cmp_p(p, *pp, c) <= 0)
				pp = &(*pp)->next;
			c->next = *pp;
			*pp = c;
			c = next;
		}
		n->child = sorted;
		fnode__sort(p, n->child);
	}
}

static void xml_escape(FILE *f, const char *s)
{
	static const char *const entities[UCHAR_MAX + 1] = {
	    ['&'] = "&amp;",
	    ['<'] = "&lt;",
	    ['>'] = "&gt;",
	    ['"'] = "&quot;",
	};

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (entities[c])
			fputs(entities[c], f);
		else
			/* Control characters are not allowed in XML 1.0. */
			fputc(c < 0x20 ? '?' : c, f);
	}
}

/* The name cut to fit @width_px, with ".." where cut; "" when not even 3 characters fit. */
static void fitted_name(FILE *f, const char *name, double width_px)
{
	size_t fit = width_px > 6 ? (size_t)((width_px - 6) / CHAR_PX) : 0;
	size_t len = strlen(name);
	char buf[512];

	if (fit < 3)
		return;
	if (len <= fit) {
		xml_escape(f, name);
		return;
	}
	fit = MIN(fit - 2, sizeof(buf) - 3);
	memcpy(buf, name, fit);
	strcpy(buf + fit, "..");
	xml_escape(f, buf);
}

/* A warm color from the name, so the same function has the same color everywhere. */
static void color(const struct xframe *fr, char *buf, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *c = fr->name; *c; c++)
		h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
	if (fr->kernel) /* kernel frames: orange-brown */
		snprintf(buf, len, "rgb(%d,%d,%d)", 200 + (int)(h % 40), 120 + (int)((h >> 8) % 50),
			 40 + (int)((h >> 16) % 30));
	else if (!fr->function) /* unsymbolized: grey */
		snprintf(buf, len, "rgb(%d,%d,%d)", 170 + (int)(h % 30), 170 + (int)(h % 30),
			 170 + (int)(h % 30));
	else
		snprintf(buf, len, "rgb(%d,%d,%d)", 215 + (int)(h % 40), 80 + (int)((h >> 8) % 150),
			 40 + (int)((h >> 16) % 50));
}

struct layout {
	const struct xprofile *p;
	FILE *f;
	int64_t total;
	int max_depth;
	bool inverted;
	double height;
};

static void draw(const struct layout *l, const struct fnode *n, int depth, double x_px)
{
	double w_px = (double)n->total / (double)l->total * (SVG_WIDTH_PX - 2 * PAD_PX);
	double y =
	    l->inverted ? HEAD_PX + depth * ROW_PX : l->height - FOOT_PX - (depth + 1) * ROW_PX;
	const struct xframe *fr = &l->p->frames[n->frame];
	char fill[32];
	double child_x = x_px;

	if (w_px < MIN_BOX_PX)
		return;
	color(fr, fill, sizeof(fill));
	fprintf(l->f, "<g class=\"f\" data-x=\"%.3f\" data-w=\"%.3f\" data-n=\"", x_px - PAD_PX,
		w_px);
	xml_escape(l->f, fr->name);
	fprintf(l->f, "\"><title>");
	xml_escape(l->f, fr->name);
	fprintf(l->f, " (%s%s)\n%" PRId64 " samples, %.2f%%; self %" PRId64 ", %.2f%%</title>",
		fr->kernel		   ? "kernel"
		: strrchr(fr->module, '/') ? strrchr(fr->module, '/') + 1
					   : fr->module,
		fr->inlined ? ", inlined" : "", n->total,
		100.0 * (double)n->total / (double)l->total, n->self,
		100.0 * (double)n->self / (double)l->total);
	fprintf(l->f,
		"<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" rx=\"2\"/>"
		"<text x=\"%.2f\" y=\"%.1f\">",
		x_px, y, w_px, ROW_PX - 1, fill, x_px + 3, y + ROW_PX - 5);
	fitted_name(l->f, fr->name, w_px);
	fputs("</text></g>\n", l->f);
	for (const struct fnode *c = n->child; c; c = c->next) {
		draw(l, c, depth + 1, child_x);
		child_x += (double)c->total / (double)l->total * (SVG_WIDTH_PX - 2 * PAD_PX);
	}
}

/* Click to zoom (a printf format: W, P, C): rescale the boxes inside the clicked one's span, hide
 * the others. */
static const char zoom_script[] =
    "<script type=\"text/ecmascript\"><![CDATA[\n"
    "(function () {\n"
    "  var W = %g, P = %g, C = %g;\n"
    "  var boxes = document.querySelectorAll('g.f');\n"
    "  function fit(t, name, w) {\n"
    "    var n = Math.floor((w - 6) / C);\n"
    "    t.textContent = n < 3 ? '' : name.length <= n ? name : name.slice(0, n - 2) + '..';\n"
    "  }\n"
    "  function zoom(x0, w0) {\n"
    "    for (var i = 0; i < boxes.length; i++) {\n"
    "      var g = boxes[i], x = +g.getAttribute('data-x'), w = +g.getAttribute('data-w');\n"
    "      var l = Math.max(x, x0), r = Math.min(x + w, x0 + w0);\n"
    "      if (r - l <= 1e-6) { g.style.display = 'none'; continue; }\n"
    "      g.style.display = '';\n"
    "      var nx = P + (l - x0) / w0 * W, nw = (r - l) / w0 * W;\n"
    "      var rect = g.querySelector('rect'), text = g.querySelector('text');\n"
    "      rect.setAttribute('x', nx); rect.setAttribute('width', nw);\n"
    "      text.setAttribute('x', nx + 3); fit(text, g.getAttribute('data-n'), nw);\n"
    "    }\n"
    "    document.getElementById('reset').style.display = w0 < W - 1e-6 ? '' : 'none';\n"
    "  }\n"
    "  for (var i = 0; i < boxes.length; i++)\n"
    "    boxes[i].addEventListener('click', function (e) {\n"
    "      zoom(+this.getAttribute('data-x'), +this.getAttribute('data-w'));\n"
    "      e.stopPropagation();\n"
    "    });\n"
    "  document.getElementById('reset').addEventListener('click', function () { zoom(0, W); });\n"
    "})();\n"
    "]]></script>\n";

/*
 * flamegraph__svg() - write the flame graph of @p's samples (of thread @tid
 * only, unless 0) to @f as a standalone SVG: the root at the bottom, callees
 * above their callers; @inverted: the leaf functions at the top and their
 * callers below (what calls the hot code). Box width is proportional to
 * total samples; the title shows samples, share and self samples. The
 * header carries the session, thread, samples and the lost/truncated/
 * unsymbolized counts. Returns 0 or -ENOMEM; -ENODATA if there are no samples.
 */
int flamegraph__svg(FILE *f, const struct xprofile *p, int64_t tid, bool inverted)
{
	_cleanup_free_ int64_t *per_stack = calloc(p->n_stacks ?: 1, sizeof(*per_stack));
	struct fnode root = {};
	struct layout l = {.p = p, .f = f, .inverted = inverted};
	char what[256];
	int r = per_stack ? 0 : -ENOMEM;

	/* Samples per stack first (rows are per thread and window): each stack's frames are
	 * then walked once, so the tree costs the (stack, frame) pairs, not the rows. */
	for (size_t i = 0; i < p->n_samples && r == 0; i++)
		if (!tid || p->samples[i].tid == tid)
			per_stack[p->samples[i].stack] += p->samples[i].count;
	for (size_t i = 0; i < p->n_stacks && r == 0; i++) {
		const struct xstack *st = &p->stacks[i];
		struct fnode *n = &root;

		if (!per_stack[i])
			continue;
		root.total += per_stack[i];
		/* The tree is as deep as its deepest stack. */
		l.max_depth = MAX(l.max_depth, (int)st->len);
		for (size_t j = 0; j < st->len; j++) {
			size_t fi = st->frames[inverted ? j : st->len - 1 - j];

			n = fnode__child(n, p->frames[fi].func, fi);
			if (!n) {
				r = -ENOMEM;
				break;
			}
			n->total += per_stack[i];
		}
		if (n && n != &root)
			n->self += per_stack[i];
	}
	if (r == 0 && root.total == 0)
		r = -ENODATA;
	if (r < 0) {
		fnode__free(root.child);
		return r;
	}
	fnode__sort(p, root.child);
	l.total = root.total;
	l.height = HEAD_PX + l.max_depth * ROW_PX + FOOT_PX;

	if (tid)
		snprintf(what, sizeof(what), "thread %s (TID %" PRId64 ")",
			 xprofile__thread_name(p, tid), tid);
	else
		snprintf(what, sizeof(what), "all threads");
	fprintf(
	    f,
	    "<?xml version=\"1.0\" standalone=\"no\"?>\n"
	    "<svg version=\"1.1\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
	    "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n"
	    "<style>text { font-family: Verdana, 'DejaVu Sans', sans-serif; font-size: %dpx; "
	    "fill: #000; pointer-events: none; } g.f { cursor: pointer; } g.f:hover rect { "
	    "stroke: #000; stroke-width: 0.5; } #reset { cursor: pointer; fill: #06c; }</style>\n"
	    "<rect width=\"100%%\" height=\"100%%\" fill=\"#f8f8f0\"/>\n"
	    "<text x=\"%.0f\" y=\"22\" style=\"font-size: 16px\">",
	    SVG_WIDTH_PX, l.height, SVG_WIDTH_PX, l.height, FONT_PX, PAD_PX);
	fprintf(f, "%s flame graph: session %" PRId64 ", ", inverted ? "Inverted" : "CPU",
		p->session);
	xml_escape(f, p->comm);
	fprintf(f, " (PID %" PRId64 "), ", p->pid);
	xml_escape(f, what);
	fprintf(f,
		"</text>\n<text x=\"%.0f\" y=\"42\">%" PRId64 " samples of %s; lost %" PRId64
		", truncated stacks %" PRId64 ", unsymbolized frames %" PRId64
		". Hover for figures, click a box to zoom.</text>\n"
		"<text id=\"reset\" x=\"%.0f\" y=\"42\" text-anchor=\"end\" style=\"display: none; "
		"pointer-events: auto\">Reset zoom</text>\n",
		PAD_PX, root.total, p->event, p->lost_samples, p->truncated_stacks,
		p->unsymbolized_frames, SVG_WIDTH_PX - PAD_PX);
	{
		double x = PAD_PX;

		for (const struct fnode *c = root.child; c; c = c->next) {
			draw(&l, c, 0, x);
			x += (double)c->total / (double)l.total * (SVG_WIDTH_PX - 2 * PAD_PX);
		}
	}
	fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" style=\"fill: #555\">%s</text>\n", PAD_PX,
		l.height - 9,
		inverted ? "Top row: where the samples were taken; below: their callers."
			 : "Bottom row: the outermost callers; above: their callees. Width: share "
			   "of samples.");
	fprintf(f, zoom_script, SVG_WIDTH_PX - 2 * PAD_PX, PAD_PX, CHAR_PX);
	fputs("</svg>\n", f);
	fnode__free(root.child);
	return 0;
}
