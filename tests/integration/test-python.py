#!/usr/bin/env python3
"""Python-aware stacks, on real CPython processes attached while they run:
- a pure-Python hot function three calls deep is first in top, with its
  .py file and the line of its hot loop, and its callers are in order on the
  hottest path, for Debian's /usr/bin/python3 (libpython linked in), for
  an interpreter on the shared libpython (PY_EMBED, if built), and for each
  other CPython version profd was built for (PY_INTERPRETERS: meson option
  python_interpreters);
- --python off keeps the native frames (_PyEval_EvalFrameDefault), no .py;
- numpy's matrix multiply in a named Python function: that function sits
  directly above the native numpy/BLAS frames of the same stack;
- two Python threads running different functions, behind 40 idle threads:
  each thread's samples have its own function and never the other's (SQL over the documented
  schema, as a user would run it);
- a process without Python: attached all the same, python "not_found";
- code objects freed and made again at the same address (py-code-reuse.py:
  gen_a and gen_b in turns, 50 ms each): each is named with its own file,
  and neither takes the other's samples (a code object known by its
  address alone would); a sample whose code object was replaced before
  profd read it is "[python]", an unknown frame, not the new code's;
- the README's main job: a PyTorch training loop attached while it runs,
  with --children: train_step -> Model.forward sits above ATen's C++ and
  the BLAS kernel, and the DataLoader worker processes forked during the
  session have their own Python frames (Dataset.__getitem__)."""
import os
import sqlite3
import subprocess

from profdtest import Failure, Profd, binary, check, require_root_bpf, run, skip

STATIC_PYTHON = '/usr/bin/python3'
WORKLOADS = os.environ.get('PY_WORKLOADS', os.path.join(os.path.dirname(__file__), '..', 'workloads'))


def workload(name):
    return os.path.join(WORKLOADS, name)


def line_of(path, text):
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if text in line:
                return i
    raise AssertionError('%r not in %s' % (text, path))


def python_version(exe):
    out = subprocess.run([exe, '-c', 'import sys; print("%d.%d" % sys.version_info[:2])'],
                         capture_output=True, text=True)
    return tuple(int(x) for x in out.stdout.split('.')) if out.returncode == 0 else None


def start(d, *argv):
    """Start a Python workload and wait for its 'ready' line."""
    p = d.spawn(*argv)
    line = p.stdout.readline()
    while line and not line.startswith('ready'):
        line = p.stdout.readline()
    if not line.startswith('ready'):
        raise Failure('%s did not start: %s' % (argv, p.stdout.read()))
    return p


def profile(d, argv, seconds=3, *extra):
    """Attach to a running workload for @seconds; the ended session object."""
    p = start(d, *argv)
    sid = d.json('attach', p.pid, '--freq', '397', '--duration', seconds, *extra)['session']
    s = d.wait_ended(sid)
    p.kill()
    p.wait()
    return sid, s


def names(frames):
    return [f['function'] for f in frames]


def check_deep(d, interp, label):
    script = workload('py-deep.py')
    sid, s = profile(d, [interp, script, '60'])
    py = s['python']
    print('%s: session %d, %d samples, python %r' % (label, sid, s['samples'], py))
    check(py['status'] == 'ok' and py['version'].startswith('3.'), '%s: python %r' % (label, py))
    check(py['samples'] >= 0.9 * s['samples'], '%s: only %d of %d samples had Python frames'
          % (label, py['samples'], s['samples']))
    top = d.json('top', sid, '--limit', '5')['functions']
    first = top[0]
    hot_line = line_of(script, 'total ^= x')
    print('%s: top %s' % (label, [(f['function'], f['file'], f['line'], f['self_pct']) for f in top]))
    check(first['function'] == 'inner_hot', '%s: top function %r' % (label, first['function']))
    check(first['module'].endswith('py-deep.py') and first['file'].endswith('py-deep.py'),
          '%s: inner_hot in %r (%r)' % (label, first['module'], first['file']))
    check(first['line'] == hot_line, '%s: inner_hot at line %r, its loop is line %d'
          % (label, first['line'], hot_line))
    check(first['total_pct'] >= 90, '%s: inner_hot on %.1f%% of stacks' % (label, first['total_pct']))
    path = names(d.json('hotpaths', sid, '--limit', '1')['paths'][0]['frames'])
    print('%s: hottest path (leaf first) %s' % (label, path))
    py_part = [n for n in path if n in ('inner_hot', 'middle', 'outer', 'main', '<module>')]
    check(py_part == ['inner_hot', 'middle', 'outer', 'main', '<module>'],
          '%s: Python callers %r' % (label, py_part))
    # The interpreter's own frames around the Python ones stay (main -> Py_RunMain -> ...).
    check(path.index('<module>') < len(path) - 1, '%s: nothing native under <module>' % label)
    return sid


def check_off(d):
    sid, s = profile(d, [STATIC_PYTHON, workload('py-deep.py'), '60'], 2, '--python', 'off')
    check(s['python']['status'] == 'off', 'python %r with --python off' % s['python'])
    top = d.json('top', sid, '--limit', '200')['functions']
    check(not [f for f in top if f['module'].endswith('.py')], '.py frames with --python off')
    check('_PyEval_EvalFrameDefault' in names(top), 'no _PyEval_EvalFrameDefault with --python off: %s'
          % names(top)[:10])


def check_numpy(d):
    if subprocess.run([STATIC_PYTHON, '-c', 'import numpy'], capture_output=True).returncode:
        print('numpy part skipped: python3-numpy not installed')
        return
    sid, s = profile(d, [STATIC_PYTHON, workload('py-numpy.py'), '60'])
    paths = d.json('hotpaths', sid, '--limit', '5')['paths']
    path = paths[0]['frames']
    print('numpy: hottest path (leaf first) %s' % names(path))
    check('dense_layer' in names(path), 'dense_layer not on the hottest path')
    i = names(path).index('dense_layer')
    below = path[:i]
    # Leaf first: everything before dense_layer is what it called: native code only,
    # down to the BLAS kernel (numpy's multiarray module, then libblas/openblas).
    check(below and all(not f['module'].endswith('.py') for f in below),
          'frames below dense_layer %r' % names(below))
    check(any('blas' in os.path.basename(f['module']) for f in below),
          'no BLAS frame below dense_layer: %r' % [f['module'] for f in below])
    check(names(path)[i + 1] == 'train', 'dense_layer called from %r' % names(path)[i + 1])


def check_threads(d, interp, label):
    p = d.spawn(interp, workload('py-threads.py'), '60')
    tids = {}
    line = p.stdout.readline()
    while line and not line.startswith('ready'):
        if line.startswith('tid '):
            _, name, tid = line.split()
            tids[name] = int(tid)
        line = p.stdout.readline()
    check(set(tids) == {'alpha', 'beta'}, 'threads %r' % tids)
    sid = d.json('attach', p.pid, '--freq', '397', '--duration', 3)['session']
    d.wait_ended(sid)
    p.kill()
    p.wait()
    db = sqlite3.connect('file:%s?mode=ro' % d.db, uri=True)
    for name, own, other in (('alpha', 'alpha_work', 'beta_work'), ('beta', 'beta_work', 'alpha_work')):
        total = db.execute('SELECT sum(count) FROM samples WHERE session_id = ? AND tid = ?',
                           (sid, tids[name])).fetchone()[0] or 0
        per_fn = dict(db.execute(
            'SELECT f.function, sum(sa.count) FROM samples sa'
            ' JOIN (SELECT DISTINCT stack_id, frame_id FROM stack_frames) sf ON sf.stack_id = sa.stack_id'
            ' JOIN frames f ON f.id = sf.frame_id'
            ' WHERE sa.session_id = ? AND sa.tid = ? AND f.module LIKE \'%.py\''
            ' GROUP BY f.function', (sid, tids[name])).fetchall())
        print('%s: thread %s (%d): %d samples, Python functions on its stacks %r'
              % (label, name, tids[name], total, per_fn))
        check(total >= 30, 'thread %s has %d samples' % (name, total))
        check(per_fn.get(own, 0) >= 0.9 * total, 'thread %s: %s on %d of %d stacks'
              % (name, own, per_fn.get(own, 0), total))
        check(per_fn.get(other, 0) == 0, 'thread %s: %s on %d stacks' % (name, other, per_fn.get(other, 0)))
    db.close()


def check_not_python(d):
    p = d.spawn(binary('SPIN_THREADS'), '--seconds', '30')
    sid = d.json('attach', p.pid, '--duration', '0.5')['session']
    s = d.wait_ended(sid)
    p.kill()
    p.wait()
    print('C workload: python %r, %d samples' % (s['python'], s['samples']))
    check(s['python']['status'] == 'not_found' and s['python']['version'] is None,
          'python %r for a C program' % s['python'])
    check(s['samples'] > 0 and s['python']['samples'] == 0, 'samples %r' % s)


def check_code_reuse(d):
    p = start(d, STATIC_PYTHON, workload('py-code-reuse.py'), '4')
    sid = d.json('attach', p.pid, '--freq', '397', '--duration', '3')['session']
    s = d.wait_ended(sid)
    out = p.communicate(timeout=30)[0].split()
    rounds, reused = int(out[out.index('rounds') + 1]), int(out[out.index('reused') + 1])
    top = d.json('top', sid, '--limit', '50')['functions']
    gen = {f['function']: f for f in top if f['function'] in ('gen_a', 'gen_b')}
    unknown = sum(f['self_samples'] for f in top if f['module'] == '[python]')
    print('code reuse: %d rounds, %d at an address the other function had; %d samples; %r; '
          'unknown Python frames %d' % (
              rounds, reused, s['samples'],
              {n: (f['file'], f['line'], f['total_samples']) for n, f in gen.items()}, unknown))
    check(reused >= rounds // 4, 'only %d of %d rounds reused an address: nothing to test' % (
        reused, rounds))
    check(set(gen) == {'gen_a', 'gen_b'}, 'functions seen: %r' % sorted(gen))
    for n, f in gen.items():
        check(f['file'].endswith(n + '.py') and f['line'] in (3, 4),  # the loop's lines
              '%s at %s:%r, not %s.py:3-4' % (n, f['file'], f['line'], n))
    # They ran in turns: each has about half of the samples in them, named or not.
    a, b = gen['gen_a']['total_samples'], gen['gen_b']['total_samples']
    check(max(a, b) <= 0.6 * (a + b + unknown),
          'gen_a %d, gen_b %d, unknown %d samples: one took the other\'s' % (a, b, unknown))


def check_torch(d):
    if subprocess.run([STATIC_PYTHON, '-c', 'import torch'], capture_output=True).returncode:
        print('PyTorch part skipped: python3-torch not installed')
        return
    p = start(d, STATIC_PYTHON, workload('py-train.py'), '120')
    sid = d.json('attach', p.pid, '--freq', '397', '--duration', 5, '--children')['session']
    s = d.wait_ended(sid)
    p.kill()
    p.wait()
    print('torch: %d samples, python %r' % (s['samples'], s['python']))
    paths = [names(x['frames']) for x in d.json('hotpaths', sid, '--limit', '20')['paths']]
    fwd = [x for x in paths if 'Model.forward' in x and 'train_step' in x]
    check(fwd, 'no path through train_step and Model.forward: %r' % [x[:12] for x in paths[:3]])
    x = fwd[0]
    print('torch: a forward path (leaf first) %s' % x[:x.index('train_step') + 1])
    below = x[:x.index('Model.forward')]
    check(any(n and n.startswith('at::') for n in below), 'no ATen frame below Model.forward: %r' % below)
    check(x.index('Model.forward') < x.index('train_step'), 'train_step does not call Model.forward')
    db = sqlite3.connect('file:%s?mode=ro' % d.db, uri=True)
    rows = db.execute(
        'SELECT t.pid, sum(sa.count) FROM samples sa'
        ' JOIN threads t ON t.session_id = sa.session_id AND t.tid = sa.tid'
        ' JOIN (SELECT DISTINCT stack_id, frame_id FROM stack_frames) sf ON sf.stack_id = sa.stack_id'
        ' JOIN frames f ON f.id = sf.frame_id'
        ' WHERE sa.session_id = ? AND f.function = \'SyntheticImages.__getitem__\''
        ' GROUP BY t.pid', (sid,)).fetchall()
    db.close()
    print('torch: samples in SyntheticImages.__getitem__ by process %r (trainer %d)' % (rows, p.pid))
    check([pid for pid, n in rows if pid != p.pid and n > 0],
          'no DataLoader worker process with Python frames: %r' % rows)


def test():
    require_root_bpf()
    v = python_version(STATIC_PYTHON)
    if not v or v < (3, 11):
        skip('%s is not CPython 3.11+ (%r)' % (STATIC_PYTHON, v))
    with Profd() as d:
        check_deep(d, STATIC_PYTHON, 'static libpython')
        embed = os.environ.get('PY_EMBED')
        if embed and os.path.exists(embed):
            maps_libpython = subprocess.run(['ldd', embed], capture_output=True, text=True).stdout
            check('libpython3' in maps_libpython, 'py-embed is not linked with libpython: %s' % maps_libpython)
            check_deep(d, embed, 'shared libpython')
        else:
            print('shared libpython part skipped: py-embed not built (no python3-embed pkg-config)')
        static_version = python_version(STATIC_PYTHON)
        for exe in filter(None, os.environ.get('PY_INTERPRETERS', '').split(':')):
            v = python_version(exe)
            if v and v != static_version:
                check_deep(d, exe, 'CPython %d.%d' % v)
                check_threads(d, exe, 'CPython %d.%d' % v)
        check_off(d)
        check_numpy(d)
        check_threads(d, STATIC_PYTHON, 'static libpython')
        check_not_python(d)
        check_code_reuse(d)
        check_torch(d)


if __name__ == '__main__':
    run(test)
