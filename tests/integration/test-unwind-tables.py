#!/usr/bin/env python3
"""--unwind tables (the user stack walked in BPF from compiled CFI tables,
the stack copy + libdw only where the walk stops early) against --unwind
dwarf on the same programs, as a user sees them, and the default (auto:
the same walk, with the frame-pointer walk as well in its fallbacks): deep-nofp (no frame
pointers, libc's qsort and std::sort) has the same hot path and the same
hottest functions and 100% of its stacks reach the thread's root, most of
its samples are walked in BPF, and the samples that fell back are counted
by reason in the session; spin-threads (four threads) has the same hottest
function and per-thread split; a Python program has the same Python hot
path, Python frames merged into walked stacks; a JIT leaf (no mapping
file) falls back visibly, counted under no_mapping, and with the default its
hottest function is still found (the frame-pointer walk). Off the CPU,
a Python program's waits are walked in BPF too, with the stacks dwarf
gives, counted apart (unwind_tables.offcpu). Module tables load on
demand, so each run starts with a few fallbacks (no_process, no_table).
Compiled tables are kept on disk by build ID (cfi-cache/ beside the
database): a restarted profd reads them instead of compiling, so a short
auto session walks too, with the same whole stacks; a damaged file is
refused, counted and compiled again to the same rows; a smaller bound
evicts at the start. Without the cache (--cfi-cache-bytes 0), a short auto
session (duration x frequency under 20,000 samples) does not walk: its
tables would cost more to compile than the walk saves.
The row array (kernel memory, grown from 512 KiB as modules load) exists
only while a walking session runs: not in an idle profd, not after the
session ends; it holds what the loaded modules need (on deep-nofp, the
first 512 KiB while they fit)."""
import glob
import os
import time

from profdtest import Profd, binary, build_id, check, require_root_bpf, run, wait_for_threads

ROOTS = {'_start', '__libc_start_main', '__libc_start_call_main', 'main', 'start_thread',
         'clone', 'clone3', '__clone3'}
WORKLOADS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'workloads')
PYTHON = '/usr/bin/python3'


def names(frames):
    return [f['function'] for f in frames]


FIRST_ROWS = 64 << 10  # daemon/collect/cfi_maps.h CFI_MAPS_FIRST_ROWS
BPF_F_MMAPABLE = 1 << 10
BPF_F_INNER_MAP = 1 << 12


def row_arrays(pid):
    """Process @pid's mmap-able inner BPF array maps (the CFI row array:
    cfi_maps.c, the only map profd makes with these flags), from
    /proc/PID/fdinfo: a list of their sizes in rows."""
    found = []
    flags = BPF_F_MMAPABLE | BPF_F_INNER_MAP
    for path in glob.glob('/proc/%d/fdinfo/*' % pid):
        try:
            with open(path) as f:
                info = dict(line.split(':', 1) for line in f if ':' in line)
        except OSError:  # an fd closed meanwhile
            continue
        if info.get('map_type', '').strip() == '2' and \
                int(info.get('map_flags', '0').strip(), 16) & flags == flags:
            found.append(int(info.get('max_entries', '0')))
    return found


def row_array_ok(rows, used):
    """Whether a row array of @rows rows is what cfi_maps.c makes for @used
    rows: the first one (CFI_MAPS_FIRST_ROWS) while they fit; once grown
    (rows_grow(): by half, or to what a module needs, in whole first-array
    steps), room for them and no more than half as much again, rounded up
    to a whole step."""
    if used <= FIRST_ROWS:
        return rows == FIRST_ROWS
    return used <= rows <= -(-(used + used // 2) // FIRST_ROWS) * FIRST_ROWS


def wait_row_arrays(d, present, what):
    """Wait up to 5 s until profd has a row array (@present) or none."""
    deadline = time.time() + 5
    while bool(row_arrays(d.proc.pid)) != present and time.time() < deadline:
        time.sleep(0.05)
    arrays = row_arrays(d.proc.pid)
    print('%s: row arrays %r' % (what, arrays))
    check(bool(arrays) == present, '%s: profd has row arrays %r' % (what, arrays))


def session_run(d, argv, mode, threads=1, extra=(), row_pairs=False):
    """Run @argv to its end in a session with --unwind @mode (None: the
    default, auto); (session object, top, hotpaths). The session object
    gains 'row_array_peak', the largest row array seen while @argv ran
    (rows, 0 for none), and, with @row_pairs when the mode walks,
    'row_arrays': the (row_array_rows, rows) pairs the ping gave meanwhile,
    each read at one instant (a profctl run every 0.1 s)."""
    w = d.spawn(*argv)
    wait_for_threads(w.pid, threads)
    if argv[0] == PYTHON:
        line = w.stdout.readline()
        while line and not line.startswith('ready'):
            line = w.stdout.readline()
    unwind = ('--unwind', mode) if mode else ()
    mode = mode or 'auto'
    walks = mode in ('tables', 'auto')
    sid = d.json('attach', w.pid, *unwind, '--freq', '397', *extra)['session']
    if walks:
        wait_row_arrays(d, True, 'during a %s session' % mode)
    peak, pairs, deadline = 0, set(), time.time() + 60
    while w.poll() is None and time.time() < deadline:
        peak = max([peak] + row_arrays(d.proc.pid))
        t = d.json('ping')['unwind_tables'] if walks and row_pairs else None
        if t and t['row_array_rows']:
            pairs.add((t['row_array_rows'], t['rows']))
        time.sleep(0.1)
    w.wait(timeout=1)
    s = d.wait_ended(sid)
    s.update(row_array_peak=peak, row_arrays=sorted(pairs))
    if walks:
        wait_row_arrays(d, False, 'after the %s session' % mode)
    top = d.json('top', sid, '--limit', '10000')
    paths = d.json('hotpaths', sid, '--limit', '20')['paths']
    t = s['unwind_tables']
    print('%s %s: %d samples, root %.1f%%, truncated %d, lost %d, row array %d rows, '
          'unwind_tables %r' % (
              os.path.basename(argv[-2] if argv[0] == PYTHON else argv[0]), mode, s['samples'],
              top['root_pct'], s['truncated_stacks'], s['lost_samples'], peak, t))
    check(s['unwind'] == mode, 'unwind %r' % s['unwind'])
    if walks:
        check(t is not None and t['walked'] + t['fallback_samples'] > 0, 'unwind_tables %r' % t)
        # Every CPU sample is counted once, walked or fallen back, whether it was
        # stored or not (the unwinding thread's queue drops are counted in both).
        check(abs(t['walked'] + t['fallback_samples'] - s['samples']) <= s['lost_samples'] + 2,
              'walked %d + fallbacks %d != samples %d' % (t['walked'], t['fallback_samples'], s['samples']))
        check(t['fallback_samples'] == sum(t['fallbacks'].values()), 'fallbacks %r' % t)
    else:
        check(t is None, 'unwind_tables %r with --unwind %s' % (t, mode))
    return s, top, paths


def self_top(top, n):
    """The @n hottest user functions by self samples."""
    user = [f for f in top['functions'] if f['kind'] == 'user']
    return [f['function'] for f in sorted(user, key=lambda f: -f['self_samples'])[:n]]


def check_deep(d):
    nofp = binary('DEEP_NOFP')
    res = {m: session_run(d, [nofp, '4'], m, row_pairs=True) for m in ('tables', 'dwarf', None)}
    (s, top, paths), (_, dtop, dpaths) = res['tables'], res['dwarf']
    # The default walks in BPF as tables does, with the same whole stacks.
    ds, atop, apaths = res[None]
    at = ds['unwind_tables']
    print('deep-nofp, default (auto): %.1f%% walked in BPF, root %.1f%%, fallbacks %r' % (
        100 * at['walked'] / max(ds['samples'], 1), atop['root_pct'], at['fallbacks']))
    check(at['walked'] >= 0.8 * ds['samples'], 'auto: only %d of %d samples walked in BPF' % (
        at['walked'], ds['samples']))
    check(atop['root_pct'] == 100.0, 'auto: only %.1f%% of stacks reached the root' % atop['root_pct'])
    # The row array holds what the modules loaded need, grown in steps, not
    # the cap. On Debian 12 the program, libc, libstdc++ and the vDSO (62,842
    # rows) fit the first array; in some runs ld.so and libgcc_s load too and
    # take it past 65,536 rows (66,619 rows, in 131,072): a check of the
    # first array's size alone failed then.
    for m, (rs, _, _) in (('tables', res['tables']), ('auto', res[None])):
        print('%s: row arrays (rows, rows used) %r, largest seen %d' % (
            m, rs['row_arrays'], rs['row_array_peak']))
        check(rs['row_arrays'], '%s: the ping showed no row array' % m)
        for rows, used in rs['row_arrays']:
            check(row_array_ok(rows, used), '%s: a row array of %d rows for %d rows' % (
                m, rows, used))
    t = s['unwind_tables']
    share = t['walked'] / max(s['samples'], 1)
    print('deep-nofp: %.1f%% of samples walked in BPF, fallbacks %r' % (100 * share, t['fallbacks']))
    check(top['root_pct'] == 100.0, 'tables: only %.1f%% of stacks reached the root' % top['root_pct'])
    out = d.ctl('session', s['id'])[1]
    line = next((x for x in out.splitlines() if x.startswith('unwind tables:')), '')
    print('profctl session: %s' % line)
    check('%d samples walked in BPF' % t['walked'] in line, 'profctl session says %r' % line)
    check(share >= 0.8, 'only %.1f%% of samples walked in BPF' % (100 * share))
    check(s['truncated_stacks'] == 0 and s['missing_user_stacks'] == 0,
          'tables: truncated %d, missing %d' % (s['truncated_stacks'], s['missing_user_stacks']))
    mine, theirs = self_top(top, 5), self_top(dtop, 5)
    print('top 5 by self: tables %r, dwarf %r' % (mine, theirs))
    check(mine[0] == theirs[0] and len(set(mine[:3]) & set(theirs[:3])) >= 2,
          'hottest functions differ: tables %r, dwarf %r' % (mine, theirs))
    # The whole hot path under cmp_c, as test-dwarf checks it for dwarf, the same in both.
    chain = ['sort_c'] + ['recursive'] * 5 + ['level2', 'level1', 'run']
    for mode, ps in (('tables', paths), ('dwarf', dpaths), ('auto', apaths)):
        qsort = [names(p['frames']) for p in ps if 'cmp_c' in names(p['frames'])[:2]]
        check(qsort, '%s: no hot path ends in cmp_c' % mode)
        fr = qsort[0]
        print('%s: qsort hot path %s' % (mode, ' <- '.join(map(str, fr))))
        i = fr.index('sort_c') if 'sort_c' in fr else -1
        check(i > 0 and fr[i:i + len(chain)] == chain and 'qsort_r' in fr[:i] and fr[-1] in ROOTS,
              '%s: hot path %r' % (mode, fr))


def check_spin(d):
    spin = binary('SPIN_THREADS')
    argv = [spin, '--seconds', '3', '--weights', '1,2,3,4']
    res = {m: session_run(d, argv, m, threads=5) for m in ('tables', 'dwarf')}
    (s, top, _), (_, dtop, _) = res['tables'], res['dwarf']
    t = s['unwind_tables']
    share = t['walked'] / max(s['samples'], 1)
    print('spin-threads: %.1f%% walked in BPF, root %.1f%% (dwarf %.1f%%)' % (
        100 * share, top['root_pct'], dtop['root_pct']))
    check(self_top(top, 1) == ['hot_function'] == self_top(dtop, 1),
          'hottest: tables %r, dwarf %r' % (self_top(top, 3), self_top(dtop, 3)))
    check(share >= 0.8, 'spin-threads: only %.1f%% walked in BPF' % (100 * share))
    check(top['root_pct'] >= dtop['root_pct'] - 2, 'spin-threads: root %.1f%% vs dwarf %.1f%%' % (
        top['root_pct'], dtop['root_pct']))


def check_python(d):
    if not os.access(PYTHON, os.X_OK):
        return
    argv = [PYTHON, os.path.join(WORKLOADS, 'py-deep.py'), '4']
    res = {m: session_run(d, argv, m) for m in ('tables', 'dwarf')}
    (s, top, paths), (ds, _, dpaths) = res['tables'], res['dwarf']
    t = s['unwind_tables']
    share = t['walked'] / max(s['samples'], 1)
    print('python: %.1f%% walked in BPF; python %r (dwarf %r)' % (100 * share, s['python'], ds['python']))
    check(share >= 0.8, 'python: only %.1f%% walked in BPF' % (100 * share))
    check(s['python']['status'] == 'ok' and s['python']['samples'] >= 0.9 * s['samples'],
          'python frames merged in %d of %d samples' % (s['python']['samples'], s['samples']))
    want = ['inner_hot', 'middle', 'outer', 'main', '<module>']
    for mode, ps in (('tables', paths), ('dwarf', dpaths)):
        fr = names(ps[0]['frames'])
        print('%s: python hot path %s' % (mode, ' <- '.join(map(str, fr))))
        check([n for n in fr if n in want] == want and fr[-1] in ROOTS, '%s: python path %r' % (mode, fr))


def user_names(stack):
    """The user frames of an off-CPU stack, leaf first, by function name."""
    return [f['function'] for f in stack['frames'] if f.get('kind') != 'kernel']


def check_offcpu(d):
    """Off the CPU, python3.11 (no frame pointers, rbp holding data) waits
    in clock_nanosleep and in the GIL's condition wait: with tables the user
    stacks are walked in BPF, counted in unwind_tables.offcpu, reach the
    thread's root with no [unknown] frame, and agree with the stack copy +
    libdw (--unwind dwarf) as far as that goes: its 1 KiB copy of the stack
    ends inside the interpreter's frames. The intervals of the first moments,
    before the tables load, fall back to that copy, visibly (no_table)."""
    if not os.access(PYTHON, os.X_OK):
        return
    argv = [PYTHON, os.path.join(WORKLOADS, 'py-waits.py'), '4']
    stacks = {}
    for mode in ('tables', 'dwarf'):
        s, _, _ = session_run(d, argv, mode)
        # a stack with an [unknown] frame stands as ['[unknown]']
        stacks[mode] = [['[unknown]'] if any(f['module'] == '[unknown]' for f in x['frames'])
                        else user_names(x)
                        for x in d.json('offcpu', s['id'], '--limit', '50')['stacks']]
        if mode == 'tables':
            t = s['unwind_tables']['offcpu']
            print('py-waits off the CPU, tables: %r' % t)
            check(t is not None and t['walked'] >= 100, 'off-CPU intervals walked: %r' % t)
            check(t['walked'] >= 0.8 * (t['walked'] + t['fallback_intervals']),
                  'only %r of the off-CPU intervals walked in BPF' % t)
            check(t['fallback_intervals'] == sum(t['fallbacks'].values()), 'fallbacks %r' % t)
            out = d.ctl('session', s['id'])[1]
            check('%d off-CPU intervals walked in BPF' % t['walked'] in out,
                  'profctl session does not count the off-CPU walk:\n' + out)
    for mode in ('tables', 'dwarf'):
        for x in stacks[mode][:6]:
            print('%s: %s' % (mode, ' <- '.join(map(str, x))))
    top = stacks['tables'][:5]
    rooted = [x for x in top if x and x[-1] in ROOTS]
    check(['[unknown]'] not in stacks['tables'], 'off-CPU stacks with [unknown] frames (tables)')
    check(len(rooted) >= 3, 'only %d of the 5 heaviest off-CPU stacks reach the root' % len(rooted))
    # Where dwarf's stack is as deep as 8 frames, the walked stack starts with it.
    agree = [x for x in rooted if any(len(y) >= 8 and x[:len(y)] == y for y in stacks['dwarf'])]
    print('off-CPU: %d of %d rooted stacks with tables start with a stack of dwarf' % (
        len(agree), len(rooted)))
    check(len(agree) == len(rooted), 'walked off-CPU stacks that dwarf does not begin')


def short_auto(d):
    """A 2 s auto session at 99 Hz on deep-nofp: (session, top)."""
    w = d.spawn(binary('DEEP_NOFP'), '4')
    wait_for_threads(w.pid, 2)
    sid = d.json('attach', w.pid, '--duration', '2', '--freq', '99')['session']
    s = d.wait_ended(sid)
    w.wait(timeout=60)
    top = d.json('top', sid, '--limit', '10')
    print('deep-nofp, auto for 2 s at 99 Hz: %d samples, root %.1f%%, unwind_tables %r' % (
        s['samples'], top['root_pct'], s['unwind_tables']))
    check(s['samples'] > 0 and top['root_pct'] >= 99, 'short auto: root %.1f%% of %d samples' % (
        top['root_pct'], s['samples']))
    wait_row_arrays(d, False, 'after a short auto session')
    return s, top


def cache_files(d):
    """{name: bytes} of the table cache's files."""
    cache = os.path.join(d.dir, 'cfi-cache')
    return {n: os.path.getsize(os.path.join(cache, n)) for n in os.listdir(cache)}


def restart(d, extra=()):
    d.stop()
    d.extra_args = list(extra)
    d.start()


def check_table_cache():
    nofp = binary('DEEP_NOFP')
    mine = build_id(nofp) + '.cfi'
    with Profd() as d:
        t = d.json('ping')['unwind_tables']
        check(t['cache'] and t['cache_stored'] == 0, 'a new profd: %r' % t)
        # The first session compiles deep-nofp's and libc's tables and keeps them.
        session_run(d, [nofp, '4'], 'tables')
        t, files = d.json('ping')['unwind_tables'], cache_files(d)
        print('after a first session: %r, files %r' % (t, files))
        check(mine in files and t['cache_stored'] >= 2 and t['compile_s'] > 0 and
              t['cache_hits'] == 0, 'first session: %r, files %r' % (t, files))
        check(sum(files.values()) == t['cache_bytes'], 'cache_bytes %d, files %r' % (
            t['cache_bytes'], files))
        # Restarted, profd reads them: a short auto session walks, nothing compiled again.
        # A module the first session never ran into (ld.so or libgcc_s, which
        # only some runs sample) is compiled and stored: a file of its own.
        restart(d)
        s, _ = short_auto(d)
        t, after = d.json('ping')['unwind_tables'], cache_files(d)
        new = set(after) - set(files)
        print('restarted, a short auto session: %r, new files %r' % (t, sorted(new)))
        u = s['unwind_tables']
        check(u is not None and u['walked'] >= 0.9 * s['samples'],
              'short auto with the cache: %r of %d samples' % (u, s['samples']))
        check(t['cache_hits'] >= 2 and t['cache_rejected'] == 0 and
              t['cache_stored'] == len(new) and set(files) <= set(after),
              'restarted: %r, files before %r, after %r' % (t, files, after))
        # A damaged file: refused, counted, compiled again to the same rows.
        path = os.path.join(d.dir, 'cfi-cache', mine)
        with open(path, 'rb') as f:
            good = f.read()
        with open(path, 'r+b') as f:
            f.seek(168 + 8 * ((len(good) - 168) // 16) + 6)  # a row's fp_off, mid-file
            f.write(b'\x55')
        restart(d)
        s, top, _ = session_run(d, [nofp, '4'], 'tables')
        t = d.json('ping')['unwind_tables']
        with open(path, 'rb') as f:
            again = f.read()
        print('after damage: %r, root %.1f%%' % (t, top['root_pct']))
        check(t['cache_rejected'] == 1 and t['cache_stored'] >= 1 and again == good,
              'damaged file: %r, rewritten the same: %r' % (t, again == good))
        check(top['root_pct'] == 100.0, 'after damage: root %.1f%%' % top['root_pct'])
        # A smaller bound: the least recently used files go at the start.
        files = cache_files(d)
        bound = sum(files.values()) - 1
        restart(d, ('--cfi-cache-bytes', str(bound)))
        left = cache_files(d)
        print('bound %d bytes: %r left of %r' % (bound, left, files))
        check(sum(left.values()) <= bound and left, 'bound %d: %r' % (bound, left))
        # Without the cache a short auto session does not walk.
        restart(d, ('--cfi-cache-bytes', '0'))
        check(not d.json('ping')['unwind_tables']['cache'], 'cache off')
        s, _ = short_auto(d)
        check(s['unwind'] == 'auto' and s['unwind_tables'] is None,
              'a 2 s auto session without the cache walked tables: %r' % s['unwind_tables'])


def check_jit(d):
    for mode in ('tables', None):
        s, top, _ = session_run(d, [binary('JIT_MAP'), '2'], mode)
        t = s['unwind_tables']
        # Its leaf is in an anonymous mapping: the walk stops at once, the sample falls back.
        check(t['fallbacks']['no_mapping'] >= 0.5 * s['samples'],
              'jit-map %s: no_mapping fallbacks %r of %d samples' % (mode, t['fallbacks'], s['samples']))
        check(self_top(top, 1) == ['jit_hot_loop'], 'jit-map %s: hottest %r' % (mode, self_top(top, 3)))
        if mode is None:  # the fallback's frame-pointer walk gets past the JIT code
            check(top['root_pct'] >= 90, 'jit-map auto: only %.1f%% reached the root' % top['root_pct'])


def test():
    require_root_bpf()
    with Profd() as d:
        wait_row_arrays(d, False, 'idle profd')
        check_deep(d)
        check_spin(d)
        check_python(d)
        check_offcpu(d)
        check_jit(d)
    check_table_cache()


run(test)
