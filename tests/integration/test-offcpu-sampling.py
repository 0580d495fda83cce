#!/usr/bin/env python3
"""Off-CPU time is sampled as CPU time is: an interval at least one period
(1 / freq_hz) long is always recorded, a shorter one of d ns with
probability d / period, weighted by period / d (offcpu.bpf.c,
keep_interval()). What a user sees, on a thread that naps ~0.1 ms
thousands of times a second beside one that sleeps 20 ms at a time:

- the off-CPU time profd reports for each thread is within 15% of the
  kernel's own account (wall time minus the thread's CPU time from
  /proc/PID/task/TID/schedstat), and its count of blocking intervals within
  15% of the thread's voluntary context switches (/proc/.../status).
  (profd measures from switch-out to switch-in, the kernel charges part of
  each switch to the thread: even unsampled, the napper reads ~5% above the
  kernel's figure here, ~6 us an interval.)
  The sleeper's 20 ms sleeps are longer than the period: each is one
  record, counted once, so a weight applied to them shows there;
- profd received far fewer records than the intervals it estimates: under
  a quarter of them (each costs a kernel stack in BPF and work in profd);
- the session says which period it sampled with (offcpu_period_ns), and
  profctl offcpu that its figures are estimates."""
import time

from profdtest import Profd, check, require_root_bpf, run

FREQ = 397
SECONDS = 4
WORKLOAD = r'''
import sys, threading, time
def napper(end):
    while time.monotonic() < end:
        time.sleep(50e-6)
def sleeper(end):
    while time.monotonic() < end:
        time.sleep(0.02)
end = time.monotonic() + float(sys.argv[1])
ts = [threading.Thread(target=f, args=(end,), name=f.__name__) for f in (napper, sleeper)]
for t in ts:
    t.start()
print(' '.join('%s=%d' % (t.name, t.native_id) for t in ts), flush=True)
for t in ts:
    t.join()
'''


def task_times(pid, tid):
    """(CPU time ns, voluntary context switches) of thread @tid, from /proc."""
    with open('/proc/%d/task/%d/schedstat' % (pid, tid)) as f:
        cpu_ns = int(f.read().split()[0])
    with open('/proc/%d/task/%d/status' % (pid, tid)) as f:
        vol = [int(l.split()[1]) for l in f if l.startswith('voluntary_ctxt_switches')][0]
    return cpu_ns, vol


def test():
    require_root_bpf()
    with Profd() as d:
        w = d.spawn('/usr/bin/python3', '-c', WORKLOAD, str(SECONDS + 20))
        tids = dict(x.split('=') for x in w.stdout.readline().split())
        tids = {name: int(tid) for name, tid in tids.items()}
        time.sleep(0.5)
        # Raw requests, not profctl: the kernel's figures are read right after the attach and
        # right before the detach, so that both cover the same seconds.
        sid = d.request({'cmd': 'attach', 'pid': w.pid, 'events': ['cpu', 'offcpu'], 'freq_hz': FREQ})['id']
        t0, before = time.monotonic(), {n: task_times(w.pid, t) for n, t in tids.items()}
        time.sleep(SECONDS)
        t1, after = time.monotonic(), {n: task_times(w.pid, t) for n, t in tids.items()}
        check(d.request({'cmd': 'detach', 'session': sid})['ok'], 'detach failed')
        s = d.json('session', sid)['session']
        w.kill()
        w.wait()

        period = s.get('offcpu_period_ns')
        check(period == 10**9 // FREQ, 'session offcpu_period_ns %r, expected %d' % (period, 10**9 // FREQ))
        walks = (s.get('unwind_tables') or {}).get('offcpu')
        check(walks is not None, 'no off-CPU record counts in the session: %r' % s.get('unwind_tables'))
        records = walks['walked'] + walks['fallback_intervals']

        rows = d.json('sql', "SELECT tid, state != 'runnable', sum(count), sum(total_ns) FROM offcpu"
                      " WHERE session_id = %d GROUP BY 1, 2" % sid)['rows']
        estimated = 0
        for name, tid in tids.items():
            blocked = sum(r[2] for r in rows if r[0] == tid and r[1])
            off_ns = sum(r[3] for r in rows if r[0] == tid)
            true_off = (t1 - t0) * 1e9 - (after[name][0] - before[name][0])
            true_blocks = after[name][1] - before[name][1]
            print('%s: off-CPU %.3f s (kernel: %.3f s), %d blocking intervals (voluntary switches: %d)' % (
                name, off_ns / 1e9, true_off / 1e9, blocked, true_blocks))
            check(abs(off_ns - true_off) <= 0.15 * true_off,
                  '%s: off-CPU %.3f s, the kernel says %.3f s' % (name, off_ns / 1e9, true_off / 1e9))
            check(abs(blocked - true_blocks) <= 0.15 * true_blocks,
                  '%s: %d blocking intervals, %d voluntary switches' % (name, blocked, true_blocks))
            estimated += blocked
        print('records received: %d for ~%d intervals (%.1f%%)' % (records, estimated,
                                                                    100 * records / max(estimated, 1)))
        check(records < 0.25 * estimated, '%d records for %d intervals: not sampled' % (records, estimated))
        # A reader of profctl offcpu is told the figures are estimates.
        _, out, _ = d.ctl('offcpu', sid, '--limit', '1')
        check('sampled: intervals under %.3f ms' % (period / 1e6) in out, 'profctl offcpu:\n' + out)


if __name__ == '__main__':
    run(test)
