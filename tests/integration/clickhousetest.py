"""clickhousetest.py - start a real ClickHouse server (Debian's 18.16) on
loopback ports in a temporary directory, for the fleet tests; run queries
on it over its HTTP interface.

    with ClickHouse() as ch:
        ch.query('CREATE DATABASE profd')
        ch.url  # http://127.0.0.1:PORT

Skips the test (exit 77) when clickhouse-server is not installed.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP, ERROR = 77, 99

# A user with a password, for the tests of credentials.
TEST_USER, TEST_PASSWORD = 'profd_test', 'fleet-secret'


def server_path():
    """Debian installs the server in /usr/sbin; the upstream packages in /usr/bin."""
    for p in (shutil.which('clickhouse-server'), '/usr/bin/clickhouse-server',
              '/usr/sbin/clickhouse-server'):
        if p and os.access(p, os.X_OK):
            return p
    print('SKIP: clickhouse-server is not installed (Debian package clickhouse-server)')
    sys.exit(SKIP)


def free_port():
    """A TCP port free on 127.0.0.1 right now (a race with other programs is possible)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class ClickHouse:
    """A clickhouse-server of our own, stopped (SIGTERM) and removed on exit."""

    def __init__(self, config_dir='/etc/clickhouse-server'):
        self.server = server_path()
        self.config_dir = config_dir
        self.dir = tempfile.mkdtemp(prefix='profd-clickhouse-')
        self.proc = None
        self.http_port = None
        self.url = None

    def _write_config(self):
        with open(os.path.join(self.config_dir, 'config.xml')) as f:
            config = f.read()
        config = config.replace('/var/log/clickhouse-server/', self.dir + '/log/')
        config = config.replace('/var/lib/clickhouse/', self.dir + '/data/')
        ports = {'http_port': free_port(), 'tcp_port': free_port(),
                 'interserver_http_port': free_port()}
        for tag, port in ports.items():
            config = re.sub(r'<%s>\d+</%s>' % (tag, tag), '<%s>%d</%s>' % (tag, port, tag), config)
        for tag in ('https_port', 'tcp_port_secure'):
            config = re.sub(r'\s*<%s>\d+</%s>' % (tag, tag), '', config)
        config = config.replace('<listen_host>::1</listen_host>', '')
        self.http_port = ports['http_port']
        self.url = 'http://127.0.0.1:%d' % self.http_port
        with open(os.path.join(self.dir, 'config.xml'), 'w') as f:
            f.write(config)
        with open(os.path.join(self.config_dir, 'users.xml')) as f:
            users = f.read()
        user = ('<%s><password>%s</password><networks><ip>::/0</ip></networks>'
                '<profile>default</profile><quota>default</quota></%s>'
                % (TEST_USER, TEST_PASSWORD, TEST_USER))
        users = users.replace('</users>', user + '</users>', 1)
        with open(os.path.join(self.dir, 'users.xml'), 'w') as f:
            f.write(users)

    def start(self, timeout=60):
        self._write_config()
        self.log = open(os.path.join(self.dir, 'stdout.log'), 'w+')
        self.proc = subprocess.Popen([self.server, '--config-file=' + os.path.join(self.dir, 'config.xml')],
                                     cwd=self.dir, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                print('setup error: clickhouse-server exited with %d:\n%s' %
                      (self.proc.returncode, self.logtext()[-3000:]))
                sys.exit(ERROR)
            try:
                with urllib.request.urlopen(self.url + '/ping', timeout=2) as r:
                    if r.read().strip() == b'Ok.':
                        return self
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.2)
        self.stop()
        print('setup error: clickhouse-server did not answer /ping within %d s' % timeout)
        sys.exit(ERROR)

    def logtext(self):
        self.log.flush()
        self.log.seek(0)
        text = self.log.read()
        err = os.path.join(self.dir, 'log', 'clickhouse-server.err.log')
        if os.path.exists(err):
            with open(err) as f:
                text += f.read()
        return text

    def query(self, sql, body=None, database=None, user=None, password=None):
        """@sql's answer as text; raises RuntimeError with ClickHouse's message on an error.
        With @body, @sql goes in the URL and @body (bytes or str) is the data."""
        params = {}
        if database:
            params['database'] = database
        if body is None:
            data = sql.encode()
        else:
            params['query'] = sql
            data = body.encode() if isinstance(body, str) else body
        url = self.url + '/' + ('?' + urllib.parse.urlencode(params) if params else '')
        req = urllib.request.Request(url, data=data, method='POST')
        if user:
            req.add_header('X-ClickHouse-User', user)
            req.add_header('X-ClickHouse-Key', password or '')
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError('ClickHouse: HTTP %d: %s' % (e.code, e.read().decode()[:500]))

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        if exc_type is None or os.environ.get('KEEP_CLICKHOUSE') is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print('ClickHouse directory kept: ' + self.dir)
