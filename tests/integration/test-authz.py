#!/usr/bin/env python3
"""Authorization from SO_PEERCRED, with real users the test creates: user A
cannot profile user B's process or root's, and cannot list or query B's
sessions; B can profile and query its own; root and a member of the profd
group can do everything. The users (and the profd group, if the test made
it) are removed at the end."""
import grp
import os
import shutil
import subprocess
import time

from profdtest import Failure, Profd, binary, check, require_root_bpf, run, skip, wait_for_threads

SUFFIX = str(os.getpid())
USER_A, USER_B, USER_ADM = 'p7a' + SUFFIX, 'p7b' + SUFFIX, 'p7adm' + SUFFIX


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True)


def denied(d, user, *args):
    """profctl as @user must fail; return its stderr."""
    rc, out, err = d.ctl(*args, user=user, check_rc=False)
    check(rc != 0, 'profctl %s as %s succeeded: %s' % (' '.join(map(str, args)), user, out))
    return err


def scenario(d, spin):
    os.chmod(d.dir, 0o755)  # the socket's directory: the users must reach the socket
    wa = d.spawn(spin, '--seconds', '120', '--weights', '1', user=USER_A)
    wb = d.spawn(spin, '--seconds', '120', '--weights', '1', user=USER_B)
    wr = d.spawn(spin, '--seconds', '120', '--weights', '1')
    for w in (wa, wb, wr):
        wait_for_threads(w.pid, 2)

    # A may not profile B's process nor root's: a clear error, no session.
    for w in (wb, wr):
        err = denied(d, USER_A, 'attach', w.pid)
        check('not allowed to profile PID %d' % w.pid in err, 'A attaching %d: %r' % (w.pid, err))
    check(d.json('sessions')['sessions'] == [], 'a refused attach left a session')

    # B profiles its own process; A profiles its own.
    sb = d.json('attach', wb.pid, '--freq', 397, user=USER_B)['session']
    sa = d.json('attach', wa.pid, '--freq', 397, user=USER_A)['session']
    time.sleep(1.5)
    # A cannot see B's session, in the list or by id, nor detach it.
    ids_a = [s['id'] for s in d.json('sessions', user=USER_A)['sessions']]
    check(ids_a == [sa], 'A lists sessions %r, expected only its own %d' % (ids_a, sa))
    for cmd in ('session', 'top', 'threads', 'detach'):
        err = denied(d, USER_A, cmd, sb)
        check('no session %d' % sb in err, 'A %s %d: %r' % (cmd, sb, err))
    check(d.json('session', sb)['session']['state'] == 'running', "A's detach stopped B's session")
    # B sees and queries its own, not A's.
    ids_b = [s['id'] for s in d.json('sessions', user=USER_B)['sessions']]
    check(ids_b == [sb], 'B lists sessions %r' % ids_b)
    check(d.json('session', sb, user=USER_B)['session']['uid'] == int(
        subprocess.check_output(['id', '-u', USER_B])), "B's session has the wrong uid")
    denied(d, USER_B, 'top', sa)
    d.json('detach', sb, user=USER_B)
    check(d.json('top', sb, user=USER_B)['total_samples'] > 0, "B's session has no samples")

    # Root and a profd group member see everything and may profile anyone.
    ids_root = sorted(s['id'] for s in d.json('sessions')['sessions'])
    check(ids_root == sorted([sa, sb]), 'root lists %r' % ids_root)
    ids_adm = sorted(s['id'] for s in d.json('sessions', user=USER_ADM)['sessions'])
    check(ids_adm == sorted([sa, sb]), 'profd group member lists %r' % ids_adm)
    d.json('top', sb, user=USER_ADM)
    sr = d.json('attach', wr.pid, '--freq', 397, user=USER_ADM)['session']
    d.json('detach', sr, user=USER_ADM)
    d.json('detach', sa)
    sr2 = d.json('attach', wa.pid, '--freq', 397)['session']
    d.json('detach', sr2)

    # snapshot --comm as A takes A's processes of that name, not B's or root's.
    rc, out, err = d.ctl('snapshot', '--comm', 'spin-threads', '--duration', '1', '--freq', 397,
                         user=USER_A, check_rc=False)
    check(rc == 0 and len(out.split()) == 1, 'A snapshot --comm: rc %d out %r err %r' % (rc, out, err))
    if rc == 0:
        snap = d.json('session', int(out.split()[0]))['session']
        check(snap['pid'] == wa.pid, "A's snapshot --comm took PID %d, not A's %d" % (snap['pid'], wa.pid))

    # A setuid program run by A is not A's to profile (its saved uid is root's).
    sudo_like = os.path.join(d.dir, 'spin-setuid')
    shutil.copy(spin, sudo_like)
    os.chmod(sudo_like, 0o4755)
    ws = d.spawn(sudo_like, '--seconds', '120', '--weights', '1', user=USER_A)
    wait_for_threads(ws.pid, 2)
    err = denied(d, USER_A, 'attach', ws.pid)
    check('not allowed' in err, 'A attaching its setuid process: %r' % err)


def test():
    require_root_bpf()
    for tool in ('useradd', 'userdel', 'groupadd', 'groupdel', 'gpasswd', 'setpriv'):
        if not shutil.which(tool):
            skip('%s is missing: cannot create test users' % tool)
    spin = binary('SPIN_THREADS')
    made_group = False
    try:
        grp.getgrnam('profd')
    except KeyError:
        sh('groupadd', '--system', 'profd')
        made_group = True
    users = []
    try:
        for u in (USER_A, USER_B, USER_ADM):
            sh('useradd', '--no-create-home', '--user-group', '--shell', '/usr/sbin/nologin', u)
            users.append(u)
        sh('gpasswd', '--add', USER_ADM, 'profd')
        with Profd() as d:
            scenario(d, spin)
    finally:
        for u in users:
            subprocess.run(['userdel', u], capture_output=True)
        if made_group:
            subprocess.run(['groupdel', 'profd'], capture_output=True)


run(test)
