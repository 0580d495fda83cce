#!/usr/bin/env python3
"""DWARF unwinding through a real profd: a workload built without frame
pointers (deep-nofp: a hot path several calls deep through libc's qsort and
libstdc++'s std::sort) has >= 95% of its samples reach the thread's root
with --unwind dwarf, and the whole hot path in hotpaths; frame pointers
alone do visibly worse on the same program, and where their walk reads
garbage (an rbp that is no frame pointer) the stack ends there, counted as
truncated, with no caller outside the process's code. The top functions agree with
perf record --call-graph dwarf run on the same process at the same time.
The system's python3 (no frame pointers) unwinds to main through
_PyEval_EvalFrameDefault."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from profdtest import Profd, binary, check, require_root_bpf, run

ROOTS = {'_start', '__libc_start_main', '__libc_start_call_main', 'main', 'start_thread',
         'clone', 'clone3', '__clone3'}


def base_name(function):
    """A function's name without return type, template arguments or parameters,
    which perf and profd print differently ('void std::f<int>(int)' -> 'std::f')."""
    name = (function or '').split('(')[0].split('<')[0].strip()
    return name.split()[-1] if name else ''


def perf_top_self(perf_data, limit):
    """perf report's hottest symbols by self samples (without children)."""
    p = subprocess.run(['perf', 'report', '-i', perf_data, '--stdio', '--no-children', '--sort', 'symbol',
                        '-g', 'none', '--percent-limit', '0.5'], capture_output=True, text=True)
    rows = []
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith('%') and parts[1] == '[.]':
            # perf appends '- -' (no call-graph columns) after the symbol.
            rows.append(base_name(' '.join(t for t in parts[2:] if t != '-')))
    return rows[:limit]


def test():
    require_root_bpf()
    nofp = binary('DEEP_NOFP')
    with Profd() as d:
        # --unwind dwarf, with perf recording the same process at the same time.
        w = d.spawn(nofp, '6')
        time.sleep(0.3)
        sid = d.json('attach', w.pid, '--unwind', 'dwarf')['session']
        tmp = tempfile.mkdtemp(prefix='profd-perf-')
        perf = None
        if shutil.which('perf'):
            perf = subprocess.Popen(['perf', 'record', '-q', '-F', '99', '--call-graph', 'dwarf,16384',
                                     '-p', str(w.pid), '-o', os.path.join(tmp, 'perf.data')],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        w.wait(timeout=30)
        if perf:
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
        d.wait_ended(sid)

        top = d.json('top', sid, '--limit', '5')
        print('dwarf: %d samples, %.1f%% reached the thread root, %.1f%% frames unsymbolized' % (
            top['total_samples'], top['root_pct'], top['unsymbolized_pct'] or 0))
        check(top['unwind'] == 'dwarf', 'unwind %r' % top['unwind'])
        check(top['total_samples'] >= 200, 'only %d samples' % top['total_samples'])
        check(top['root_pct'] >= 95, 'only %.1f%% of DWARF-unwound stacks reached the root' % top['root_pct'])
        # Self samples by the function the symbol table names at the leaf (the first
        # frame not inlined), which is what perf report --sort symbol counts; profd's
        # own top counts inlined functions (here mix(), inlined into the comparators)
        # as functions of their own, as pprof does.
        allpaths = d.json('hotpaths', sid, '--limit', '10000')['paths']
        self_by_symbol = {}
        # User-space functions only, on both sides: profd samples per CPU, so a timer
        # that expires while the scheduler has interrupts off fires on the incoming
        # task's finish_task_switch (kernel); perf record -p samples per task and
        # does not see that.
        for p in allpaths:
            if p['frames'][0]['kind'] != 'user':
                continue
            leaf = next((f for f in p['frames'] if not f.get('inlined')), p['frames'][0])
            name = base_name(leaf['function'])
            self_by_symbol[name] = self_by_symbol.get(name, 0) + p['samples']
        names = sorted(self_by_symbol, key=lambda n: -self_by_symbol[n])[:5]
        print('profd top 5 (self, user space, by symbol): %r' % names)
        inl = [f['function'] for f in top['functions'] if f['function'] == 'mix']
        print('inlined mix() as a function of its own: %r' % bool(inl))

        # The whole hot path: comparator <- libc's merge sort <- qsort_r <- sort_c <- recursive x5
        # <- level2 <- level1 <- run <- main/worker_main, down to a root.
        paths = d.json('hotpaths', sid, '--limit', '20')['paths']
        # The leaf is mix(), inlined into cmp_c: a frame of its own, marked inlined.
        qsort_paths = [p for p in paths if 'cmp_c' in [f['function'] for f in p['frames'][:2]]]
        check(qsort_paths, 'no hot path ends in cmp_c: %r' % [p['frames'][0]['function'] for p in paths])
        first = qsort_paths[0]['frames']
        if first[0]['function'] == 'mix':
            check(first[0]['inlined'] and not first[1]['inlined'], 'mix() not marked inlined: %r' % first[:2])
        fr = [f['function'] for f in first]
        print('qsort hot path: ' + ' <- '.join(fr))
        chain = ['sort_c'] + ['recursive'] * 5 + ['level2', 'level1', 'run']
        i = fr.index('sort_c') if 'sort_c' in fr else -1
        check(i > 0 and fr[i:i + len(chain)] == chain, 'chain under cmp_c: %r' % fr)
        check(any(f.startswith('msort_with_tmp') for f in fr[:i]) and 'qsort_r' in fr[:i],
              'libc qsort frames missing between cmp_c and sort_c: %r' % fr[:i])
        check(fr[-1] in ROOTS, 'outermost frame %r is not a thread root' % fr[-1])
        # std::sort's insertion sort is inlined into the caller (inline frames are not
        # expanded yet), its __introsort_loop is not: some cmp_cpp path must show it.
        cpp = [[f['function'] or '' for f in p['frames']] for p in paths
               if 'cmp_cpp' in [f['function'] for f in p['frames'][:2]]]
        check(any(any('__introsort_loop' in f for f in fr) and 'sort_cpp' in fr for fr in cpp),
              'no cmp_cpp path through std::__introsort_loop and sort_cpp: %r' % cpp[:2])

        if perf:
            theirs = perf_top_self(os.path.join(tmp, 'perf.data'), 5)
            print('perf top 5 (self, user space): %r' % theirs)
            # The same three hottest, in any order, and four of five; both sample the
            # same process at 99 Hz at the same time.
            check(set(names[:3]) == set(theirs[:3]) and len(set(names[:5]) & set(theirs[:5])) >= 4,
                  'top functions disagree with perf: profd %r, perf %r' % (names, theirs))
        shutil.rmtree(tmp, ignore_errors=True)

        # Frame pointers alone on the same program: stacks stop early.
        w = d.spawn(nofp, '3')
        time.sleep(0.3)
        sid_fp = d.json('attach', w.pid, '--unwind', 'fp')['session']
        w.wait(timeout=30)
        d.wait_ended(sid_fp)
        fp = d.json('top', sid_fp, '--limit', '5')
        print('fp: %.1f%% reached the thread root (dwarf: %.1f%%)' % (fp['root_pct'], top['root_pct']))
        check(fp['root_pct'] <= top['root_pct'] - 30,
              'frame pointers did as well as DWARF (%.1f%% vs %.1f%%): the workload has frame pointers?' % (
                  fp['root_pct'], top['root_pct']))
        # Where the walk reads a saved rbp that is not one, it finds "return
        # addresses" outside all code (0x800c6262f5e003fb, ...): the stack must
        # end there, counted as truncated, not carry them as callers.
        r = d.json('sql', "SELECT count(DISTINCT t.stack_id), coalesce(sum(t.count), 0)"
                   " FROM sample_totals t WHERE t.session_id = %d AND t.stack_id IN"
                   " (SELECT sf.stack_id FROM stack_frames sf JOIN frames f ON f.id = sf.frame_id"
                   "  WHERE f.module = '[unknown]')" % sid_fp)
        junk_stacks, junk_samples = r['rows'][0]
        s = d.json('session', sid_fp)['session']
        print('fp: %d samples, %d truncated stacks, %d samples with [unknown] frames' % (
            s['samples'], s['truncated_stacks'], junk_samples))
        check(junk_samples == 0, 'fp: %d samples (%d stacks) carry frames outside all code' % (
            junk_samples, junk_stacks))
        check(s['truncated_stacks'] > 0, 'fp: stacks cut at garbage are not counted as truncated')

        # The system's python3, built without frame pointers: interpreter frames under main.
        py = shutil.which('python3', path='/usr/bin')
        if py:
            w = d.spawn(py, '-c', 'import time\n'
                        'def inner(n):\n    return sum(i * i for i in range(n))\n'
                        'def outer():\n    t = time.time()\n'
                        '    while time.time() - t < 3: inner(10000)\n'
                        'outer()\n')
            time.sleep(0.3)
            # Native frames only: this checks DWARF unwinding through the interpreter
            # (test-python checks the Python frames that replace them by default).
            sid_py = d.json('attach', w.pid, '--python', 'off')['session']  # unwind: default, auto
            w.wait(timeout=30)
            d.wait_ended(sid_py)
            pt = d.json('top', sid_py, '--limit', '10')
            print('python3: %.1f%% reached the root, unwind %s' % (pt['root_pct'], pt['unwind']))
            check(pt['unwind'] == 'auto', 'default unwind %r' % pt['unwind'])
            check(pt['root_pct'] >= 90, 'python3: only %.1f%% of stacks complete' % pt['root_pct'])
            paths = d.json('hotpaths', sid_py, '--limit', '1')['paths']
            fr = [f['function'] for f in paths[0]['frames']]
            print('python3 hot path: ' + ' <- '.join(map(str, fr)))
            check('_PyEval_EvalFrameDefault' in fr and fr[-1] in ROOTS and 'Py_BytesMain' in fr,
                  'python3 path %r' % fr)


run(test)
