/* options.c - profd's command line: --help, the options, and the configuration file they override.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "log.h"
#include "protocol.h"
#include "service/config.h"
#include "service/daemon.h"
#include "util.h"

static void help(void)
{
	printf("Usage: profd [OPTIONS]\n"
	       "\n"
	       "Sampling profiler daemon: profiles processes on request from profctl(1),\n"
	       "and stores call stacks and counters in an SQLite database.\n"
	       "Settings come from the configuration file, then from these options.\n"
	       "\n"
	       "Options:\n"
	       "  --config PATH          configuration file (default %s; a missing\n"
	       "                         default file is not an error)\n"
	       "  --check-config         check the configuration file and options, print\n"
	       "                         the effective settings, and exit (0 if valid)\n"
	       "  --db PATH              database file (default %s)\n"
	       "  --socket PATH          Unix socket to listen on (default %s)\n"
	       "  --log-level LEVEL      error, warning, info (default) or debug\n"
	       "  --default-freq HZ      samples per second when attach gives none (default %d)\n"
	       "  --offcpu yes|no        trace off-CPU intervals (default yes). no: the\n"
	       "                         sched_switch program, which runs at every context\n"
	       "                         switch of the machine, is never loaded; attach then\n"
	       "                         defaults to cpu,rss and refuses events offcpu\n"
	       "  --flush-interval SECONDS  write running sessions to the database this often\n"
	       "                         (default %d, 1 to 3600): a killed profd loses at most\n"
	       "                         that much; every query writes them first\n"
	       "  --retention-days DAYS  delete ended sessions older than DAYS (0: keep; default)\n"
	       "  --max-db-bytes SIZE    delete the oldest ended sessions while the database is\n"
	       "                         larger than SIZE (K, M, G suffixes; 0: no limit)\n"
	       "  --merge-windows-after SECONDS  merge the 1 s windows of samples older than\n"
	       "                         SECONDS into coarser ones (default %d; 0: never):\n"
	       "                         time slices that old are read at that resolution\n"
	       "  --merged-window SECONDS  length of the merged windows (default %d)\n"
	       "  --clickhouse-url URL   ship sessions to ClickHouse's HTTP interface at URL\n"
	       "                         (http[s]://host:port; docs/fleet.md)\n"
	       "  --pyroscope-url URL    push CPU profiles to Pyroscope's ingest API at URL\n"
	       "  --fleet-interval SECONDS  ship and push running sessions this often\n"
	       "                         (default %d)\n"
	       "  --host-name NAME       this host's name in fleet rows (default: the system's)\n"
	       "  --max-sessions N       sessions running at once (default %d, at most %d)\n"
	       "  --max-threads N        threads sampled at once per session (default %d);\n"
	       "                         an exited thread makes room\n"
	       "  --max-stacks N         distinct call stacks a session holds in memory at once\n"
	       "                         (default %d; stored ones past 16384 are forgotten\n"
	       "                         and found again); samples past it are counted as\n"
	       "                         limit_dropped_samples\n"
	       "  --ring-buffer-bytes SIZE  BPF ring buffer for samples (default 8M, a power of\n"
	       "                         2; off-CPU intervals get half): kernel memory, mapped\n"
	       "                         twice into profd, so counted twice in its RSS\n"
	       "  --cfi-cache-bytes SIZE  keep compiled CFI tables (one file per build ID) in\n"
	       "                         cfi-cache/ beside the database, at most SIZE (default\n"
	       "                         256M; 0: none, every session compiles its modules)\n"
	       "  --foreground           stay in the foreground (profd never forks; accepted for\n"
	       "                         compatibility with init scripts)\n"
	       "  -h, --help             show this help\n"
	       "  --version              show the version\n"
	       "\n"
	       "profd must run as root (it needs CAP_BPF and CAP_PERFMON). Under systemd it\n"
	       "notifies readiness (Type=notify), pets the watchdog, takes its socket from\n"
	       "profd.socket if activated so, and logs with journald priorities.\n"
	       "Examples:\n"
	       "  profd --db /tmp/p.db --socket /tmp/p.sock &\n"
	       "  PROFD_SOCKET=/tmp/p.sock profctl attach $(pidof myjob) --duration 10 --wait\n"
	       "  profd --config /etc/profd/profd.conf --retention-days 30 --check-config\n",
	       PROFD_DEFAULT_CONFIG, PROFD_DEFAULT_DB, PROFD_DEFAULT_SOCKET, PROFD_DEFAULT_FREQ_HZ,
	       PROFD_DEFAULT_FLUSH_INTERVAL_S, PROFD_DEFAULT_MERGE_WINDOWS_AFTER_S,
	       PROFD_DEFAULT_MERGED_WINDOW_S, PROFD_DEFAULT_FLEET_INTERVAL_S,
	       PROFD_DEFAULT_MAX_SESSIONS, PROFILE_MAX_SLOTS, PROFD_DEFAULT_MAX_THREADS,
	       PROFD_DEFAULT_MAX_STACKS);
}

/* The options that set a configuration key, one row each: --name VALUE sets key. */
static const struct key_option {
	const char *name;
	const char *key;
} key_options[] = {
    {"db", "db"},
    {"socket", "socket"},
    {"log-level", "log_level"},
    {"default-freq", "default_freq_hz"},
    {"offcpu", "offcpu"},
    {"flush-interval", "flush_interval_s"},
    {"retention-days", "retention_days"},
    {"max-db-bytes", "max_db_bytes"},
    {"merge-windows-after", "merge_windows_after_s"},
    {"merged-window", "merged_window_s"},
    {"host-name", "host_name"},
    {"fleet-interval", "fleet_interval_s"},
    {"clickhouse-url", "clickhouse_url"},
    {"pyroscope-url", "pyroscope_url"},
    {"max-sessions", "max_sessions"},
    {"max-threads", "max_threads_per_session"},
    {"max-stacks", "max_stacks_per_session"},
    {"ring-buffer-bytes", "ring_buffer_bytes"},
    {"cfi-cache-bytes", "cfi_cache_bytes"},
};

enum {
	OPT_FOREGROUND = 256,
	OPT_VERSION,
	OPT_CONFIG,
	OPT_CHECK_CONFIG,
	OPT_KEY, /* OPT_KEY + i: key_options[i] */
};

/* The options that set no configuration key. */
static const struct option other_options[] = {
    {"foreground", no_argument, NULL, OPT_FOREGROUND},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"check-config", no_argument, NULL, OPT_CHECK_CONFIG},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
};

/* getopt_long()'s table: key_options, then other_options, then the end. */
static void longopts_fill(struct option *longopts)
{
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(key_options); i++)
		longopts[n++] = (struct option){key_options[i].name, required_argument, NULL,
						(int)(OPT_KEY + i)};
	for (size_t i = 0; i < ARRAY_SIZE(other_options); i++)
		longopts[n++] = other_options[i];
	longopts[n] = (struct option){};
}

/*
 * options__parse() - the effective settings in *@cfg: defaults, then the
 * configuration file, then the command line. Two passes: the first finds
 * --config (and --help, --version), the file is read, then the second
 * applies the other options over it. Returns 1 to run, 0 to exit with
 * success (--help, --version, --check-config), -EINVAL or -ENOMEM (logged).
 * *@cfg is to be released with config__done() in every case.
 */
int options__parse(int argc, char **argv, struct profd_config *cfg)
{
	struct option longopts[ARRAY_SIZE(key_options) + ARRAY_SIZE(other_options) + 1];
	const char *config_path = NULL;
	bool check_config = false;
	char err[512];
	int c, r;

	r = config__init(cfg);
	if (r < 0)
		return log_error_errno(r, "Out of memory");
	longopts_fill(longopts);
	opterr = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		switch (c) {
		case OPT_CONFIG:
			config_path = optarg;
			break;
		case OPT_CHECK_CONFIG:
			check_config = true;
			break;
		case 'h':
			help();
			return 0;
		case OPT_VERSION:
			printf("profd %s\n", PROFD_VERSION);
			return 0;
		case '?':
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s' (see profd --help)", argv[optind]);
		return -EINVAL;
	}
	r = config__load(cfg, config_path ? config_path : PROFD_DEFAULT_CONFIG, !config_path, err,
			 sizeof(err));
	if (r < 0) {
		log_error("invalid configuration: %s", err);
		return -EINVAL;
	}
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) >= 0) {
		const struct key_option *o;

		if (c < OPT_KEY)
			continue;
		o = &key_options[c - OPT_KEY];
		r = config__set(cfg, o->key, optarg, err, sizeof(err));
		if (r == -ENOMEM)
			return log_error_errno(r, "Out of memory");
		if (r < 0) {
			/* The message names the key; say which option it came from. */
			log_error("invalid --%s: %s", o->name, err);
			return -EINVAL;
		}
	}
	log_set_level(cfg->log_level);
	if (check_config) {
		config__print(cfg, stdout);
		return 0;
	}
	return 1;
}
