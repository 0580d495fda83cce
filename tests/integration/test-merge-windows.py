#!/usr/bin/env python3
"""Windows merged as they age, on a real profd and a real session: with
--merge-windows-after 3 --merged-window 4, a session's 1 s windows become
4 s windows while it runs and after it ends; whole-session reports answer
the same before and after; the rows keep every sample (and the rollups
equal their sums); a time range reaching merged windows says at which
resolution it was read, in --json and in the text."""
import sqlite3
import time

from profdtest import Profd, check, require_root_bpf, run

AFTER_S, WINDOW_S = 3, 4


def merged_until(db, sid):
    con = sqlite3.connect('file:%s?mode=ro' % db, uri=True)
    try:
        return con.execute('SELECT merged_until_ns - started_at_ns, ended_at_ns - started_at_ns '
                           'FROM sessions WHERE id = ?', (sid,)).fetchone()
    finally:
        con.close()


def test():
    require_root_bpf()
    with Profd(['--merge-windows-after', str(AFTER_S), '--merged-window', str(WINDOW_S)]) as d:
        w = d.spin('1,1')
        sid = d.json('attach', w.pid, '--freq', 199, '--duration', '10',
                     '--events', 'cpu,offcpu,counters')['session']
        # Merged while it runs: the first windows are older than 3 s after ~7 s.
        deadline = time.time() + 30
        while time.time() < deadline and (merged_until(d.db, sid)[0] or 0) < WINDOW_S * 10**9:
            time.sleep(0.2)
        running_mark = merged_until(d.db, sid)[0] or 0
        check(running_mark >= WINDOW_S * 10**9, 'no window merged while the session ran')
        while d.json('session', sid)['session']['state'] != 'ended':
            time.sleep(0.2)
        before = {cmd: d.json(cmd, sid) for cmd in ('top', 'hotpaths', 'threads', 'offcpu')}

        # Every window, up to the one that holds the session's end.
        deadline = time.time() + 30
        while time.time() < deadline:
            mark, end = merged_until(d.db, sid)
            if mark is not None and mark >= end:
                break
            time.sleep(0.2)
        mark, end = merged_until(d.db, sid)
        check(mark is not None and mark >= end, 'windows not merged to the end: %r of %r' % (mark, end))
        print('merged up to %.0f s of a %.1f s session (%.0f s while it ran)' % (
            mark / 1e9, end / 1e9, running_mark / 1e9))
        after = {cmd: d.json(cmd, sid) for cmd in before}
        for cmd in before:
            check(after[cmd] == before[cmd], '%s differs after the merge:\n%r\n%r' % (cmd, before[cmd], after[cmd]))

        con = sqlite3.connect('file:%s?mode=ro' % d.db, uri=True)
        stored = con.execute('SELECT samples, started_at_ns FROM sessions WHERE id = ?', (sid,)).fetchone()
        rows = con.execute('SELECT sum(count), count(DISTINCT window_ns) FROM samples WHERE session_id = ?',
                           (sid,)).fetchone()
        windows = con.execute('SELECT sum(samples), count(*) FROM windows WHERE session_id = ?', (sid,)).fetchone()
        aligned = con.execute('SELECT count(*) FROM samples WHERE session_id = ?1 AND '
                              '(window_ns - ?2) % ?3 <> 0', (sid, stored[1], WINDOW_S * 10**9)).fetchone()[0]
        mismatched = con.execute(
            'SELECT count(*) FROM (SELECT tid, stack_id, sum(count) AS n FROM samples WHERE session_id = ?1 '
            'GROUP BY 1, 2) r FULL OUTER JOIN (SELECT * FROM sample_totals WHERE session_id = ?1) t '
            'USING (tid, stack_id) WHERE r.n IS NOT t.count', (sid,)).fetchone()[0]
        counters = con.execute('SELECT count(DISTINCT window_ns) FROM thread_counters WHERE session_id = ?',
                               (sid,)).fetchone()[0]
        con.close()
        print('%d samples in %d windows of samples, %d of counters, %d rows of windows; %d rows off the 4 s grid'
              % (rows[0], rows[1], counters, windows[1], aligned))
        check(stored[0] > 100, 'too few samples: %d' % stored[0])
        check(rows[0] == stored[0] == before['top']['total_samples'] == windows[0],
              'samples lost or doubled: rows %d, session %d, top %d, windows %d' % (
                  rows[0], stored[0], before['top']['total_samples'], windows[0]))
        check(mismatched == 0, '%d rollup rows differ from the merged rows' % mismatched)
        # 10 s in 4 s windows: 3 of them (a late row may keep its 1 s window).
        check(rows[1] <= 4 and windows[1] <= 4 and counters <= 4,
              'windows not merged: %d, %d, %d distinct' % (rows[1], windows[1], counters))
        check(aligned <= 2, '%d rows off the merged windows' % aligned)

        # A slice of one second reaches a merged window: read whole, and said.
        top = d.json('top', sid, '--from', '5', '--to', '6')
        print('top --from 5 --to 6: %d samples, covered %s-%s s at %s s' % (
            top['total_samples'], top['covered_from_s'], top['covered_to_s'], top['resolution_s']))
        check(top['resolution_s'] == WINDOW_S and top['covered_from_s'] == 4 and top['covered_to_s'] == 8,
              'resolution not stated: %r' % {k: top.get(k) for k in ('from_s', 'to_s', 'covered_from_s',
                                                                    'covered_to_s', 'resolution_s')})
        check(top['total_samples'] > 0, 'the slice has no samples')
        _, text, _ = d.ctl('top', sid, '--from', '5', '--to', '6')
        check('time range read at 4 s windows' in text, 'the text does not say the resolution:\n' + text)

        # Per-window imbalance cannot split a merged window: 4 s windows, all samples.
        th = d.json('threads', sid, '--window', '1')
        check(th['window_s'] == WINDOW_S, 'threads --window 1 used %r s windows' % th.get('window_s'))
        check(all(x['start_s'] % WINDOW_S == 0 for x in th['windows']) and
              sum(x['samples'] for x in th['windows']) == stored[0],
              'threads windows: %r' % [(x['start_s'], x['samples']) for x in th['windows']])

        # A restart keeps it all.
        d.stop()
        d.start()
        check(d.json('top', sid) == before['top'], 'top differs after a restart')


run(test)
