/*
 * profctl.h - what the files of profctl share: the parsed command line, the
 * command table's entry, and the helpers that send a request and print
 * its answer (call.c). Each command group is a file of its own:
 * cmd-attach.c, cmd-report.c, cmd-export.c, cmd-diff.c, cmd-sql.c,
 * cmd-fleet.c (which talks to ClickHouse, not to profd).
 */
#pragma once

#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "conn.h"

#define EXIT_USAGE 2
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

/* How often attach --wait asks profd about the session. */
#define WAIT_POLL_NS (500 * NSEC_PER_MSEC)

/* Range of --limit, as profd accepts it (docs/protocol.md). */
#define LIMIT_MAX 10000

/* OPERAND_TARGET: a PID, or none with --comm or --cgroup (snapshot). */
enum operand {
	OPERAND_NONE,
	OPERAND_PID,
	OPERAND_SESSION,
	OPERAND_TOPIC,
	OPERAND_TWO_SESSIONS, /* diff A B */
	OPERAND_SQL,	      /* sql "SELECT ..." */
	OPERAND_TARGET,
	OPERAND_FLEET, /* fleet top|hotpaths, fleet sql "SELECT ..." */
};


/* The parsed command line. */
struct args {
	const struct command *command;
	const char *socket_path;
	bool json;
	bool ascii;
	bool wait;
	long long id; /* the PID or SESSION operand */
	bool has_duration;
	double duration_s;
	long long freq_hz;
	const char *events;	       /* --events as given; validated */
	const char *unwind;	       /* --unwind: fp, dwarf, auto; NULL: profd's default */
	long long stack_bytes;	       /* --stack-bytes; 0: profd's default */
	double memory_interval_s;      /* --memory-interval; 0: profd's default */
	long long malloc_sample_bytes; /* --malloc-sample-bytes; 0: profd's default */
	long long malloc_max_rate;     /* --malloc-max-rate; -1: profd's default */
	bool debuginfod;	       /* resymbolize --debuginfod */
	bool children;		       /* attach --children */
	const char *python;	       /* attach --python: auto, off; NULL: profd's default */
	const char *uprobes;	       /* attach --uprobe LIB:SYMBOL[,LIB:SYMBOL] */
	long long uprobe_max_rate;     /* attach --uprobe-max-rate; -1: profd's default */
	const char *python_frames;     /* --python-frames: clean, all; NULL: profd's default */
	bool all;		       /* threads --all: every thread */
	const char *group_by;	       /* threads --group-by: name; NULL: by thread */
	const char *event;	       /* top/hotpaths --event NAME; NULL: CPU samples */
	double window_s;	       /* threads --window SECONDS; 0: none */
	long long limit;	       /* 0: profd's default */
	long long id2;		       /* diff: the second SESSION */
	const char *sql;	       /* sql: the statement */
	double from_s, to_s;	       /* --from/--to; to_s 0: to the end */
	bool has_from, has_to;
	long long thread;		  /* --thread TID; 0: all */
	bool inverted;			  /* flamegraph --inverted */
	const char *format;		  /* export --format */
	const char *output;		  /* -o FILE; NULL: stdout */
	bool csv;			  /* sql --csv */
	long long max_rows;		  /* sql --max-rows; 0: profd's default */
	bool has_pid;			  /* snapshot: the PID operand was given */
	const char *comm;		  /* snapshot --comm NAME */
	const char *cgroup;		  /* snapshot --cgroup PATH */
	const char *label;		  /* snapshot --label TEXT */
	uint64_t pid_start_ticks;	  /* attach request: the start time of the process meant */
	const struct command *help_topic; /* "help COMMAND" */
	/* fleet: the report, and where ClickHouse is (cmd-fleet.c fills the defaults). */
	const char *fleet_report;   /* "top", "hotpaths" or "sql" */
	const char *clickhouse_url; /* --clickhouse-url */
	const char *database;	    /* --database */
	const char *user;	    /* --user */
	const char *password_file;  /* --password-file */
	const char *ca_file;	    /* --ca-file */
	double since_s;		    /* --since; 0: the default */
	const char *host;	    /* --host NAME */
};

struct command {
	const char *name;
	enum operand operand;
	const char *synopsis;  /* after "profctl NAME" */
	const char *summary;   /* one line, for the command list */
	const char *options;   /* the command's own options' long names, space-separated
				* (client/cmdline.c); the common ones are added */
	int (*run)(struct conn *c, const struct args *a);
	bool without_profd; /* run() gets no connection to profd (fleet) */
};

/*
 * A human rendering goes to a memory stream first, so that a malformed
 * response leaves no half table on stdout.
 */
struct render {
	FILE *f;
	char *text;
	size_t size;
};

typedef int (*render_fn)(FILE *f, const json_t *o);

/* SIGINT was received (attach --wait, snapshot). */
extern volatile sig_atomic_t interrupted;

/* In call.c; each is documented there. */
int log_oom(void);

/*
 * In cmdline.c. parse_integer(): @s as a decimal integer in @min..@max for
 * the option or operand @what; logs one line and returns -EINVAL otherwise.
 * options__build(): the getopt_long() tables for a command taking the
 * options @names (space-separated long names) and the common ones: @ret
 * (@n entries, the last zeroed) and @shortopts (@len bytes); -EINVAL if a
 * name is unknown or a table too small. options__apply(): the option
 * getopt_long() returned as @c, with @value, into @a: 0, -EINVAL (logged),
 * or -ENOENT if @c is not a command option.
 */
int parse_integer(const char *s, const char *what, long long min, long long max, long long *ret);
int options__build(const char *names, struct option *ret, size_t n, char *shortopts, size_t len);
int options__apply(int c, const char *value, struct args *a);
bool events_next(const char *list, size_t *pos, const char **ret, size_t *ret_len);
int call_error(int r, const char *detail);
int call_quiet(struct conn *c, json_t *request, json_t **ret, char **ret_detail);
int call(struct conn *c, json_t *request, json_t **ret);
int call_for_text(struct conn *c, const struct args *a, json_t *request, json_t **ret);
json_t *request_new(const char *cmd);
json_t *request_session(const char *cmd, long long session);
int print_json(const json_t *reply);
int render_begin(struct render *out);
int render_end(struct render *out, int r);
const json_t *session_of(const json_t *reply);
void on_sigint(int sig);
void sleep_ns(uint64_t ns);
int call_and_render(struct conn *c, const struct args *a, json_t *request, render_fn fn,
		    const char *member);
json_t *request_set(json_t *request, const char *key, json_t *value);
json_t *request_range(json_t *request, const struct args *a);
json_t *request_report(const char *cmd, const struct args *a);
bool want_ascii(const struct args *a);

int call_and_draw(struct conn *c, const struct args *a, json_t *request,
		  int (*fn)(FILE *f, const json_t *reply, bool ascii));

/*
 * In cmd-fleet.c. fleet__check_args(): after parsing, the fleet report
 * named and its operands, and where ClickHouse is (--clickhouse-url, else
 * $PROFD_CLICKHOUSE_URL, else profd.conf's [fleet] settings) filled into
 * @a; logs a usage error and returns -EINVAL, or -ENOMEM.
 */
int fleet__check_args(struct args *a);

/* In cmd-export.c: the export format named @name, or NULL. */
const struct export_format *export_format_find(const char *name);

/* The commands, one function each (in the cmd-*.c files). */
int run_attach(struct conn *c, const struct args *a);
int run_detach(struct conn *c, const struct args *a);
int run_snapshot(struct conn *c, const struct args *a);
int run_sessions(struct conn *c, const struct args *a);
int run_session(struct conn *c, const struct args *a);
int run_top(struct conn *c, const struct args *a);
int run_hotpaths(struct conn *c, const struct args *a);
int run_memory(struct conn *c, const struct args *a);
int run_threads(struct conn *c, const struct args *a);
int run_offcpu(struct conn *c, const struct args *a);
int run_gpu(struct conn *c, const struct args *a);
int run_ranges(struct conn *c, const struct args *a);
int run_resymbolize(struct conn *c, const struct args *a);
int run_analyze(struct conn *c, const struct args *a);
int run_export(struct conn *c, const struct args *a);
int run_flamegraph(struct conn *c, const struct args *a);
int run_diff(struct conn *c, const struct args *a);
int run_sql(struct conn *c, const struct args *a);
int run_ping(struct conn *c, const struct args *a);
int run_fleet(struct conn *c, const struct args *a);
