#!/usr/bin/env python3
"""profd as a systemd Type=notify service, with a notification socket the
test owns in place of systemd: READY=1 (with a STATUS=) once profctl gets
answers, WATCHDOG=1 at half the WATCHDOG_USEC period, STATUS= counting the
running sessions, STOPPING=1 on SIGTERM. Then socket activation: profd
serves on the socket passed as fd 3 (LISTEN_FDS), and leaves its file alone
when it stops."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from profdtest import Failure, Profd, binary, check, require_root_bpf, run, skip, wait_for_threads


def messages(sock, seconds):
    """Every datagram received within @seconds, as lists of lines."""
    out, deadline = [], time.time() + seconds
    while time.time() < deadline:
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            out.append(sock.recv(4096).decode().split('\n'))
        except socket.timeout:
            break
    return out


def notify(spin):
    if not os.environ.get('PROFD_HAVE_LIBSYSTEMD'):
        skip('profd was built without libsystemd: no sd_notify')
    tmp = tempfile.mkdtemp(prefix='issue7-notify-')
    path = os.path.join(tmp, 'notify.sock')
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    try:
        d = Profd(env={'NOTIFY_SOCKET': path, 'WATCHDOG_USEC': '1000000'})
        with d:
            msgs = messages(sock, 3)
            flat = [line for m in msgs for line in m]
            check('READY=1' in flat, 'no READY=1 in %r' % msgs)
            check(any(line.startswith('STATUS=0 session') for line in flat), 'no STATUS= at start: %r' % msgs)
            check(flat.count('WATCHDOG=1') >= 3, 'WATCHDOG=1 %d times in 3 s at a 1 s watchdog' %
                  flat.count('WATCHDOG=1'))
            w = d.spawn(spin, '--seconds', '60', '--weights', '1')
            wait_for_threads(w.pid, 2)
            sid = d.json('attach', w.pid, '--freq', 397)['session']
            flat = [line for m in messages(sock, 1.5) for line in m]
            check('STATUS=1 session(s) running' in flat, 'STATUS after attach: %r' % flat)
            d.json('detach', sid)
            d.stop()
            flat = [line for m in messages(sock, 1) for line in m]
            check('STOPPING=1' in flat, 'no STOPPING=1 on SIGTERM: %r' % flat)
    finally:
        sock.close()
        shutil.rmtree(tmp, ignore_errors=True)


def socket_activation():
    if not os.environ.get('PROFD_HAVE_LIBSYSTEMD'):
        skip('profd was built without libsystemd: no socket activation')
    d = Profd()
    path = os.path.join(d.dir, 'activated.sock')
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(path)
    lsock.listen(16)
    os.chmod(path, 0o666)
    fd = lsock.fileno()

    def as_fd3():
        os.dup2(fd, 3)
        os.set_inheritable(3, True)

    log = open(os.path.join(d.dir, 'activated.log'), 'w+')
    # LISTEN_PID must be profd's own PID: the shell's, which exec keeps.
    proc = subprocess.Popen(['sh', '-c', 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"', d.profd,
                             '--db', d.db, '--socket', os.path.join(d.dir, 'unused.sock')],
                            preexec_fn=as_fd3, close_fds=False, stdout=log, stderr=subprocess.STDOUT)
    try:
        ok = False
        for _ in range(100):
            r = subprocess.run([d.profctl, '--socket', path, 'ping'], capture_output=True, text=True)
            if r.returncode == 0:
                ok = True
                break
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        log.seek(0)
        text = log.read()
        check(ok, 'profctl ping on the passed socket failed:\n' + text)
        check('socket passed by systemd' in text, 'profd did not say it uses the passed socket:\n' + text)
        check(not os.path.exists(os.path.join(d.dir, 'unused.sock')), 'profd made its own socket too')
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        check(os.path.exists(path), "profd unlinked the socket systemd owns")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        lsock.close()
        log.close()
        subprocess.run(['rm', '-rf', d.dir])


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    notify(spin)
    socket_activation()


run(test)
