/*
 * config.h - profd's settings: built-in defaults, then the configuration
 * file (/etc/profd/profd.conf, INI syntax, parsed by inih), then the
 * command line, each overriding the one before.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* SYSCONFDIR/profd/profd.conf, set by meson: /etc/profd/profd.conf with prefix /usr. */
#ifndef PROFD_DEFAULT_CONFIG
#define PROFD_DEFAULT_CONFIG "/etc/profd/profd.conf"
#endif

/* Defaults of the limits (docs/man/profd.8). */
#define PROFD_DEFAULT_MAX_SESSIONS 16
#define PROFD_DEFAULT_MAX_THREADS 4096
#define PROFD_DEFAULT_MAX_STACKS 200000
/* The ring only has to hold what arrives while its drain thread waits for a CPU (the
 * records then wait in user memory while the loop is busy: collect/bpf_util.h). VmRSS
 * counts it twice (the kernel maps the data pages twice), with the off-CPU one of half its
 * size: 8 MiB took 24 MiB of profd's RSS, 2 MiB takes 6. 2 MiB holds ~120 samples with
 * 16 KiB stack copies, ~4,000 with table-walked stacks of 60 frames. */
#define PROFD_DEFAULT_RING_BUFFER_BYTES (2u << 20)
/* Compiled CFI tables kept in cfi-cache/ beside the database (collect/cfi_cache.h): ~20 times
 * libtorch_cpu.so's 11 MiB. */
#define PROFD_DEFAULT_CFI_CACHE_BYTES (256ull << 20)
/* Reports and SQL run on this many threads, at most this many queued or running per user and
 * in all, each stopped after the timeout: the event loop never waits for them (readers.h).
 * A thread takes the oldest query of a user who has none running first. */
#define PROFD_DEFAULT_QUERY_THREADS 2
#define PROFD_DEFAULT_QUERIES_PER_USER 32
#define PROFD_DEFAULT_MAX_QUERIES 64
#define PROFD_DEFAULT_QUERY_TIMEOUT_S 60
/* 1 s windows older than an hour are merged into 1 min windows. */
#define PROFD_DEFAULT_MERGE_WINDOWS_AFTER_S 3600
#define PROFD_DEFAULT_MERGED_WINDOW_S 60
/*
 * Running sessions write what they aggregated to the database every 5 s, in
 * one transaction (a query, a session's end and a stop write it at once; a
 * session's first seconds are written every second: YOUNG_SESSION_NS, main.c).
 * Every 1 s, as the windows are, cost 28-61% more of the daemon's CPU on a
 * PyTorch loop at 999 Hz (16.5-20.4 against 12.7-13.3 us a sample, minutes
 * 2-4 of a run each; bench/cost: 24.3 against 16.9): each commit rewrites
 * the B-tree pages it touched (~0.5 pwrite a sample into the WAL at 1 s)
 * and prepares its statements again (store__begin_flush()).
 */
#define PROFD_DEFAULT_FLUSH_INTERVAL_S 5
/* Running sessions are shipped to ClickHouse and pushed to Pyroscope every minute. */
#define PROFD_DEFAULT_FLEET_INTERVAL_S 60

struct profd_config {
	char *db_path;			/* owned */
	char *socket_path;		/* owned */
	int log_level;			/* enum log_level */
	unsigned default_freq_hz;	/* attach without freq_hz: 1..PROFD_MAX_FREQ_HZ */
	bool offcpu; /* load the off-CPU program (a sched_switch hook on every CPU); default true */
	unsigned flush_interval_s;	/* running sessions written to the database this often */
	uint64_t retention_ns;		/* ended sessions older than this are deleted; 0: kept */
	uint64_t max_db_bytes;		/* oldest ended sessions deleted above this size; 0: none */
	unsigned merge_windows_after_s; /* 1 s windows older than this are merged; 0: never */
	unsigned merged_window_s;	/* ... into windows this long, 2..86400 s */
	unsigned max_sessions;		/* running at once, 1..PROFILE_MAX_SLOTS */
	unsigned max_threads;		/* per session */
	unsigned max_stacks;		/* distinct call stacks per session */
	uint64_t ring_buffer_bytes; /* BPF ring buffer for samples, a power of 2; off-CPU: half */
	uint64_t cfi_cache_bytes;   /* compiled CFI tables kept beside the database; 0: none */
	unsigned query_threads;	    /* reader threads for reports and SQL, 1..64 */
	unsigned queries_per_user;  /* reports or SQL queued or running for one uid */
	unsigned max_queries;	    /* ... for everyone, >= query_threads */
	unsigned query_timeout_s;   /* a report is stopped this long after it was asked */
	/* [fleet] (docs/fleet.md): every string owned, NULL or "" when not set. */
	char *host_name;	   /* the host's name in fleet rows; NULL: gethostname() */
	unsigned fleet_interval_s; /* running sessions are shipped and pushed this often */
	char *clickhouse_url;	   /* http(s)://host:port of ClickHouse's HTTP interface */
	char *clickhouse_database; /* "profd" */
	char *clickhouse_user;
	char *clickhouse_password;
	char *clickhouse_password_file; /* the password, read from this file (root only) */
	char *fleet_ca_file; /* https: the CA certificates (PEM) servers must chain to, not the system's */
	char *pyroscope_url;		/* http(s)://host:port of Pyroscope's ingest API */
	char *pyroscope_app;		/* application name of the pushed profiles: "profd" */
	char *pyroscope_tenant;		/* X-Scope-OrgID header, if set */
	char *pyroscope_user;		/* basic auth, with the password from the file below */
	char *pyroscope_password_file;
};

/* config__init() - the built-in defaults into @c. Returns 0 or -ENOMEM. */
int config__init(struct profd_config *c);
void config__done(struct profd_config *c);

/*
 * config__load() - read the INI file @path over @c. Settings absent from it
 * keep their value; unknown sections or keys and bad values are errors.
 * @missing_ok: a missing file is not an error (the default path).
 * Returns 0, -ENOENT (no such file, @missing_ok false), -EINVAL (then
 * @errbuf of @errlen bytes says "PATH:LINE: what"), -errno. Does not log.
 */
int config__load(struct profd_config *c, const char *path, bool missing_ok, char *errbuf,
		 size_t errlen);

/*
 * config__set() - one setting by its key as in the file ("db",
 * "retention_days", "max_sessions", ...), for a file line or a command-line
 * flag. Returns 0, -EINVAL (unknown key or bad value; @errbuf says why),
 * -ENOMEM.
 */
int config__set(struct profd_config *c, const char *key, const char *value, char *errbuf,
		size_t errlen);

/* config__print() - the effective settings, in the file's syntax, to @f. */
void config__print(const struct profd_config *c, FILE *f);

/*
 * parse_size_bytes() - "1048576", "512K", "64M", "10G", "1T" (powers of
 * 1024) into *@ret. Returns 0 or -EINVAL (or -ERANGE on overflow).
 */
int parse_size_bytes(const char *s, uint64_t *ret);
