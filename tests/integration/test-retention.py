#!/usr/bin/env python3
"""Retention on a real database: sessions that ended more than
--retention-days ago are deleted when profd starts, newer ones stay and keep
their reports; --max-db-bytes deletes the oldest ended sessions and the file
gets smaller; the database stays consistent (integrity and foreign keys)."""
import os
import sqlite3
import time

from profdtest import Profd, binary, check, require_root_bpf, run, wait_for_threads

DAY_NS = 86400 * 10**9


def test():
    require_root_bpf()
    with Profd() as d:
        w = d.spin('1,1')
        ids = [d.json('attach', w.pid, '--freq', 397, '--duration', '1', '--wait', '--unwind', 'dwarf')['session']
               for _ in range(3)]
        running = d.json('attach', w.pid, '--freq', 397)['session']
        d.stop()  # the running session ends as daemon_stopped
        con = sqlite3.connect(d.db)
        old = time.time_ns() - 40 * DAY_NS
        con.executemany('UPDATE sessions SET started_at_ns = ?, ended_at_ns = ? WHERE id = ?',
                        [(old, old + 10**9, i) for i in ids[:2]])
        con.commit()
        con.close()
        size_before = os.path.getsize(d.db)

        d.extra_args = ['--retention-days', '30']
        d.start()
        left = sorted(s['id'] for s in d.json('sessions')['sessions'])
        check(left == sorted([ids[2], running]), 'after retention of 30 days: sessions %r' % left)
        check('retention: deleted 2 ended session(s)' in d.logtext(), 'retention not logged:\n' + d.logtext())
        check(d.json('top', ids[2])['total_samples'] > 0, 'the kept session lost its samples')

        # A size limit below what one session takes: every ended session goes.
        d.stop()
        d.extra_args = ['--max-db-bytes', '64K']
        d.start()
        check(d.json('sessions')['sessions'] == [], 'sessions left above max_db_bytes')
        d.stop()
        size_after = os.path.getsize(d.db)
        print('database: %d bytes before, %d after retention' % (size_before, size_after))
        con = sqlite3.connect(d.db)
        # The space went back to the file system: no free page is left in the file.
        # (How much the file shrinks depends on how many pages the sessions
        # filled; test-store checks that on sessions of known size.)
        check(con.execute('PRAGMA auto_vacuum').fetchone()[0] == 2, 'database not in incremental auto-vacuum')
        check(con.execute('PRAGMA freelist_count').fetchone()[0] == 0, 'free pages left in the file')
        check(size_after <= size_before, 'the file grew (%d -> %d)' % (size_before, size_after))
        check(con.execute('PRAGMA integrity_check').fetchall() == [('ok',)], 'integrity_check')
        check(con.execute('PRAGMA foreign_key_check').fetchall() == [], 'foreign_key_check')
        check(con.execute('SELECT count(*) FROM stacks').fetchone()[0] == 0, 'stacks of deleted sessions left')
        con.close()


run(test)
