#!/usr/bin/env python3
"""profctl sql: the documented views answer like profctl top and threads;
writes, DROP, ATTACH, PRAGMA writes and load_extension() are refused and
the database is unchanged; a user other than root sees only its own
sessions, in the tables and in the views, and cannot read main.* directly."""
import os
import pwd
import subprocess

from profdtest import Profd, binary, check, require_root_bpf, run, skip, wait_for_threads

USER = 'profd-i8-sqltest'


created = []


def ensure_user():
    """The test user, created (and removed at the end, see test()) if missing."""
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        p = subprocess.run(['useradd', '--system', '--no-create-home', '--shell', '/usr/sbin/nologin', USER],
                           capture_output=True, text=True)
        if p.returncode != 0:
            skip('cannot create a test user with useradd: ' + p.stderr.strip())
        created.append(USER)
        return pwd.getpwnam(USER)


def as_user(u, argv, **kw):
    return ['setpriv', '--reuid=%d' % u.pw_uid, '--regid=%d' % u.pw_gid, '--clear-groups'] + list(argv)


def test():
    require_root_bpf()
    try:
        run_as_users()
    finally:
        for name in created:
            subprocess.run(['userdel', name], capture_output=True)


def run_as_users():
    spin = binary('SPIN_THREADS')
    user = ensure_user()
    with Profd() as d:
        os.chmod(d.dir, 0o755)  # the other user reaches the socket
        w = d.spawn(spin, '--seconds', '3', '--weights', '1,2,3')
        wait_for_threads(w.pid, 4)
        root_sid = d.json('attach', w.pid, '--freq', '397')['session']
        w.communicate(timeout=30)
        d.wait_ended(root_sid)

        # The user profiles its own process.
        uw = d.spawn(*as_user(user, [spin, '--seconds', '3', '--weights', '1']))
        wait_for_threads(uw.pid, 2)
        ctl = [d.profctl, '--socket', d.socket]
        p = subprocess.run(as_user(user, ctl + ['--json', 'attach', str(uw.pid), '--freq', '397']),
                           capture_output=True, text=True)
        check(p.returncode == 0, 'attach as %s failed: %s' % (USER, p.stderr))
        import json
        user_sid = json.loads(p.stdout)['session']
        uw.communicate(timeout=30)
        d.wait_ended(user_sid)

        # Views agree with the reports.
        top = d.json('top', root_sid, '--limit', '1')
        r = d.json('sql', 'SELECT function, self_samples FROM hot_functions WHERE session_id = %d'
                   ' ORDER BY self_samples DESC LIMIT 1' % root_sid)
        check(r['columns'] == ['function', 'self_samples'], 'columns %r' % r['columns'])
        check(r['rows'][0] == [top['functions'][0]['function'], top['functions'][0]['self_samples']],
              'hot_functions %r, top %r' % (r['rows'][0], top['functions'][0]))
        r = d.json('sql', 'SELECT sum(samples) FROM hot_paths WHERE session_id = %d' % root_sid)
        check(r['rows'][0][0] == top['total_samples'], 'hot_paths sum %r, total %d' % (r['rows'], top['total_samples']))
        r = d.json('sql', "SELECT name, share_pct FROM thread_imbalance WHERE session_id = %d AND name = 'worker-3'" % root_sid)
        check(len(r['rows']) == 1 and 35 < r['rows'][0][1] < 65, 'thread_imbalance %r' % r['rows'])
        csv = subprocess.run([d.profctl, '--socket', d.socket, 'sql', "SELECT 1 AS n, 'a,b' AS s", '--csv'],
                             capture_output=True).stdout
        check(csv == b'n,s\r\n1,"a,b"\r\n', 'csv %r' % csv)
        r = d.json('sql', 'SELECT * FROM samples', '--max-rows', '2')
        check(r['truncated'] and len(r['rows']) == 2, 'max-rows: %r' % {k: r[k] for k in ('truncated', 'row_count')})

        # Refused: writes, DROP, ATTACH, PRAGMA writes, load_extension; nothing changes.
        before = d.json('sql', 'SELECT count(*) FROM samples')['rows']
        for sql, word in [('INSERT INTO sessions (pid) VALUES (1)', 'only SELECT'),
                          ('DELETE FROM samples', 'only SELECT'),
                          ('DROP TABLE samples', 'only SELECT'),
                          ("ATTACH DATABASE '%s/x.db' AS x" % d.dir, 'ATTACH'),
                          ('PRAGMA user_version = 99', 'PRAGMA'),
                          ('PRAGMA journal_mode = DELETE', 'PRAGMA'),
                          ("SELECT load_extension('/tmp/x.so')", 'load_extension'),
                          ('SELECT 1; DELETE FROM samples', 'one statement'),
                          # Bounded: no value beyond the result cap, no statement beyond 5 s.
                          ('SELECT length(randomblob(100000000))', 'too big'),
                          ('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)'
                           ' SELECT count(*) FROM c', 'stopped after 5 s')]:
            rc, out, err = d.ctl('sql', sql, check_rc=False)
            check(rc == 1 and word in err, '%r: rc %d, stderr %r' % (sql, rc, err))
        check(d.json('sql', 'SELECT count(*) FROM samples')['rows'] == before, 'samples changed')
        check(d.json('sql', 'PRAGMA user_version')['rows'][0][0] >= 11, 'user_version')
        check(not os.path.exists(os.path.join(d.dir, 'x.db')), 'ATTACH created a file')

        # The other user: only its own session, everywhere.
        def user_sql(sql):
            p = subprocess.run(as_user(user, ctl + ['--json', 'sql', sql]), capture_output=True, text=True)
            return p.returncode, (json.loads(p.stdout) if p.returncode == 0 else None), p.stderr

        rc, r, err = user_sql('SELECT id FROM sessions')
        check(rc == 0 and r['rows'] == [[user_sid]], 'user sees sessions %r (%s)' % (r and r['rows'], err))
        for table in ('samples', 'threads', 'windows', 'hot_functions', 'thread_imbalance', 'hot_paths'):
            rc, r, err = user_sql('SELECT DISTINCT session_id FROM %s' % table)
            check(rc == 0 and r['rows'] == [[user_sid]], 'user sees %s of sessions %r (%s)' % (table, r and r['rows'], err))
        rc, r, _ = user_sql("SELECT count(*) FROM frames WHERE function = 'hot_function'")
        check(rc == 0 and r['rows'][0][0] >= 1, 'user does not see its own frames')
        rc, r, _ = user_sql('SELECT count(*) FROM stacks')
        own = d.json('sql', 'SELECT count(*) FROM (SELECT stack_id FROM samples WHERE session_id = %d'
                     ' UNION SELECT stack_id FROM offcpu WHERE session_id = %d'
                     ' UNION SELECT stack_id FROM event_samples WHERE session_id = %d'
                     ' UNION SELECT stack_id FROM vm_changes WHERE session_id = %d)'
                     % (user_sid, user_sid, user_sid, user_sid))['rows'][0][0]
        check(rc == 0 and r['rows'][0][0] == own, 'user sees %r stacks, owns %d' % (r and r['rows'], own))
        for sql in ('SELECT count(*) FROM main.samples', 'SELECT * FROM main.sessions'):
            rc, _, err = user_sql(sql)
            check(rc == 1 and 'own sessions' in err, '%r as user: rc %d %r' % (sql, rc, err))
        # As root, everything.
        r = d.json('sql', 'SELECT count(*) FROM sessions')
        check(r['rows'][0][0] == 2, 'root sees %r sessions' % r['rows'])


run(test)
