#!/usr/bin/env python3
"""Reports and SQL run on reader threads: a long query costs no sample and
does not hold up the answers about sessions; a client that hangs up frees
its reader at once; past the per-user limit a query is refused as busy."""
import json
import os
import socket
import subprocess
import time

from profdtest import Profd, check, require_root_bpf, run

# A statement that runs until profd stops it at its 5 s SQL limit.
ENDLESS = 'WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n'


def sql_request(query):
    return {'v': 1, 'cmd': 'sql', 'query': query}


def open_query(d, query):
    """Connect, send @query as an sql request and return the socket, without reading the answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(d.socket)
    s.sendall((json.dumps(sql_request(query)) + '\n').encode())
    return s


def running(d):
    return d.request({'v': 1, 'cmd': 'ping'})['queries_running']


def wait_running(d, want, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if running(d) == want:
            return True
        time.sleep(0.05)
    return False


def no_sample_lost_during_queries(d):
    w = d.spin('4,4', seconds=60)
    sid = d.json('attach', w.pid, '--freq', '199', '--duration', '8')['session']
    # Two endless statements, one after the other, on two clients: each runs 5 s.
    q = [subprocess.Popen([d.profctl, '--socket', d.socket, 'sql', ENDLESS],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    check(wait_running(d, 2, 10), 'the two queries did not start: %d running' % running(d))
    # Answered while both readers are busy: sessions, session, and the queries still run.
    sessions = d.json('sessions')['sessions']
    check(any(s['id'] == sid for s in sessions), 'sessions did not list the live session')
    check(d.json('session', sid)['session']['state'] == 'running', 'the session is not running')
    check(all(p.poll() is None for p in q),
          'a query ended before sessions was answered: the answer waited for it')
    for p in q:
        _, err = p.communicate(timeout=30)
        check(p.returncode == 1 and 'query stopped after' in err,
              'the endless query was not stopped at its limit: rc %d, %r' % (p.returncode, err))
    s = d.wait_ended(sid, timeout=30)
    print('live session at 199 Hz during 10 s of queries: %d samples, %d lost, ended: %s' % (
        s['samples'], s['lost_samples'], s['end_reason']))
    check(s['end_reason'] == 'duration', 'the session ended by %r' % s['end_reason'])
    check(s['samples'] > 500, 'too few samples: %d' % s['samples'])
    check(s['lost_samples'] == 0, 'samples were lost while queries ran: %d' % s['lost_samples'])
    w.kill()


def hang_up_frees_reader(d):
    socks = [open_query(d, ENDLESS) for _ in range(2)]
    check(wait_running(d, 2, 10), 'the two queries did not start: %d running' % running(d))
    for s in socks:
        s.close()
    # The statements would run for 5 s more; hanging up stops them at once.
    check(wait_running(d, 0, 2.5), 'readers still busy after their clients hung up: %d' % running(d))
    r = d.request(sql_request('SELECT 42 AS answer'))
    check(r['ok'] and r['rows'] == [[42]], 'a query after the hang-ups: %r' % r)


def busy_beyond_limit(d):
    socks = [open_query(d, ENDLESS) for _ in range(50)]
    answers = []
    for s in socks:
        s.setblocking(False)
    # The refused ones are answered at once; the accepted ones are still running.
    deadline = time.time() + 4
    pending = list(socks)
    while pending and time.time() < deadline:
        for s in list(pending):
            try:
                data = s.recv(65536)
            except BlockingIOError:
                continue
            answers.append(data.decode())
            pending.remove(s)
        time.sleep(0.05)
    busy = [a for a in answers if '"EBUSY"' in a]
    print('50 clients with an endless query each: %d refused as busy, %d running' % (len(busy), len(pending)))
    check(len(busy) == 50 - 4, 'expected 46 busy answers (queries_per_user = 4), got %d: %r' % (
        len(busy), answers[:2]))
    check(all('queries_per_user' in a for a in busy), 'the busy answer does not say why: %r' % busy[:1])
    check(len(pending) == 4, '%d queries running, expected 4' % len(pending))
    check(d.json('sessions') is not None, 'sessions did not answer')
    for s in socks:
        s.close()
    check(wait_running(d, 0, 2.5), 'readers still busy after the hang-ups: %d' % running(d))


def test():
    require_root_bpf()
    with Profd() as d:
        conf = os.path.join(d.dir, 'profd.conf')
        with open(conf, 'w') as f:
            f.write('[limits]\nquery_threads = 2\nqueries_per_user = 4\nmax_queries = 64\n')
        d.stop()
        d.extra_args = ['--config', conf]
        d.start()
        no_sample_lost_during_queries(d)
        hang_up_frees_reader(d)
        busy_beyond_limit(d)


run(test)
