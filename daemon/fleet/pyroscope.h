/*
 * pyroscope.h - the thread that pushes each session's CPU samples to
 * Pyroscope's ingest API (POST /ingest, format=pprof), piece by piece,
 * never on the event loop.
 */
#pragma once

#include <stdint.h>

struct pyroscope;

/* What the push needs of profd's [fleet] settings; the strings are copied. */
struct pyroscope_settings {
	const char *url;    /* http(s)://host:port of Pyroscope (a trailing '/' is dropped) */
	const char *app;    /* application name: "profd"; characters Pyroscope refuses: '_' */
	const char *tenant; /* X-Scope-OrgID header; NULL or "": none */
	const char *user;   /* basic auth user; NULL or "": no basic auth */
	const char *password_file; /* basic auth password: the file's first line; NULL: "" */
	const char *host_name;	   /* the "host" label; NULL or "": gethostname() */
	unsigned interval_s;	   /* a push round this often, >= 1; retries back off up to it */
	unsigned flush_interval_s; /* profd's: a window reaches the database this late; 0: 1 */
	const char *ca_file;	   /* https: CA certificates (PEM); NULL or "": the system's */
};

/*
 * pyroscope__new() - start the push thread on the database at @db_path (its
 * own read-write connection, which writes only the fleet_cursors rows of
 * sink 'pyroscope'; the schema is the current one: the store opened it
 * first). On the first start with Pyroscope on this database, the sessions
 * already stored get a cursor marked done without being pushed; every
 * session stored later is pushed, from its cursor after a restart: every
 * @s->interval_s, the CPU samples of each session's windows from where its
 * last push ended (its start, first) to 3 s before now, as one gzip'd pprof
 * (common/pprof.h) per session; an ended session's last piece as soon as
 * pyroscope__session_ended() says so. A failed push is retried (1 s,
 * doubling, at most the interval) from the same point; the cursor moves in
 * the database after each 2xx answer, so a piece is pushed twice only if
 * its answer was lost (or profd died between the answer and the cursor).
 *
 * Returns 0 with *@ret set, -EINVAL (no URL, interval 0), -ENOENT/-EACCES
 * (the password file), -EIO (the database cannot be opened or written),
 * -ENOMEM, or pthread_create()'s -errno. Logs nothing itself; the thread
 * logs one line per change of the push state ("Pyroscope at URL: HTTP 500:
 * ...", "...: pushing again") and database errors.
 */
int pyroscope__new(const char *db_path, const struct pyroscope_settings *s, struct pyroscope **ret);

/*
 * pyroscope__session_ended() - a session ended: push its last piece now,
 * not at the next round. Never blocks (takes the thread's lock for a flag).
 * Accepts NULL (no Pyroscope configured).
 */
void pyroscope__session_ended(struct pyroscope *ps);

/*
 * pyroscope__free() - a last round (the last pieces of the sessions ended
 * by then), at most about 5 s even if the server hangs, then stop the
 * thread and free. Logs the sessions left with unpushed samples (the next
 * start pushes them). Accepts NULL.
 */
void pyroscope__free(struct pyroscope *ps);
