#!/usr/bin/env python3
"""profd writes what running sessions aggregated to the database every
flush_interval_s (--flush-interval), and before every request, so that a
report is never older than the request that asked for it. Read as a user
who opens the database file itself (sqlite3, no request to profd):

- with --flush-interval 30, a running session's samples are not in the file
  5 s after the attach; one request (profctl session) puts them there at
  once, and the session's own count agrees with the rows;
- with --flush-interval 1, they reach the file within 5 s of the attach with
  no request at all;
- stopping profd (SIGTERM) writes what waited: the rows then hold every
  sample the session counted."""
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


def test():
    require_root_bpf()

    with Profd(['--flush-interval', '30']) as d:
        sid = attach(d)
        time.sleep(5)
        early = stored_samples(d.db, sid)
        check(early == 0, '--flush-interval 30: %d samples in the file 5 s after the attach' % early)
        s = d.json('session', sid)['session']
        after = stored_samples(d.db, sid)
        check(s['samples'] > 0 and after >= s['samples'],
              'a request did not write the samples: session says %d, the file has %d'
              % (s['samples'], after))
        print('--flush-interval 30: 0 samples in the file after 5 s; %d after one request' % after)

    with Profd(['--flush-interval', '1']) as d:
        sid = attach(d)
        start, n = time.monotonic(), 0
        while n == 0 and time.monotonic() - start < 5:
            time.sleep(0.2)
            n = stored_samples(d.db, sid)
        check(n > 0, '--flush-interval 1: no samples in the file 5 s after the attach')
        print('--flush-interval 1: %d samples in the file %.1f s after the attach, no request'
              % (n, time.monotonic() - start))

    # SIGTERM: the running session ends, and what it counted is written.
    d = Profd(['--flush-interval', '3600'])
    with d:
        sid = attach(d)
        time.sleep(2)
        check(stored_samples(d.db, sid) == 0, 'samples written before the interval or a request')
        d.stop()
        n = stored_samples(d.db, sid)
        con = sqlite3.connect(d.db)
        counted, reason = con.execute('SELECT samples, end_reason FROM sessions WHERE id = ?',
                                      (sid,)).fetchone()
        con.close()
        check(n > 0 and n == counted and reason == 'daemon_stopped',
              'after SIGTERM: %d samples in rows, the session counted %r, ended %r'
              % (n, counted, reason))
        print('stopped with --flush-interval 3600: %d samples written at the stop' % n)


if __name__ == '__main__':
    run(test)
