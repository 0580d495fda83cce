#!/usr/bin/env python3
"""Bad input gets a clear error and the daemon keeps answering: a PID that
does not exist, a kernel thread, a zombie (no session created), PID 0, a string, a 10 MiB request, invalid JSON, an unknown
command, an unknown session, a client that disconnects mid-line. Out of
file descriptors: a client that profd cannot take is told so (EMFILE), not
left waiting, and profd answers again once fds are free."""
import json
import os
import resource
import shutil
import socket
import subprocess
import time

from profdtest import Profd, check, require_root_bpf, run


def raw(sock_path, payload, read=True):
    """Send raw bytes on a new connection; return the parsed response line (or None)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(sock_path)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon may close after answering an oversized request
    if not read:
        s.close()
        return None
    buf = b''
    while not buf.endswith(b'\n'):
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf.decode()) if buf else None


def expect_error(resp, code, what):
    check(resp is not None, '%s: no response' % what)
    check(resp.get('ok') is False and resp.get('v') == 1, '%s: not an error: %r' % (what, resp))
    check(resp['error']['code'] == code, '%s: code %r, expected %s (%r)' % (what, resp['error']['code'], code, resp))
    check(resp['error']['message'], '%s: empty message' % what)


def out_of_fds(d):
    """profd's fd limit lowered to what it uses + 8, then 40 clients connect
    and wait: the ones it cannot take get an EMFILE answer at once."""
    pid = d.proc.pid
    used = len(os.listdir('/proc/%d/fd' % pid))
    limit = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (used + 8, limit[1]))
    held, told = [], []
    try:
        for _ in range(40):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.socket)
            held.append(s)
        deadline = time.time() + 10
        for s in held:
            s.settimeout(max(0.05, deadline - time.time()))
            try:
                line = s.recv(4096)
            except socket.timeout:
                continue
            if line:
                told.append(json.loads(line.decode()))
        print('out of fds: %d fds used, limit %d: %d of 40 waiting clients told %r' % (
            used, used + 8, len(told), told[:1]))
        check(len(told) >= 20, 'only %d of 40 clients got an answer with profd out of fds' % len(told))
        for resp in told:
            expect_error(resp, 'EMFILE', 'client beyond the fd limit')
        check('Out of file descriptors' in d.logtext(), 'profd did not log its fd shortage')
    finally:
        for s in held:
            s.close()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limit)
    time.sleep(0.2)


def test():
    require_root_bpf()
    with Profd() as d:
        def alive():
            resp = raw(d.socket, b'{"v":1,"cmd":"ping"}\n')
            check(resp and resp['ok'], 'daemon stopped answering: %r' % resp)

        # A PID that does not exist: a child that has been reaped.
        p = subprocess.Popen(['true'])
        p.wait()
        rc, out, err = d.ctl('attach', p.pid, check_rc=False)
        check(rc == 1 and 'no process' in err, 'dead PID: rc %d stderr %r' % (rc, err))
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":%d}\n' % p.pid), 'ESRCH', 'dead pid')
        alive()

        # What cannot be profiled is refused at once, and no session is created: a kernel
        # thread (kthreadd, PID 2) and a zombie (a child that exited, not yet reaped).
        before = d.json('sessions')['sessions']
        rc, _, err = d.ctl('attach', 2, '--duration', 5, check_rc=False, timeout=3)
        check(rc == 1 and 'kernel thread' in err, 'attach to a kernel thread: rc %d %r' % (rc, err))
        z = subprocess.Popen(['true'])
        with open('/proc/%d/stat' % z.pid) as f:
            while f.read().rsplit(')', 1)[1].split()[0] != 'Z':
                f.seek(0)
        rc, _, err = d.ctl('attach', z.pid, '--duration', 5, check_rc=False, timeout=3)
        check(rc == 1 and 'zombie' in err and 'PID %d' % os.getpid() in err,
              'attach to a zombie: rc %d %r' % (rc, err))
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":%d}\n' % z.pid), 'ESRCH', 'zombie')
        z.wait()
        check(d.json('sessions')['sessions'] == before, 'sessions created by refused attaches')
        alive()

        # PID 0, negative, a string: refused by profctl (usage) and by profd.
        for arg in ('0', '-5', 'abc', '12abc'):
            rc, _, err = d.ctl('attach', arg, check_rc=False)
            check(rc == 2 and err.strip(), 'profctl attach %s: rc %d stderr %r' % (arg, rc, err))
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":0}\n'), 'EINVAL', 'pid 0')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":"abc"}\n'), 'EINVAL', 'pid string')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"events":["nope"]}\n'), 'EINVAL', 'unknown event')
        alive()

        # 10 MiB on one line: E2BIG, then the connection is closed; others are served.
        big = b'{"cmd":"ping","pad":"' + b'x' * (10 << 20) + b'"}\n'
        expect_error(raw(d.socket, big), 'E2BIG', '10 MiB request')
        alive()

        expect_error(raw(d.socket, b'{"cmd": "ping"\n'), 'EINVAL', 'invalid JSON')
        expect_error(raw(d.socket, b'\xff\xfe\x00garbage\n'), 'EINVAL', 'binary garbage')
        expect_error(raw(d.socket, b'{"cmd":"rm -rf /"}\n'), 'EINVAL', 'unknown command')
        expect_error(raw(d.socket, b'{"v":99,"cmd":"ping"}\n'), 'EPROTONOSUPPORT', 'bad version')
        expect_error(raw(d.socket, b'{"cmd":"top","session":424242}\n'), 'ENOENT', 'unknown session')
        # The newer options, malformed: an error each, and profd still answers.
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"unwind":"magic"}\n'), 'EINVAL', 'bad unwind')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"stack_bytes":"x"}\n'), 'EINVAL', 'bad stack_bytes')
        expect_error(raw(d.socket, b'{"cmd":"threads","session":1,"window_s":-1}\n'), 'EINVAL', 'bad window')
        expect_error(raw(d.socket, b'{"cmd":"offcpu","session":424242}\n'), 'ENOENT', 'offcpu unknown session')
        expect_error(raw(d.socket, b'{"cmd":"resymbolize","session":424242}\n'), 'ENOENT',
                     'resymbolize unknown session')
        expect_error(raw(d.socket, b'{"cmd":"top","session":1,"event":"nope"}\n'), 'EINVAL', 'bad event')
        # Memory: the settings of rss and malloc, and the report.
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"memory_interval_s":0}\n'), 'EINVAL',
                     'memory_interval_s 0')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"memory_interval_s":"1"}\n'), 'EINVAL',
                     'memory_interval_s string')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"malloc_sample_bytes":-5}\n'), 'EINVAL',
                     'negative malloc_sample_bytes')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"malloc_sample_bytes":1e300}\n'), 'EINVAL',
                     'huge malloc_sample_bytes')
        expect_error(raw(d.socket, b'{"cmd":"attach","pid":1,"malloc_max_hits_per_s":[1]}\n'), 'EINVAL',
                     'malloc_max_hits_per_s array')
        expect_error(raw(d.socket, b'{"cmd":"memory","session":424242}\n'), 'ENOENT', 'memory unknown session')
        alive()
        rc, _, err = d.ctl('top', '424242', check_rc=False)
        check(rc == 1 and '424242' in err, 'profctl top unknown: rc %d stderr %r' % (rc, err))

        # Several requests on one connection are answered in order.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(d.socket)
        s.sendall(b'{"cmd":"ping"}\n{"cmd":"nope"}\n{"cmd":"sessions"}\n')
        f = s.makefile('rb')
        answers = [json.loads(f.readline()) for _ in range(3)]
        s.close()
        check([a['ok'] for a in answers] == [True, False, True], 'pipelined answers %r' % answers)

        # A client that sends half a line and disconnects.
        raw(d.socket, b'{"cmd":"pi', read=False)
        alive()

        # No daemon at the socket: one clear line, non-zero exit.
        p = subprocess.run([d.profctl, '--socket', d.socket + '.missing', 'sessions'],
                           capture_output=True, text=True)
        check(p.returncode == 1 and 'cannot connect' in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              'no daemon: rc %d stderr %r' % (p.returncode, p.stderr))

        out_of_fds(d)
        alive()
        check(d.proc.poll() is None, 'profd died:\n' + d.logtext())

    # Without CAP_BPF/CAP_PERFMON/CAP_SYS_ADMIN profd refuses to start, clearly.
    capsh = shutil.which('capsh')
    if capsh:
        d2 = Profd()
        p = subprocess.run([capsh, '--drop=cap_bpf,cap_perfmon,cap_sys_admin', '--',
                            '-c', '"$0" --db "$1" --socket "$2"', d2.profd, d2.db, d2.socket],
                           capture_output=True, text=True, timeout=30)
        d2.log.close()
        shutil.rmtree(d2.dir, ignore_errors=True)
        check(p.returncode == 1 and 'CAP_BPF' in p.stderr,
              'profd without capabilities: rc %d stderr %r' % (p.returncode, p.stderr))
    else:
        print('capsh not installed: capability refusal not checked')


run(test)
