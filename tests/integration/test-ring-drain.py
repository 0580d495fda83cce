#!/usr/bin/env python3
"""A real profd whose event loop is held up (another process holds the
database's write lock for 3 s: each flush waits for it, the loop with it)
keeps every sample taken meanwhile: a drain thread copies the records out
of the BPF ring buffer (1 MiB here) as they come, and the loop handles them
once the lock is gone. Samples carry 16 KiB stack copies (--unwind dwarf),
~3 MiB in those 3 s, three times the ring: without the drain thread the
ring fills and the samples of those seconds are lost (counted)."""
import sqlite3
import time

from profdtest import Profd, binary, check, require_root_bpf, run

FREQ = 99
LOCK_S = 3


def test():
    require_root_bpf()
    with Profd(['--ring-buffer-bytes', '1M']) as d:
        w = d.spawn(binary('DEEP_NOFP'), '60')
        sid = d.json('attach', w.pid, '--freq', str(FREQ), '--unwind', 'dwarf',
                     '--duration', '8')['session']
        time.sleep(2)

        db = sqlite3.connect(d.db, timeout=10, isolation_level=None)
        db.execute('BEGIN IMMEDIATE')
        t0 = time.time()
        time.sleep(LOCK_S)
        db.execute('COMMIT')
        db.close()
        print('database write lock held for %.1f s' % (time.time() - t0))

        s = d.wait_ended(sid, timeout=60)
        rings = d.json('ping')['rings']['samples']
        print('session: %d samples, %d lost; ring %d bytes, at most %d bytes queued'
              % (s['samples'], s['lost_samples'], rings['ring_bytes'],
                 rings['queued_peak_bytes']))
        check(rings['ring_bytes'] == 1 << 20, 'ring of %d bytes, not the 1 MiB asked'
              % rings['ring_bytes'])
        check(s['lost_samples'] == 0, '%d samples lost while the loop waited' % s['lost_samples'])
        check(rings['queued_peak_bytes'] > rings['ring_bytes'],
              'the records queued while the loop waited (%d bytes) would have fit the ring: '
              'the test did not hold the loop up' % rings['queued_peak_bytes'])

        # The seconds the loop waited have their samples, as the others do.
        rows = d.json('sql', 'SELECT window_ns, samples FROM windows WHERE session_id = %d '
                      'ORDER BY window_ns' % sid)['rows']
        counts = [r[1] for r in rows]
        print('samples per 1 s window: %r' % counts)
        check(len(counts) >= 7, 'only %d windows in an 8 s session' % len(counts))
        middle = counts[1:-1]
        check(min(middle) >= FREQ // 2, 'a window with %d samples (about %d expected): %r'
              % (min(middle), FREQ, counts))


run(test)
