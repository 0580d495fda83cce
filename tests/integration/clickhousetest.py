"""clickhousetest.py - a real ClickHouse server (Debian's clickhouse-server
18.16) on loopback ports and a temporary directory, for the fleet tests
(test-fleet-ship, test-fleet-cli).

ClickHouse(password=None) copies /etc/clickhouse-server/{config,users}.xml,
points their paths at the temporary directory and their ports at free
loopback ports, starts the server and waits for /ping. query() runs SQL over
the HTTP interface. stop() sends SIGTERM (the server then finishes what it serves, seconds),
kill() SIGKILL; start() again on the same directory brings it back with its
data; pause()/resume() SIGSTOP/SIGCONT. Besides `default` (with
@password, if given), users.xml has TEST_USER with TEST_PASSWORD, for the
tests of credentials.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from profdtest import skip, Failure

# Debian installs the server in /usr/sbin; the upstream packages in /usr/bin.
SERVER_PATHS = ('/usr/bin/clickhouse-server', '/usr/sbin/clickhouse-server')

# A user with a password, for the tests of credentials.
TEST_USER, TEST_PASSWORD = 'profd_test', 'fleet-secret'


def server_binary():
    """The clickhouse-server program, or skip the test (exit 77)."""
    for p in SERVER_PATHS:
        if os.access(p, os.X_OK):
            return p
    skip('clickhouse-server is not installed (Debian package clickhouse-server)')


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ClickHouse:
    """A clickhouse-server of its own; a context manager that stops it."""

    def __init__(self, password=None, user='default'):
        self.binary = server_binary()
        self.dir = tempfile.mkdtemp(prefix='profd-ch-')
        self.http_port, self.tcp_port, self.inter_port = free_port(), free_port(), free_port()
        self.user, self.password = user, password
        self.proc = None
        self.log = None
        self._write_config()

    @property
    def url(self):
        return 'http://127.0.0.1:%d' % self.http_port

    def _write_config(self):
        with open('/etc/clickhouse-server/config.xml') as f:
            cfg = f.read()
        cfg = cfg.replace('/var/log/clickhouse-server/', self.dir + '/log/')
        cfg = cfg.replace('/var/lib/clickhouse/', self.dir + '/data/')
        cfg = re.sub(r'<http_port>\d+</http_port>', '<http_port>%d</http_port>' % self.http_port, cfg)
        cfg = re.sub(r'<tcp_port>\d+</tcp_port>', '<tcp_port>%d</tcp_port>' % self.tcp_port, cfg)
        cfg = re.sub(r'<interserver_http_port>\d+</interserver_http_port>',
                     '<interserver_http_port>%d</interserver_http_port>' % self.inter_port, cfg)
        cfg = re.sub(r'\s*<https_port>\d+</https_port>', '', cfg)
        cfg = re.sub(r'\s*<tcp_port_secure>\d+</tcp_port_secure>', '', cfg)
        cfg = cfg.replace('<listen_host>::1</listen_host>', '')
        with open(os.path.join(self.dir, 'config.xml'), 'w') as f:
            f.write(cfg)
        with open('/etc/clickhouse-server/users.xml') as f:
            users = f.read()
        if self.password is not None:
            users = users.replace('<password></password>',
                                  '<password>%s</password>' % self.password, 1)
        users = users.replace('</users>', '<%s><password>%s</password><networks><ip>::/0</ip></networks>'
                              '<profile>default</profile><quota>default</quota></%s></users>'
                              % (TEST_USER, TEST_PASSWORD, TEST_USER), 1)
        with open(os.path.join(self.dir, 'users.xml'), 'w') as f:
            f.write(users)
        for d in ('log', 'data'):
            os.makedirs(os.path.join(self.dir, d), exist_ok=True)

    def start(self, timeout=60):
        self.log = open(os.path.join(self.dir, 'stdout.log'), 'a')
        self.proc = subprocess.Popen([self.binary, '--config-file=' + os.path.join(self.dir, 'config.xml')],
                                     cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failure('clickhouse-server exited with %d:\n%s' % (self.proc.returncode, self.logtext()))
            try:
                with urllib.request.urlopen(self.url + '/ping', timeout=2) as r:
                    if r.read().strip() == b'Ok.':
                        return self
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.2)
        raise Failure('clickhouse-server did not answer /ping within %d s:\n%s' % (timeout, self.logtext()))

    def logtext(self):
        text = ''
        for name in ('stdout.log', 'log/clickhouse-server.err.log'):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    text += f.read()[-3000:]
            except OSError:
                pass
        return text

    def query(self, sql, database=None, timeout=30, body=None, user=None, password=None):
        """Run @sql; return its output (TabSeparated unless the query says FORMAT).
        With @body (bytes or str), @sql goes in the URL and @body is its data.
        As @user with @password, or the server's own user."""
        params = {'database': database} if database else {}
        if body is None:
            data = sql.encode()
        else:
            params['query'] = sql
            data = body.encode() if isinstance(body, str) else body
        url = self.url + '/' + ('?' + urllib.parse.urlencode(params) if params else '')
        req = urllib.request.Request(url, data=data, method='POST')
        req.add_header('X-ClickHouse-User', user or self.user)
        if (password if user else self.password) is not None:
            req.add_header('X-ClickHouse-Key', password if user else self.password)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise Failure('ClickHouse: %s\n%s' % (e, e.read().decode(errors='replace')[:2000]))

    def rows(self, sql, database='profd'):
        """@sql's rows, each a list of strings (TabSeparated)."""
        out = self.query(sql, database=database)
        return [line.split('\t') for line in out.splitlines() if line]

    def value(self, sql, database='profd'):
        rows = self.rows(sql, database)
        return rows[0][0] if rows else None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        """Take the server down at once (SIGKILL), as a crash or a lost host would."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            print('--- clickhouse log ---\n' + self.logtext())
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False
