#!/usr/bin/env python3
"""profctl snapshot, as cron runs it: three snapshots in a row of the same
process make three sessions, each ended by its duration, labelled, with
samples; --comm NAME takes every process of that name; --cgroup PATH every
process of a cgroup; a name nothing matches is an error."""
import os
import shutil
import time

from profdtest import Profd, binary, check, require_root_bpf, run, wait_for_threads


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        # A name of our own, so that other spin-threads on the machine do not match.
        name = 'snap7-%d' % os.getpid()
        mine = os.path.join(d.dir, name)
        shutil.copy(spin, mine)
        w = d.spawn(mine, '--seconds', '120', '--weights', '1,1')
        wait_for_threads(w.pid, 3)

        # A cron-like loop: three runs, three sessions.
        ids = []
        for _ in range(3):
            rc, out, err = d.ctl('snapshot', w.pid, '--duration', '1', '--freq', 397,
                                 '--label', 'cron job')
            lines = out.split()
            check(rc == 0 and len(lines) == 1 and lines[0].isdigit(),
                  'snapshot printed %r (stderr %r)' % (out, err))
            ids.append(int(lines[0]))
        check(len(set(ids)) == 3, 'three snapshots gave sessions %r' % ids)
        for sid in ids:
            s = d.json('session', sid)['session']
            check(s['state'] == 'ended' and s['end_reason'] == 'duration',
                  'session %d: %s/%s' % (sid, s['state'], s['end_reason']))
            check(s['label'] == 'cron job', 'session %d label %r' % (sid, s['label']))
            check(s['samples'] > 0, 'session %d has no samples' % sid)
        _, out, _ = d.ctl('session', ids[0])
        check('label:' in out and 'cron job' in out, 'profctl session shows no label:\n' + out)

        # --comm: two processes of that name, two sessions, one per PID.
        w2 = d.spawn(mine, '--seconds', '120', '--weights', '1')
        wait_for_threads(w2.pid, 2)
        snap = d.json('snapshot', '--comm', name, '--duration', '1', '--freq', 397)
        pids = sorted(s['pid'] for s in snap['sessions'])
        check(pids == sorted([w.pid, w2.pid]), 'snapshot --comm took PIDs %r' % pids)
        check(all(s['end_reason'] == 'duration' for s in snap['sessions']), 'snapshot --comm sessions')

        rc, out, err = d.ctl('snapshot', '--comm', name + '-none', '--duration', '1', check_rc=False)
        check(rc == 1 and "no process named '%s-none'" % name in err, 'unmatched name: %d %r' % (rc, err))

        # --cgroup: a cgroup of our own, with one of the two processes in it.
        cg = '/sys/fs/cgroup/issue7-snap-%d' % os.getpid()
        try:
            os.mkdir(cg)
        except OSError as e:
            print('cgroup part not run: cannot create a cgroup v2 directory (%s)' % e)
            return
        try:
            with open(os.path.join(cg, 'cgroup.procs'), 'w') as f:
                f.write(str(w2.pid))
            snap = d.json('snapshot', '--cgroup', os.path.basename(cg), '--duration', '1', '--freq', 397)
            check([s['pid'] for s in snap['sessions']] == [w2.pid],
                  'snapshot --cgroup took %r' % [s['pid'] for s in snap['sessions']])
        finally:
            w2.kill()
            w2.wait()
            for _ in range(50):
                try:
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.1)


run(test)
