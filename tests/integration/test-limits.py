#!/usr/bin/env python3
"""Limits of profd.conf, each reached on a real process: max_sessions (a
second attach is refused with a clear error), max_stacks_per_session (the
distinct stacks a session holds in memory at once: the samples past it
are counted as limit_dropped_samples and shown; stored stacks are
forgotten after each flush and make room, so a long session whose stacks
keep varying stores more distinct stacks than the limit and drops none),
max_threads_per_session (a process with more threads is refused; threads
started later past the limit are counted, not sampled). The stacks are
forgotten with CUDA probes on too: only a live GPU allocation's stack has
to stay."""
import sqlite3
import time

from profdtest import Profd, binary, check, require_root_bpf, run, wait_for_threads

MIB = 1 << 20


def distinct_stacks(d, sid):
    con = sqlite3.connect(d.db)
    n = con.execute('SELECT count(DISTINCT stack_id) FROM samples WHERE session_id = ?',
                    (sid,)).fetchone()[0]
    con.close()
    return n


def varied_cuda_session(d):
    """fake-cudart --varied for 8 s, CPU samples at 999 Hz and CUDA probes: (session, its end)."""
    w = d.spawn_waiting(binary('FAKE_CUDART'), '--varied', '8')
    sid = d.json('attach', w.pid, '--freq', 999, '--events', 'cpu,cuda')['session']
    d.go(w)
    return sid, d.wait_ended(sid, timeout=40)


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    deep = binary('DEEP_NOFP')
    with Profd(['--max-sessions', '1', '--max-stacks', '16']) as d:
        # Sorting through libc and libstdc++: hundreds of distinct stacks a second.
        w1 = d.spawn(deep, '60')
        w2 = d.spawn(spin, '--seconds', '60', '--weights', '1')
        time.sleep(0.3)
        wait_for_threads(w2.pid, 2)
        sid = d.json('attach', w1.pid, '--freq', 397, '--unwind', 'fp')['session']
        rc, out, err = d.ctl('attach', w2.pid, check_rc=False)
        check(rc != 0 and '1 sessions are running' in err and 'max_sessions' in err,
              'second attach past max_sessions: %r' % err)
        time.sleep(3)
        s = d.json('detach', sid)
        check(s['limit_dropped_samples'] > 0, 'no samples dropped at max_stacks 16: %r' % s)
        check(s['samples'] > 0, 'nothing kept below the stack limit')
        n = distinct_stacks(d, sid)
        # three flushes, each with room for 16 stacks once the stored ones are forgotten
        check(n > 16, '%d distinct stacks stored with max_stacks_per_session 16' % n)
        _, out, _ = d.ctl('session', sid)
        check('limit dropped:' in out and str(s['limit_dropped_samples']) in out,
              'profctl session does not show the dropped samples:\n' + out)
        # With the first session ended, the second attach is allowed.
        d.json('detach', d.json('attach', w2.pid, '--freq', 397)['session'])

    # deep-nofp's stacks keep varying (recursion through qsort and std::sort):
    # ~9,000 distinct ones in 10 s at 999 Hz, ~1,200 in each 1 s flush. At most
    # 4000 in memory (2000 kept after a flush): all stored, no sample dropped.
    with Profd(['--max-stacks', '4000']) as d:
        w = d.spawn(deep, '60')
        sid = d.json('attach', w.pid, '--freq', 999, '--duration', 10)['session']
        s = d.wait_ended(sid, timeout=30)
        n = distinct_stacks(d, sid)
        print('max_stacks_per_session 4000: %d samples, %d distinct stacks stored, %d dropped'
              % (s['samples'], n, s['limit_dropped_samples']))
        check(n > 4000, 'only %d distinct stacks in 10 s: the test needs more than the limit' % n)
        check(s['limit_dropped_samples'] == 0, 'samples dropped with room to forget stacks: %r' % s)

    # The same with CUDA probes on: fake-cudart --varied calls its own
    # cudaDeviceSynchronize() from call chains of 12 lengths a second, a new
    # band of 12 each second, and keeps a 1 MiB cudaMalloc() live throughout.
    # Before, the first stack a CUDA call took turned the forgetting off for
    # the session: once max_stacks were held, samples were dropped and CUDA
    # calls lost (2,886 of 7,976 samples, 17,850 calls at max_stacks 600).
    # The limit is three times the most distinct stacks a 1 s window saw in a
    # first session without one (how many depends on the machine's kernel
    # and compiler; a session's first 10 s flush every window), plus the
    # few CUDA call stacks: room for a flush's stacks and those kept after one.
    with Profd() as d:
        sid, _ = varied_cuda_session(d)
        con = sqlite3.connect(d.db)
        per_flush = con.execute('SELECT max(n) FROM (SELECT count(DISTINCT stack_id) AS n '
                                'FROM samples WHERE session_id = ? GROUP BY window_ns)',
                                (sid,)).fetchone()[0]
        con.close()
    limit = 3 * per_flush + 50
    with Profd(['--max-stacks', str(limit)]) as d:
        sid, s = varied_cuda_session(d)
        n = distinct_stacks(d, sid)
        g = d.json('gpu', sid)
        syncs = sum(x['calls'] for x in g['syncs'] if x['api'] == 'cudaDeviceSynchronize')
        m = g['memory']
        print('max_stacks_per_session %d (at most %d stacks a flush), CUDA probes: %d samples, '
              '%d distinct stacks stored, %d dropped; %d syncs from %d stacks; live %d bytes'
              % (limit, per_flush, s['samples'], n, s['limit_dropped_samples'], syncs,
                 len(g['syncs']), m['live_bytes']))
        check(s['limit_dropped_samples'] == 0, 'samples dropped with CUDA probes on: %r' % s)
        check(syncs > 1000 and g['lost_calls'] == 0, 'syncs %d, lost %d' % (syncs, g['lost_calls']))
        check(n > limit, 'only %d distinct stacks: the test needs more than the limit' % n)
        top = m['by_stack'][0] if m['by_stack'] else {}
        check(m['live_bytes'] == MIB and top.get('live_bytes') == MIB and
              'alloc_cache' in top.get('stack', []),
              'the live block keeps its stack, alloc_cache: %r' % top)

    with Profd(['--max-threads', '2']) as d:
        many = d.spawn(spin, '--seconds', '60', '--weights', '1,1,1')
        wait_for_threads(many.pid, 4)
        rc, out, err = d.ctl('attach', many.pid, check_rc=False)
        check(rc != 0 and 'more than 2 threads' in err, 'attach to 4 threads with max 2: %r' % err)
        # Workers that start after the attach: the first two threads seen are sampled.
        late = d.spawn(spin, '--seconds', '4', '--weights', '1,1,1', '--delay', '1')
        wait_for_threads(late.pid, 1)
        sid = d.json('attach', late.pid, '--freq', 397)['session']
        late.wait(timeout=30)
        s = d.wait_ended(sid, timeout=15)
        # The limit bounds the threads alive at once: a worker that exits makes room, so
        # count the threads sampled in each window that ended before the first exit.
        con = sqlite3.connect(d.db)
        first_exit = con.execute('SELECT min(exited_at_ns) FROM threads WHERE session_id = ?',
                                 (sid,)).fetchone()[0] or 2**62
        per_window = con.execute('SELECT window_ns, count(DISTINCT tid) FROM samples '
                                 'WHERE session_id = ? AND window_ns + 1000000000 <= ? '
                                 'GROUP BY window_ns', (sid, first_exit)).fetchall()
        con.close()
        print('threads sampled per window before the first exit: %r' % [n for _, n in per_window])
        check(per_window and max(n for _, n in per_window) <= 2,
              'more than 2 threads sampled at once with max 2: %r' % per_window)
        check(s['limit_dropped_samples'] > 0, 'third worker not counted as dropped: %r' % s)


run(test)
