"""Two real profds ship spin-threads sessions to one real ClickHouse
(docs/fleet.md): every sample arrives exactly once per host, even when the
server is down for a while mid-session and when the answer to an INSERT is
lost after the server stored it; the hot function tops a query over both
hosts. Then servers that refuse, fail, answer garbage, hang or reject the
password: each is a clear log line and a count in profctl session, local
profiling goes on, and profd stops promptly."""
import http.server
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from clickhousetest import ClickHouse, free_port, server_binary  # noqa: E402
from profdtest import Failure, Profd, binary, check, require_root_bpf, run, wait_for_threads  # noqa: E402


class CutProxy:
    """TCP proxy to @port that, once armed, forwards the next INSERT into
    samples and closes the client's connection instead of relaying the
    server's answer: the server stored the rows, the client never knows."""

    def __init__(self, port, tls=None):
        """@tls: (certificate file, key file): the proxy speaks https to its clients
        (Debian's ClickHouse 18.16 is built without TLS)."""
        self.port, self.armed, self.cuts = port, False, 0
        self.tls = None
        if tls:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*tls)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(16)
        self.url = '%s://127.0.0.1:%d' % ('https' if tls else 'http', self.sock.getsockname()[1])
        self.refused_handshakes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.tls:
                try:
                    c = self.tls.wrap_socket(c, server_side=True)
                except (ssl.SSLError, OSError):
                    self.refused_handshakes += 1  # the client did not trust the certificate
                    c.close()
                    continue
            try:
                s = socket.create_connection(('127.0.0.1', self.port))
            except OSError:
                c.close()
                continue
            state = {'cut': False}
            threading.Thread(target=self._relay, args=(c, s, lambda d: self._up(d, state)),
                             daemon=True).start()
            threading.Thread(target=self._relay, args=(s, c, lambda d: self._down(state)),
                             daemon=True).start()

    @staticmethod
    def _relay(src, dst, forward):
        """Copies @src to @dst while forward(data) is true, then shuts both down."""
        try:
            while True:
                data = src.recv(65536)
                if not data or not forward(data):
                    break
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
                x.close()
            except OSError:
                pass

    def _up(self, data, state):
        """Client to server: the armed INSERT into samples goes through, its answer is cut."""
        if self.armed and b'INSERT%20INTO%20samples' in data:
            self.armed = False
            state['cut'] = True
        return True

    def _down(self, state):
        """Server to client: nothing more once the answer is cut."""
        if state['cut']:
            self.cuts += 1
            return False
        return True


def fleet_of(d, sid):
    return d.json('session', sid)['session']['fleet']['clickhouse']


def wait_shipped(d, sid, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        c = fleet_of(d, sid)
        if c and c['done']:
            return c
        time.sleep(0.5)
    raise Failure('session %s not shipped whole within %d s: %r\n%s'
                         % (sid, timeout, fleet_of(d, sid), d.logtext()[-3000:]))


def chunk_table(ch, d, host, sid):
    """Samples per shipped chunk, in ClickHouse and in the local windows of its span."""
    import sqlite3
    chunks = [(int(c), int(n)) for c, n in ch.rows(
        "SELECT chunk_ns, sum(count) FROM samples WHERE host = '%s' AND session_id = %d "
        "GROUP BY chunk_ns ORDER BY chunk_ns" % (host, sid))]
    db = sqlite3.connect('file:%s?mode=ro' % d.db, uri=True)
    out = []
    for i, (c, n) in enumerate(chunks):
        hi = chunks[i + 1][0] if i + 1 < len(chunks) else 1 << 62
        lo = 0 if i == 0 else c
        local = db.execute('SELECT coalesce(sum(count), 0) FROM samples WHERE session_id = ? AND '
                           'window_ns >= ? AND window_ns < ?', (sid, lo, hi)).fetchone()[0]
        out.append('chunk %d: %d in ClickHouse, %d local' % (c, n, local))
    return '\n'.join(out)


def attach_spin(d, seconds, weights='1,2'):
    w = d.spawn(binary('SPIN_THREADS'), '--seconds', str(seconds), '--weights', weights)
    wait_for_threads(w.pid, len(weights.split(',')) + 1)
    return w, d.json('attach', w.pid, '--freq', '199')['session']


def ship_two_hosts():
    with ClickHouse() as ch:
        proxy = CutProxy(ch.http_port)
        proxy.armed = True
        common = ['--fleet-interval', '2', '--log-level', 'debug']
        with Profd(common + ['--host-name', 'host-a', '--clickhouse-url', proxy.url]) as a, \
                Profd(common + ['--host-name', 'host-b', '--clickhouse-url', ch.url]) as b:
            wa, sa = attach_spin(a, 16)
            wb, sb = attach_spin(b, 8)
            # Running sessions ship while they run.
            deadline = time.time() + 15
            while time.time() < deadline and not (fleet_of(a, sa) or {}).get('chunks'):
                time.sleep(0.5)
            check((fleet_of(a, sa) or {}).get('chunks', 0) > 0,
                  'session %d shipped no chunk while it ran: %r' % (sa, fleet_of(a, sa)))
            # The server goes away mid-session, and comes back.
            ch.kill()
            down = None
            deadline = time.time() + 12
            while time.time() < deadline:
                c = fleet_of(a, sa)
                if c['failures'] > 0 and c['last_error']:
                    down = c
                    break
                time.sleep(0.5)
            check(down is not None, 'no failure counted while ClickHouse was down: %r' % fleet_of(a, sa))
            print('while down:', down)
            # Through the proxy the server's death reads as a lost connection.
            check(down['last_error'].startswith('ClickHouse at ') and
                  ('connection lost' in down['last_error'] or 'connection refused' in down['last_error']),
                  'last_error does not say why: %r' % down['last_error'])
            _, out, _ = a.ctl('session', sa)
            check('last error:' in out and 'failures' in out, 'profctl session does not show the failure:\n' + out)
            time.sleep(2)
            ch.start()
            wa.wait(timeout=60)
            wb.wait(timeout=60)
            a.wait_ended(sa)
            b.wait_ended(sb)
            ca, cb = wait_shipped(a, sa), wait_shipped(b, sb)
            print('shipped:', ca, cb)
            check(ca['last_error'] is None, 'last_error stays after a success: %r' % ca)
            check(proxy.cuts == 1, 'the proxy cut %d answers, expected 1' % proxy.cuts)
            check('already in ClickHouse' in a.logtext(),
                  'profd did not notice the INSERT whose answer was lost:\n' + a.logtext()[-3000:])

            locals_ = {}
            for host, d, sid in (('host-a', a, sa), ('host-b', b, sb)):
                local = d.json('top', sid, '--limit', '1')['total_samples']
                locals_[host] = (local, d.json('top', sid, '--limit', '1')['functions'][0]['function'])
                remote = int(ch.value("SELECT sum(count) FROM samples WHERE host = '%s' AND "
                                      "session_id = %d AND event = 'cpu'" % (host, sid)) or 0)
                print('%s: %d samples locally, %d in ClickHouse' % (host, local, remote))
                check(local > 100, '%s: only %d samples' % (host, local))
                if remote != local:
                    print(chunk_table(ch, d, host, sid))
                    print(ch.logtext())
                check(remote == local, '%s: ClickHouse has %d samples, the session %d' % (host, remote, local))
                row = ch.rows("SELECT state, samples FROM sessions FINAL WHERE host = '%s' AND "
                              "session_id = %d" % (host, sid))
                check(len(row) == 1 and row[0][0] == 'ended', '%s: sessions row %r' % (host, row))
            missing = int(ch.value('SELECT count() FROM samples WHERE stack_hash NOT IN '
                                   '(SELECT stack_hash FROM stacks)'))
            check(missing == 0, '%d sample rows name a stack ClickHouse does not have' % missing)
            top = ch.rows("SELECT functions[1] AS f, sum(count) AS n, uniqExact(host) FROM samples "
                          "ANY INNER JOIN (SELECT DISTINCT stack_hash, functions FROM stacks) "
                          "USING stack_hash WHERE event = 'cpu' GROUP BY f ORDER BY n DESC LIMIT 3")
            print('fleet top:', top)
            check(top and top[0][0] == 'hot_function' and top[0][2] == '2',
                  'hot_function does not top the fleet: %r' % top)
            # What a user asks: profctl fleet top over both hosts sums the two sessions,
            # and its hottest function is each host's own.
            _, out, _ = a.ctl('fleet', 'top', '--clickhouse-url', ch.url, '--since', '1h', '--json')
            fleet = json.loads(out)
            print('profctl fleet top: %d samples, %d hosts, %d sessions, first %s' % (
                fleet['total_samples'], fleet['hosts'], fleet['sessions'], fleet['functions'][0]['function']))
            check(fleet['total_samples'] == sum(n for n, _ in locals_.values()),
                  'fleet top has %d samples, the two sessions %r' % (fleet['total_samples'], locals_))
            check(fleet['hosts'] == 2 and fleet['sessions'] == 2, 'fleet top counts %d hosts, %d sessions' % (
                fleet['hosts'], fleet['sessions']))
            check(all(f == fleet['functions'][0]['function'] for _, f in locals_.values()),
                  'fleet top first %r, the hosts\' own %r' % (fleet['functions'][0]['function'], locals_))
            t0 = time.time()
            check(a.stop() == 0, 'profd exited %s' % a.proc.returncode)
            print('profd stopped in %.1f s' % (time.time() - t0))


class BadServer(http.server.BaseHTTPRequestHandler):
    """HTTP 500, or 200 with garbage, or an answer after 40 s."""
    mode = '500'

    def do_POST(self):
        self.rfile.read(int(self.headers.get('Content-Length') or 0))
        if self.mode == 'slow':
            time.sleep(40)
        if self.mode == '500':
            body = b'Code: 999, e.displayText() = boom from the test\n'
            self.send_response(500)
        else:
            body = b'<html>hello, I am not ClickHouse</html>\n'
            self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def bad_server(mode):
    cls = type('Bad' + mode, (BadServer,), {'mode': mode})
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), cls)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, 'http://127.0.0.1:%d' % srv.server_address[1]


def bad_input():
    srv500, url500 = bad_server('500')
    srvgarbage, urlgarbage = bad_server('garbage')
    srvslow, urlslow = bad_server('slow')
    pwfile = tempfile.NamedTemporaryFile('w', suffix='.pw', delete=False)
    pwfile.write('wrong-password\n')
    pwfile.close()
    with ClickHouse(password='right-password') as ch:
        conf = tempfile.NamedTemporaryFile('w', suffix='.conf', delete=False)
        conf.write('[fleet]\nclickhouse_url = %s\nclickhouse_password_file = %s\n' % (ch.url, pwfile.name))
        conf.close()
        cases = [
            ('refused', ['--clickhouse-url', 'http://127.0.0.1:%d' % free_port()], 'connection refused'),
            ('500', ['--clickhouse-url', url500], 'HTTP 500: Code: 999'),
            ('garbage', ['--clickhouse-url', urlgarbage], 'unexpected answer'),
            ('slow', ['--clickhouse-url', urlslow], 'no answer in time'),
            ('auth', ['--config', conf.name], 'authentication failed'),
        ]
        ds, sessions = [], []
        try:
            for name, args, _ in cases:
                d = Profd(['--fleet-interval', '2'] + args)
                d.start()
                ds.append(d)
            for d in ds:
                w, sid = attach_spin(d, 4, '1')
                sessions.append((w, sid))
            for d, (w, sid) in zip(ds, sessions):
                w.wait(timeout=30)
                d.wait_ended(sid)
            # The slow server makes its request fail at curl's 30 s limit.
            deadline = time.time() + 45
            for (name, _, expect), d, (_, sid) in zip(cases, ds, sessions):
                while True:
                    s = d.json('session', sid)['session']
                    c = s['fleet']['clickhouse']
                    if (c and c['failures'] > 0) or time.time() > deadline:
                        break
                    time.sleep(0.5)
                print('%s: %d samples; fleet %r' % (name, s['samples'], c))
                check(s['samples'] > 50, '%s: local profiling stopped: %d samples' % (name, s['samples']))
                check(c and c['failures'] > 0 and expect in (c['last_error'] or ''),
                      '%s: expected a failure with %r, got %r' % (name, expect, c))
                check(not c['done'], '%s: counted as shipped' % name)
                log = d.logtext()
                check(expect in log, '%s: no log line saying %r:\n%s' % (name, expect, log[-2000:]))
                check(log.count(expect) <= 3, '%s: the error is logged at every retry (%d times)'
                      % (name, log.count(expect)))
            for (name, _, _), d in zip(cases, ds):
                t0 = time.time()
                d.proc.send_signal(signal.SIGTERM)
                d.proc.wait(timeout=20)
                took = time.time() - t0
                print('%s: profd stopped in %.1f s' % (name, took))
                check(took < 5, '%s: profd took %.1f s to stop' % (name, took))
        finally:
            for d in ds:
                d.__exit__(None, None, None)
            for srv in (srv500, srvgarbage, srvslow):
                srv.shutdown()
            os.unlink(conf.name)
            os.unlink(pwfile.name)


def ship_over_https():
    """https:// with a certificate the system does not trust: refused, and said,
    until ca_file names it; then every sample arrives."""
    with ClickHouse() as ch, tempfile.TemporaryDirectory(prefix='fleet-tls-') as tmp:
        cert, key = os.path.join(tmp, 'cert.pem'), os.path.join(tmp, 'key.pem')
        subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
                        '-keyout', key, '-out', cert, '-subj', '/CN=127.0.0.1',
                        '-addext', 'subjectAltName=IP:127.0.0.1'], check=True, capture_output=True)
        proxy = CutProxy(ch.http_port, tls=(cert, key))
        conf = os.path.join(tmp, 'profd.conf')
        with open(conf, 'w') as f:
            f.write('[fleet]\nclickhouse_url = %s\nca_file = %s\nfleet_interval_s = 2\n' % (proxy.url, cert))
        # Without ca_file: the certificate is refused, and profctl session says why.
        with Profd(['--clickhouse-url', proxy.url, '--fleet-interval', '2', '--host-name', 'tls']) as d:
            w, sid = attach_spin(d, 4)
            w.wait(timeout=30)
            d.wait_ended(sid)
            deadline = time.time() + 20
            while time.time() < deadline and not (fleet_of(d, sid) or {}).get('last_error'):
                time.sleep(0.5)
            c = fleet_of(d, sid) or {}
            print('https without ca_file:', c.get('last_error'))
            check('certificate' in (c.get('last_error') or '').lower() and not c.get('done'),
                  'an untrusted certificate was not refused, or not said: %r' % c)
        # With it: shipped over TLS, each sample once.
        with Profd(['--config', conf, '--host-name', 'tls']) as d:
            w, sid = attach_spin(d, 4)
            w.wait(timeout=30)
            d.wait_ended(sid)
            c = wait_shipped(d, sid)
            local = d.json('top', sid, '--limit', '1')['total_samples']
            remote = int(ch.value("SELECT sum(count) FROM samples WHERE host = 'tls' AND session_id = %d "
                                  "AND event = 'cpu'" % sid) or 0)
            print('https with ca_file: %d samples locally, %d in ClickHouse; %d handshakes refused before'
                  % (local, remote, proxy.refused_handshakes))
            check(local > 50 and remote == local, 'over https: ClickHouse has %d samples, the session %d' % (
                remote, local))
            # profctl fleet over https too, trusting the same file.
            _, out, _ = d.ctl('fleet', 'top', '--clickhouse-url', proxy.url, '--ca-file', cert, '--json')
            check(json.loads(out)['total_samples'] >= local, 'profctl fleet top over https: %s' % out[:200])
            rc, _, err = d.ctl('fleet', 'top', '--clickhouse-url', proxy.url, check_rc=False)
            check(rc == 1 and 'certificate' in err.lower(), 'profctl fleet without the CA: rc %d, %r' % (rc, err))


def test():
    require_root_bpf()
    server_binary()
    t0 = time.time()
    ship_two_hosts()
    print('two hosts: %.0f s' % (time.time() - t0))
    t0 = time.time()
    bad_input()
    print('bad input: %.0f s' % (time.time() - t0))
    t0 = time.time()
    ship_over_https()
    print('https: %.0f s' % (time.time() - t0))


if __name__ == '__main__':
    run(test)
