#!/usr/bin/env python3
"""An upgrade keeps every stored session (issue 14): a schema-12 database
with real sessions of every kind answers every report the same once the
current profd has migrated it.

A real profd records short sessions: CPU (two spin-threads runs, one with
the counters, for diff), off-CPU (offcpu-mix), memory (alloc-pattern's
leak: RSS, sampled allocations and page-faults as the second sampled
event), CUDA (fake-cudart, whose allocations succeed, with a --uprobe; and
the nvcc-built cuda-work with kernels and NVTX ranges where nvcc was
found) and Python (py-threads.py, Python frames). Every report of every
session is recorded, raw as the protocol answers it and as profctl exports
it. profd is stopped, the database is turned back into what a profd of
schema 12 left (schemadown.downgrade(): generic, from schema/0001..0012;
its sqlite_master is asserted equal to theirs), profd is started on it
again (it migrates at open), and every report must be equal to the one
before: exactly, but for the fields named in normalize().
"""
import copy
import gzip
import os
import sqlite3

from profdtest import Profd, binary, check, require_root_bpf, run, wait_for_threads
import schemadown

SCHEMA_DIR = os.environ.get('SCHEMA_DIR',
                            os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'schema'))
OLD_VERSION = 12
PYTHON = '/usr/bin/python3'
WORKLOADS = os.environ.get('PY_WORKLOADS', os.path.join(os.path.dirname(__file__), '..', 'workloads'))
SLICE = (1, 2)  # --from/--to: the second 1 s window of each session


def record_sessions(d):
    """Run every kind of session side by side (2 cores: a few seconds in all);
    return {kind: session id} once all have ended."""
    sessions = {}

    def attach(kind, pid, events, *extra):
        sessions[kind] = d.json('attach', pid, '--events', events, '--freq', '199', *extra)['session']

    def ready(w, what):
        line = w.stdout.readline()
        while line and not line.startswith('ready'):
            line = w.stdout.readline()
        check(line.startswith('ready'), '%s did not start' % what)

    # The workloads first (Python takes a while to start), then the attaches.
    py = d.spawn(PYTHON, os.path.join(WORKLOADS, 'py-threads.py'), '30')
    a = d.spawn(binary('SPIN_THREADS'), '--seconds', '30', '--weights', '1,2')
    b = d.spawn(binary('SPIN_THREADS'), '--seconds', '30', '--weights', '2,1')
    off = d.spawn(binary('OFFCPU_MIX'), '30')
    for w in (a, b):
        wait_for_threads(w.pid, 3)
    ready(off, 'offcpu-mix')
    ready(py, 'py-threads.py')
    # 8 MiB/s in touched 64 KiB blocks: 2,048 page faults a second, sampled 1 in 512.
    mem = d.spawn(binary('ALLOC_PATTERN'), 'leak', '--seconds', '15', '--rate-kib', '8192')
    ready(mem, 'alloc-pattern')
    fake = d.spawn_waiting(binary('FAKE_CUDART'))

    attach('cpu-a', a.pid, 'cpu', '--duration', '3')
    attach('cpu-b', b.pid, 'cpu,counters', '--duration', '3')
    attach('offcpu', off.pid, 'cpu,offcpu', '--duration', '3')
    # 5 s of readings every 0.25 s: 3 or more even if the loop is held a while (the first
    # malloc attach loads its BPF object, a slow step on a loaded machine).
    attach('memory', mem.pid, 'cpu,rss,malloc,page-faults', '--duration', '5', '--memory-interval', '0.25')
    attach('python', py.pid, 'cpu', '--duration', '3')
    attach('cuda-fake', fake.pid, 'cpu,cuda', '--uprobe', 'fake-cudart:work_unit')
    d.go(fake)
    for sid in list(sessions.values()):
        d.wait_ended(sid)
    # The nvcc-built program after the others: while it runs with the real
    # runtime, profd's event loop stops for seconds (no RSS reading, no
    # answer to `session`), which would leave the memory session one reading.
    cuda = os.environ.get('CUDA_WORK_SHARED')
    if cuda and os.path.exists(cuda):
        w = d.spawn_waiting(cuda)
        attach('cuda', w.pid, 'cpu,cuda,nvtx')
        d.go(w)
        d.wait_ended(sessions['cuda'])
    else:
        print('nvcc was not found at build time: the CUDA session is fake-cudart\'s only')
    for kind, sid in sessions.items():
        s = d.json('session', sid)['session']
        print('session %d (%s): %s, %d samples, ended: %s' % (sid, kind, ','.join(s['events']),
                                                             s['samples'], s['end_reason']))
    return sessions


def reports(d, sessions):
    """{name: what profd answers} for every report of every session: the raw
    responses of the protocol's reports (errors too: a report a session cannot
    give must keep refusing it the same way), and profctl's exports."""
    out = {}

    def req(name, **args):
        out[name] = d.request(dict(v=1, **args))

    def export(name, sid, *args):
        """profctl's file, decompressed if gzip (pprof: its header has a time), or its
        exit status and message where it refuses (no samples in the slice)."""
        path = os.path.join(d.dir, 'export.out')
        rc, _, err = d.ctl(*(args[:1] + (sid,) + args[1:]), '-o', path, check_rc=False)
        if rc != 0:
            out[name] = {'ok': False, 'error': {'code': 'exit %d' % rc, 'message': err}}
            return
        with open(path, 'rb') as f:
            data = f.read()
        os.unlink(path)
        out[name] = gzip.decompress(data) if data[:2] == b'\x1f\x8b' else data

    req('sessions', cmd='sessions')
    # diff is profctl's, from two top requests.
    out['diff cpu-a cpu-b'] = d.json('diff', sessions['cpu-a'], sessions['cpu-b'], '--limit', 10000)
    out['diff cpu-a cpu-b slice'] = d.json('diff', sessions['cpu-a'], sessions['cpu-b'], '--limit', 10000,
                                           '--from', SLICE[0], '--to', SLICE[1])
    # The documented views (docs/schema.md), which 0013 made read the rollups.
    for view, key in (('hot_functions', 'session_id, function, module'),
                      ('hot_paths', 'session_id, stack_id'),
                      ('thread_imbalance', 'session_id, tid'),
                      ('frame_names', 'frame_id')):
        req('sql %s' % view, cmd='sql', query='SELECT * FROM %s ORDER BY %s' % (view, key), max_rows=1000000)
    for kind, sid in sorted(sessions.items()):
        def r(name, **args):
            req('%s %s' % (name, kind), session=sid, **args)
        r('session', cmd='session')
        for py in ('clean', 'all'):
            r('top python_frames=' + py, cmd='top', limit=10000, python_frames=py)
            r('hotpaths python_frames=' + py, cmd='hotpaths', limit=10000, python_frames=py)
            r('analyze python_frames=' + py, cmd='analyze', python_frames=py)
        r('top slice', cmd='top', limit=10000, from_s=SLICE[0], to_s=SLICE[1])
        r('hotpaths slice', cmd='hotpaths', limit=10000, from_s=SLICE[0], to_s=SLICE[1])
        r('threads', cmd='threads', all=True, group_by='name', window_s=1)
        r('threads default', cmd='threads')
        r('offcpu', cmd='offcpu', limit=10000)
        r('memory', cmd='memory', limit=10000)
        r('gpu', cmd='gpu', limit=10000)
        r('ranges', cmd='ranges')
        r('profile', cmd='profile')
        r('profile per_window=false', cmd='profile', per_window=False)
        r('profile per_thread=false', cmd='profile', per_window=False, per_thread=False, packed=True)
        r('profile slice', cmd='profile', from_s=SLICE[0], to_s=SLICE[1], packed=True)
        r('top event=page-faults', cmd='top', limit=10000, event='page-faults')
        r('hotpaths event=page-faults', cmd='hotpaths', limit=10000, event='page-faults')
        r('profile event=page-faults', cmd='profile', event='page-faults', per_window=False)
        for fmt in ('pprof', 'folded', 'chrome-trace', 'speedscope'):
            export('export %s %s' % (fmt, kind), sid, 'export', '--format', fmt)
        export('export folded slice %s' % kind, sid, 'export', '--format', 'folded',
               '--from', SLICE[0], '--to', SLICE[1])
        export('flamegraph %s' % kind, sid, 'flamegraph')
        export('flamegraph inverted slice %s' % kind, sid, 'flamegraph', '--inverted',
               '--from', SLICE[0], '--to', SLICE[1])
    return out


def check_content(before, sessions):
    """The reports recorded before hold what each kind of session is for (equal
    empty reports would prove nothing): CPU samples of hot_function, both
    slices, counters, off-CPU stacks, RSS readings, allocation samples and
    page-fault samples, Python frames, CUDA calls, kernels and NVTX ranges."""
    def get(name):
        v = before[name]
        check(isinstance(v, dict) and v.get('ok', True), '%s before the downgrade: %r' % (name, v))
        return v

    for kind in ('cpu-a', 'cpu-b'):
        check(any(f['function'] == 'hot_function' for f in get('top python_frames=clean ' + kind)['functions']),
              '%s: no hot_function in top' % kind)
        check(get('top slice ' + kind)['total_samples'] > 0, '%s: no samples in the slice' % kind)
    check(get('diff cpu-a cpu-b')['functions'], 'diff lists no function')
    check(any(t['counters'].get('task-clock', {}).get('status') == 'ok' for t in get('threads cpu-b')['threads']),
          'cpu-b: no task-clock counter')
    check(get('offcpu offcpu')['stacks'], 'offcpu: no off-CPU stack')
    m = get('memory memory')
    check(m['rss'] and m['rss']['readings'] >= 3 and m['allocations'] and m['allocations']['sampled'] > 0,
          'memory: RSS readings %r, allocation samples %r' % (m['rss'] and m['rss']['readings'],
                                                             m['allocations'] and m['allocations']['sampled']))
    check(get('top event=page-faults memory')['total_samples'] > 0, 'memory: no page-fault samples')
    check(get('session python')['session']['python']['status'] == 'ok' and
          any((f['module'] or '').endswith('.py') for f in get('top python_frames=clean python')['functions']),
          'python: no Python frames')
    g = get('gpu cuda-fake')
    check(g['memory']['allocations'] > 0 and g['uprobes'], 'cuda-fake: allocations %r, uprobes %r' % (
        g['memory']['allocations'], g['uprobes']))
    if 'cuda' in sessions:
        check(get('gpu cuda')['kernels'] and get('ranges cuda')['ranges'], 'cuda: no kernels or no ranges')
    check(get('sql hot_functions')['row_count'] > 0, 'hot_functions is empty')
    print('before: %d CPU samples of cpu-a (%d in the slice), %d off-CPU stacks, %d allocation samples, '
          '%d page-fault samples, %d CUDA allocations' % (
              get('top python_frames=clean cpu-a')['total_samples'], get('top slice cpu-a')['total_samples'],
              len(get('offcpu offcpu')['stacks']), m['allocations']['sampled'],
              get('top event=page-faults memory')['total_samples'], g['memory']['allocations']))


def normalize(name, value):
    """@value of report @name without what legitimately differs after the
    downgrade and the migration (a copy; @value is left as it is).

    Nothing differs across the restart itself: an ended session's figures are
    stored, and no report carries a query time or the daemon's own state.

    What a profd of schema 12 did not record, the downgrade drops with its
    columns and tables, as that profd never wrote it: today schema 14's RSS
    split by mapping kind (/proc/PID/smaps) and its address-space changes.
    From them come, in the memory report, rss.by_mapping (the session's and
    each process's), growth and the diagnosis, which weighs the mapping kinds
    and the changes; and in analyze, the memory-growth finding's copy of that
    diagnosis (its title, verdict, evidence and suggestion). Those are left
    out here; check_old_memory() checks that the migrated session reports
    them as docs/protocol.md says of a session stored without them. And
    schema 17's counts of the BPF table walk (the default unwind, auto,
    walks the tables): a session's unwind_tables, null once migrated, as
    for any session stored before the walk. And schema 21's off-CPU sampling
    period, offcpu_period_ns in the session and offcpu reports, null once
    migrated (check_old_offcpu())."""
    if not isinstance(value, dict) or value.get('ok') is False:
        return value
    v = copy.deepcopy(value)
    if name.startswith('session'):
        for sess in [v.get('session')] + list(v.get('sessions') or []):
            if isinstance(sess, dict):
                sess.pop('unwind_tables', None)
                sess.pop('offcpu_period_ns', None)
    if name.startswith('offcpu '):
        v.pop('offcpu_period_ns', None)
    if name.startswith('memory ') and isinstance(v.get('rss'), dict):
        v['rss'].pop('by_mapping', None)
        for p in v['rss'].get('processes') or []:
            p.pop('by_mapping', None)
    if name.startswith('memory '):
        v.pop('growth', None)
        v.pop('diagnosis', None)
    if name.startswith('analyze '):
        for f in v.get('findings') or []:
            if f.get('rule') == 'memory-growth':
                for k in ('title', 'suggestion'):
                    f.pop(k, None)
                for k in ('verdict', 'diagnosis'):
                    f.get('evidence', {}).pop(k, None)
    return v


def check_old_offcpu(before, after):
    """The offcpu reports of @before (sampled with the session's period, 1 /
    199 Hz) and @after (migrated from schema 12): after, offcpu_period_ns is
    null, as for a session stored before off-CPU time was sampled."""
    name = 'offcpu offcpu'  # the offcpu-mix session, the one with the offcpu event
    check(before.get(name, {}).get('ok') is not False, 'no offcpu report of the offcpu session')
    b, a = before[name].get('offcpu_period_ns'), after[name].get('offcpu_period_ns')
    print('%s: offcpu_period_ns %r before the downgrade, %r after the migration' % (name, b, a))
    check(b == 10**9 // 199 and a is None, '%s: offcpu_period_ns %r, then %r' % (name, b, a))


def check_old_memory(before, after):
    """The memory reports of @before (recorded with schema 14's data) and
    @after (the same session, migrated from schema 12): after, no split by
    mapping kind ([]) and no address-space growth (null), as for a session
    stored before schema 14; and before, the session had both (else the
    test would not have seen the columns and the table at work)."""
    for name in sorted(before):
        if not name.startswith('memory ') or not before[name].get('ok') or not before[name].get('rss'):
            continue
        b, a = before[name], after[name]
        had = bool(b['rss']['by_mapping']) and b['growth'] is not None
        print('%s: before the downgrade, by_mapping %s and growth %s; after the migration %r and %r' % (
            name, 'set' if b['rss']['by_mapping'] else '[]', 'set' if b['growth'] else 'null',
            a['rss']['by_mapping'], a['growth']))
        check(had, '%s: the session recorded no split by mapping kind or no growth: %r / %r' % (
            name, b['rss']['by_mapping'], b['growth']))
        check(a['rss']['by_mapping'] == [] and all(p['by_mapping'] == [] for p in a['rss']['processes']) and
              a['growth'] is None, '%s after the migration: by_mapping %r, growth %r' % (
                  name, a['rss']['by_mapping'], a['growth']))


def differences(a, b, path=''):
    """Where JSON values (or bytes) @a and @b differ: a list of 'path: a != b'."""
    if type(a) is not type(b):
        return ['%s: %r != %r' % (path or '.', a, b)]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append('%s.%s: only %s' % (path, k, 'before' if k in a else 'after'))
            else:
                out += differences(a[k], b[k], '%s.%s' % (path, k))
        return out
    if isinstance(a, list):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, '%s[%d]' % (path, i))
        if len(a) != len(b):
            out.append('%s: %d items != %d' % (path, len(a), len(b)))
        return out
    if isinstance(a, bytes) and a != b:
        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return ['%s: bytes differ at %d (of %d / %d): %r != %r' % (
            path or '.', i, len(a), len(b), a[max(0, i - 40):i + 40], b[max(0, i - 40):i + 40])]
    return [] if a == b else ['%s: %r != %r' % (path or '.', a, b)]


def user_version(db):
    c = sqlite3.connect(db)
    try:
        return c.execute('PRAGMA user_version').fetchone()[0]
    finally:
        c.close()


def test():
    require_root_bpf()
    with Profd() as d:
        sessions = record_sessions(d)
        before = reports(d, sessions)
        check_content(before, sessions)
        check(d.stop() == 0, 'profd exited with %r at SIGTERM' % d.proc.returncode)

        new_version = user_version(d.db)
        done = schemadown.downgrade(d.db, SCHEMA_DIR, OLD_VERSION)
        print('schema %d -> %d: %s' % (new_version, OLD_VERSION, '; '.join(done)))
        ref = schemadown.reference(SCHEMA_DIR, OLD_VERSION)
        c = sqlite3.connect(d.db)
        want, have = schemadown.shape(ref), schemadown.shape(c)
        c.close()
        ref.close()
        check(have == want, 'the downgraded database is not schema %d: extra %r, missing %r' % (
            OLD_VERSION, sorted(set(have) - set(want)), sorted(set(want) - set(have))))
        print('sqlite_master equals that of schema/0001..%04d: %d objects' % (OLD_VERSION, len(want) - 1))

        d.start()
        migrated = user_version(d.db)
        check(migrated == new_version, 'profd left the database at schema %d, not %d' % (migrated, new_version))
        after = reports(d, sessions)
        check(sorted(before) == sorted(after), 'reports differ in names')
        differ = []
        for name in sorted(before):
            diffs = differences(normalize(name, before[name]), normalize(name, after[name]))
            diff = '; '.join(diffs[:5]) + (' (and %d more)' % (len(diffs) - 5) if len(diffs) > 5 else '') \
                if diffs else None
            v = before[name]
            ok = v['error']['code'] if isinstance(v, dict) and v.get('ok') is False else 'ok'
            print('%-6s %-50s %s' % ('same' if diff is None else 'DIFFER', name,
                                     ok if diff is None else diff))
            if diff:
                differ.append(name)
        check(not differ, '%d of %d reports changed across the migration: %s' % (len(differ), len(before),
                                                                               ', '.join(differ)))
        check_old_memory(before, after)
        check_old_offcpu(before, after)
        print('%d reports equal before the downgrade and after the migration' % len(before))


run(test)
