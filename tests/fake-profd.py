#!/usr/bin/env python3
"""fake-profd.py - a stand-in for profd that answers with canned responses, for testing profctl.

Usage: fake-profd.py SOCKET [--log FILE]

Listens on the Unix stream socket SOCKET (a stale file there is removed) and
answers each request line with one response line in the shapes of
docs/protocol.md. With --log, appends every request it receives to FILE, one
JSON object per line (unparseable requests as {"raw": "..."}), so that a test
can check what profctl sent. Exits on SIGTERM or SIGINT, removing SOCKET.

Canned world:
  session 7   PID 4242 "matmul", 10 s, 3960 samples, 4 threads; attach PID
              4242 returns it. "session" reports it running for the first two
              polls on a connection, ended (end_reason "duration") from the third.
  session 8   PID 2222 "sleeper"; attach PID 2222 returns it; stays running
              until detached. Its detach reply is wrapped as {"session": SESSION}
              (session 7's is the bare SESSION object), so both shapes get used.
  session 6   PID 977 "postgres", ended "detached", no samples: empty reports.
  session 5   PID 31337 "python3", ended "target_exited".
  PID 999999  attach: ESRCH.  PID 1: EPERM.
  session 999 (or any other unknown id): ENOENT.
Malformed replies, to test profctl's checks (any command taking a session):
  666 ok:true but required fields missing    667 a line that is not JSON
  668 connection closed without an answer    669 "v": 2
  670 ok:false with an error lacking "message" (code only)
  671 a 65 MiB line (over profctl's 64 MiB cap)
  672 session 7's reply to the command, written a few bytes at a time
  673-676 "profile" with a malformed "samples_packed" (for export): a stack
          index out of range, a row of 3 numbers, a non-number, a trailing ';'
"""

import json
import math
import os
import signal
import socket
import socketserver
import sys
import threading
import time

MAX_REQUEST_BYTES = 64 * 1024
STARTED_NS = 1763768521000000000  # 2025-11-21T23:42:01Z


def iso(ns):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // 1_000_000_000))


def session_obj(sid, pid, comm, exe, state, end_reason, duration_s, elapsed_s, samples,
                lost=0, truncated=0, missing=0, unsym=0, threads=1, freq_hz=99):
    ended_ns = STARTED_NS + int(elapsed_s * 1e9) if state == "ended" else None
    return {
        "id": sid, "pid": pid, "comm": comm, "exe": exe, "uid": 0,
        "state": state, "end_reason": end_reason, "event": "cpu-clock", "events": ["cpu"],
        "freq_hz": freq_hz, "unwind": "fp", "duration_s": duration_s,
        "started_at": iso(STARTED_NS), "started_at_ns": STARTED_NS,
        "ended_at": iso(ended_ns) if ended_ns else None, "ended_at_ns": ended_ns,
        "elapsed_s": elapsed_s, "samples": samples, "lost_samples": lost,
        "truncated_stacks": truncated, "missing_user_stacks": missing,
        "unsymbolized_frames": unsym, "threads": threads,
    }


def session7(poll):
    """Session 7 at poll number @poll (1-based) on a connection; 0 means the final state."""
    if poll in (1, 2):
        return session_obj(7, 4242, "matmul", "/opt/bench/matmul", "running", None, 10,
                           3.2 * poll, 1267 * poll, lost=4 * poll, truncated=poll, missing=0,
                           unsym=4, threads=4)
    return session_obj(7, 4242, "matmul", "/opt/bench/matmul", "ended", "duration", 10, 10.0,
                       3960, lost=12, truncated=3, missing=1, unsym=4, threads=4)


def session8(state="running", end_reason=None):
    return session_obj(8, 2222, "sleeper", "/usr/bin/sleeper", state, end_reason, None, 1.5,
                       12, threads=1)


SESSION6 = session_obj(6, 977, "postgres", "/usr/lib/postgresql/15/bin/postgres", "ended",
                       "detached", None, 754.2, 0, threads=0)
SESSION5 = session_obj(5, 31337, "python3", None, "ended", "target_exited", 30, 12.7, 1254,
                       lost=0, unsym=17, threads=2, freq_hz=199)

TOTAL7 = 3960
MATMUL = "/opt/bench/matmul"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
LIBSTDCXX = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"
KERNEL = "[kernel.kallsyms]"
REALLOC = ("void std::vector<double, std::allocator<double> >::"
           "_M_realloc_insert<double const&>(__gnu_cxx::__normal_iterator<double*, "
           "std::vector<double, std::allocator<double> > >, double const&)")


def pct(n, total):
    return round(100.0 * n / total, 1) if total else 0.0


def fn(function, module, file, line, self_samples, total_samples):
    return {"function": function, "module": module, "file": file, "line": line,
            "self_samples": self_samples, "total_samples": total_samples,
            "self_pct": pct(self_samples, TOTAL7), "total_pct": pct(total_samples, TOTAL7)}


FUNCTIONS7 = [
    fn("matmul_kernel", MATMUL, "/src/bench/matmul.c", 88, 2410, 2410),
    fn("__memmove_avx_unaligned_erms", LIBC, None, None, 402, 402),
    fn("pack_block", MATMUL, "/src/bench/matmul.c", 41, 380, 782),
    fn(REALLOC, LIBSTDCXX, "/usr/include/c++/12/bits/vector.tcc", 461, 150, 150),
    fn("clear_page_erms", KERNEL, None, None, 120, 120),
    fn("matmul+0x1a2f", MATMUL, None, None, 88, 88),
    fn("worker_main", MATMUL, "/src/bench/matmul.c", 131, 0, 3280),
    fn("main", MATMUL, "/src/bench/matmul.c", 150, 0, 270),
]


def fr(function, module, file=None, line=None, kind="user"):
    return {"function": function, "module": module, "file": file, "line": line, "kind": kind}


THREAD_BASE = [fr("start_thread", LIBC), fr("clone3", LIBC)]
MAIN_BASE = [fr("main", MATMUL, "/src/bench/matmul.c", 150),
             fr("__libc_start_call_main", LIBC), fr("__libc_start_main_impl", LIBC),
             fr("_start", MATMUL)]
PATHS7 = [
    (2410, [fr("matmul_kernel", MATMUL, "/src/bench/matmul.c", 88),
            fr("worker_main", MATMUL, "/src/bench/matmul.c", 131)] + THREAD_BASE),
    (402, [fr("__memmove_avx_unaligned_erms", LIBC),
           fr("pack_block", MATMUL, "/src/bench/matmul.c", 47),
           fr("worker_main", MATMUL, "/src/bench/matmul.c", 127)] + THREAD_BASE),
    (380, [fr("pack_block", MATMUL, "/src/bench/matmul.c", 41),
           fr("worker_main", MATMUL, "/src/bench/matmul.c", 127)] + THREAD_BASE),
    (150, [fr(REALLOC, LIBSTDCXX, "/usr/include/c++/12/bits/vector.tcc", 461),
           fr("load_matrix", MATMUL, "/src/bench/matmul.c", 20)] + MAIN_BASE),
    (120, [fr("clear_page_erms", KERNEL, kind="kernel"),
           fr("get_page_from_freelist", KERNEL, kind="kernel"),
           fr("__handle_mm_fault", KERNEL, kind="kernel"),
           fr("handle_mm_fault", KERNEL, kind="kernel"),
           fr("do_user_addr_fault", KERNEL, kind="kernel"),
           fr("exc_page_fault", KERNEL, kind="kernel"),
           fr("asm_exc_page_fault", KERNEL, kind="kernel"),
           fr("load_matrix", MATMUL, "/src/bench/matmul.c", 22)] + MAIN_BASE),
    (88, [fr("matmul+0x1a2f", MATMUL),
          fr("worker_main", MATMUL, "/src/bench/matmul.c", 131)] + THREAD_BASE),
]

THREADS7 = [(4243, "worker-1", 1260), (4244, "worker-2", 1230), (4245, "worker-3", 1180),
            (4242, "matmul", 290)]


def counters(s):
    return {k: s[k] for k in ("lost_samples", "truncated_stacks", "missing_user_stacks",
                              "unsymbolized_frames")}


def error(code, errno_, message):
    return {"v": 1, "ok": False, "error": {"code": code, "errno": errno_, "message": message}}


def ok(**fields):
    return dict({"v": 1, "ok": True}, **fields)


# A memory report whose session had the rss event but no growth part: what a kernel without the
# syscalls:*/page-fault tracepoints gives (profd(8), REQUIREMENTS). A real profd's reply, trimmed.
MEMORY7 = json.loads('{"session":7,"state":"ended","duration_s":2.05,"rss":{"interval_s":1.0,"series":[{"t_s":0.05,"rss_bytes":1454080,"pss_bytes":224256,"anon_bytes":94208,"file_bytes":1359872,"shmem_bytes":0,"swap_bytes":0,"processes":1},{"t_s":1.05,"rss_bytes":1658880,"pss_bytes":277504,"anon_bytes":126976,"file_bytes":1531904,"shmem_bytes":0,"swap_bytes":0,"processes":1}],"processes":[{"pid":4242,"readings":2,"start_bytes":1454080,"end_bytes":1658880,"peak_bytes":1658880,"growth_bytes_per_s":204791,"first_s":0.05,"last_s":1.05,"by_mapping":[{"kind":"heap","start_bytes":0,"end_bytes":8192,"growth_bytes_per_s":8192},{"kind":"anon","start_bytes":32768,"end_bytes":57344,"growth_bytes_per_s":24575},{"kind":"stack","start_bytes":12288,"end_bytes":12288,"growth_bytes_per_s":0},{"kind":"shmem","start_bytes":0,"end_bytes":0,"growth_bytes_per_s":0},{"kind":"file","start_bytes":1400832,"end_bytes":1572864,"growth_bytes_per_s":172024},{"kind":"other","start_bytes":8192,"end_bytes":8192,"growth_bytes_per_s":0}]}],"readings":2,"start_bytes":1454080,"end_bytes":1658880,"peak_bytes":1658880,"growth_bytes_per_s":204791,"last_reading_s":1.05,"by_mapping":[{"kind":"heap","start_bytes":0,"end_bytes":8192,"growth_bytes_per_s":8192},{"kind":"anon","start_bytes":32768,"end_bytes":57344,"growth_bytes_per_s":24575},{"kind":"stack","start_bytes":12288,"end_bytes":12288,"growth_bytes_per_s":0},{"kind":"shmem","start_bytes":0,"end_bytes":0,"growth_bytes_per_s":0},{"kind":"file","start_bytes":1400832,"end_bytes":1572864,"growth_bytes_per_s":172024},{"kind":"other","start_bytes":8192,"end_bytes":8192,"growth_bytes_per_s":0}]},"growth":null,"allocations":null,"diagnosis":{"verdict":"flat","growth_bytes":204800,"kind":"file","evidence":["RSS 1.4 -> 1.6 MiB (+0.2 MiB) over 1 s","most of it in file mappings: +0.2 MiB"],"suggestion":null}}')


class Handler(socketserver.StreamRequestHandler):
    def setup(self):
        super().setup()
        self.polls = {}

    def log_request(self, obj):
        path = self.server.log_path
        if path:
            with self.server.log_lock, open(path, "a") as f:
                f.write(json.dumps(obj) + "\n")

    def send(self, obj):
        self.wfile.write((json.dumps(obj) + "\n").encode())
        self.wfile.flush()

    def handle(self):
        try:
            self.serve_lines()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away first (e.g. profctl refusing an oversized reply)

    def serve_lines(self):
        while True:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_REQUEST_BYTES or not line.endswith(b"\n"):
                self.log_request({"raw": line[:200].decode(errors="replace")})
                self.send(error("E2BIG", 7, "request longer than 65536 bytes"))
                return
            try:
                req = json.loads(line)
            except ValueError:
                self.log_request({"raw": line.decode(errors="replace")})
                self.send(error("EINVAL", 22, "request is not valid JSON"))
                continue
            self.log_request(req)
            resp = self.answer(req)
            if resp is None:
                return  # close without answering (session 668)
            if isinstance(resp, tuple):  # ("drip", bytes): a few bytes per write
                for i in range(0, len(resp[1]), 7):
                    self.wfile.write(resp[1][i:i + 7])
                    self.wfile.flush()
                    time.sleep(0.0005)
            elif isinstance(resp, bytes):
                self.wfile.write(resp)
                self.wfile.flush()
            else:
                self.send(resp)

    def session_id(self, req):
        sid = req.get("session")
        if not isinstance(sid, int) or isinstance(sid, bool) or sid < 1:
            return None, error("EINVAL", 22, "\"session\" must be a positive integer")
        if sid == 666:
            return None, ok(session=666)
        if sid == 667:
            return None, b"this is not json\n"
        if sid == 668:
            return None, None
        if sid == 669:
            return None, {"v": 2, "ok": True, "session": 669}
        if sid == 670:
            return None, {"v": 1, "ok": False, "error": {"code": "EIO", "errno": 5}}
        if sid == 671:
            return None, b'{"v":1,"ok":true,"pad":"' + b"x" * (65 << 20) + b'"}\n'
        if 673 <= sid <= 676 and req.get("cmd") in ("profile", "session"):
            packed = {673: "0,1,0,3;1,1,0,2", 674: "0,1,0", 675: "0,x,0,3", 676: "0,1,0,3;"}[sid]
            frame = {"function": "f", "module": "/bin/f", "kind": "user", "address": "0x10"}
            return None, ok(session=dict(SESSION5, id=sid), event="cpu-clock", total_samples=3,
                            period=10101010, period_unit="nanoseconds", started_at_ns=STARTED_NS,
                            frames=[frame], stacks=[[0]], threads=[], mappings=[],
                            samples_packed=packed)
        if sid == 672:
            resp = self.answer(dict(req, session=7))
            resp["session"] = 672 if resp.get("session") == 7 else resp.get("session")
            return None, ("drip", (json.dumps(resp) + "\n").encode())
        if sid not in (5, 6, 7, 8):
            return None, error("ENOENT", 2, "no session %d" % sid)
        return sid, None

    def current_session(self, sid):
        if sid == 7:
            self.polls[7] = self.polls.get(7, 0) + 1
            return session7(self.polls[7])
        if sid == 8:
            return session8()
        return {5: SESSION5, 6: SESSION6}[sid]

    def answer(self, req):
        if not isinstance(req, dict):
            return error("EINVAL", 22, "request is not a JSON object")
        if req.get("v", 1) != 1:
            return error("EINVAL", 22, "unsupported protocol version")
        cmd = req.get("cmd")
        if cmd == "ping":
            return ok(version="0.1.0", protocol=1)
        if cmd == "attach":
            return self.attach(req)
        if cmd == "sessions":
            return ok(sessions=[session8(), session7(0), SESSION6, SESSION5])
        if cmd not in ("detach", "session", "top", "hotpaths", "threads", "gpu", "ranges",
                       "profile", "memory"):
            return error("EINVAL", 22, "unknown command '%s'" % cmd)

        sid, bad = self.session_id(req)
        if sid is None:
            return bad
        if cmd == "session":
            return ok(session=self.current_session(sid))
        if cmd == "detach":
            if sid == 7:
                s = session7(0)
                s.update(end_reason="detached", elapsed_s=4.1, ended_at_ns=STARTED_NS + 4100000000,
                         ended_at=iso(STARTED_NS + 4100000000))
                return ok(**s)
            if sid == 8:
                s = session8("ended", "detached")
                s.update(ended_at_ns=STARTED_NS + 1500000000, ended_at=iso(STARTED_NS + 1500000000))
                return ok(session=s)
            return ok(**self.current_session(sid))

        if cmd == "gpu":
            return ok(**GPU7) if sid == 7 else ok(**dict(GPU7, kernels=[], api=[], copies=[],
                                                         syncs=[], uprobes=[], probes=[]))
        if cmd == "ranges":
            return ok(**RANGES7)
        if cmd == "memory":
            return ok(**MEMORY7) if sid == 7 else ok(**dict(MEMORY7, session=sid, rss=None))
        limit = req.get("limit", 20 if cmd == "top" else 10)
        if not isinstance(limit, int) or not 1 <= limit <= 10000:
            return error("EINVAL", 22, "\"limit\" must be 1..10000")
        s = session7(0) if sid == 7 else self.current_session(sid)
        empty = sid != 7
        total = 0 if empty else TOTAL7
        if cmd == "top":
            return ok(session=sid, event="cpu-clock", total_samples=total, **counters(s),
                      functions=[] if empty else FUNCTIONS7[:limit])
        if cmd == "hotpaths":
            paths = [] if empty else [{"samples": n, "pct": pct(n, TOTAL7), "frames": frames}
                                      for n, frames in PATHS7[:limit]]
            return ok(session=sid, total_samples=total, **counters(s), paths=paths)
        # threads
        rows = [] if empty else THREADS7
        threads = [{"tid": t, "name": name, "samples": n, "share_pct": pct(n, TOTAL7)}
                   for t, name, n in rows]
        if rows:
            counts = [n for _, _, n in rows]
            mean = sum(counts) / len(counts)
            sd = math.sqrt(sum((n - mean) ** 2 for n in counts) / len(counts))
            busiest = max(rows, key=lambda r: r[2])
            imbalance = {"threads": len(rows), "mean_samples": round(mean, 1),
                         "max_samples": busiest[2], "max_over_mean": round(busiest[2] / mean, 2),
                         "cv": round(sd / mean, 2), "straggler_tid": busiest[0],
                         "straggler_name": busiest[1]}
        else:
            imbalance = {"threads": 0, "mean_samples": None, "max_samples": None,
                         "max_over_mean": None, "cv": None, "straggler_tid": None,
                         "straggler_name": None}
        return ok(session=sid, total_samples=total, threads=threads, imbalance=imbalance)

    def attach(self, req):
        pid = req.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 1:
            return error("EINVAL", 22, "\"pid\" must be an integer >= 1")
        duration = req.get("duration_s")
        if duration is not None and (isinstance(duration, bool)
                                     or not isinstance(duration, (int, float)) or duration <= 0):
            return error("EINVAL", 22, "\"duration_s\" must be a number > 0")
        freq = req.get("freq_hz", 99)
        if not isinstance(freq, int) or isinstance(freq, bool) or not 1 <= freq <= 10000:
            return error("EINVAL", 22, "\"freq_hz\" must be an integer 1..10000")
        events = req.get("events", ["cpu"])
        if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
            return error("EINVAL", 22, "\"events\" must be an array of names")
        for e in events:
            if e not in ("cpu", "cuda", "nvtx"):
                return error("EINVAL", 22, "unknown event '%s' (known: cpu)" % e)
        if pid == 999999:
            return error("ESRCH", 3, "no process with PID %d" % pid)
        if pid == 1:
            return error("EPERM", 1, "you may not trace PID 1")
        if pid == 4242:
            sid, comm = 7, "matmul"
        elif pid == 2222:
            sid, comm = 8, "sleeper"
        else:
            return error("ESRCH", 3, "no process with PID %d" % pid)
        return ok(session=sid, pid=pid, comm=comm, event="cpu-clock", freq_hz=freq,
                  events=events, duration_s=duration, unwind="fp", started_at=iso(STARTED_NS),
                  started_at_ns=STARTED_NS)


# profctl gpu 7 / ranges 7: a training step's CUDA calls and NVTX ranges.
GPU7 = {
    "session": 7, "events": "cpu,cuda,nvtx", "lost_calls": 0, "nvtx_unmatched": 0,
    "unnamed_launches": 1, "session_s": 10.0, "truncated_stacks": 2, "missing_stacks": 0,
    "probes": [{"what": "cudaMalloc", "file": "/usr/lib/libcudart.so.13", "status": "attached"},
               {"what": "cuLaunchKernel", "file": "", "status": "missing"},
               {"what": "NVTX v3 calls", "file": "/opt/app/train", "status":
                "inlined: not traced (only nvtx*_impl_init_v3 are out of line)"}],
    "kernels": [{"name": "gemm(float*, int)", "launches": 300, "errors": 0, "grid": "64,1,1",
                 "block": "256,1,1", "api": "__cudaLaunchKernel",
                 "stack": ["__cudaLaunchKernel", "__device_stub__Z4gemmPfi(float*, int)",
                           "gemm(float*, int)", "train_step", "main"]}],
    "api": [{"api": "cudaDeviceSynchronize", "calls": 100, "errors": 0, "total_ms": 2500.0,
             "avg_ms": 25.0, "min_ms": 1.5, "max_ms": 80.25}],
    "copies": [{"direction": "HtoD", "api": "cudaMemcpy", "calls": 100, "bytes": 409600,
                "errors": 0}],
    "syncs": [{"api": "cudaDeviceSynchronize", "calls": 100, "total_ms": 2500.0,
               "stack": ["cudaDeviceSynchronize", "train_step", "main"]}],
    "uprobes": [{"probe": "libc:malloc", "calls": 42, "total_ms": 0.5, "avg_ms": 0.012,
                 "min_ms": 0.001, "max_ms": 0.2}],
    "memory": {"allocations": 3, "failed_allocations": 1, "requested_bytes": 3145728,
               "allocated_bytes": 2097152, "frees": 1, "freed_bytes": 1048576,
               "live_bytes": 1048576, "peak_live_bytes": 2097152,
               "by_stack": [{"api": "cudaMalloc", "space": "device", "live_bytes": 1048576,
                             "allocated_bytes": 2097152, "requested_bytes": 3145728,
                             "allocations": 3, "failed": 1,
                             "stack": ["cudaMalloc", "alloc_cache", "main"]}],
               "timeline": [{"t_s": 0, "live_bytes": 2097152}, {"t_s": 3, "live_bytes": 1048576}]},
}
RANGES7 = {
    "session": 7, "events": "cpu,cuda,nvtx", "lost_calls": 0, "nvtx_unmatched": 2,
    "unnamed_launches": 0, "session_s": 10.0,
    "ranges": [
        {"kind": "push", "path": "train", "name": "train", "depth": 0, "calls": 1,
         "total_ms": 9000.0, "avg_ms": 9000.0, "min_ms": 9000.0, "max_ms": 9000.0, "pct": 90.0},
        {"kind": "push", "path": "train > step", "name": "step", "depth": 1, "calls": 100,
         "total_ms": 8900.0, "avg_ms": 89.0, "min_ms": 80.0, "max_ms": 120.0, "pct": 89.0},
        {"kind": "mark", "path": "checkpoint", "name": "checkpoint", "depth": 0, "calls": 1,
         "total_ms": 0.0, "avg_ms": 0.0, "min_ms": 0.0, "max_ms": 0.0, "pct": 0.0}],
}


class Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True


def main():
    args = sys.argv[1:]
    log_path = None
    if "--log" in args:
        i = args.index("--log")
        log_path = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        sys.stderr.write(__doc__)
        return 2
    path = args[0]
    if os.path.exists(path):
        os.unlink(path)
    server = Server(path, Handler)
    server.log_path = log_path
    server.log_lock = threading.Lock()

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
