/*
 * profctl.c - the command-line client of profd: start and stop sampling
 * sessions, list them, and print their reports (hottest functions, hot call
 * paths as a tree, per-thread samples).
 */
#include <assert.h>
#include <ctype.h>
#include <getopt.h>
#include <langinfo.h>
#include <limits.h>
#include <locale.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>

#include "conn.h"
#include "profctl.h"
#include "export.h"
#include "log.h"
#include "output.h"
#include "protocol.h"
#include "procfs.h"
#include "targets.h"
#include "profctl-help.h"
#include "util.h"

/*
 * The commands, in the order "profctl --help" lists them, a row each (not
 * reflowed: each .options stays one literal, as tests/test-profctl-help.py
 * reads it from here).
 */
/* clang-format off */
static const struct command commands[] = {
	{.name = "attach", .operand = OPERAND_PID, .run = run_attach,
	 .synopsis = "PID [--duration SECONDS] [--freq HZ] [--events LIST] [--unwind MODE]\n"
		     "        [--children] [--python auto|off] [--uprobe LIB:SYMBOL[,...]] [--wait]",
	 .summary = "start sampling a process; prints the new session's ID",
	 .options = "duration freq events wait unwind stack-bytes children memory-interval malloc-sample-bytes malloc-max-rate python uprobe uprobe-max-rate"},
	{.name = "snapshot", .operand = OPERAND_TARGET, .run = run_snapshot,
	 .synopsis = "(PID | --comm NAME | --cgroup PATH) --duration SECONDS\n"
		     "        [--label TEXT] [--freq HZ] [--events LIST] [--unwind MODE]",
	 .summary = "profile for a while and print the session ID(s); for cron",
	 .options = "duration comm cgroup label freq events unwind stack-bytes children python uprobe uprobe-max-rate"},
	{.name = "detach", .operand = OPERAND_SESSION, .run = run_detach,
	 .synopsis = "SESSION",
	 .summary = "stop a running session"},
	{.name = "sessions", .operand = OPERAND_NONE, .run = run_sessions,
	 .synopsis = "",
	 .summary = "list all sessions, newest first"},
	{.name = "session", .operand = OPERAND_SESSION, .run = run_session,
	 .synopsis = "SESSION",
	 .summary = "show one session's settings and counters"},
	{.name = "top", .operand = OPERAND_SESSION, .run = run_top,
	 .synopsis = "SESSION [--limit N] [--event NAME] [--from S] [--to S] [--python-frames V]",
	 .summary = "hottest functions, by samples in the function itself",
	 .options = "limit event from to python-frames"},
	{.name = "hotpaths", .operand = OPERAND_SESSION, .run = run_hotpaths,
	 .synopsis = "SESSION [--limit N] [--ascii] [--event NAME] [--from S] [--to S]\n"
		     "        [--python-frames clean|all]",
	 .summary = "hottest call paths, merged into a call tree",
	 .options = "limit ascii event from to python-frames"},
	{.name = "threads", .operand = OPERAND_SESSION, .run = run_threads,
	 .synopsis = "SESSION [--all] [--group-by name] [--window SECONDS]",
	 .summary = "samples per thread and load imbalance",
	 .options = "all group-by window"},
	{.name = "offcpu", .operand = OPERAND_SESSION, .run = run_offcpu,
	 .synopsis = "SESSION [--limit N]",
	 .summary = "where threads wait: the top blocking stacks by off-CPU time",
	 .options = "limit"},
	{.name = "memory", .operand = OPERAND_SESSION, .run = run_memory,
	 .synopsis = "SESSION [--limit N] [--ascii]",
	 .summary = "memory growth explained: a diagnosis, RSS by mapping, the stacks that grow it",
	 .options = "limit ascii"},
	{.name = "export", .operand = OPERAND_SESSION, .run = run_export,
	 .synopsis = "SESSION --format FORMAT [-o FILE] [--from S] [--to S] [--thread TID]",
	 .summary = "the profile for other tools: pprof, folded, chrome-trace",
	 .options = "format output from to thread event python-frames"},
	{.name = "flamegraph", .operand = OPERAND_SESSION, .run = run_flamegraph,
	 .synopsis = "SESSION [-o FILE.svg] [--thread TID] [--inverted] [--from S] [--to S]",
	 .summary = "an SVG flame graph of the call stacks, for a web browser",
	 .options = "output from to thread inverted event python-frames"},
	{.name = "diff", .operand = OPERAND_TWO_SESSIONS, .run = run_diff,
	 .synopsis = "SESSION_A SESSION_B [--limit N] [--from S] [--to S] [--python-frames V]",
	 .summary = "compare two sessions: which functions' shares changed most",
	 .options = "limit from to python-frames"},
	{.name = "analyze", .operand = OPERAND_SESSION, .run = run_analyze,
	 .synopsis = "SESSION [--python-frames clean|all]",
	 .summary = "findings: bottlenecks with evidence and a suggestion",
	 .options = "python-frames"},
	{.name = "sql", .operand = OPERAND_SQL, .run = run_sql,
	 .synopsis = "\"SELECT ...\" [--csv] [--max-rows N]",
	 .summary = "run a read-only SQL query over the stored profiles",
	 .options = "csv max-rows"},
	{.name = "fleet", .operand = OPERAND_FLEET, .run = run_fleet, .without_profd = true,
	 .synopsis = "top|hotpaths [--since DURATION] [--host NAME] [--comm NAME] [--label TEXT]\n"
		     "        [--event NAME] [--limit N] [--ascii] [--clickhouse-url URL]\n"
		     "        [--database DB] [--user NAME] [--password-file FILE] [--ca-file FILE]\n"
		     "  or: profctl fleet sql \"SELECT ...\" [--csv] [--clickhouse-url URL] ...",
	 .summary = "top, hotpaths or SQL over every host's sessions, from ClickHouse",
	 .options = "clickhouse-url database user password-file ca-file since host comm label event limit "
		    "ascii csv"},
	{.name = "gpu", .operand = OPERAND_SESSION, .run = run_gpu,
	 .synopsis = "SESSION [--limit N]",
	 .summary = "kernel launches, CUDA API times, copies, GPU memory growth",
	 .options = "limit"},
	{.name = "ranges", .operand = OPERAND_SESSION, .run = run_ranges,
	 .synopsis = "SESSION",
	 .summary = "NVTX ranges as a tree: calls, total/avg/min/max time, % of session"},
	{.name = "resymbolize", .operand = OPERAND_SESSION, .run = run_resymbolize,
	 .synopsis = "SESSION [--debuginfod]",
	 .summary = "name frames left unsymbolized, from debug info found since",
	 .options = "debuginfod"},
	{.name = "ping", .operand = OPERAND_NONE, .run = run_ping,
	 .synopsis = "",
	 .summary = "check that profd answers; prints its version and its CFI tables' figures"},
	/* No .run: main() prints the help. */
	{.name = "help", .operand = OPERAND_TOPIC,
	 .synopsis = "[COMMAND]",
	 .summary = "show this help, or a command's"},
};
/* clang-format on */
static const size_t n_commands = ARRAY_SIZE(commands);

static const char common_options_help[] =
    "Common options (before or after the command):\n"
    "  -s, --socket PATH  profd's socket (default: $PROFD_SOCKET if set, else\n"
    "                     " PROFD_DEFAULT_SOCKET ")\n"
    "  -j, --json         print profd's response as one JSON document instead\n"
    "  -h, --help         show help and exit\n";

static void help_global(FILE *f)
{
	fprintf(f, "Usage: profctl [--socket PATH] [--json] COMMAND [ARGS]\n"
		   "\n"
		   "Control profd, the sampling profiler daemon, and print its reports.\n"
		   "\n"
		   "Commands:\n");
	for (size_t i = 0; i < n_commands; i++) {
		char head[64];

		snprintf(head, sizeof(head), "%s %s", commands[i].name,
			 commands[i].operand == OPERAND_PID	  ? "PID"
			 : commands[i].operand == OPERAND_TARGET  ? "TARGET"
			 : commands[i].operand == OPERAND_SESSION ? "SESSION"
			 : commands[i].operand == OPERAND_TOPIC	  ? "[COMMAND]"
			 : commands[i].operand == OPERAND_TWO_SESSIONS ? "A B"
			 : commands[i].operand == OPERAND_SQL	  ? "QUERY"
			 : commands[i].operand == OPERAND_FLEET	  ? "REPORT"
								  : "");
		fprintf(f, "  %-19s %s\n", head, commands[i].summary);
	}
	fprintf(f,
		"\n"
		"%s"
		"  -V, --version      show profctl's version and exit\n"
		"\n"
		"Examples:\n"
		"  profctl attach 1234 --duration 10 --wait\n"
		"  profctl sessions\n"
		"  profctl top 7 --limit 10\n"
		"  profctl hotpaths 7\n"
		"  profctl top 7 --json\n"
		"  profctl flamegraph 7 -o cpu.svg\n"
		"  profctl export 7 --format pprof -o cpu.pb.gz\n"
		"  profctl sql \"SELECT * FROM hot_functions WHERE session_id = 7\"\n"
		"  profctl fleet top --since 2h --comm python3 --clickhouse-url http://ch:8123\n"
		"  profctl help attach\n"
		"\n"
		"Exit status: 0 success, 1 error (from profd, or profd unreachable),\n"
		"2 usage error, 130 attach --wait interrupted.\n"
		"See profctl(1) and profd(8).\n",
		common_options_help);
}

/*
 * help_command() - a command's usage line, then its description and its
 * options, which come from profctl(1)'s COMMANDS section (profctl-help.h,
 * made at build time by client/man2help.py): one text for both.
 */
static void help_command(FILE *f, const struct command *cmd)
{
	const char *text = "See profctl(1).\n";

	for (size_t i = 0; i < ARRAY_SIZE(command_helps); i++)
		if (strcmp(command_helps[i].name, cmd->name) == 0)
			text = command_helps[i].text;
	fprintf(f, "Usage: profctl %s %s\n\n%s\n%s", cmd->name, cmd->synopsis, text,
		common_options_help);
}

static const struct command *command_find(const char *name)
{
	for (size_t i = 0; i < n_commands; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

/*
 * parse_operand() - the command's one operand: a PID, a SESSION or a help
 * topic. *@have_operand says whether one was seen already. Logs and returns
 * -EINVAL when @operand is invalid or one too many.
 */
static int parse_operand(const char *operand, struct args *a, bool *have_operand)
{
	if (a->command->operand == OPERAND_TWO_SESSIONS && *have_operand && !a->id2)
		return parse_integer(operand, "SESSION_B", 1, LLONG_MAX, &a->id2);
	/* fleet sql QUERY: the second operand. */
	if (a->command->operand == OPERAND_FLEET && *have_operand && !a->sql &&
	    strcmp(a->fleet_report, "sql") == 0) {
		a->sql = operand;
		return 0;
	}
	if (*have_operand || a->command->operand == OPERAND_NONE) {
		log_error("unexpected argument '%s' (see 'profctl %s --help')", operand,
			  a->command->name);
		return -EINVAL;
	}
	*have_operand = true;
	switch (a->command->operand) {
	case OPERAND_PID:
		return parse_integer(operand, "PID", 1, INT_MAX, &a->id);
	case OPERAND_TARGET:
		a->has_pid = true;
		return parse_integer(operand, "PID", 1, INT_MAX, &a->id);
	case OPERAND_SESSION:
		return parse_integer(operand, "SESSION", 1, LLONG_MAX, &a->id);
	case OPERAND_TWO_SESSIONS:
		return parse_integer(operand, "SESSION_A", 1, LLONG_MAX, &a->id);
	case OPERAND_SQL:
		a->sql = operand;
		return 0;
	case OPERAND_FLEET:
		a->fleet_report = operand; /* checked by fleet__check_args() */
		return 0;
	default:
		a->help_topic = command_find(operand);
		if (!a->help_topic) {
			log_error("unknown command '%s' (see 'profctl --help')", operand);
			return -EINVAL;
		}
		return 0;
	}
}

/*
 * common_option() - the common option getopt_long() returned as @c, -s or
 * -j, into @a; false if @c is another. Before the command or after it alike.
 */
static bool common_option(int c, struct args *a)
{
	switch (c) {
	case 's':
		a->socket_path = optarg;
		return true;
	case 'j':
		a->json = true;
		return true;
	default:
		return false;
	}
}

/*
 * parse_command_line() - fill @a from @argv. Returns 0 to run a command, 1
 * when help or the version was printed (exit 0), -EINVAL on a usage error
 * (already reported, on stderr). getopt_long() reports unknown options itself.
 */
static int parse_command_line(int argc, char **argv, struct args *a)
{
	static const struct option global_options[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {},
	};
	_cleanup_free_ char **sub_argv = NULL;
	_cleanup_free_ char *sub_name = NULL;
	struct option options[32]; /* the common options and the command's */
	char shortopts[32]; /* the common options' and the command's short names */
	bool have_operand = false;
	int sub_argc, c;

	/* Global options end at the command name ('+'). */
	optind = 0;
	while ((c = getopt_long(argc, argv, "+s:jhV", global_options, NULL)) != -1) {
		if (common_option(c, a))
			continue;
		switch (c) {
		case 'h':
			help_global(stdout);
			return 1;
		case 'V':
			printf("profctl %s (protocol %d)\n", PROFD_VERSION, PROFD_PROTOCOL_VERSION);
			return 1;
		default:
			return -EINVAL;
		}
	}
	if (optind >= argc) {
		log_error("no command given (see 'profctl --help')");
		return -EINVAL;
	}
	a->command = command_find(argv[optind]);
	if (!a->command) {
		log_error("unknown command '%s' (see 'profctl --help')", argv[optind]);
		return -EINVAL;
	}

	/*
	 * The command's own argv, named "profctl CMD" so that getopt_long()'s
	 * messages say which command it was parsing.
	 */
	if (asprintf(&sub_name, "profctl %s", a->command->name) < 0) {
		sub_name = NULL; /* undefined after a failure */
		return log_oom();
	}
	sub_argc = argc - optind;
	sub_argv = calloc((size_t)sub_argc + 1, sizeof(*sub_argv));
	if (!sub_argv)
		return log_oom();
	sub_argv[0] = sub_name;
	for (int i = 1; i < sub_argc; i++)
		sub_argv[i] = argv[optind + i];

	if (options__build(a->command->options, options, ARRAY_SIZE(options), shortopts,
			   sizeof(shortopts)) < 0) {
		/* A name in the command table that cmdline.c does not know. */
		log_error("internal error: bad option table for '%s'", a->command->name);
		return -EINVAL;
	}

	optind = 0;
	while ((c = getopt_long(sub_argc, sub_argv, shortopts, options, NULL)) != -1) {
		if (common_option(c, a))
			continue;
		switch (c) {
		case 'h':
			help_command(stdout, a->command);
			return 1;
		case '?':
			/* getopt_long() printed what was wrong. */
			return -EINVAL;
		case 1:
			if (parse_operand(optarg, a, &have_operand) < 0)
				return -EINVAL;
			break;
		default:
			if (options__apply(c, optarg, a) < 0)
				return -EINVAL;
		}
	}

	/* What follows "--" is all operands. */
	for (; optind < sub_argc; optind++)
		if (parse_operand(sub_argv[optind], a, &have_operand) < 0)
			return -EINVAL;

	if (a->command->operand == OPERAND_TARGET) {
		if (have_operand + !!a->comm + !!a->cgroup != 1) {
			log_error("give one of PID, --comm NAME or --cgroup PATH (see 'profctl %s "
				  "--help')",
				  a->command->name);
			return -EINVAL;
		}
		if (!a->has_duration) {
			log_error("missing --duration SECONDS (see 'profctl %s --help')",
				  a->command->name);
			return -EINVAL;
		}
	}
	if (!have_operand && a->command->operand != OPERAND_NONE &&
	    a->command->operand != OPERAND_TOPIC && a->command->operand != OPERAND_TARGET) {
		log_error("missing %s (see 'profctl %s --help')",
			  a->command->operand == OPERAND_PID	 ? "PID"
			  : a->command->operand == OPERAND_SQL	 ? "SQL statement"
			  : a->command->operand == OPERAND_FLEET ? "report: top, hotpaths or sql"
								 : "SESSION",
			  a->command->name);
		return -EINVAL;
	}
	if (a->command->operand == OPERAND_TWO_SESSIONS && !a->id2) {
		log_error("missing SESSION_B: diff compares two sessions (see 'profctl diff --help')");
		return -EINVAL;
	}
	if (a->command->run == run_export && !a->format) {
		log_error("missing --format: folded, pprof, chrome-trace or speedscope (see 'profctl "
			  "export --help')");
		return -EINVAL;
	}
	if (a->has_from && a->has_to && a->from_s >= a->to_s) {
		log_error("--from %g must be less than --to %g", a->from_s, a->to_s);
		return -EINVAL;
	}
	if (a->command->operand == OPERAND_FLEET)
		return fleet__check_args(a);
	return 0;
}

int main(int argc, char **argv)
{
	_cleanup_(conn__freep) struct conn *conn = NULL;
	_cleanup_free_ char **argv_copy = NULL;
	struct args a = { .malloc_max_rate = -1, .uprobe_max_rate = -1 };
	const char *env;
	int r;

	log_set_program("profctl");

	env = getenv("PROFD_SOCKET");
	a.socket_path = env && *env ? env : PROFD_DEFAULT_SOCKET;

	/* getopt_long() names the program after argv[0]; say "profctl" whatever the path. */
	argv_copy = calloc((size_t)argc + 1, sizeof(*argv_copy));
	if (!argv_copy) {
		log_oom();
		return EXIT_FAILURE;
	}
	argv_copy[0] = (char *)"profctl";
	for (int i = 1; i < argc; i++)
		argv_copy[i] = argv[i];

	r = parse_command_line(argc, argv_copy, &a);
	if (r == -ENOMEM)
		return EXIT_FAILURE;
	if (r < 0)
		return EXIT_USAGE;
	if (r > 0)
		return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;

	if (!a.command->run) {
		/* profctl help [COMMAND] */
		if (a.help_topic)
			help_command(stdout, a.help_topic);
		else
			help_global(stdout);
		return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
	}

	if (a.command->without_profd) {
		r = a.command->run(NULL, &a);
		goto done;
	}

	r = conn__open(a.socket_path, &conn);
	if (r == -ENOENT || r == -ECONNREFUSED) {
		log_error_errno(
		    r, "cannot connect to profd at %s: %m (is profd running? see profd(8))",
		    a.socket_path);
		return EXIT_FAILURE;
	}
	if (r < 0) {
		log_error_errno(r, "cannot connect to profd at %s: %m", a.socket_path);
		return EXIT_FAILURE;
	}

	r = a.command->run(conn, &a);
done:
	if (fflush(stdout) != 0) {
		log_error_errno(-errno, "cannot write output: %m");
		return EXIT_FAILURE;
	}
	if (r == -EINTR)
		return EXIT_INTERRUPTED;
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
