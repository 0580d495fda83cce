#!/usr/bin/env python3
"""Sessions end three ways, and their data stays either way: the duration runs
out (profctl attach --wait returns), profctl detach, and the target's exit.
Threads a target creates after the attach are sampled in its session."""
import os
import time

from profdtest import Profd, check, require_root_bpf, run, wait_for_threads, binary


def test():
    require_root_bpf()
    with Profd() as d:
        w = d.spin('2,2')

        # --duration with --wait: returns once the session has ended.
        t0 = time.time()
        att = d.json('attach', w.pid, '--duration', '2', '--wait')
        took = time.time() - t0
        sid = att['session']
        s = d.json('session', sid)['session']
        check(s['state'] == 'ended' and s['end_reason'] == 'duration',
              'after --wait: state %r, end_reason %r' % (s['state'], s['end_reason']))
        check(1.5 <= took <= 15, 'attach --duration 2 --wait took %.1f s' % took)
        check(s['samples'] > 0, 'duration session stored no samples')
        check(abs(s['elapsed_s'] - 2) < 1.5, 'elapsed %.2f s for a 2 s session' % s['elapsed_s'])

        # detach: ends at once, keeps what was sampled.
        sid2 = d.json('attach', w.pid, '--freq', '199')['session']
        time.sleep(1.5)
        det = d.json('detach', sid2)
        check(det['state'] == 'ended' and det['end_reason'] == 'detached', 'detach gave %r' % det)
        top = d.json('top', sid2)
        check(top['total_samples'] > 0, 'detached session has no samples')
        check(d.json('session', sid2)['session']['freq_hz'] == 199, 'freq_hz not recorded')
        # The workload still runs: its threads have no exit time.
        check(all(t['exited_at_ns'] is None for t in d.json('threads', sid2)['threads']),
              'exits recorded for threads that still run')
        # Detaching an ended session is not an error and changes nothing.
        check(d.json('detach', sid2)['end_reason'] == 'detached', 'second detach changed the session')

        # Killing the target ends its session with target_exited.
        sid3 = d.json('attach', w.pid)['session']
        time.sleep(1)
        w.kill()
        w.wait()
        s3 = d.wait_ended(sid3, timeout=10)
        check(s3['end_reason'] == 'target_exited', 'end_reason %r after kill' % s3['end_reason'])
        check(s3['samples'] > 0, 'killed target: no samples kept')

        # Threads created after the attach are sampled too.
        late = d.spawn(binary('SPIN_THREADS'), '--seconds', '3', '--weights', '2,2', '--delay', '1')
        wait_for_threads(late.pid, 1)
        sid4 = d.json('attach', late.pid)['session']
        check(len(os.listdir('/proc/%d/task' % late.pid)) == 1,
              'workers started before the attach; the test cannot tell')
        late.wait(timeout=30)
        d.wait_ended(sid4, timeout=10)
        names = {t['name'] for t in d.json('threads', sid4)['threads'] if t['samples'] > 0}
        check({'worker-1', 'worker-2'} <= names, 'threads created after attach: %r' % names)

        # Sessions are listed newest first, all ended.
        ids = [x['id'] for x in d.json('sessions')['sessions']]
        check(ids[:4] == [sid4, sid3, sid2, sid], 'sessions list order %r' % ids)


run(test)
