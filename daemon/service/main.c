/*
 * main.c - profd's main() and its event loop: options, capability checks,
 * the collectors and the socket set up, then one epoll loop that drains the
 * ring buffers, ends sessions, flushes every second and answers requests.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "collect/counters.h"
#include "collect/malloc_probes.h"
#include "collect/offcpu.h"
#include "collect/sampler.h"
#include "collect/unwind_worker.h"
#include "collect/uprobes.h"
#include "fleet/pyroscope.h"
#include "fleet/shipper.h"
#include "log.h"
#include "protocol.h"
#include "service/config.h"
#include "service/daemon.h"
#include "service/notify.h"
#include "service/readers.h"
#include "service/server.h"
#include "store/store.h"
#include "symbols/symbolize.h"
#include "symbols/unwind.h"
#include "util.h"

/* Samples waiting for or in DWARF unwinding, at most (~20 KiB each). */
#define UNWIND_QUEUE 1024
/* How often retention runs (and once at start), when configured. */
#define RETENTION_INTERVAL_NS (600 * NSEC_PER_SEC)
/*
 * The symbolizer closes the ELF files that no stack has needed for
 * SYMBOLS_IDLE_NS, looked at every SYMBOLS_TRIM_NS: an always-on profd
 * otherwise keeps every library any profiled job mapped open for good (its
 * symbol index, libdw's debug info, the mapped file: ~27 MiB of RSS after a
 * PyTorch job has gone).
 */
#define SYMBOLS_TRIM_NS (60 * NSEC_PER_SEC)
#define SYMBOLS_IDLE_NS (600 * NSEC_PER_SEC)
/*
 * The pages the symbolizer and the loop's unwinder read from the files of
 * their modules are dropped from profd's RSS (symbolizer__drop_pages(),
 * unwinder__drop_pages()) after a tick in which the symbolizer
 * opened a file (most are read then: the symbol table, the DWARF), after a
 * session ends (its last flush), and every FILE_PAGES_NS: what lookups
 * read in between stays resident until then. A PyTorch job's first flush
 * leaves ~10 MiB to drop; a drop takes ~2.5 ms of CPU (/proc/self/maps,
 * the pagemap entries of each file: libtorch_cpu.so's are 240 KiB).
 */
#define FILE_PAGES_NS (60 * NSEC_PER_SEC)
/* How often the loop wakes up to end expired sessions; flushes: flush_interval_ns(). */
#define TICK_NS (200 * NSEC_PER_MSEC)
/*
 * A session this young is flushed every window, not every flush_interval_s:
 * a flush symbolizes the new stacks, and what it reads may go with a
 * short-lived target (a JIT's /tmp/perf-PID.map that it removes at exit,
 * /proc/PID/root for a process in a container). A target of a few seconds
 * flushed only every 5 s would first be symbolized after its exit;
 * test-jit's 4 s JIT then showed '[unknown]' for its only function.
 */
#define YOUNG_SESSION_NS (10 * NSEC_PER_SEC)

/* The effective settings: defaults, then profd.conf, then the command line. */
static struct profd_config cfg;

int profd__add_watch(struct profd *p, int fd, struct watch *w, void (*fn)(struct watch *, uint32_t))
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = w};

	w->fn = fn;
	return epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void on_sampler(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, sampler_watch));

	record_reader__poll(sampler__reader(p->env.sampler));
	unwind_worker__flush(p->worker); /* what this read submitted, with one wake-up */
}

static void on_worker(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, worker_watch));

	unwind_worker__drain(p->worker, profd__on_sample, p);
}

static void on_offcpu_ready(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, offcpu_watch));

	record_reader__poll(offcpu__reader(p->offcpu));
}

/* glibc's mallopt(3); malloc_trim() is declared in util.h. */
int mallopt(int param, int value);
#define GLIBC_M_TRIM_THRESHOLD (-1) /* M_TRIM_THRESHOLD of glibc's <malloc.h> */
#define GLIBC_M_MMAP_THRESHOLD (-3) /* M_MMAP_THRESHOLD of glibc's <malloc.h> */

/*
 * Allocations of at least this many bytes get pages of their own (mmap),
 * given back when freed. glibc's default threshold rises to the largest
 * block freed so far (up to 32 MiB), after which a report's big arrays
 * (its rows, a profile's packed text) come from a reader thread's arena
 * and stay resident: 100 MiB after the reports of bench/query, 62 MiB
 * with the threshold fixed.
 */
#define PROFD_MMAP_THRESHOLD_BYTES (256 * 1024)

/*
 * free() gives the top of the heap back (brk) once this many bytes are free
 * there. glibc's default, 128 KiB, made each flush grow the heap and give it
 * back: on a PyTorch job at 999 Hz, 4% of profd's CPU went to the brk calls'
 * TLB shootdowns (an IPI to every CPU). The explicit malloc_trim() calls
 * after a report and a compile still give everything back.
 */
#define PROFD_TRIM_THRESHOLD_BYTES (8 * 1024 * 1024)

/* Answers of the reader threads: to their clients, who may have gone meanwhile. */
static void on_readers(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, readers_watch));
	json_t *answer;
	uint64_t client;

	bool any = false;

	while (readers__take(p->readers, &client, &answer)) {
		server__reply(p->server, client, dispatch__finish(p, answer));
		any = true;
	}
	/* A report's memory (its rows, its answer) came from a reader thread's malloc arena:
	 * give it back to the system, or profd's RSS stays at its largest report's. */
	if (any)
		malloc_trim(0);
}

/* flush_interval_ns() - how long the loop lets samples wait at @now before a flush. */
static uint64_t flush_interval_ns(const struct profd *p, uint64_t now)
{
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && now - session__started_mono_ns(p->slots[i]) < YOUNG_SESSION_NS)
			return PROFD_WINDOW_NS;
	return (uint64_t)p->cfg->flush_interval_s * NSEC_PER_SEC;
}

/* drop_file_pages() - drop the loop's file pages when FILE_PAGES_NS says it is due at @now. */
static void drop_file_pages(struct profd *p, uint64_t now)
{
	uint64_t files = symbolizer__files_opened(p->env.sym), t0;
	int64_t r;

	if (files == p->file_pages_files && !p->file_pages_due &&
	    now - p->last_file_pages_ns < FILE_PAGES_NS)
		return;
	t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	r = symbolizer__drop_pages(p->env.sym);
	if (r >= 0) {
		int64_t u = unwinder__drop_pages(p->unwinder); /* off-CPU and allocation stacks' */

		r = u < 0 ? u : r + u;
	}
	p->last_file_pages_ns = now;
	p->file_pages_files = files;
	p->file_pages_due = false;
	if (r < 0)
		log_full_errno(LOG_LEVEL_DEBUG, (int)r, "Failed to read /proc/self/maps: %m");
	else if (r > 0)
		log_debug("dropped %.1f MiB read from ELF files from RSS in %.2f ms of CPU",
			  (double)r / (1 << 20),
			  (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e6);
}

static void on_timer(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, timer_watch));
	uint64_t expirations, now = now_ns(CLOCK_MONOTONIC);

	if (read(p->timer_fd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
		return;
	/* From the loop itself: a loop stuck in a slow query or a deadlock stops it. */
	if (p->watchdog_ns && now - p->last_watchdog_ns >= p->watchdog_ns) {
		notify__send("WATCHDOG=1");
		p->last_watchdog_ns = now;
	}
	profd__collect(p, false);
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && session__expired(p->slots[i], now))
			profd__end_session(p, i, "duration");
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p->slots[i] && session__read_memory(p->slots[i], now) < 0)
			log_warning("Session %lld: out of memory for its memory readings",
				    (long long)session__id(p->slots[i]));
	if (now - p->last_retention_ns >= RETENTION_INTERVAL_NS)
		profd__run_retention(p);
	/* A merged window completes every merged_window_s; a backlog (an upgraded
	 * database, a restart) is worked off a bounded piece per tick. */
	if (p->merge_backlog ||
	    now - p->last_merge_ns >= (uint64_t)p->cfg->merged_window_s * NSEC_PER_SEC)
		profd__merge_windows(p);
	/* Rate limits, probes for new children, libraries mapped since the
	 * attach (libcuda.so at cuInit()). Its own clock: queries flush too,
	 * and may keep the flush below from running for a while. */
	features__tick(p, now);
	/* Counters are read per window; the flush writes every window since the last. */
	if (now - p->last_counters_ns >= PROFD_WINDOW_NS) {
		for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
			if (p->slots[i])
				session__read_counters(p->slots[i], &p->env);
		p->last_counters_ns = now;
	}
	if (now - p->last_flush_ns >= flush_interval_ns(p, now))
		profd__flush(p);
	profd__retire_exited(p);
	if (now - p->last_symbols_trim_ns >= SYMBOLS_TRIM_NS) {
		size_t closed = symbolizer__trim(p->env.sym, now, SYMBOLS_IDLE_NS);

		p->last_symbols_trim_ns = now;
		if (closed) {
			log_debug("closed %zu ELF files no stack needed for %llu s", closed,
				  (unsigned long long)(SYMBOLS_IDLE_NS / NSEC_PER_SEC));
			malloc_trim(0); /* their memory is in the middle of the heap */
		}
	}
	drop_file_pages(p, now);
}

static void on_signal(struct watch *w, uint32_t events)
{
	struct profd *p = (struct profd *)((char *)w - offsetof(struct profd, signal_watch));
	struct signalfd_siginfo si;

	if (read(p->signal_fd, &si, sizeof(si)) == sizeof(si)) {
		log_info("received %s, stopping", strsignal((int)si.ssi_signo));
		p->quit = true;
	}
}

/* profd needs CAP_BPF + CAP_PERFMON (Linux >= 5.8), or CAP_SYS_ADMIN before them. */
static int check_capabilities(void)
{
	cap_t caps = cap_get_proc();
	cap_flag_value_t bpf = CAP_CLEAR, perfmon = CAP_CLEAR, admin = CAP_CLEAR;

	if (!caps)
		return -errno;
	cap_get_flag(caps, CAP_SYS_ADMIN, CAP_EFFECTIVE, &admin);
#ifdef CAP_BPF
	cap_get_flag(caps, CAP_BPF, CAP_EFFECTIVE, &bpf);
	cap_get_flag(caps, CAP_PERFMON, CAP_EFFECTIVE, &perfmon);
#endif
	cap_free(caps);
	if (admin == CAP_SET || (bpf == CAP_SET && perfmon == CAP_SET))
		return 0;
	return -EPERM;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_DEBUG && log_get_level() < LOG_LEVEL_DEBUG)
		return 0;
	if (level != LIBBPF_WARN && log_get_level() < LOG_LEVEL_INFO)
		return 0;
	fprintf(stderr, "%sprofd: libbpf: ",
		log_priority_prefix(level == LIBBPF_WARN   ? LOG_LEVEL_WARNING
				    : level == LIBBPF_INFO ? LOG_LEVEL_INFO
							   : LOG_LEVEL_DEBUG));
	return vfprintf(stderr, fmt, ap);
}

/*
 * table_cache_open() - keep compiled CFI tables in cfi-cache/ beside the
 * database (cfi_cache_bytes > 0). A cache that cannot be made is logged
 * and done without: every session then compiles the modules it walks.
 */
static void table_cache_open(struct sampler *s, const struct profd_config *cfg)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(cfg->db_path, '/');
	int r;

	if (cfg->cfi_cache_bytes == 0)
		return;
	if (!slash)
		snprintf(dir, sizeof(dir), "cfi-cache");
	else
		snprintf(dir, sizeof(dir), "%.*s/cfi-cache", (int)(slash - cfg->db_path),
			 cfg->db_path);
	r = sampler__set_table_cache(s, dir, cfg->cfi_cache_bytes);
	if (r < 0)
		log_warning_errno(r, "No CFI table cache in %s (every session compiles its tables): %m",
				  dir);
}

static int run(void)
{
	struct profd p = {.cfg = &cfg, .epfd = -1, .timer_fd = -1, .signal_fd = -1};
	struct itimerspec tick = {
	    .it_interval = {0, TICK_NS},
	    .it_value = {0, TICK_NS},
	};
	sigset_t mask;
	int r;

	/* Before any thread exists, so that every thread inherits the mask and
	 * the signals reach the signalfd, not a default action in some thread. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = check_capabilities();
	if (r < 0)
		return log_error_errno(r, "profd needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): "
					  "run it as root");

	/* The symbolizer and the unwinder keep one fd per mapped file of every
	 * target (a PyTorch job maps hundreds of libraries): raise the soft
	 * limit to the hard one. Failing that, files past the limit show up as
	 * unsymbolized frames, and are retried. */
	{
		struct rlimit rl;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
			rl.rlim_cur = rl.rlim_max;
			(void)setrlimit(RLIMIT_NOFILE, &rl);
		}
	}

	r = store__open(cfg.db_path, &p.env.store);
	if (r < 0) {
		if (r == -EPROTO)
			log_error("Database '%s' has schema version %d, newer than this profd (%d)",
				  cfg.db_path, store__schema_version(p.env.store),
				  store__latest_version());
		else if (r == -EIO)
			log_error("Failed to open database '%s': %s", cfg.db_path,
				  store__errmsg(p.env.store));
		else
			log_error_errno(r, "Failed to open database '%s': %m", cfg.db_path);
		goto out;
	}
	r = store__mark_interrupted(p.env.store);
	if (r > 0)
		log_warning("%d session(s) left running by a previous profd marked 'interrupted'",
			    r);
	if (cfg.retention_ns || cfg.max_db_bytes) {
		/* Deleted sessions should give their space back to the file system.
		 * Converting an older database rewrites it: tell systemd to wait. */
		notify__send("STATUS=checking the database for incremental vacuum (a one-time "
			     "VACUUM may take a while)\nEXTEND_TIMEOUT_USEC=%llu",
			     3600ULL * 1000000);
		r = store__enable_incremental_vacuum(p.env.store);
		if (r < 0)
			log_warning(
			    "Cannot switch the database to incremental vacuum (%s): deleted "
			    "sessions leave free pages in the file, reused by new data",
			    store__errmsg(p.env.store));
		else if (r > 0)
			log_info("Database rewritten once (VACUUM) for incremental vacuum");
		profd__run_retention(&p);
	}

	p.env.sym = symbolizer__new();
	if (!p.env.sym) {
		r = log_error_errno(-ENOMEM, "Out of memory");
		goto out;
	}
	libbpf_set_print(libbpf_print);
	r = sampler__new(cfg.ring_buffer_bytes, profd__on_sample, &p, &p.env.sampler);
	if (r < 0) {
		log_error_errno(r, "Failed to load the BPF sampling program: %m");
		goto out;
	}

	table_cache_open(p.env.sampler, &cfg);

	r = counters__probe(&p.counters);
	if (r < 0)
		log_warning_errno(r, "Cannot probe perf counters: %m");
	else
		p.env.counters = &p.counters;
	p.unwinder = unwinder__new();
	if (!p.unwinder) {
		r = log_error_errno(-ENOMEM, "Out of memory");
		goto out;
	}
	/* Sharing the sampler's targets (children it follows are traced off the CPU too)
	 * and its CFI tables (off-CPU user stacks are walked in BPF from them). */
	if (cfg.offcpu) {
		struct offcpu_shared_maps maps = {
			.targets_fd = sampler__targets_fd(p.env.sampler),
		};

		sampler__cfi_fds(p.env.sampler, maps.cfi_fds);
		r = offcpu__new_shared(cfg.ring_buffer_bytes / 2, &maps, profd__on_offcpu, &p,
				       &p.offcpu);
		/* Off-CPU time is one report among others: run without it, and say so. */
		if (r < 0) {
			log_warning_errno(r, "Off-CPU tracing unavailable (sched_switch BPF "
					     "program): %m");
			p.offcpu = NULL;
		}
	} else {
		log_info("Off-CPU tracing off (offcpu = no): attach defaults to cpu,rss");
	}

	r = unwind_worker__new(UNWIND_QUEUE, &p.worker);
	if (r < 0) {
		log_error_errno(r, "Failed to start the unwinding thread: %m");
		goto out;
	}

	p.epfd = epoll_create1(EPOLL_CLOEXEC);
	p.signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	p.timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (p.epfd < 0 || p.signal_fd < 0 || p.timer_fd < 0 ||
	    timerfd_settime(p.timer_fd, 0, &tick, NULL) < 0) {
		r = log_error_errno(-errno, "Failed to set up the event loop: %m");
		goto out;
	}
	if ((r = profd__add_watch(&p, record_reader__fd(sampler__reader(p.env.sampler)),
				  &p.sampler_watch, on_sampler)) < 0 ||
	    (r = profd__add_watch(&p, p.timer_fd, &p.timer_watch, on_timer)) < 0 ||
	    (r = profd__add_watch(&p, p.signal_fd, &p.signal_watch, on_signal)) < 0 ||
	    (r = profd__add_watch(&p, unwind_worker__fd(p.worker), &p.worker_watch, on_worker)) <
		0 ||
	    (p.offcpu && (r = profd__add_watch(&p, record_reader__fd(offcpu__reader(p.offcpu)),
					       &p.offcpu_watch, on_offcpu_ready)) < 0)) {
		log_error_errno(r, "Failed to set up the event loop: %m");
		goto out;
	}

	{
		struct readers_limits lim = {
		    .threads = cfg.query_threads,
		    .per_user = cfg.queries_per_user,
		    .max_jobs = MAX(cfg.max_queries, cfg.query_threads),
		    .timeout_ns = (uint64_t)cfg.query_timeout_s * NSEC_PER_SEC,
		};

		r = readers__new(cfg.db_path, &lim, &p.readers);
		if (r < 0 || (r = profd__add_watch(&p, readers__fd(p.readers), &p.readers_watch,
						   on_readers)) < 0) {
			log_error_errno(r, "Failed to start the query threads: %m");
			goto out;
		}
	}

	/* Retention and the window merge wait for what a fleet sink has not got. */
	store__set_fleet_sinks(
	    p.env.store, (cfg.clickhouse_url && *cfg.clickhouse_url ? STORE_SINK_CLICKHOUSE : 0) |
			     (cfg.pyroscope_url && *cfg.pyroscope_url ? STORE_SINK_PYROSCOPE : 0));
	if (cfg.clickhouse_url && *cfg.clickhouse_url) {
		struct shipper_settings ship = {
		    .db_path = cfg.db_path,
		    .url = cfg.clickhouse_url,
		    .database = cfg.clickhouse_database,
		    .user = cfg.clickhouse_user,
		    .password = cfg.clickhouse_password,
		    .password_file = cfg.clickhouse_password_file,
		    .host_name = cfg.host_name,
		    .interval_s = cfg.fleet_interval_s,
		    .flush_interval_s = cfg.flush_interval_s,
		    .ca_file = cfg.fleet_ca_file,
		};

		r = shipper__new(&ship, &p.shipper);
		if (r < 0) {
			log_error_errno(r, "Failed to start shipping to ClickHouse at %s: %m",
					cfg.clickhouse_url);
			goto out;
		}
		log_info("shipping sessions to ClickHouse at %s every %u s", cfg.clickhouse_url,
			 cfg.fleet_interval_s);
	}
	if (cfg.pyroscope_url && *cfg.pyroscope_url) {
		struct pyroscope_settings ps = {
		    .url = cfg.pyroscope_url,
		    .app = cfg.pyroscope_app,
		    .tenant = cfg.pyroscope_tenant,
		    .user = cfg.pyroscope_user,
		    .password_file = cfg.pyroscope_password_file,
		    .host_name = cfg.host_name,
		    .interval_s = cfg.fleet_interval_s,
		    .flush_interval_s = cfg.flush_interval_s,
		    .ca_file = cfg.fleet_ca_file,
		};

		r = pyroscope__new(cfg.db_path, &ps, &p.pyroscope);
		if (r < 0) {
			log_error_errno(r, "Failed to start pushing to Pyroscope at %s: %m%s",
					cfg.pyroscope_url,
					r == -ENOENT || r == -EACCES ? " (pyroscope_password_file)" : "");
			goto out;
		}
		log_info("pushing CPU profiles to Pyroscope at %s every %u s", cfg.pyroscope_url,
			 cfg.fleet_interval_s);
	}

	r = notify__listen_fd();
	if (r >= 0) {
		/* Socket activation (profd.socket): systemd made the socket and its mode. */
		int fd = r;

		r = server__new_from_fd(fd, p.epfd, dispatch__request, &p, &p.server);
		if (r < 0) {
			log_error_errno(r, "Failed to serve on the socket systemd passed: %m");
			goto out;
		}
		log_info("serving on the socket passed by systemd (--socket is ignored)");
	} else if (r != -ENOENT) {
		log_error_errno(r, "systemd passed sockets profd cannot use (one listening Unix "
				   "stream socket expected): %m");
		goto out;
	} else {
		r = server__new(cfg.socket_path, p.epfd, dispatch__request, &p, &p.server);
	}
	if (r == -EADDRINUSE) {
		log_error("Another profd is already listening on %s", cfg.socket_path);
		goto out;
	}
	if (r < 0) {
		log_error_errno(r, "Failed to listen on %s: %m", cfg.socket_path);
		goto out;
	}
	server__on_gone(p.server, dispatch__gone);
	p.last_flush_ns = p.last_counters_ns = now_ns(CLOCK_MONOTONIC);
	log_info("profd %s: listening on %s, database %s", PROFD_VERSION, cfg.socket_path,
		 cfg.db_path);
	p.watchdog_ns = notify__watchdog_ns();
	p.last_watchdog_ns = now_ns(CLOCK_MONOTONIC);
	notify__send("READY=1\nSTATUS=0 session(s) running");

	while (!p.quit) {
		struct epoll_event evs[16];
		int n = epoll_wait(p.epfd, evs, ARRAY_SIZE(evs), -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = log_error_errno(-errno, "epoll_wait failed: %m");
			break;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;

			w->fn(w, evs[i].events);
		}
	}
	notify__send("STOPPING=1\nSTATUS=stopping: ending the running sessions");
	for (unsigned i = 0; i < PROFILE_MAX_SLOTS; i++)
		if (p.slots[i])
			profd__end_session(&p, i, "daemon_stopped");
	if (r > 0)
		r = 0;
out:
	server__free(p.server); /* first: a client waiting for a reader cancels its query */
	readers__free(p.readers);
	pyroscope__free(p.pyroscope); /* the last pieces of the sessions just ended */
	/* After the sessions ended: their last chunks go out, for at most SHIPPER_STOP_NS. */
	shipper__free(p.shipper);
	unwind_worker__free(p.worker);
	offcpu__free(p.offcpu);
	malloc_probes__free(p.malloc_probes);
	uprobes__free(p.uprobes);
	unwinder__free(p.unwinder);
	sampler__free(p.env.sampler);
	symbolizer__free(p.env.sym);
	store__close(p.env.store);
	if (p.timer_fd >= 0)
		close(p.timer_fd);
	if (p.signal_fd >= 0)
		close(p.signal_fd);
	if (p.epfd >= 0)
		close(p.epfd);
	return r;
}

int main(int argc, char **argv)
{
	int r;

	log_set_program("profd");
	/* Before any thread: a fixed threshold also stops glibc from moving it. */
	if (mallopt(GLIBC_M_MMAP_THRESHOLD, PROFD_MMAP_THRESHOLD_BYTES) != 1)
		log_warning("cannot set malloc's mmap threshold; reports may leave memory resident");
	if (mallopt(GLIBC_M_TRIM_THRESHOLD, PROFD_TRIM_THRESHOLD_BYTES) != 1)
		log_warning("cannot set malloc's trim threshold");
	if (store__init_library() < 0)
		log_warning("SQLite was initialized before profd set it up");
	r = options__parse(argc, argv, &cfg);
	if (r <= 0) {
		config__done(&cfg);
		return r < 0 ? 2 : 0;
	}
	r = run();
	config__done(&cfg);
	return r < 0 ? 1 : 0;
}
