/* cmd-export.c - export and flamegraph: a session's profile in other tools' formats, and as an SVG
 * flame graph. */
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "output.h"
#include "profctl.h"
#include "protocol.h"
#include "util.h"
#include "export.h"

/* The export formats: name, and whether the output is binary (not for a terminal). */
static const struct export_format {
	const char *name;
	int (*write)(FILE *f, const struct xprofile *p, int64_t tid);
	bool binary;
} export_formats[] = {
    {"folded", export__folded, false},
    {"pprof", pprof__write, true},
    {"chrome-trace", export__chrome_trace, false},
    {"speedscope", export__speedscope, false},
};

const struct export_format *export_format_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(export_formats); i++)
		if (strcmp(export_formats[i].name, name) == 0)
			return &export_formats[i];
	return NULL;
}

/*
 * load_profile() - ask profd for session @a->id's raw profile (with
 * --from/--to and --event; per window if @per_window, else summed; with
 * @by_stack and no --thread, summed over threads too: one row per stack)
 * and its SESSION object, into @p. Logs; returns 0 or -errno.
 */
static int load_profile(struct conn *c, const struct args *a, bool per_window, bool by_stack,
			struct xprofile *p)
{
	_cleanup_(json_decrefp) json_t *reply = NULL, *session = NULL;
	json_t *request = request_range(request_session("profile", a->id), a);
	int r;

	/* Only the Chrome trace places samples in time: the others take them summed. */
	if (!per_window)
		request = request_set(request, "per_window", json_false());
	/* What needs no thread (the flame graph, folded stacks) gets a row a stack, not one a thread. */
	if (!per_window && by_stack && !a->thread)
		request = request_set(request, "per_thread", json_false());
	if (a->event)
		request = request_set(request, "event", json_string(a->event));
	/* The rows as one string: a few bytes a row in profd's memory, not hundreds. */
	r = call(c, request_set(request, "packed", json_true()), &reply);
	if (r < 0)
		return r;
	r = call(c, request_session("session", a->id), &session);
	if (r < 0)
		return r;
	r = xprofile__load(p, reply, json_object_get(session, "session"));
	if (r == -EBADMSG)
		log_error("malformed \"profile\" response from profd");
	else if (r < 0)
		log_oom();
	return r;
}

/*
 * write_output() - run @write into -o FILE (created 0644, replaced only once
 * complete: written to FILE.tmp, then renamed), into FILE itself when it
 * exists and is not a regular file (/dev/null, a FIFO: never replaced), or
 * stdout. Logs; returns 0 or -errno.
 */
static int write_output(const struct args *a, bool binary,
			int (*write)(FILE *f, const struct xprofile *p, int64_t tid, bool inv),
			const struct xprofile *p)
{
	_cleanup_free_ char *tmp = NULL;
	FILE *f = stdout;
	int r;

	if (!a->output && binary && isatty(STDOUT_FILENO)) {
		log_error("%s output is binary: write it to a file with -o FILE", a->format);
		return -EINVAL;
	}
	if (a->output) {
		struct stat sb;
		int fd;

		if (stat(a->output, &sb) == 0 && !S_ISREG(sb.st_mode)) {
			fd = open(a->output, O_WRONLY | O_CLOEXEC);
		} else {
			if (asprintf(&tmp, "%s.tmp", a->output) < 0) {
				tmp = NULL;
				return log_oom();
			}
			fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		}
		if (fd < 0)
			return log_error_errno(-errno, "cannot create %s: %m", tmp ?: a->output);
		f = fdopen(fd, "w");
		if (!f) {
			close(fd);
			if (tmp)
				unlink(tmp);
			return log_oom();
		}
	}
	r = write(f, p, a->thread, a->inverted);
	if (a->output) {
		if (fclose(f) != 0 && r >= 0)
			r = -errno;
		if (tmp && r >= 0 && rename(tmp, a->output) < 0)
			r = -errno;
		if (tmp && r < 0)
			unlink(tmp);
	}
	if (r == -ENODATA)
		log_error("no samples%s in session %lld%s", a->thread ? " of that thread" : "",
			  a->id, a->has_from || a->has_to ? " in that time range" : "");
	else if (r == -ENOMEM)
		log_oom();
	else if (r < 0)
		log_error_errno(r, "cannot write %s: %m", a->output ? a->output : "the output");
	return r;
}

static const struct export_format *current_format;

static int write_export(FILE *f, const struct xprofile *p, int64_t tid, bool inverted)
{
	return current_format->write(f, p, tid);
}

static int write_flamegraph(FILE *f, const struct xprofile *p, int64_t tid, bool inverted)
{
	return flamegraph__svg(f, p, tid, inverted);
}

/* --thread TID must name a thread of the session: say so rather than print an empty file. */
static int check_thread(const struct args *a, const struct xprofile *p)
{
	if (!a->thread)
		return 0;
	for (size_t i = 0; i < p->n_samples; i++)
		if (p->samples[i].tid == a->thread)
			return 0;
	log_error("session %lld has no samples of thread %lld%s (see 'profctl threads %lld')",
		  a->id, a->thread, a->has_from || a->has_to ? " in that time range" : "", a->id);
	return -ENOENT;
}

int run_export(struct conn *c, const struct args *a)
{
	_cleanup_(xprofile__free) struct xprofile p = {};
	int r;

	current_format = export_format_find(a->format);
	r = load_profile(c, a, current_format->write == export__chrome_trace,
			 current_format->write == export__folded, &p);
	if (r < 0)
		return r;
	r = check_thread(a, &p);
	if (r < 0)
		return r;
	r = write_output(a, current_format->binary, write_export, &p);
	/* On stderr too, since the folded format has no room for them. */
	if (r == 0)
		fprintf(stderr,
			"profctl: %s %s: %lld samples; lost samples %lld, truncated stacks %lld, "
			"unsymbolized frames %lld\n",
			a->output ? "wrote" : "exported", a->output ? a->output : a->format,
			(long long)p.total_samples, (long long)p.lost_samples,
			(long long)p.truncated_stacks, (long long)p.unsymbolized_frames);
	return r;
}

int run_flamegraph(struct conn *c, const struct args *a)
{
	_cleanup_(xprofile__free) struct xprofile p = {};
	int r;

	r = load_profile(c, a, false, true, &p);
	if (r < 0)
		return r;
	r = check_thread(a, &p);
	if (r < 0)
		return r;
	r = write_output(a, false, write_flamegraph, &p);
	if (r == 0 && a->output)
		fprintf(stderr, "profctl: wrote %s; open it in a web browser\n", a->output);
	return r;
}
