/*
 * shipper.h - the thread that ships stored sessions to ClickHouse
 * (docs/fleet.md): in chunks of whole windows, each chunk's rows of a table
 * in one INSERT, counted once even when an answer is lost, with its cursor
 * in fleet_cursors (schema 16). Never on the event loop: its own thread and
 * its own SQLite connection, which writes only the ClickHouse cursor rows.
 */
#pragma once

#include <stdint.h>

struct shipper;

/* What the shipper needs from profd's settings ([fleet], docs/fleet.md); strings are copied. */
struct shipper_settings {
	const char *db_path;	   /* profd's database */
	const char *url;	   /* http(s)://host:port of ClickHouse */
	const char *database;	   /* NULL or "": "profd" */
	const char *user;	   /* NULL or "": "default" */
	const char *password;	   /* NULL: none (or from password_file) */
	const char *password_file; /* the password's first line, if password is not set */
	const char *host_name;	   /* NULL or "": gethostname() */
	unsigned interval_s;	   /* running sessions are shipped this often, >= 1 */
	unsigned flush_interval_s; /* profd's: a window reaches the database this late; 0: 1 */
	const char *ca_file;	   /* https: CA certificates (PEM); NULL or "": the system's */
};

/* How long shipper__free() lets the last round run before it cancels the transfer. */
#define SHIPPER_STOP_NS (2 * 1000000000ULL)

/*
 * shipper__new() - start the shipping thread. It creates the tables at its
 * first successful connection, then every @interval_s (or at a
 * shipper__kick()) ships what is new of every session ClickHouse does not
 * have whole; a failed round is retried after 1 s, doubling up to
 * @interval_s. Failures are logged once per change of error, and counted in
 * the session's cursor (profctl session).
 * Returns 0, -EINVAL (a URL that is not http(s)://, a database name with
 * other characters than letters, digits and '_'), -errno of reading the
 * password file or opening the database, -ENOMEM, or pthread_create()'s
 * -errno. Logs only from the thread.
 */
int shipper__new(const struct shipper_settings *s, struct shipper **ret);

/* shipper__kick() - a session ended: ship now rather than at the next interval. Never blocks long.
 */
void shipper__kick(struct shipper *sh);

/*
 * shipper__free() - one last round (sessions ended at shutdown), cancelled
 * after SHIPPER_STOP_NS if ClickHouse is slow, then stop and join the
 * thread. What was not shipped is shipped at the next start. Accepts NULL.
 */
void shipper__free(struct shipper *sh);
