#!/usr/bin/env python3
"""Pyroscope push: a listener on a loopback port plays Pyroscope's /ingest.
profd pushes a spin-threads session every 2 s as gzip'd pprof, with the name
labels, tenant and basic auth of its configuration; go tool pprof reads the
bodies and finds the workload's hottest function; the samples of all pushes
add up to the session's. While the listener answers 500, garbage or nothing,
profd logs why once, keeps sampling, retries, and the samples arrive once it
answers 200 again. The cursors are in the database: a session stored before
Pyroscope was configured is never pushed; profd stopped while the listener
answers 500 pushes the rest of that session after its restart, each sample
once in all, and profctl session shows the pushes, samples and failures."""
import base64
import gzip
import sqlite3
import http.server
import os
import re
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.parse

from profdtest import Profd, binary, check, go_pprof_top, require_root_bpf, require_tool, run, wait_for_threads

TENANT = 'team-a'
USER = 'pusher'
PASSWORD = 's3cret pass'
LABEL = 'nightly,run{1}'  # the name's separators: profd must escape them
LABEL_BEFORE = 'before'  # a session stored before Pyroscope was configured
LABEL_RESTART = 'restart'  # a session pushed across a restart of profd
APP = 'testapp'


class Listener:
    """A loopback HTTP server answering POST /ingest as told by .mode:
    'ok' (200, the request kept), '500', 'garbage' (bytes that are not HTTP),
    'slow' (no answer for 40 s)."""

    def __init__(self, tls=None):
        """@tls: (certificate file, key file) to answer over https."""
        self.mode = 'ok'
        self.accepted = []  # (query dict, headers, body) of the 200 answers
        self.attempts = {'ok': 0, '500': 0, 'garbage': 0, 'slow': 0}
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
                with outer.lock:
                    mode = outer.mode
                    outer.attempts[mode] += 1
                if mode == '500':
                    msg = b'ingest failed: test error\nsecond line\n'
                    self.send_response(500)
                    self.send_header('Content-Length', str(len(msg)))
                    self.end_headers()
                    self.wfile.write(msg)
                elif mode == 'garbage':
                    self.wfile.write(b'\x00\x01garbage, not HTTP\r\n\r\n')
                    self.close_connection = True
                elif mode == 'slow':
                    time.sleep(40)  # profd gives up first
                    self.close_connection = True
                else:
                    q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                    with outer.lock:
                        outer.accepted.append((self.path, q, dict(self.headers), body))
                    self.send_response(200)
                    self.send_header('Content-Length', '0')
                    self.end_headers()

        self.server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def set(self, mode):
        with self.lock:
            self.mode = mode

    def count(self, mode):
        with self.lock:
            return self.attempts[mode]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if c < 0x80:
            return v, i


def fields(b):
    """(field number, wire type, value) of a protobuf message's fields."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v = b[i:i + n]
            i += n
        elif wt == 1:
            v = b[i:i + 8]
            i += 8
        elif wt == 5:
            v = b[i:i + 4]
            i += 4
        else:
            raise ValueError('wire type %d' % wt)
        yield num, wt, v


def pprof_read(body):
    """(samples: the sum of the samples' first value (samples/count),
    time_nanos, duration_nanos) of a gzip'd pprof."""
    total = time_ns = duration_ns = 0
    for num, wt, v in fields(gzip.decompress(body)):
        if num == 9:
            time_ns = v
        if num == 10:
            duration_ns = v
        if num != 2:  # Profile.sample
            continue
        for snum, swt, sv in fields(v):
            if snum != 2:  # Sample.value
                continue
            if swt == 2:  # packed
                first, _ = varint(sv, 0)
            else:
                first = sv
            total += first
            break
    return total, time_ns, duration_ns


def wait_for(what, cond, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.2)
    check(False, 'timed out after %d s waiting for %s' % (timeout, what))


def parse_name(name):
    """app{k=v,...} as Pyroscope's labelset parser reads it."""
    m = re.fullmatch(r'([^{]*)\{(.*)\}', name)
    check(m, 'name %r is not app{labels}' % name)
    labels = {}
    for part in m.group(2).split(','):
        k, _, v = part.partition('=')
        labels[k.strip()] = v.strip()
    return m.group(1), labels


def test():
    require_root_bpf()
    go = require_tool('go', 'golang-go')
    listener = Listener()
    try:
        run_test(go, listener)
    finally:
        listener.close()
    run_https()


def run_https():
    """https:// with a self-signed certificate: refused and said without ca_file;
    with it, the session's samples all arrive."""
    with tempfile.TemporaryDirectory(prefix='pyro-tls-') as tmp:
        cert, key = os.path.join(tmp, 'cert.pem'), os.path.join(tmp, 'key.pem')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
                        '-keyout', key, '-out', cert, '-subj', '/CN=127.0.0.1',
                        '-addext', 'subjectAltName=IP:127.0.0.1'], check=True, capture_output=True)
        listener = Listener(tls=(cert, key))
        url = 'https://127.0.0.1:%d/' % listener.port
        conf = os.path.join(tmp, 'profd.conf')
        with open(conf, 'w') as f:
            f.write('[fleet]\nca_file = %s\n' % cert)
        try:
            for with_ca in (False, True):
                args = ['--pyroscope-url', url, '--fleet-interval', '2', '--host-name', 'tls-host']
                with Profd((['--config', conf] if with_ca else []) + args) as d:
                    w = d.spawn(binary('SPIN_THREADS'), '--seconds', '4', '--weights', '1')
                    wait_for_threads(w.pid, 2)
                    sid = d.json('attach', w.pid, '--freq', '397')['session']
                    d.wait_ended(sid)
                    py = lambda: d.json('session', sid)['session']['fleet']['pyroscope'] or {}
                    if not with_ca:
                        wait_for('a failure over https', lambda: py().get('last_error'), 20)
                        print('https without ca_file:', py()['last_error'])
                        check('certificate' in py()['last_error'].lower() and not py()['done'],
                              'an untrusted certificate was not refused, or not said: %r' % py())
                        continue
                    wait_for('the session pushed over https', lambda: py().get('done'), 30)
                    total = d.json('top', sid, '--limit', '1')['total_samples']
                    # Only this session's pushes got through the TLS handshake.
                    with listener.lock:
                        bodies = [b for _, _, _, b in listener.accepted]
                    pushed = sum(pprof_read(b)[0] for b in bodies)
                    print('https with ca_file: %d pushes of %d samples, the session %d' % (
                        len(bodies), pushed, total))
                    check(total > 100 and pushed == total and py()['rows'] == total,
                          'over https: %d samples received, cursor %r, session %d' % (pushed, py(), total))
        finally:
            listener.close()


def run_test(go, listener):
    conf_dir = os.path.join('/tmp', 'profd-pyro-%d' % os.getpid())
    os.makedirs(conf_dir, exist_ok=True)
    pw = os.path.join(conf_dir, 'password')
    with open(pw, 'w') as f:
        f.write(PASSWORD + '\n')
    conf = os.path.join(conf_dir, 'profd.conf')
    with open(conf, 'w') as f:
        f.write('[fleet]\npyroscope_app = %s\npyroscope_tenant = %s\npyroscope_user = %s\n'
                'pyroscope_password_file = %s\n' % (APP, TENANT, USER, pw))
    args = ['--config', conf, '--pyroscope-url', 'http://127.0.0.1:%d/' % listener.port,
            '--fleet-interval', '2', '--host-name', 'test-host']
    # First without Pyroscope: a session that must never be pushed.
    with Profd(['--fleet-interval', '2']) as d:
        early = d.spawn(binary('SPIN_THREADS'), '--seconds', '30', '--weights', '1')
        wait_for_threads(early.pid, 2)
        resp = d.request({'v': 1, 'cmd': 'attach', 'pid': early.pid, 'freq_hz': 397,
                          'label': LABEL_BEFORE})
        check(resp.get('ok'), 'attach failed: %r' % resp)
        sid_before = resp['session']
        time.sleep(2)
        d.json('detach', sid_before)
        early.kill()
        d.stop()
        d.extra_args = args
        d.start()
        run_pushes(go, listener, d, sid_before)
    os.unlink(pw)
    os.unlink(conf)
    os.rmdir(conf_dir)


def pushes_of(listener, label):
    """(query, body) of the accepted pushes whose name has label=@label."""
    with listener.lock:
        acc = list(listener.accepted)
    return [(q, b) for _, q, _, b in acc if parse_name(q['name'][0])[1].get('label') == label]


def run_pushes(go, listener, d, sid_before):
    spin = d.spawn(binary('SPIN_THREADS'), '--seconds', '45', '--weights', '1,2,3')
    wait_for_threads(spin.pid, 4)
    # profctl attach has no --label (snapshot has): the request takes one.
    resp = d.request({'v': 1, 'cmd': 'attach', 'pid': spin.pid, 'freq_hz': 397, 'label': LABEL})
    check(resp.get('ok'), 'attach failed: %r' % resp)
    sid = resp['session']

    # Pushes arrive while the session runs.
    wait_for('two pushes', lambda: len(listener.accepted) >= 2, 20)
    path, q, headers, body = listener.accepted[0]
    print('first push: %s' % path)
    check(path.startswith('/ingest?'), 'pushed to %r, not /ingest (trailing / of the URL)' % path)
    check(q.get('format') == ['pprof'], 'format %r' % q.get('format'))
    check(q.get('spyName') == ['profd'], 'spyName %r' % q.get('spyName'))
    check(q.get('sampleRate') == ['397'], 'sampleRate %r' % q.get('sampleRate'))
    app, labels = parse_name(q['name'][0])
    check(app == APP, 'app %r, configured %r' % (app, APP))
    check(labels.get('host') == 'test-host', 'host label %r' % labels.get('host'))
    check(labels.get('comm') == 'spin-threads', 'comm label %r' % labels.get('comm'))
    check(labels.get('label') == 'nightly_run_1_', 'label %r: separators not escaped' % labels.get('label'))
    for _, q2, _, _ in listener.accepted:
        check(int(q2['from'][0]) < int(q2['until'][0]), 'from %s not before until %s' % (q2['from'], q2['until']))
    check(headers.get('X-Scope-OrgID') == TENANT, 'X-Scope-OrgID %r' % headers.get('X-Scope-OrgID'))
    expect_auth = 'Basic ' + base64.b64encode(('%s:%s' % (USER, PASSWORD)).encode()).decode()
    check(headers.get('Authorization') == expect_auth, 'Authorization %r' % headers.get('Authorization'))

    # A server that fails: one log line per kind of failure, sampling goes on.
    before = d.json('session', sid)['session']['samples']
    for mode, text in (('500', 'HTTP 500: ingest failed: test error'),
                       ('garbage', 'not an HTTP answer'), ('slow', 'too slow')):
        n_log = d.logtext().count('Pyroscope at')
        listener.set(mode)
        wait_for('a push answered %s' % mode, lambda: listener.count(mode) >= 1, 15)
        wait_for('profd to log the %s failure' % mode,
                 lambda: d.logtext().count('Pyroscope at') > n_log, 20)
        line = d.logtext().splitlines()
        line = [l for l in line if 'Pyroscope at' in l][-1]
        print('%s: %s' % (mode, line))
        check('retrying' in line, 'no retry said in %r' % line)
        check(text in line, 'expected %r in %r' % (text, line))
        if mode == '500':
            # Retries back off: not one log line each.
            wait_for('a retry', lambda: listener.count(mode) >= 3, 15)
            check(d.logtext().count(text) == 1, '%r logged %d times, not once' % (text, d.logtext().count(text)))
    listener.set('ok')
    during = d.json('session', sid)['session']['samples']
    check(during > before + 397, 'session sampled %d samples while Pyroscope failed' % (during - before))
    wait_for('profd to push again', lambda: 'pushing again' in d.logtext(), 30)

    spin.wait(timeout=60)
    s = d.wait_ended(sid)
    # The last piece follows the session's end at once, not at the next round only.
    wait_for('the last piece', lambda: any(
        int(q['until'][0]) >= s['ended_at_ns'] // 10**9 for _, q, _, _ in listener.accepted), 15)
    time.sleep(3)  # a piece pushed twice would come now
    bodies = [b for _, _, _, b in listener.accepted]
    pushed = 0
    for _, q, _, b in listener.accepted:
        n, t, dur = pprof_read(b)
        pushed += n
        # The profile's own time span is the piece's, as from/until say.
        check(t // 10**9 == int(q['from'][0]) and abs((t + dur) / 1e9 - int(q['until'][0])) <= 1,
              'pprof time %.3f + %.3f s, pushed as from %s until %s' % (t / 1e9, dur / 1e9, q['from'][0], q['until'][0]))
    top = d.json('top', sid, '--limit', '1')
    print('%d pushes, %d samples; session %d samples' % (len(bodies), pushed, top['total_samples']))
    check(pushed == top['total_samples'],
          'pushes hold %d samples, the session %d' % (pushed, top['total_samples']))

    # go tool pprof reads the bodies (merged) and finds the hottest function.
    files = []
    for i, b in enumerate(bodies):
        files.append(os.path.join(d.dir, 'push-%d.pb.gz' % i))
        with open(files[-1], 'wb') as f:
            f.write(b)
    _, first = go_pprof_top(go, d.dir, files, show=1200)
    check(first == top['functions'][0]['function'],
          'pprof top function %r, profctl top %r' % (first, top['functions'][0]['function']))

    # profctl session: the pushes, their samples and the failures, from fleet_cursors.
    fleet = d.json('session', sid)['session']['fleet']
    print('session %d fleet: %r' % (sid, fleet))
    py = fleet['pyroscope']
    check(py is not None, 'no pyroscope cursor for session %d' % sid)
    check(py['done'] and py['chunks'] == len(bodies) and py['rows'] == pushed,
          'pyroscope cursor %r, %d pushes of %d samples accepted' % (py, len(bodies), pushed))
    check(py['failures'] >= 5 and py['last_error'] is None, 'failures/last_error %r' % py)
    # Stored before Pyroscope was configured: done, nothing pushed, and no push names it.
    py = d.json('session', sid_before)['session']['fleet']['pyroscope']
    check(py is not None and py['done'] and py['chunks'] == 0,
          'session stored before Pyroscope: cursor %r' % py)
    check(not pushes_of(listener, LABEL_BEFORE), 'a session stored before Pyroscope was pushed')
    _, text, _ = d.ctl('session', sid)
    line = [l for l in text.splitlines() if l.startswith('pyroscope:')]
    print(line)
    check(line and ('%d pieces, %d samples' % (len(bodies), pushed)) in line[0] and '(done)' in line[0],
          'profctl session shows %r' % line)

    run_restart(listener, d)


def run_restart(listener, d):
    """profd stopped while the listener answers 500; started again with it
    answering 200: the rest of the session arrives, each sample once."""
    spin = d.spawn(binary('SPIN_THREADS'), '--seconds', '40', '--weights', '1,1')
    wait_for_threads(spin.pid, 3)
    resp = d.request({'v': 1, 'cmd': 'attach', 'pid': spin.pid, 'freq_hz': 397, 'label': LABEL_RESTART})
    check(resp.get('ok'), 'attach failed: %r' % resp)
    sid = resp['session']
    wait_for('a push of the second session', lambda: pushes_of(listener, LABEL_RESTART), 20)
    listener.set('500')
    n500 = listener.count('500')
    wait_for('a push answered 500', lambda: listener.count('500') > n500, 15)
    time.sleep(2)  # samples that only a later push can carry
    d.stop()
    before = pushes_of(listener, LABEL_RESTART)
    pushed_before = sum(pprof_read(b)[0] for _, b in before)
    db = sqlite3.connect('file:%s?mode=ro' % d.db, uri=True)
    try:
        state, reason = db.execute('SELECT state, end_reason FROM sessions WHERE id = ?', (sid,)).fetchone()
        stored = db.execute('SELECT coalesce(sum(count), 0) FROM samples WHERE session_id = ?', (sid,)).fetchone()[0]
        cur = db.execute("SELECT shipped_until_ns, chunks, rows, failures, last_error, done FROM fleet_cursors "
                         "WHERE session_id = ? AND sink = 'pyroscope'", (sid,)).fetchone()
    finally:
        db.close()
    print('stopped: session %s %s, %d samples stored, %d pushed; cursor %r' % (state, reason, stored, pushed_before, cur))
    check(reason == 'daemon_stopped', 'session ended %r, not daemon_stopped' % reason)
    check(cur is not None and cur[5] == 0 and cur[3] >= 1 and (cur[4] or '').startswith('HTTP 500'),
          'cursor at stop %r: not failing, or done' % (cur,))
    check(cur[1] == len(before) and cur[2] == pushed_before,
          'cursor at stop %r, %d pushes of %d samples accepted' % (cur, len(before), pushed_before))
    check(stored > pushed_before + 397, 'only %d samples left to push (%d stored)' % (stored - pushed_before, stored))
    check('not fully pushed at stop' in d.logtext(), 'no log line about the unpushed session')

    listener.set('ok')
    d.start()
    wait_for('the rest of the session after the restart',
             lambda: (d.json('session', sid)['session']['fleet']['pyroscope'] or {}).get('done'), 20)
    time.sleep(3)  # a piece pushed twice would come now
    after = pushes_of(listener, LABEL_RESTART)
    pushed = sum(pprof_read(b)[0] for _, b in after)
    total = d.json('top', sid, '--limit', '1')['total_samples']
    py = d.json('session', sid)['session']['fleet']['pyroscope']
    print('restart: %d pushes before, %d after; %d samples pushed, session %d; cursor %r'
          % (len(before), len(after) - len(before), pushed, total, py))
    check(len(after) > len(before), 'nothing pushed after the restart')
    check(pushed == total, 'pushes hold %d samples, the session %d' % (pushed, total))
    check(py['chunks'] == len(after) and py['rows'] == pushed and py['last_error'] is None,
          'pyroscope cursor %r, %d pushes of %d samples accepted' % (py, len(after), pushed))
    # The last piece ends at the session's end.
    s = d.json('session', sid)['session']
    check(max(int(q['until'][0]) for q, _ in after) >= s['ended_at_ns'] // 10**9,
          'no push reaches the session end')


run(test)
