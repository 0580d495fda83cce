#!/usr/bin/env python3
"""diff of the same workload run twice at the same time, the second with
hot_function twice as slow (spin-threads --hot-factor 2): hot_function's share grows
(from ~90% to ~95% of the stacks), warm_function's shrinks, hot_function's
samples relative to warm_function's double, and hot_function is among the
largest changes of the workload's functions."""
import subprocess

from profdtest import Profd, binary, check, require_root_bpf, run, wait_for_threads


def profile_both(d, spin, spins):
    """Sessions of the workload and of its regression (--hot-factor 2), run at
    the same time: one after the other, the 9:1 split of the two functions
    moved with the load of the moment (a CI run where a build ran beside the
    first saw 85:15 there, and hot/warm grow 3.12x instead of 2x)."""
    argv = [spin, '--seconds', '8', '--weights', '3,3', '--spins', spins]
    ws = [d.spawn(*argv), d.spawn(*(argv + ['--hot-factor', '2']))]
    for w in ws:
        wait_for_threads(w.pid, 3)
    # 999 Hz: each has about one of the two CPUs, ~8,000 samples, ~400 of them in
    # warm_function in the second. At 397 Hz (~60 there, one run after the other)
    # the hot/warm ratio below swung from 1.9x to 2.8x.
    sids = [d.json('attach', w.pid, '--freq', '999')['session'] for w in ws]
    for w in ws:
        w.communicate(timeout=60)
    for sid in sids:
        d.wait_ended(sid)
    return sids


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        # Both do the same work per unit, calibrated once.
        spins = subprocess.run([spin, '--calibrate'], stdout=subprocess.PIPE, text=True,
                               check=True).stdout.strip()
        a, b = profile_both(d, spin, spins)
        diff = d.json('diff', a, b)
        fns = {f['function']: f for f in diff['functions']}
        hot, warm = fns['hot_function'], fns['warm_function']
        print('hot_function self %.2f%% -> %.2f%%, total %.2f%% -> %.2f%%; warm_function self %.2f%% -> %.2f%%' % (
            hot['self_pct_a'], hot['self_pct_b'], hot['total_pct_a'], hot['total_pct_b'],
            warm['self_pct_a'], warm['self_pct_b']))
        # Expected: hot_function on 90% -> 94.7% of the stacks, warm_function 10% -> 5.3%.
        # Total (on the stack), not self: on a loaded machine interrupts land on top of
        # hot_function in a varying share of samples (self then goes to the kernel).
        # ~3000 samples per run give under 1 point of noise on each share.
        check(hot['total_delta_pct'] >= 1.0, 'hot_function share grew by only %.2f points' % hot['total_delta_pct'])
        check(warm['total_delta_pct'] <= -1.0, 'warm_function share fell by only %.2f points' % -warm['total_delta_pct'])
        # And relative to each other, hot_function did about twice the work of before.
        growth = (hot['self_pct_b'] / warm['self_pct_b']) / (hot['self_pct_a'] / warm['self_pct_a'])
        check(1.4 <= growth <= 3.0, 'hot/warm self samples grew %.2fx, expected about 2x' % growth)
        check(abs(hot['self_delta_pct'] - (hot['self_pct_b'] - hot['self_pct_a'])) < 0.02, 'delta is not B - A')
        # Among the workload's own functions (kernel frames such as irqentry_exit_to_user_mode
        # move with the interrupts a run happens to take on this VM), hot_function's change
        # is one of the two largest, with warm_function's: the work moved between them.
        order = [f['function'] for f in diff['functions'] if 'spin-threads' in (f['module'] or '')]
        check(order.index('hot_function') < 2, 'hot_function is not among the 2 largest changes of '
              'spin-threads\' functions: %r' % order[:5])
        changes = [max(abs(f['self_delta_pct']), abs(f['total_delta_pct'])) for f in diff['functions']]
        check(changes == sorted(changes, reverse=True), 'not sorted by the largest change')
        _, text, _ = d.ctl('diff', a, b, '--limit', '5')
        check('hot_function' in text and 'DELTA' in text, 'human diff:\n' + text)
        rc, _, err = d.ctl('diff', a, check_rc=False)
        check(rc == 2 and 'SESSION_B' in err, 'diff with one session: rc %d %r' % (rc, err))


run(test)
