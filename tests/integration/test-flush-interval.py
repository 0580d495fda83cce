#!/usr/bin/env python3
"""profd writes what running sessions aggregated to the database every
flush_interval_s (--flush-interval), a session's first 10 s every second
(so that a short-lived target is symbolized while it runs), and before
every request, so that a report is never older than the request that asked
for it. Read as a user who opens the database file itself (sqlite3, no
request to profd):

- with --flush-interval 30, a new session's samples reach the file within
  3 s; past its first 10 s they stop arriving for 5 s while the job keeps
  running; one request (profctl session) writes them at once; stopping
  profd (SIGTERM) writes the rest: the rows then hold every sample the
  session counted;
- with --flush-interval 2, past the first 10 s they keep arriving with no
  request at all."""
import sqlite3
import time

from profdtest import Profd, check, require_root_bpf, run

WORKLOAD = 'while True:\n    sum(range(20000))\n'


def stored_samples(db, sid):
    """CPU samples of session @sid in the database file, read as any program
    would, with a connection of its own (closed at once: no read transaction
    is left open under profd)."""
    con = sqlite3.connect(db, timeout=10)
    try:
        n = con.execute('SELECT sum(count) FROM samples WHERE session_id = ?', (sid,)).fetchone()[0]
    finally:
        con.close()
    return n or 0


def attach(d):
    """A session on a busy Python process, attached through the protocol (an
    attach writes the session's row, not its samples)."""
    w = d.spawn('/usr/bin/python3', '-c', WORKLOAD)
    time.sleep(0.5)
    r = d.request({'cmd': 'attach', 'pid': w.pid, 'events': ['cpu']})
    check(r.get('ok'), 'attach: %r' % r)
    return r['session']


def wait_stored(db, sid, seconds):
    """Samples of @sid in the file, polled until some are there or @seconds pass."""
    start, n = time.monotonic(), 0
    while n == 0 and time.monotonic() - start < seconds:
        time.sleep(0.2)
        n = stored_samples(db, sid)
    return n


def sleep_until(t0, seconds):
    time.sleep(max(0.0, t0 + seconds - time.monotonic()))


def test():
    require_root_bpf()

    with Profd(['--flush-interval', '30']) as d:
        t0 = time.monotonic()
        sid = attach(d)
        young = wait_stored(d.db, sid, 3)
        check(young > 0, '--flush-interval 30: no samples in the file 3 s after the attach')
        sleep_until(t0, 12)
        a = stored_samples(d.db, sid)
        sleep_until(t0, 17)
        b = stored_samples(d.db, sid)
        check(b == a, '--flush-interval 30: the file went from %d to %d samples between 12 s and '
              '17 s after the attach, with no request' % (a, b))
        s = d.json('session', sid)['session']
        c = stored_samples(d.db, sid)
        check(c > b and c >= s['samples'],
              'a request did not write the samples: the session says %d, the file has %d (%d before)'
              % (s['samples'], c, b))
        time.sleep(2)
        d.stop()
        n = stored_samples(d.db, sid)
        con = sqlite3.connect(d.db)
        counted, reason = con.execute('SELECT samples, end_reason FROM sessions WHERE id = ?',
                                      (sid,)).fetchone()
        con.close()
        check(n > c and n == counted and reason == 'daemon_stopped',
              'after SIGTERM: %d samples in rows (%d before), the session counted %r, ended %r'
              % (n, c, counted, reason))
        print('--flush-interval 30: %d samples in the file within 3 s, %d at 12 s and at 17 s, '
              '%d after one request, %d after the stop' % (young, a, c, n))

    with Profd(['--flush-interval', '2']) as d:
        t0 = time.monotonic()
        sid = attach(d)
        sleep_until(t0, 12)
        a = stored_samples(d.db, sid)
        sleep_until(t0, 16)
        b = stored_samples(d.db, sid)
        check(b > a, '--flush-interval 2: the file stayed at %d samples from 12 s to 16 s' % a)
        print('--flush-interval 2: %d samples in the file at 12 s, %d at 16 s, no request' % (a, b))


if __name__ == '__main__':
    run(test)
