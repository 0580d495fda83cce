#!/usr/bin/env python3
"""profctl fleet top, hotpaths and sql against a real ClickHouse server
(clickhousetest.py) holding the tables profd ships (docs/fleet.md), with
rows of 2 hosts x 2 sessions whose stacks and counts are known: the totals,
the hot function's self and total samples, the --host/--comm/--label/
--since/--event filters, the hosts and sessions counts, the hot paths'
order and frames, read-only SQL (writes refused, nothing changed), and the
errors a user meets: no server given, nothing listening, a wrong password,
an unknown database, a bad query.

The tables are profd's own: a real profd with --clickhouse-url creates
them (at its first connection, before any session), then the rows go in
by column name, so the test fails if the daemon's tables change under
the client. Skips (77) without clickhouse-server, or without root (profd).
"""
import json
import os
import subprocess
import tempfile
import time

from clickhousetest import TEST_PASSWORD, TEST_USER, ClickHouse, free_port
from profdtest import Failure, Profd, binary, check, require_root_bpf, run

APP, LIBC, KERNEL = '/usr/bin/app', '/usr/lib/x86_64-linux-gnu/libc.so.6', '[kernel.kallsyms]'

# Leaf first, as profd's reports and the stacks table give them.
STACKS = {
    'S1': [('hot_loop', APP, 'user'), ('compute', APP, 'user'), ('main', APP, 'user')],
    'S2': [('memcpy', LIBC, 'user'), ('hot_loop', APP, 'user'), ('compute', APP, 'user'),
           ('main', APP, 'user')],
    'S3': [('recurse', APP, 'user'), ('recurse', APP, 'user'), ('recurse', APP, 'user'),
           ('main', APP, 'user')],
    'S4': [('read_disk', APP, 'user'), ('io_thread', APP, 'user'), ('start_thread', LIBC, 'user')],
    'S5': [('app+0x1a2f', APP, 'user'), ('main', APP, 'user')],
    'S6': [('copy_user_generic', KERNEL, 'kernel'), ('__x64_sys_read', KERNEL, 'kernel'),
           ('read_disk', APP, 'user'), ('io_thread', APP, 'user'), ('start_thread', LIBC, 'user')],
}


def stack_hash(frames):
    """FNV-1a 64 over function NUL module NUL of each frame, leaf first (fleet-design.md)."""
    h = 0xcbf29ce484222325
    for function, module, _ in frames:
        for b in function.encode() + b'\0' + module.encode() + b'\0':
            h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


HASH = {name: stack_hash(frames) for name, frames in STACKS.items()}

# (host, session, comm, label, minutes ago, [(event, stack, tid, count)])
SESSIONS = [
    ('alpha', 1, 'trainer', 'exp-a', 5,
     [('cpu', 'S1', 11, 300), ('cpu', 'S1', 12, 200), ('cpu', 'S2', 11, 100), ('cpu', 'S3', 12, 50)]),
    ('alpha', 2, 'server', 'prod', 10, [('cpu', 'S4', 21, 200), ('cpu', 'S6', 21, 30)]),
    ('beta', 1, 'trainer', 'exp-b', 20,
     [('cpu', 'S1', 31, 300), ('cpu', 'S5', 31, 20), ('page-faults', 'S2', 31, 77)]),
    # Three hours old: outside the default --since 1h.
    ('beta', 7, 'trainer', 'exp-a', 180, [('cpu', 'S1', 41, 1000)]),
]
# lost_samples per session; alpha/1 was shipped twice, the newer row (version 2) counts.
LOST = {('alpha', 1): [(1, 3), (2, 5)], ('alpha', 2): [(1, 0)], ('beta', 1): [(1, 2)],
        ('beta', 7): [(1, 9)]}


def sql_str(s):
    return "'" + s.replace('\\', '\\\\').replace("'", "\\'") + "'"


def sql_array(items):
    return '[' + ','.join(sql_str(i) for i in items) + ']'


# The columns the rows below give, by name: a column the client reads that
# profd renames, drops or retypes fails the INSERT; one it adds takes its default.
STACK_COLUMNS = 'stack_hash, functions, modules, kinds, depth, truncated'
SESSION_COLUMNS = ('host, session_id, pid, comm, exe, label, uid, user, event, events, freq_hz, '
                   'started_at, started_at_ns, ended_at_ns, state, end_reason, samples, lost_samples, '
                   'truncated_stacks, missing_user_stacks, unsymbolized_frames, limit_dropped_samples, version')
SAMPLE_COLUMNS = ('host, session_id, chunk_ns, event, minute, tid, thread, pid, comm, label, user, '
                  'stack_hash, count')


def profd_tables(ch):
    """The database and tables profd creates: a profd with --clickhouse-url makes
    them at its first connection to the server, at start, with no session."""
    want = {'sessions', 'stacks', 'samples'}
    with Profd(['--clickhouse-url', ch.url, '--host-name', 'fleet-cli']) as d:
        deadline = time.time() + 30
        while time.time() < deadline:
            got = set(ch.query("SELECT name FROM system.tables WHERE database = 'profd'").split())
            if want <= got:
                return
            time.sleep(0.1)
        raise Failure('profd did not create its ClickHouse tables within 30 s (has %s):\n%s'
                      % (sorted(got), d.logtext()))


def load(ch):
    profd_tables(ch)
    rows = []
    for name, frames in STACKS.items():
        rows.append('(%d,%s,%s,%s,%d,0)' % (HASH[name], sql_array(f for f, _, _ in frames),
                                            sql_array(m for _, m, _ in frames),
                                            sql_array(k for _, _, k in frames), len(frames)))
    # S1 twice, as a second host's shipping leaves it until the table merges.
    ch.query('INSERT INTO stacks (%s) VALUES %s' % (STACK_COLUMNS, ','.join(rows + rows[:1])),
             database='profd')
    now = int(time.time())
    rows = []
    srows = []
    for host, session, comm, label, ago, samples in SESSIONS:
        start = now - ago * 60
        for version, lost in LOST[(host, session)]:
            srows.append("(%s,%d,4242,%s,'/usr/bin/app',%s,0,'root','cpu-clock','cpu',99,"
                         "toDateTime(%d),%d,0,'running','',0,%d,1,2,3,0,%d)"
                         % (sql_str(host), session, sql_str(comm), sql_str(label), start,
                            start * 10**9, lost, version))
        for event, stack, tid, count in samples:
            rows.append('(%s,%d,%d,%s,toDateTime(%d),%d,%s,4242,%s,%s,\'root\',%d,%d)'
                        % (sql_str(host), session, start * 10**9, sql_str(event), start, tid,
                           sql_str('worker-%d' % tid), sql_str(comm), sql_str(label),
                           HASH[stack], count))
    ch.query('INSERT INTO sessions (%s) VALUES %s' % (SESSION_COLUMNS, ','.join(srows)),
             database='profd')
    ch.query('INSERT INTO samples (%s) VALUES %s' % (SAMPLE_COLUMNS, ','.join(rows)), database='profd')


def main():
    require_root_bpf()
    profctl = binary('PROFCTL')
    with ClickHouse() as ch, tempfile.TemporaryDirectory(prefix='fleet-cli-') as tmp:
        load(ch)
        env = dict(os.environ, PROFD_CONFIG=os.path.join(tmp, 'none.conf'), LC_ALL='C.UTF-8')
        env.pop('PROFD_CLICKHOUSE_URL', None)

        def ctl(*args, rc=0, env_extra=None, url=ch.url):
            argv = [profctl, 'fleet'] + list(args) + (['--clickhouse-url', url] if url else [])
            p = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                               env=dict(env, **(env_extra or {})))
            check(p.returncode == rc, '%s: exit %d, not %d\nstdout: %s\nstderr: %s'
                  % (' '.join(argv[1:]), p.returncode, rc, p.stdout[-2000:], p.stderr))
            return p

        def js(*args, **kw):
            return json.loads(ctl(*args, '--json', **kw).stdout)

        def fn(top, name):
            for f in top['functions']:
                if f['function'] == name:
                    return f
            raise Failure('%s not in fleet top: %s' % (name, [f['function'] for f in top['functions']]))

        # top: every CPU sample of the last hour, 2 hosts, 3 sessions (beta/7 is older).
        top = js('top')
        check(top['total_samples'] == 1200, 'fleet top total %d, not 1200' % top['total_samples'])
        check(top['hosts'] == 2 and top['sessions'] == 3,
              'hosts %d sessions %d, not 2 and 3' % (top['hosts'], top['sessions']))
        check(top['session'] is None and top['event'] == 'cpu' and top['since_s'] == 3600,
              'fleet top head: %r' % {k: top[k] for k in ('session', 'event', 'since_s')})
        hot = top['functions'][0]
        check(hot['function'] == 'hot_loop' and hot['module'] == APP,
              'hottest function %r, not hot_loop' % hot)
        check(hot['self_samples'] == 800 and hot['total_samples'] == 900,
              'hot_loop self %d total %d, not 800 and 900' % (hot['self_samples'], hot['total_samples']))
        check(hot['self_pct'] == 66.7 and hot['total_pct'] == 75.0, 'hot_loop pcts %r' % hot)
        order = [f['function'] for f in top['functions'] if f['self_samples'] > 0]
        check(order == ['hot_loop', 'read_disk', 'memcpy', 'recurse', 'copy_user_generic', 'app+0x1a2f'],
              'order by self samples: %s' % order)
        check(fn(top, 'main')['self_samples'] == 0 and fn(top, 'main')['total_samples'] == 970,
              'main: %r' % fn(top, 'main'))
        check(fn(top, 'recurse')['total_samples'] == 50, 'recursion counted more than once: %r'
              % fn(top, 'recurse'))
        check(fn(top, 'read_disk')['total_samples'] == 230, 'read_disk: %r' % fn(top, 'read_disk'))
        check(fn(top, 'copy_user_generic')['kind'] == 'kernel', 'kernel kind lost')
        # Loss counters: of the sessions counted, the newest row of each (alpha/1: 5, not 3 + 5).
        check(top['lost_samples'] == 7 and top['truncated_stacks'] == 3,
              'counters %r' % {k: top[k] for k in ('lost_samples', 'truncated_stacks')})
        check(len(js('top', '--limit', '2')['functions']) == 2, '--limit 2')

        # The human table: the same printer as profctl top, with a fleet header.
        text = ctl('top').stdout
        lines = text.splitlines()
        check(lines[0].startswith('fleet: 2 hosts, 3 sessions, last 1h: 1200 samples (cpu)'),
              'header: %r' % lines[0])
        check('lost samples: 7,' in text, 'counters line: %r' % text)
        row = next((l for l in lines if 'hot_loop' in l), '')
        check(row.split()[:4] == ['66.7', '800', '75.0', '900'] and 'app' in row,
              'hot_loop row: %r' % row)

        # Filters.
        t = js('top', '--host', 'beta')
        check(t['total_samples'] == 320 and t['hosts'] == 1 and t['sessions'] == 1 and
              t['functions'][0]['function'] == 'hot_loop' and t['functions'][0]['self_samples'] == 300,
              '--host beta: %r' % t)
        t = js('top', '--comm', 'server')
        check(t['total_samples'] == 230 and t['functions'][0]['function'] == 'read_disk' and
              t['sessions'] == 1, '--comm server: %r' % t)
        t = js('top', '--label', 'exp-a')
        check(t['total_samples'] == 650 and t['sessions'] == 1, '--label exp-a: %r' % t)
        t = js('top', '--since', '4h')
        check(t['total_samples'] == 2200 and t['sessions'] == 4 and t['since_s'] == 14400 and
              t['functions'][0]['self_samples'] == 1800, '--since 4h: %r' % t)
        t = js('top', '--since', '15m')
        check(t['total_samples'] == 880 and t['sessions'] == 2, '--since 15m: %r' % t)
        t = js('top', '--event', 'page-faults')
        check(t['total_samples'] == 77 and t['functions'][0]['function'] == 'memcpy' and
              t['event'] == 'page-faults', '--event page-faults: %r' % t)
        t = js('top', '--host', "no'such\\host")
        check(t['total_samples'] == 0 and t['hosts'] == 0 and t['functions'] == [],
              'a host with quotes matches nothing: %r' % t)
        check('no samples' in ctl('top', '--host', 'nosuch').stdout, 'empty top says no samples')

        # hotpaths: the hottest stacks, merged over hosts, frames leaf first.
        hp = js('hotpaths')
        got = [(p['samples'], [f['function'] for f in p['frames']]) for p in hp['paths']]
        want = [(800, ['hot_loop', 'compute', 'main']),
                (200, ['read_disk', 'io_thread', 'start_thread']),
                (100, ['memcpy', 'hot_loop', 'compute', 'main']),
                (50, ['recurse', 'recurse', 'recurse', 'main']),
                (30, ['copy_user_generic', '__x64_sys_read', 'read_disk', 'io_thread', 'start_thread']),
                (20, ['app+0x1a2f', 'main'])]
        check(got == want, 'fleet hotpaths:\n%r\nnot\n%r' % (got, want))
        check(hp['total_samples'] == 1200 and hp['hosts'] == 2 and hp['paths'][0]['pct'] == 66.7,
              'hotpaths head: %r' % {k: hp[k] for k in ('total_samples', 'hosts')})
        check(hp['paths'][4]['frames'][0]['module'] == KERNEL and
              hp['paths'][4]['frames'][0]['kind'] == 'kernel', 'kernel frame: %r' % hp['paths'][4])
        check(len(js('hotpaths', '--limit', '2')['paths']) == 2, 'hotpaths --limit 2')
        text = ctl('hotpaths', '--ascii').stdout
        check(text.startswith('fleet: 2 hosts, 3 sessions, last 1h: 1200 samples; the 6 hottest '
                              'paths hold 1200 (100.0%)'), 'hotpaths header: %r' % text[:200])
        tree = text[text.index('CALL TREE'):].splitlines()[1:]
        check(tree[0].split()[:2] == ['970', '80.8%'] and 'main [app]' in tree[0] and 'compute' in tree[1]
              and 'hot_loop' in tree[2] and '[app]' in tree[2],
              'call tree, callers first:\n' + '\n'.join(tree))

        # sql: read-only passthrough, printed as profctl sql prints.
        q = 'SELECT host, sum(count) AS n FROM samples WHERE event = \'cpu\' GROUP BY host ORDER BY host'
        text = ctl('sql', q).stdout
        check(text.split() == ['host', 'n', 'alpha', '880', 'beta', '1320', '(2', 'rows)'],
              'fleet sql table: %r' % text)
        r = js('sql', q)
        check(r['columns'] == ['host', 'n'] and r['rows'] == [['alpha', 880], ['beta', 1320]] and
              r['row_count'] == 2 and r['truncated'] is False, 'fleet sql --json: %r' % r)
        # (text mode reads CRLF as \n)
        check(ctl('sql', q, '--csv').stdout == 'host,n\nalpha,880\nbeta,1320\n', 'fleet sql --csv')
        r = js('sql', 'SELECT stack_hash, functions FROM stacks WHERE stack_hash = %d LIMIT 1' % HASH['S1'])
        h = r['rows'][0][0]
        check(h == HASH['S1'] or h == str(HASH['S1']), 'a UInt64 over 2^63 kept whole: %r' % h)
        check(r['rows'][0][1] == ['hot_loop', 'compute', 'main'], 'an Array column: %r' % r)
        for write in ('INSERT INTO samples (host, count) VALUES (\'evil\', 1)', 'DROP TABLE samples',
                      'CREATE TABLE x (a UInt8) ENGINE = Memory'):
            p = ctl('sql', write, rc=1)
            check('readonly' in p.stderr and p.stderr.count('\n') == 1 and p.stdout == '',
                  '%s not refused in one line: %r' % (write, p.stderr))
        check(ch.query('SELECT count(), sum(count) FROM samples', database='profd').split() == ['10', '2277'],
              'the samples table changed under fleet sql')
        p = ctl('sql', 'SELEC 1', rc=1)
        check(p.stderr.startswith('profctl: error: ClickHouse at %s: HTTP 400: Syntax error' % ch.url)
              and p.stderr.count('\n') == 1, 'syntax error: %r' % p.stderr)

        # Where the server is: the environment, then profd.conf.
        p = ctl('top', url=None, rc=2)
        check('--clickhouse-url' in p.stderr and 'PROFD_CLICKHOUSE_URL' in p.stderr,
              'no server given: %r' % p.stderr)
        t = json.loads(ctl('top', '--json', url=None, env_extra={'PROFD_CLICKHOUSE_URL': ch.url}).stdout)
        check(t['total_samples'] == 1200, '$PROFD_CLICKHOUSE_URL')
        pw = os.path.join(tmp, 'password')
        with open(pw, 'w') as f:
            f.write(TEST_PASSWORD + '\n')
        bad = os.path.join(tmp, 'bad-password')
        with open(bad, 'w') as f:
            f.write('wrong\n')
        conf = os.path.join(tmp, 'profd.conf')
        for password_file, rc in ((pw, 0), (bad, 1)):
            with open(conf, 'w') as f:
                f.write('[daemon]\nsocket = /run/x.sock\n[fleet]\nclickhouse_url = %s\n'
                        'clickhouse_user = %s\nclickhouse_password_file = %s\n'
                        % (ch.url, TEST_USER, password_file))
            p = ctl('top', url=None, rc=rc, env_extra={'PROFD_CONFIG': conf})
            check(p.stdout.startswith('fleet: 2 hosts') if rc == 0 else
                  'authentication failed' in p.stderr,
                  'profd.conf [fleet] url and credentials (%s): %r' % (password_file, p.stderr))

        # Errors: one line, ClickHouse's own message, exit 1.
        p = ctl('top', '--user', TEST_USER, '--password-file', bad, rc=1)
        check('authentication failed' in p.stderr and 'password' in p.stderr.lower() and
              p.stderr.count('\n') == 1, 'wrong password: %r' % p.stderr)
        p = ctl('top', '--user', TEST_USER, '--password-file', pw)
        check(p.stdout.startswith('fleet: 2 hosts'), 'the right password')
        p = ctl('top', '--user', 'nobody_here', rc=1)
        check('authentication failed' in p.stderr and 'nobody_here' in p.stderr, 'unknown user: %r' % p.stderr)
        p = ctl('top', url='http://127.0.0.1:%d' % free_port(), rc=1)
        check(p.stderr.endswith(': connection refused\n') and p.stderr.count('\n') == 1,
              'connection refused: %r' % p.stderr)
        p = ctl('hotpaths', '--database', 'nosuch', rc=1)
        check("HTTP 404: Database nosuch doesn't exist (code 81)" in p.stderr, 'unknown database: %r' % p.stderr)
        p = ctl('top', '--password-file', os.path.join(tmp, 'missing'), rc=1)
        check('cannot read the password file' in p.stderr, 'missing password file: %r' % p.stderr)
        ctl('top', '--since', 'yesterday', rc=2)
        ctl('sql', rc=2)
        ctl('sql', 'SELECT 1', '--host', 'alpha', rc=2)
        ctl('flame', rc=2)


run(main)
