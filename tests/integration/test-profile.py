#!/usr/bin/env python3
"""A real profd attached to a real multi-threaded workload (spin-threads):
the hot function is on top, the call path is whole, thread shares follow the
1:2:3 work split, and the data stays queryable after the target exits."""
import os

from profdtest import Profd, check, require_root_bpf, run, wait_for_threads, binary

WEIGHTS = [1, 2, 3]


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        w = d.spawn(spin, '--seconds', '8', '--weights', ','.join(map(str, WEIGHTS)))
        wait_for_threads(w.pid, 1 + len(WEIGHTS))

        # 397 Hz, not the default 99: the 1:2:3 check needs the samples. At 99 Hz the
        # lightest thread gets ~70 samples in this run, and binomial noise alone
        # (sqrt(70) ~ 8, 12%) would make a 15% tolerance fail one run in five;
        # at 397 Hz it is ~300 samples, 6%, and 15% is 2.5 sigma. Not 400 or 500:
        # a multiple of the scheduler tick (CONFIG_HZ 250 here, 100/300/1000
        # elsewhere) samples in lockstep with scheduling and aliases under
        # contention, which is why perf's default is 99 and not 100.
        att = d.json('attach', w.pid, '--freq', '397')
        sid = att['session']
        check(att['pid'] == w.pid, 'attach reports pid %s, expected %d' % (att['pid'], w.pid))
        check(att['event'] in ('cycles', 'cpu-clock'), 'event %r' % att['event'])
        check(att['freq_hz'] == 397, 'freq_hz %r' % att['freq_hz'])
        print('session %d: event %s' % (sid, att['event']))

        # Attaching the same PID twice is refused while the first session runs.
        rc, _, err = d.ctl('attach', w.pid, check_rc=False)
        check(rc != 0 and 'already' in err, 'second attach: rc %d, stderr %r' % (rc, err))

        # The session ends by itself when the workload exits.
        out, _ = w.communicate(timeout=30)
        cpu = dict(l.split(' cpu ') for l in out.splitlines() if ' cpu ' in l)
        print('workload CPU time per thread: %r' % cpu)
        s = d.wait_ended(sid, timeout=20)
        check(s['end_reason'] == 'target_exited', 'end_reason %r' % s['end_reason'])
        check(s['samples'] > 0, 'no samples stored')

        top = d.json('top', sid, '--limit', '5')
        total = top['total_samples']
        print('total samples %d, lost %d, truncated %d, unsymbolized frames %d' % (
            total, top['lost_samples'], top['truncated_stacks'], top['unsymbolized_frames']))
        for f in top['functions']:
            print('  %5.1f%% %5.1f%% %s (%s:%s)' % (f['self_pct'], f['total_pct'], f['function'], f['file'], f['line']))
        # ~7.5 s of 0.6 CPU at 397 Hz is ~1800 samples; accept a wide margin for a loaded machine.
        check(total >= 600, 'only %d samples in ~7.5 s of 0.6 CPU at 397 Hz' % total)
        hot = top['functions'][0]
        check(hot['function'] == 'hot_function', 'top function is %r, expected hot_function' % hot['function'])
        user_share = d.user_self_share(sid, 'hot_function')
        check(user_share >= 0.80, 'hot_function has %.3f of the samples that stopped in user '
              'space, expected >= 0.80' % user_share)
        check(hot['total_pct'] >= 80, 'hot_function on %.1f%% of stacks, expected >= 80%%' % hot['total_pct'])
        check(hot['file'] and hot['file'].endswith('spin-threads.c') and hot['line'] > 0,
              'hot_function source %r:%r' % (hot['file'], hot['line']))
        check(os.path.basename(hot['module']) == 'spin-threads', 'module %r' % hot['module'])
        check(top['lost_samples'] == 0, '%d samples lost' % top['lost_samples'])

        # The hot call path, leaf first, with frame pointers all the way to the thread's start.
        paths = d.json('hotpaths', sid, '--limit', '3')['paths']
        names = [f['function'] for f in paths[0]['frames']]
        print('hottest path: ' + ' <- '.join(map(str, names)))
        want = ['hot_function', 'do_work', 'run_period', 'worker_main']
        check(names[:4] == want, 'hottest path starts %r, expected %r' % (names[:4], want))
        # Below worker_main the walk reaches the thread's start: a path cut at worker_main
        # is the truncation this test rules out.
        check(any(n in ('start_thread', 'clone3', 'clone') for n in names[4:]),
              'path below worker_main: %r' % names[4:])

        # Per-thread samples follow each worker's CPU time within 15%: the 1:2:3 split the
        # duty cycle aims at, as the workload measured it (CLOCK_THREAD_CPUTIME_ID). On a
        # loaded host the split itself drifts (worker-1 at 0.20 instead of 0.167 was seen),
        # and the samples must follow what really ran.
        th = d.json('threads', sid)
        workers = {t['name']: t['samples'] for t in th['threads'] if t['name'].startswith('worker-')}
        check(len(workers) == len(WEIGHTS), 'worker threads seen: %r' % workers)
        wsum = sum(workers.values())
        own = {name: float(v.split()[0]) for name, v in cpu.items() if name.startswith('worker-')}
        own_sum = sum(own.values())
        for i, weight in enumerate(WEIGHTS, 1):
            name = 'worker-%d' % i
            share, expect = workers[name] / wsum, own[name] / own_sum
            print('%s: %.3f of worker samples, %.3f of their CPU time (by weight %.3f)'
                  % (name, share, expect, weight / sum(WEIGHTS)))
            check(abs(share - expect) <= 0.15 * expect,
                  '%s share %.3f not within 15%% of its CPU time share %.3f (the workload measured '
                  'its own CPU time as %r)' % (name, share, expect, cpu))
        imb = th['imbalance']
        check(imb['straggler_name'] == 'worker-3', 'straggler %r' % imb['straggler_name'])
        # The workload exited: every thread's exit was seen (sched_process_exit), after the session began.
        exits = [t['exited_at_ns'] for t in th['threads']]
        check(all(x and x >= att['started_at_ns'] for x in exits), 'thread exits not recorded: %r' % exits)

        # Human output shows the same facts.
        _, out, _ = d.ctl('top', sid)
        check('hot_function' in out and 'lost' in out, 'human top output:\n' + out)
        _, out, _ = d.ctl('hotpaths', sid)
        check('worker_main' in out, 'human hotpaths output:\n' + out)

        sessions = d.json('sessions')['sessions']
        check(any(x['id'] == sid for x in sessions), 'session %d not listed' % sid)

        # The stored profile outlives the daemon: restart it on the same database.
        check(d.stop() == 0, 'profd did not exit 0 on SIGTERM:\n' + d.logtext())
        d.start()
        again = d.json('top', sid, '--limit', '5')
        check(again['functions'] == top['functions'], 'top changed across a restart')
        check(d.json('session', sid)['session']['end_reason'] == 'target_exited',
              'end_reason changed across a restart')


run(test)
