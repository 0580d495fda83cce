#!/usr/bin/env python3
"""test-profctl-cli.py - profctl against the real profd, and against tests/fake-profd.py
for what a real daemon cannot be made to answer on demand.

Usage: test-profctl-cli.py PATH-TO-PROFCTL

First, with root and BPF ($PROFD set, as meson test does): a real profd on a
temporary socket and database profiles a real workload, and every command
profctl has runs against it, human and --json: exit codes, the fields
profctl reads from real responses, the errors a real profd gives (no such
session, no such process). Without root this part is skipped and the test
exits 77 once the rest has run.

Then fake-profd.py (next to this file) on a socket in a temporary directory,
for the answers a real profd cannot be made to give when a test wants them:
exact call trees and tables to compare character by character, sessions in
every end state, a daemon that answers garbage, errors, or nothing. Checks the argument handling (options
before and after the command, numbers, help), the exit codes (0, 1 for
errors from or reaching profd, 2 for usage errors, 130 for an interrupted
attach --wait), the requests profctl sends, its human output (tables, the
hot-path call tree, the counters line) and its --json output.

Exit status: 0 all checks passed, 1 a check failed, 99 setup error.
"""

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
failures = 0
checks = 0


def check(cond, what, detail=""):
    """Record one check; on failure print where and what was seen."""
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        line = sys._getframe(1).f_lineno
        print("FAIL %s:%d: %s" % (os.path.basename(__file__), line, what))
        if detail:
            print("  " + str(detail).replace("\n", "\n  "))


class Fake:
    def __init__(self, tmp):
        self.sock = os.path.join(tmp, "profd.sock")
        self.log = os.path.join(tmp, "requests.log")
        open(self.log, "w").close()
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake-profd.py"),
                                      self.sock, "--log", self.log])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        print("setup error: fake-profd.py did not start")
        sys.exit(99)

    def mark(self):
        with open(self.log) as f:
            return len(f.readlines())

    def requests_since(self, mark):
        with open(self.log) as f:
            return [json.loads(l) for l in f.readlines()[mark:]]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 99
    profctl = os.path.abspath(sys.argv[1])
    if not os.access(profctl, os.X_OK):
        print("setup error: %s is not an executable" % profctl)
        return 99

    real = run_real_checks(profctl)
    with tempfile.TemporaryDirectory(prefix="profctl-test-") as tmp:
        fake = Fake(tmp)
        try:
            run_checks(profctl, fake, tmp)
        finally:
            fake.stop()
    print("%d checks, %d failed" % (checks, failures))
    if failures:
        return 1
    if real is not None:
        print("SKIP (real profd part): " + real)
        return 77
    return 0


def run_real_checks(profctl):
    """Every command against a real profd and a real workload. Returns None, or why it was skipped."""
    if os.geteuid() != 0:
        return "needs root (CAP_BPF and CAP_PERFMON) to run profd"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "kernel has no BTF: profd's BPF programs cannot load"
    if not os.environ.get("PROFD") or not os.environ.get("SPIN_THREADS"):
        return "$PROFD and $SPIN_THREADS are not set (run through meson test)"
    sys.path.insert(0, os.path.join(HERE, "integration"))
    import profdtest

    os.environ["PROFCTL"] = profctl
    with profdtest.Profd() as d, tempfile.TemporaryDirectory(prefix="profctl-real-") as tmp:
        env = dict(os.environ, PROFD_SOCKET=d.socket, TZ="UTC", LANG="C.UTF-8")

        def ctl(*args, timeout=60):
            return subprocess.run([profctl] + [str(a) for a in args], capture_output=True,
                                  text=True, env=env, timeout=timeout)

        w = d.spawn(os.environ["SPIN_THREADS"], "--seconds", "30", "--weights", "1,3")
        profdtest.wait_for_threads(w.pid, 3)
        # attach --wait, human: the session's summary at the end, exit 0
        r = ctl("attach", w.pid, "--duration", "2", "--freq", "397", "--events",
                "cpu,offcpu,rss", "--wait")
        check(r.returncode == 0 and re.search(r"(?m)^state: +ended$", r.stdout),
              "real: attach --wait ends with the session's summary", r)
        sessions = json.loads(ctl("--json", "sessions").stdout)["sessions"]
        check(len(sessions) == 1 and sessions[0]["pid"] == w.pid, "real: sessions --json",
              sessions)
        sid = str(sessions[0]["id"])
        # a second, short session for diff; then the workload goes
        r = ctl("--json", "attach", w.pid, "--duration", "1", "--freq", "397", "--wait")
        sid2 = str(json.loads(r.stdout)["id"]) if r.returncode == 0 else sid
        w.kill()

        out = os.path.join(tmp, "cpu.svg")
        commands = [
            (("sessions",), "STATE", ("sessions",)),
            (("session", sid), "samples", ("session",)),
            (("top", sid), "hot_function", ("functions", "total_samples")),
            (("hotpaths", sid), "hot_function", ("paths",)),
            (("threads", sid), "worker-2", ("threads", "imbalance")),
            (("offcpu", sid), "", ("stacks",)),
            (("memory", sid), "RSS", ("rss",)),
            (("analyze", sid), "", ("findings",)),
            (("gpu", sid), "", ("session",)),
            (("ranges", sid), "", ("ranges",)),
            (("diff", sid, sid2), "hot_function", ("functions",)),
            (("sql", "SELECT count(*) AS n FROM samples"), "n", ("columns", "rows")),
            (("resymbolize", sid), "", ("frames_checked",)),
            (("ping",), "profd", ("version", "protocol")),
        ]
        for args, needle, keys in commands:
            r = ctl(*args)
            check(r.returncode == 0 and needle in r.stdout and "malformed" not in r.stderr,
                  "real: profctl %s" % " ".join(args), r)
            r = ctl("--json", *args)
            try:
                doc = json.loads(r.stdout)
            except ValueError:
                doc = None
            check(r.returncode == 0 and isinstance(doc, dict) and all(k in doc for k in keys) and
                  "ok" not in doc, "real: profctl --json %s has %s" % (" ".join(args), keys), r)
        # the hottest function is the workload's, in the first row of top
        top = json.loads(ctl("--json", "top", sid).stdout)
        check(top["functions"][0]["function"] == "hot_function", "real: top's first function",
              top["functions"][:2])
        # exports: files that the tools read
        r = ctl("flamegraph", sid, "-o", out)
        check(r.returncode == 0 and open(out).read().startswith("<?xml"), "real: flamegraph -o",
              r)
        r = ctl("export", sid, "--format", "folded")
        check(r.returncode == 0 and re.search(r"(?m)hot_function \d+$", r.stdout),
              "real: export --format folded", r.stderr)
        r = ctl("export", sid, "--format", "pprof", "-o", os.path.join(tmp, "p.pb.gz"))
        check(r.returncode == 0 and open(os.path.join(tmp, "p.pb.gz"), "rb").read(2) == b"\x1f\x8b",
              "real: export --format pprof is gzip", r)
        # the errors a real profd gives, with profctl's exit status 1
        for args, needle in ((("top", "9999"), "no session 9999"),
                             (("detach", "9999"), "no session 9999"),
                             (("attach", "999999"), "no process with PID 999999"),
                             (("sql", "DELETE FROM samples"), "only SELECT")):
            r = ctl(*args)
            check(r.returncode == 1 and needle in r.stderr and r.stdout == "",
                  "real: profctl %s fails with '%s'" % (" ".join(args), needle), r)
    return None


def run_checks(profctl, fake, tmp):
    base_env = dict(os.environ, PROFD_SOCKET=fake.sock, TZ="UTC", LANG="C.UTF-8",
                    LC_ALL="C.UTF-8")
    base_env.pop("POSIXLY_CORRECT", None)

    def run(*args, env=None, timeout=20):
        e = dict(base_env)
        e.update(env or {})
        return subprocess.run([profctl, *args], capture_output=True, text=True, env=e,
                              timeout=timeout)

    # --- help and version -------------------------------------------------------------
    r = run("--version")
    check(r.returncode == 0 and r.stdout.startswith("profctl "), "--version", r)
    r = run("--help")
    check(r.returncode == 0, "--help exits 0", r)
    for cmd in ("attach PID", "detach SESSION", "sessions", "session SESSION", "top SESSION",
                "hotpaths SESSION", "threads SESSION", "ping", "help [COMMAND]"):
        check(re.search(r"(?m)^  %s +\S" % re.escape(cmd), r.stdout),
              "--help lists '%s' on one line" % cmd, r.stdout)
    check("Examples:" in r.stdout and "--socket PATH" in r.stdout, "--help has examples, options")
    check(run("-h").stdout == r.stdout and run("help").stdout == r.stdout,
          "-h and 'help' print the same as --help")
    for cmd, needle in (("top", "--limit N"), ("hotpaths", "--ascii"), ("attach", "--duration"),
                        ("threads", "Usage: profctl threads SESSION")):
        a, b, c = run("help", cmd), run(cmd, "--help"), run(cmd, "-h")
        check(a.returncode == b.returncode == c.returncode == 0, "help for %s exits 0" % cmd)
        check(a.stdout == b.stdout == c.stdout and needle in a.stdout,
              "'help %s' == '%s --help' == '%s -h', mentions %s" % (cmd, cmd, cmd, needle),
              a.stdout)
    check("Default: 20" in run("help", "top").stdout, "top help gives the default limit")
    check("Default: 99" in run("help", "attach").stdout, "attach help gives the default freq")

    # --- usage errors: exit 2, one line on stderr, nothing on stdout, no request sent ---
    usage_errors = [
        ((), "no command given"),
        (("frobnicate",), "unknown command 'frobnicate'"),
        (("--json",), "no command given"),
        (("top",), "missing SESSION"),
        (("top", "abc"), "invalid SESSION 'abc': not an integer"),
        (("top", "1.5"), "invalid SESSION '1.5': not an integer"),
        (("top", "7x"), "invalid SESSION '7x': not an integer"),
        (("top", "", ), "invalid SESSION '': not an integer"),
        (("top", "--", "-5"), "invalid SESSION '-5'"),
        (("top", "0"), "invalid SESSION '0'"),
        (("top", "99999999999999999999"), "out of range"),
        (("top", "7", "8"), "unexpected argument '8'"),
        (("top", "7", "--limit", "0"), "invalid --limit '0'"),
        (("top", "7", "--limit", "ten"), "invalid --limit 'ten': not an integer"),
        (("top", "7", "--limit", "10001"), "invalid --limit '10001'"),
        (("top", "7", "--limit"), "requires an argument"),
        (("top", "7", "--bogus"), "unrecognized option '--bogus'"),
        (("top", "7", "--freq", "99"), "unrecognized option '--freq'"),
        (("hotpaths", "7", "-n", "x"), "invalid --limit 'x'"),
        (("session",), "missing SESSION"),
        (("detach", "seven"), "invalid SESSION 'seven'"),
        (("threads", "7.0"), "invalid SESSION '7.0'"),
        (("sessions", "3"), "unexpected argument '3'"),
        (("ping", "now"), "unexpected argument 'now'"),
        (("attach",), "missing PID"),
        (("attach", "12x"), "invalid PID '12x': not an integer"),
        (("attach", "0"), "invalid PID '0'"),
        (("attach", "4242", "--freq", "0"), "invalid --freq '0'"),
        (("attach", "4242", "--freq", "10001"), "invalid --freq '10001'"),
        (("attach", "4242", "--freq", "99.5"), "invalid --freq '99.5': not an integer"),
        (("attach", "4242", "--duration", "abc"), "invalid --duration 'abc'"),
        (("attach", "4242", "--duration", "0"), "invalid --duration '0'"),
        (("attach", "4242", "--duration", "-3"), "invalid --duration '-3'"),
        (("attach", "4242", "--duration", "1e3"), "invalid --duration '1e3'"),
        (("attach", "4242", "--duration", "nan"), "invalid --duration 'nan'"),
        (("attach", "4242", "--duration", "1.2.3"), "invalid --duration '1.2.3'"),
        (("attach", "4242", "--events", "cpu,,x"), "empty event name"),
        (("attach", "4242", "--events", ""), "empty event name"),
        (("attach", "4242", "--wait=yes"), "doesn't allow an argument"),
        (("snapshot", "--duration", "5"), "give one of PID, --comm NAME or --cgroup PATH"),
        (("snapshot", "42", "--comm", "x", "-d", "5"), "give one of PID, --comm NAME or --cgroup PATH"),
        (("snapshot", "42"), "missing --duration SECONDS"),
        (("snapshot", "--comm", "", "-d", "5"), "invalid --comm '': empty name"),
        (("snapshot", "42", "-d", "5", "--label", "x" * 300), "invalid --label: longer than 256 bytes"),
        (("snapshot", "4x", "-d", "5"), "invalid PID '4x'"),
        (("attach", "4242", "--python", "on"), "invalid --python 'on': auto or off"),
        (("help", "nope"), "unknown command 'nope'"),
        (("export", "7"), "missing --format"),
        (("export", "7", "--format", "svg"), "invalid --format 'svg'"),
        (("export", "7", "--format", "folded", "--thread", "0"), "invalid --thread '0'"),
        (("flamegraph", "7", "--from", "5", "--to", "2"), "--from 5 must be less than --to 2"),
        (("flamegraph", "7", "--from", "-1"), "invalid --from '-1'"),
        (("top", "7", "--to", "soon"), "invalid --to 'soon'"),
        (("diff", "7"), "missing SESSION_B"),
        (("diff", "7", "8", "9"), "unexpected argument '9'"),
        (("diff", "7", "x"), "invalid SESSION_B 'x'"),
        (("sql",), "missing SQL statement"),
        (("sql", "SELECT 1", "SELECT 2"), "unexpected argument 'SELECT 2'"),
        (("sql", "SELECT 1", "--max-rows", "0"), "invalid --max-rows '0'"),
        (("analyze",), "missing SESSION"),
    ]
    mark = fake.mark()
    for args, needle in usage_errors:
        r = run(*args)
        check(r.returncode == 2, "profctl %s exits 2" % " ".join(args), r)
        check(r.stdout == "", "profctl %s prints nothing on stdout" % " ".join(args), r.stdout)
        check(needle in r.stderr and r.stderr.count("\n") == 1,
              "profctl %s: one line on stderr with %r" % (" ".join(args), needle), r.stderr)
    check(fake.requests_since(mark) == [], "usage errors send no request",
          fake.requests_since(mark))

    # --- options before and after the command -----------------------------------------
    baseline = run("--json", "top", "7")
    check(baseline.returncode == 0, "--json top 7 exits 0", baseline)
    try:
        doc = json.loads(baseline.stdout)
    except ValueError as e:
        doc = None
        check(False, "--json top 7 prints one JSON document", e)
    if doc is not None:
        check("v" not in doc and "ok" not in doc, "--json output has no v/ok", doc.keys())
        check(doc.get("session") == 7 and doc["functions"][0]["function"] == "matmul_kernel",
              "--json top 7 is profd's response", doc)
        check(doc["functions"][0]["self_pct"] == 60.9, "reals printed as sent (60.9)",
              baseline.stdout[:400])
        check(baseline.stdout.startswith("{\n  \""), "--json is indented by 2", baseline.stdout[:40])
    nowhere = {"PROFD_SOCKET": os.path.join(tmp, "nowhere.sock")}
    for args, env in ((("top", "7", "--json"), None), (("top", "--json", "7"), None),
                      (("-j", "top", "7"), None), (("top", "7", "-j"), None),
                      (("--socket", fake.sock, "--json", "top", "7"), nowhere),
                      (("top", "7", "--socket", fake.sock, "--json"), nowhere),
                      (("--json", "top", "7", "-s", fake.sock), nowhere),
                      (("--socket=" + fake.sock, "top", "7", "--json"), nowhere),
                      (("--json", "top", "--", "7"), None)):
        r = run(*args, env=env)
        check(r.returncode == 0 and r.stdout == baseline.stdout,
              "profctl %s gives the same output as --json top 7" % " ".join(args), r)
    mark = fake.mark()
    run("top", "7", "--limit", "3")
    run("top", "7")
    run("hotpaths", "7", "-n", "2")
    reqs = fake.requests_since(mark)
    check(reqs == [{"v": 1, "cmd": "top", "session": 7, "limit": 3},
                   {"v": 1, "cmd": "top", "session": 7},
                   {"v": 1, "cmd": "hotpaths", "session": 7, "limit": 2}],
          "top/hotpaths requests (limit only when given)", reqs)

    # --- gpu, ranges, attach --uprobe ---------------------------------------------------
    mark = fake.mark()
    run("attach", "4242", "--events", "cpu,cuda,nvtx", "--uprobe", "libc:malloc,train:step",
        "--uprobe-max-rate", "500")
    run("gpu", "7", "--limit", "4")
    run("ranges", "7")
    reqs = fake.requests_since(mark)
    check(len(reqs) == 3 and reqs[0].get("uprobes") == "libc:malloc,train:step" and
          reqs[0].get("uprobe_max_calls_per_s") == 500 and
          reqs[0].get("events") == ["cpu", "cuda", "nvtx"] and
          reqs[1] == {"v": 1, "cmd": "gpu", "session": 7, "limit": 4} and
          reqs[2] == {"v": 1, "cmd": "ranges", "session": 7},
          "attach --uprobe, gpu and ranges requests", reqs)
    mark = fake.mark()
    r = run("attach", "4242", "--uprobe-max-rate", "-3")
    check(r.returncode == 2 and "--uprobe-max-rate" in r.stderr, "--uprobe-max-rate -3: usage error", r)
    r = run("attach", "4242", "--uprobe", "malloc")
    check(r.returncode == 2 and "LIB:SYMBOL" in r.stderr and fake.requests_since(mark) == [],
          "--uprobe without LIB: usage error, nothing sent", r)
    r = run("gpu", "7")
    check(r.returncode == 0 and
          "session 7 (events cpu,cuda,nvtx): 1 probes attached; lost calls 0, unnamed launches 1, "
          "stacks truncated 2, missing 0" in r.stdout and
          "NVTX v3 calls /opt/app/train: inlined: not traced" in r.stdout and
          "cuLaunchKernel" not in r.stdout, "gpu heading lists inlined NVTX, not missing probes", r.stdout)
    check("       300        0  64,1,1       256,1,1       gemm(float*, int) (__cudaLaunchKernel)\n"
          "      __cudaLaunchKernel < __device_stub__Z4gemmPfi(float*, int) < gemm(float*, int) < "
          "train_step < main\n" in r.stdout, "gpu kernel row and launching stack", r.stdout)
    check("cudaDeviceSynchronize             100        0     2500.000     25.000      1.500     80.250" in r.stdout,
          "gpu API row", r.stdout)
    check("HtoD     cudaMemcpy                  100         409600        0" in r.stdout, "gpu copies", r.stdout)
    check("GPU memory: live 1.0 MiB (peak 2.0 MiB); 3 allocations (1 failed) asking 3.0 MiB, "
          "2.0 MiB allocated, 1 frees releasing 1.0 MiB" in r.stdout and
          "live bytes over time: 0s=2.0 MiB 3s=1.0 MiB" in r.stdout and
          "failed allocations returned no memory" in r.stdout, "gpu memory lines", r.stdout)
    check("libc:malloc" in r.stdout and "User probes" in r.stdout, "gpu user probes", r.stdout)
    r = run("gpu", "6")
    check(r.returncode == 0 and r.stdout.count("none seen") == 4 and
          "no probes: attach with --events cpu,cuda" in r.stdout, "gpu of a session without probes", r.stdout)
    r = run("memory", "7")
    check(r.returncode == 0 and "address-space growth: not followed (profd could not attach its tracepoints"
          in r.stdout, "memory: growth not followed although rss was on", r.stdout)
    r = run("memory", "6")
    check(r.returncode == 0 and "address-space growth: not followed (attach --events ...,rss)" in r.stdout,
          "memory: growth not followed, rss off", r.stdout)
    r = run("ranges", "7")
    check(r.returncode == 0 and r.stdout.splitlines()[2:] == [
        "   calls     total ms     avg ms     min ms     max ms   %time  range",
        "       1     9000.000   9000.000   9000.000   9000.000   90.0%  train",
        "     100     8900.000     89.000     80.000    120.000   89.0%    step",
        "       1        0.000      0.000      0.000      0.000    0.0%  checkpoint (mark)"] and
          "NVTX ranges ended before they were seen opened: 2" in r.stdout, "ranges tree", r.stdout)
    r = run("--json", "ranges", "7")
    check(r.returncode == 0 and json.loads(r.stdout)["ranges"][1]["path"] == "train > step",
          "ranges --json", r.stdout)

    # --- no daemon ----------------------------------------------------------------------
    missing = os.path.join(tmp, "missing.sock")
    r = run("--socket", missing, "ping")
    check(r.returncode == 1, "no socket: exit 1", r)
    check(r.stderr == "profctl: error: cannot connect to profd at %s: No such file or directory "
          "(is profd running? see profd(8))\n" % missing, "no socket: message", r.stderr)
    refused = os.path.join(tmp, "refused.sock")
    lonely = socket.socket(socket.AF_UNIX)
    lonely.bind(refused)  # bound, never listening: connect() gets ECONNREFUSED
    r = run("sessions", env={"PROFD_SOCKET": refused})
    lonely.close()
    check(r.returncode == 1 and r.stderr == "profctl: error: cannot connect to profd at %s: "
          "Connection refused (is profd running? see profd(8))\n" % refused,
          "refused: exit 1 and message", r)
    r = run("--socket", "/tmp/" + "x" * 120, "ping")
    check(r.returncode == 1 and "cannot connect to profd" in r.stderr, "overlong socket path", r)

    # --- errors from profd: exit 1, "profctl: error: <message>", nothing on stdout -------
    no_session = [((cmd, "999"), "no session 999")
                  for cmd in ("top", "hotpaths", "threads", "session", "detach")]
    for args, message in no_session + [
            (("--json", "top", "999"), "no session 999"),
            (("attach", "999999"), "no process with PID 999999"),
            (("attach", "1", "--json"), "you may not trace PID 1"),
            (("attach", "4242", "--events", "cpu,cycles"), "unknown event 'cycles' (known: cpu)"),
            (("top", "670"), "profd returned error EIO")]:
        r = run(*args)
        check(r.returncode == 1 and r.stdout == "" and
              r.stderr == "profctl: error: %s\n" % message,
              "profctl %s: exit 1, 'profctl: error: %s'" % (" ".join(args), message), r)

    # --- malformed responses: exit 1, a clear message, nothing on stdout -----------------
    bad_profile = [(("export", str(sid), "--format", "folded"), 'malformed "profile" response')
                   for sid in range(673, 677)]
    for args, needle in [(("top", "666"), 'malformed response from profd: field "event"'),
                         (("hotpaths", "666"), 'malformed response from profd: field'),
                         (("threads", "666"), 'malformed response from profd: field'),
                         (("session", "666"), 'malformed response from profd: field "session"'),
                         (("top", "667"), "malformed response from profd"),
                         (("--json", "top", "667"), "malformed response from profd"),
                         (("top", "668"), "profd closed the connection without answering"),
                         (("top", "669"), "protocol version 2"),
                         (("top", "671"), "response from profd is longer than 64 MiB")] + bad_profile:
        r = run(*args)
        check(r.returncode == 1 and r.stdout == "" and needle in r.stderr and
              r.stderr.count("\n") == 1, "profctl %s: malformed reply reported" % " ".join(args),
              r)

    # A reply that trickles in a few bytes at a time reads the same as one that comes whole.
    a, b = run("hotpaths", "672"), run("hotpaths", "7")
    check(a.returncode == 0 and a.stdout == b.stdout.replace("session 7:", "session 672:"),
          "a reply read in many pieces", a)

    # --- attach requests and output -----------------------------------------------------
    mark = fake.mark()
    r1 = run("attach", "4242", "--duration", "10", "--freq", "199", "--events", "cpu")
    r2 = run("attach", "4242")
    r3 = run("attach", "-d", "0.5", "4242", "-e", " cpu ")
    r4 = run("--json", "attach", "2222", "-f", "999")
    reqs = fake.requests_since(mark)
    check(reqs == [
        {"v": 1, "cmd": "attach", "pid": 4242, "duration_s": 10, "freq_hz": 199,
         "events": ["cpu"]},
        # Without --events (--freq) profctl sends none: profd's default set (frequency) applies.
        {"v": 1, "cmd": "attach", "pid": 4242},
        {"v": 1, "cmd": "attach", "pid": 4242, "duration_s": 0.5, "events": ["cpu"]},
        {"v": 1, "cmd": "attach", "pid": 2222, "freq_hz": 999},
    ], "attach requests", reqs)
    check(r1.returncode == 0 and r1.stdout ==
          "session 7: attached to PID 4242 (matmul), event cpu-clock at 199 Hz, 10 s\n",
          "attach human output", r1)
    check(r2.stdout == "session 7: attached to PID 4242 (matmul), event cpu-clock at 99 Hz, "
          "until detached or the process exits\n", "attach without duration", r2)
    check(r3.stdout.endswith("at 99 Hz, 0.5 s\n"), "attach with 0.5 s", r3)
    check(r4.returncode == 0 and json.loads(r4.stdout).get("session") == 8, "attach --json", r4)

    # --- attach --wait ------------------------------------------------------------------
    mark = fake.mark()
    started = time.monotonic()
    r = run("attach", "4242", "--duration", "10", "--wait")
    took = time.monotonic() - started
    reqs = fake.requests_since(mark)
    check(r.returncode == 0, "attach --wait exits 0", r)
    check(r.stdout.startswith("session 7: attached to PID 4242 (matmul)") and
          re.search(r"(?m)^state: +ended$", r.stdout) and
          re.search(r"(?m)^end reason: +duration$", r.stdout) and
          re.search(r"(?m)^lost samples: +12$", r.stdout), "attach --wait summary", r.stdout)
    check(r.stderr == "", "no progress when stderr is not a terminal", r.stderr)
    check([q["cmd"] for q in reqs] == ["attach", "session", "session", "session"],
          "--wait polls until the session has ended", reqs)
    check(1.2 < took < 5, "--wait polls every 0.5 s (3 polls took %.2f s)" % took)
    r = run("attach", "4242", "-d", "10", "--wait", "--json")
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = {}
    check(r.returncode == 0 and doc.get("session") == 7 and doc.get("pid") == 4242 and
          doc.get("final", {}).get("state") == "ended" and doc["final"].get("id") == 7,
          "attach --wait --json: attach response with the ended session under 'final'", r)

    # Ctrl-C during --wait: detach, summary, exit 130; progress on a terminal's stderr.
    mark = fake.mark()
    master, slave = pty.openpty()
    p = subprocess.Popen([profctl, "attach", "2222", "--wait"], stdout=subprocess.PIPE,
                         stderr=slave, env=base_env, text=True)
    os.close(slave)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and \
            sum(q["cmd"] == "session" for q in fake.requests_since(mark)) < 2:
        time.sleep(0.05)
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    tty = b""
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        tty += chunk
    os.close(master)
    tty = tty.decode(errors="replace")
    reqs = fake.requests_since(mark)
    check(p.returncode == 130, "Ctrl-C during --wait exits 130", p.returncode)
    check(reqs and reqs[-1] == {"v": 1, "cmd": "detach", "session": 8},
          "Ctrl-C during --wait sends detach", reqs)
    check(re.search(r"(?m)^end reason: +detached$", out or ""),
          "Ctrl-C during --wait prints the summary", out)
    check("\rsession 8: 1.5 s, 12 samples" in tty, "progress line on a terminal", repr(tty))
    check("interrupted: detaching session 8" in tty, "Ctrl-C is reported", repr(tty))

    # --- top ------------------------------------------------------------------------------
    r = run("top", "7")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and len(lines) == 12, "top 7: 3 heading lines, header and 8 rows",
          r.stdout)
    if len(lines) == 12:
        check(lines[0] == "session 7: 3960 samples (cpu-clock); the 8 hottest functions by "
              "self samples", "top heading", lines[0])
        check(lines[1] == "lost samples: 12, truncated stacks: 3, missing user stacks: 1, "
              "unsymbolized frames: 4", "top counters line", lines[1])
        check(re.match(r"^SELF% +SELF +TOTAL% +TOTAL +FUNCTION +MODULE +FILE:LINE$", lines[3]),
              "top column headings", lines[3])
        check(re.match(r"^ 60\.9 +2410 +60\.9 +2410 +matmul_kernel +matmul +matmul\.c:88$",
                       lines[4]), "top first row", lines[4])
        check(re.match(r"^ +10\.2 +402 .*__memmove_avx_unaligned_erms +libc\.so\.6 +-$",
                       lines[5]), "unknown file:line shows '-', module basename", lines[5])
        check(re.search(r"  0\.0 +0 +82\.8 +3280 +worker_main ", lines[10]),
              "total samples column", lines[10])
        check(lines[4].index("matmul ") == lines[6].index("matmul "),
              "columns aligned (an overlong C++ name does not widen the column)",
              "\n".join(lines[4:8]))
        check(all(l == l.rstrip() for l in lines), "no trailing blanks")
    r = run("top", "6")
    check(r.returncode == 0 and r.stdout == "session 6: 0 samples (cpu-clock)\n"
          "lost samples: 0, truncated stacks: 0, missing user stacks: 0, unsymbolized frames: 0\n"
          "\nno samples\n", "top of an empty session", r.stdout)

    # --- hotpaths: the call tree --------------------------------------------------------
    expected_tree = """\
session 7: 3960 samples; the 6 hottest paths hold 3550 (89.6%)
lost samples: 12, truncated stacks: 3, missing user stacks: 1, unsymbolized frames: 4

SAMPLES  TOTAL%  CALL TREE (callers first)
   3280   82.8%  ├─ clone3 [libc.so.6]
   3280   82.8%  │  start_thread [libc.so.6]
   3280   82.8%  │  worker_main [matmul] matmul.c
   2410   60.9%  │  ├─ matmul_kernel [matmul] matmul.c:88
    782   19.7%  │  ├─ pack_block [matmul] matmul.c
    402   10.2%  │  │  └─ __memmove_avx_unaligned_erms [libc.so.6]
     88    2.2%  │  └─ matmul+0x1a2f [matmul]
    270    6.8%  └─ _start [matmul]
    270    6.8%     __libc_start_main_impl [libc.so.6]
    270    6.8%     __libc_start_call_main [libc.so.6]
    270    6.8%     main [matmul] matmul.c:150
    270    6.8%     load_matrix [matmul] matmul.c
    150    3.8%     ├─ void std::vector<double, std::allocator<double> >::_M_realloc_insert\
<double const&>(__gnu_cxx::__normal_iterator<double*, std::vector<double, std::allocator<double> \
> >, double const&) [libstdc++.so.6.0.30] vector.tcc:461
    120    3.0%     └─ asm_exc_page_fault [kernel.kallsyms]
    120    3.0%        exc_page_fault [kernel.kallsyms]
    120    3.0%        do_user_addr_fault [kernel.kallsyms]
    120    3.0%        handle_mm_fault [kernel.kallsyms]
    120    3.0%        __handle_mm_fault [kernel.kallsyms]
    120    3.0%        get_page_from_freelist [kernel.kallsyms]
    120    3.0%        clear_page_erms [kernel.kallsyms]
"""
    expected_ascii = (expected_tree.replace("├─", "|-").replace("└─", "`-")
                      .replace("│", "|"))
    r = run("hotpaths", "7")
    check(r.returncode == 0 and r.stdout == expected_tree, "hotpaths 7: the call tree",
          r.stdout)
    r = run("hotpaths", "7", "--ascii")
    check(r.returncode == 0 and r.stdout == expected_ascii, "hotpaths 7 --ascii", r.stdout)
    r = run("hotpaths", "7", env={"LANG": "C", "LC_ALL": "C"})
    check(r.stdout == expected_ascii, "hotpaths in a non-UTF-8 locale draws ASCII", r.stdout)
    r = run("hotpaths", "7", "--limit", "1")
    check(r.stdout.endswith("""\
SAMPLES  TOTAL%  CALL TREE (callers first)
   2410   60.9%  clone3 [libc.so.6]
   2410   60.9%  start_thread [libc.so.6]
   2410   60.9%  worker_main [matmul] matmul.c:131
   2410   60.9%  matmul_kernel [matmul] matmul.c:88
"""), "hotpaths --limit 1: one chain, root first, line kept when all paths agree", r.stdout)
    r = run("hotpaths", "7", "--limit", "2", "--ascii")
    check(r.stdout.endswith("""\
SAMPLES  TOTAL%  CALL TREE (callers first)
   2812   71.0%  clone3 [libc.so.6]
   2812   71.0%  start_thread [libc.so.6]
   2812   71.0%  worker_main [matmul] matmul.c
   2410   60.9%  |- matmul_kernel [matmul] matmul.c:88
    402   10.2%  `- pack_block [matmul] matmul.c:47
    402   10.2%     __memmove_avx_unaligned_erms [libc.so.6]
"""), "hotpaths --limit 2: branches where paths diverge, chains stay unindented", r.stdout)
    r = run("hotpaths", "6")
    check(r.returncode == 0 and r.stdout.endswith("\nno samples\n") and
          "lost samples: 0," in r.stdout, "hotpaths of an empty session", r.stdout)

    # --- threads ------------------------------------------------------------------------
    r = run("threads", "7")
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and lines[:2] == [
        "session 7: 3960 samples in 4 threads",
        "lost samples: 4, truncated stacks: 1, missing user stacks: 0, unsymbolized frames: 4"],
        "threads heading and counters", r.stdout)
    check(r.stdout.endswith("""
 TID  NAME      SAMPLES  SHARE%
4243  worker-1     1260    31.8
4244  worker-2     1230    31.1
4245  worker-3     1180    29.8
4242  matmul        290     7.3

imbalance: max/mean 1.27 (1.00 = even), mean 990.0 samples, CV 0.41, straggler TID 4243 \
(worker-1)
"""), "threads table and imbalance line", r.stdout)
    r = run("threads", "6")
    check(r.returncode == 0 and r.stdout.endswith("\nno samples\n"), "threads of an empty "
          "session", r.stdout)

    # --- sessions, session, detach, ping ------------------------------------------------
    r = run("sessions")
    check(r.returncode == 0 and r.stdout == """\
ID    PID  COMM      STATE    END            EVENT      STARTED              DURATION  SAMPLES  LOST
 8   2222  sleeper   running  -              cpu-clock  2025-11-21 23:42:01     1.5 s       12     0
 7   4242  matmul    ended    duration       cpu-clock  2025-11-21 23:42:01    10.0 s     3960    12
 6    977  postgres  ended    detached       cpu-clock  2025-11-21 23:42:01    12m34s        0     0
 5  31337  python3   ended    target_exited  cpu-clock  2025-11-21 23:42:01    12.7 s     1254     0
""", "sessions table", r.stdout)
    r = run("session", "7")
    check(r.returncode == 0 and re.search(r"(?m)^session: +7$", r.stdout) and
          re.search(r"(?m)^started: +2025-11-21 23:42:01 UTC$", r.stdout) and
          re.search(r"(?m)^unsymbolized frames: +4$", r.stdout) and
          re.search(r"(?m)^truncated stacks: +1$", r.stdout), "session key: value lines",
          r.stdout)
    r = run("session", "7", env={"TZ": "Asia/Tokyo"})
    check("started:             2025-11-22 08:42:01 JST" in r.stdout,
          "times are shown in local time", r.stdout)
    for sid in ("7", "8"):  # 7: bare SESSION reply, 8: {"session": SESSION}
        r = run("detach", sid)
        check(r.returncode == 0 and r.stdout.startswith("session %s: detached\n" % sid) and
              re.search(r"(?m)^end reason: +detached$", r.stdout), "detach %s" % sid, r.stdout)
    r = run("detach", "5")
    check(r.stdout.startswith("session 5: had already ended (target_exited)"),
          "detach of an ended session", r.stdout)
    r = run("ping")
    check(r.returncode == 0 and r.stdout == "profd 0.1.0 (protocol 1) at %s\n" % fake.sock,
          "ping", r)
    r = run("ping", "--json")
    check(r.returncode == 0 and json.loads(r.stdout) == {"version": "0.1.0", "protocol": 1},
          "ping --json", r)
    for cmd in (("sessions",), ("session", "7"), ("hotpaths", "7"), ("threads", "7"),
                ("detach", "7")):
        r = run("--json", *cmd)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            doc = None
        check(r.returncode == 0 and isinstance(doc, dict) and "v" not in doc and "ok" not in doc,
              "--json %s prints one JSON object without v/ok" % " ".join(cmd), r)


if __name__ == "__main__":
    sys.exit(main())
