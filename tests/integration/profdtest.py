"""profdtest.py - start a real profd on a temporary socket and database, run
profctl against it, run workloads; shared by the integration tests.

Exit codes follow meson: 0 pass, 1 fail, 77 skip, 99 setup error.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP, ERROR = 77, 99


def skip(reason):
    print('SKIP: ' + reason)
    sys.exit(SKIP)


def require_tool(name, package):
    """The path of program @name, or skip the test saying which Debian @package has it."""
    path = shutil.which(name)
    if not path:
        skip('%s is not installed (Debian package %s)' % (name, package))
    return path


def require_root_bpf():
    if os.geteuid() != 0:
        skip('needs root (CAP_BPF and CAP_PERFMON) to load BPF programs')
    if not os.path.exists('/sys/kernel/btf/vmlinux'):
        skip('kernel has no BTF (/sys/kernel/btf/vmlinux): CO-RE BPF cannot load')


def binary(name):
    path = os.environ.get(name)
    if not path or not os.path.exists(path):
        print('setup error: $%s is not set to a built binary (run through meson test)' % name)
        sys.exit(ERROR)
    return path


def as_user(user):
    """Command prefix that runs a program as @user (name), with its groups; [] for None."""
    if user is None:
        return []
    return ['setpriv', '--reuid', user, '--regid', user, '--init-groups', '--']


class Failure(Exception):
    pass


def check(cond, message):
    """Fail the test with @message unless @cond."""
    if not cond:
        raise Failure(message)


class Profd:
    """A profd on a temporary socket and database, stopped on exit."""

    def __init__(self, extra_args=(), env=None, db=None):
        self.dir = tempfile.mkdtemp(prefix='profd-test-')
        self.socket = os.path.join(self.dir, 'profd.sock')
        self.db = db or os.path.join(self.dir, 'profd.db')
        self.log = open(os.path.join(self.dir, 'profd.log'), 'w+')
        self.profd = binary('PROFD')
        self.profctl = binary('PROFCTL')
        self.extra_args = list(extra_args)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.children = []

    def __enter__(self):
        self.start()
        return self

    def start(self):
        self.proc = subprocess.Popen(
            # --config /dev/null: an installed profd.conf must not change what tests see.
            [self.profd, '--config', '/dev/null', '--db', self.db, '--socket', self.socket,
             '--foreground'] + self.extra_args,
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise Failure('profd exited with %d at start:\n%s' % (self.proc.returncode, self.logtext()))
            if os.path.exists(self.socket) and self.ctl('ping', check_rc=False)[0] == 0:
                return
            time.sleep(0.1)
        raise Failure('profd did not answer ping within 20 s:\n' + self.logtext())

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None

    def request(self, obj, sock=None):
        """Send one raw protocol request (a dict) and return the parsed response."""
        import socket as socketmod
        s = sock or socketmod.socket(socketmod.AF_UNIX, socketmod.SOCK_STREAM)
        try:
            if sock is None:
                s.settimeout(60)
                s.connect(self.socket)
            s.sendall((json.dumps(obj) + '\n').encode())
            buf = b''
            while not buf.endswith(b'\n'):
                chunk = s.recv(65536)
                if not chunk:
                    raise Failure('profd closed the connection without answering %r' % obj)
                buf += chunk
            return json.loads(buf)
        finally:
            if sock is None:
                s.close()

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def __exit__(self, exc_type, exc, tb):
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        self.stop()
        if exc_type is not None:
            print('--- profd log ---\n' + self.logtext())
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def ctl(self, *args, check_rc=True, timeout=60, user=None):
        """Run profctl with the test socket (as @user if given); return (rc, stdout, stderr)."""
        cmd = as_user(user) + [self.profctl, '--socket', self.socket] + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check_rc and p.returncode != 0:
            raise Failure('%s exited %d\nstdout: %s\nstderr: %s' % (' '.join(cmd), p.returncode, p.stdout, p.stderr))
        return p.returncode, p.stdout, p.stderr

    def json(self, *args, user=None):
        """Run profctl --json (as @user if given) and parse its one JSON document."""
        _, out, _ = self.ctl('--json', *args, user=user)
        try:
            return json.loads(out)
        except ValueError as e:
            raise Failure('profctl %s --json printed invalid JSON (%s):\n%s' % (' '.join(map(str, args)), e, out))

    def spawn(self, *argv, user=None, stdin=None):
        """Start a workload (as @user if given); it is killed when the test ends."""
        p = subprocess.Popen(as_user(user) + [str(a) for a in argv], stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        self.children.append(p)
        return p

    def spawn_env(self, env, *argv):
        """spawn() with @env added to the environment."""
        p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, **env))
        self.children.append(p)
        return p
    def spin(self, weights, seconds=60):
        """Start the spin-threads workload with @weights (a string, "1,2"),
        running its threads when this returns; killed when the test ends."""
        w = self.spawn(binary('SPIN_THREADS'), '--seconds', str(seconds), '--weights', weights)
        wait_for_threads(w.pid, len(weights.split(',')) + 1)
        return w

    def profile_run(self, argv, threads, freq=397):
        """Run workload @argv to its end in a session at @freq Hz, attached once it
        has @threads threads; return (session id, the workload's output)."""
        w = self.spawn(*argv)
        wait_for_threads(w.pid, threads)
        sid = self.json('attach', w.pid, '--freq', str(freq))['session']
        out, _ = w.communicate(timeout=60)
        self.wait_ended(sid)
        return sid, out

    def spawn_waiting(self, *argv):
        """Start a workload that prints 'ready' and waits for a line on stdin
        (see go()): the test attaches in between."""
        p = self.spawn(*argv, stdin=subprocess.PIPE)
        line = p.stdout.readline().strip()
        if line != 'ready':
            raise Failure('%s did not start: %r' % (argv[0], line))
        return p

    @staticmethod
    def go(p):
        """Let a spawn_waiting() workload run."""
        p.stdin.write('go\n')
        p.stdin.flush()

    def wait_ended(self, session, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.json('session', session)['session']
            if s['state'] == 'ended':
                return s
            time.sleep(0.25)
        raise Failure('session %s did not end within %d s' % (session, timeout))

    def user_self_share(self, session, function):
        """@function's self samples as a fraction (0..1) of the session's samples whose
        leaf frame is in user space. Kernel leaves are real CPU time, but how many there
        are depends on the machine (on this kind of VM the timer interrupt often lands in
        the hypervisor's pvm_irq_enable: 17-19% of a spinning workload's samples), so a
        claim about where user code spends its time is made among the user-space ones."""
        every = self.json('top', session, '--limit', '10000')['functions']
        kernel_pct = sum(f['self_pct'] for f in every if f['kind'] == 'kernel')
        mine = sum(f['self_pct'] for f in every if f['function'] == function)
        print('%s: %.1f%% of self samples; kernel leaves %.1f%%' % (function, mine, kernel_pct))
        return mine / max(100.0 - kernel_pct, 1e-9)


def check_leak_estimate(m, suspect):
    """The live bytes of leak suspect @suspect against the RSS growth in memory report @m, of a
    2 MiB/s leak attached for 8 s: within 35% (~100 samples give ~10% of sampling noise; pages
    and the timing of the readings the rest), and the verdict a leak."""
    live = suspect['live_bytes']
    grew = m['rss']['end_bytes'] - m['rss']['start_bytes']
    print('%s: live bytes estimated at %d (%d samples); RSS grew %d bytes'
          % (suspect['function'], live, suspect['samples'], grew))
    check(grew > 10 * 1024 * 1024, 'RSS grew only %d bytes in 8 s of a 2 MiB/s leak' % grew)
    check(0.65 * grew <= live <= 1.35 * grew,
          '%s live bytes estimated at %d, RSS grew %d' % (suspect['function'], live, grew))
    check(m['diagnosis']['verdict'] == 'leak', 'diagnosis: %r' % m['diagnosis'])


def build_id(path):
    """The GNU build ID of ELF file @path, in hex (readelf -n)."""
    import re
    out = subprocess.run(['readelf', '-n', path], capture_output=True, text=True).stdout
    m = re.search(r'Build ID: ([0-9a-f]+)', out)
    check(m, 'no build ID in %s' % path)
    return m.group(1)


def bpf_programs_of(pid, links_only=False):
    """Names of the BPF programs process @pid holds: the prog_id of its file
    descriptors (/proc/PID/fdinfo), named by bpftool. With @links_only, only
    the programs it holds a link to, that is attached (a link's fdinfo also
    shows link_type)."""
    return {p.get('name', '') for p in bpf_prog_infos(pid, links_only)}


def bpf_prog_infos(pid, links_only=False):
    """bpf_programs_of() as `bpftool --json prog show` gives each program: a list
    of dicts (name, and run_cnt and run_time_ns while kernel.bpf_stats_enabled is 1)."""
    ids = set()
    for fd in os.listdir('/proc/%d/fdinfo' % pid):
        try:
            with open('/proc/%d/fdinfo/%s' % (pid, fd)) as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if not links_only or any(l.startswith('link_type:') for l in lines):
            ids.update(int(l.split()[1]) for l in lines if l.startswith('prog_id:'))
    out = subprocess.run(['bpftool', '--json', 'prog', 'show'], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return [p for p in json.loads(out) if p.get('id') in ids]


def wait_for_threads(pid, count, timeout=10):
    """Wait until process @pid has at least @count threads (the workload started them)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if len(os.listdir('/proc/%d/task' % pid)) >= count:
                return
        except FileNotFoundError:
            raise Failure('workload %d exited early' % pid)
        time.sleep(0.05)
    raise Failure('workload %d did not start %d threads' % (pid, count))


def go_pprof_top(go, workdir, files, show=1500):
    """`go tool pprof -top` over the pprof @files (@go: require_tool()'s path; its caches
    go in @workdir): its output, of which it prints the first @show characters, and the
    function on top of its table. Fails the test if go fails or prints no table."""
    env = dict(os.environ, HOME=workdir, GOCACHE=os.path.join(workdir, 'gocache'),
               GOPATH=os.path.join(workdir, 'gopath'), GOFLAGS='-mod=mod', GOTOOLCHAIN='local')
    p = subprocess.run([go, 'tool', 'pprof', '-top', '-symbolize=none'] + list(files),
                       capture_output=True, text=True, env=env, timeout=300)
    print(p.stdout[:show])
    check(p.returncode == 0, 'go tool pprof failed (%d): %s' % (p.returncode, p.stderr))
    lines = p.stdout.splitlines()
    head = [i for i, l in enumerate(lines) if l.split()[:2] == ['flat', 'flat%']]
    check(head, 'no table in go tool pprof -top output')
    return p.stdout, lines[head[0] + 1].split()[-1]


def run(test):
    """Run @test(), turning Failure into exit 1 with its message."""
    try:
        test()
    except Failure as e:
        print('FAIL: %s' % e)
        sys.exit(1)
    print('PASS')
    sys.exit(0)
