#!/usr/bin/env python3
"""The Python view of call stacks (profctl(1), PYTHON FRAMES), on real
CPython processes attached while they run:
- numpy's matrix multiply: in the default view the hottest path reads
  Python frames, then numpy's and BLAS's native frames, with no frame of the
  interpreter (python3.11, libpython) anywhere; with --python-frames all the
  same path has them between the Python frame and numpy's; total samples, the BLAS
  kernel's samples and each path's Python frames are equal in both views;
  the profile exporters get the same (folded stacks: same sum);
- a thread that calls time.sleep(0) beside one that holds the GIL: in the
  default view its stacks still show the waits right under the Python frame
  (clock_nanosleep, and PyEval_RestoreThread taking the GIL back), and its
  off-CPU stacks go from libc into the interpreter, with no [unknown] frame
  (python3.11 has no frame pointers: the frame-pointer walk reads garbage);
- a C program: both views are the same."""
import os
import re
import subprocess

from profdtest import Failure, Profd, binary, check, require_root_bpf, run, skip

PYTHON = '/usr/bin/python3'
WORKLOADS = os.environ.get('PY_WORKLOADS', os.path.join(os.path.dirname(__file__), '..', 'workloads'))
INTERPRETER = re.compile(r'^(lib)?python[0-9.]*[dmu]*(\.so.*)?$')
# The interpreter's waits the view keeps (profctl(1), PYTHON FRAMES).
WAITS = set("""take_gil drop_gil PyEval_RestoreThread PyEval_AcquireThread PyEval_AcquireLock
    PyGILState_Ensure time_sleep pysleep PyThread_acquire_lock PyThread_acquire_lock_timed
    acquire_timed lock_PyThread_acquire_lock rlock_acquire _Py_read _Py_write os_read os_write
    _io_FileIO_read _io_FileIO_readinto _io_FileIO_readall _io_FileIO_write sock_recv
    sock_recv_into sock_send sock_sendall sock_accept sock_connect select_select
    select_poll_poll select_epoll_poll os_waitpid os_wait gc_collect_main""".split())


def start(d, *argv):
    """Start a Python workload; its "tid NAME TID" lines, once it printed "ready"."""
    p = d.spawn(*argv)
    tids = {}
    line = p.stdout.readline()
    while line and not line.startswith('ready'):
        if line.startswith('tid '):
            tids[line.split()[1]] = int(line.split()[2])
        line = p.stdout.readline()
    if not line.startswith('ready'):
        raise Failure('%s did not start: %s' % (argv, p.stdout.read()))
    return p, tids


def is_python(f):
    return f['module'].endswith('.py')


def is_interpreter(f):
    """An interpreter-internal frame: the interpreter's or libpython's, not one of its waits."""
    return (f.get('kind') != 'kernel' and f['function'] not in WAITS
            and bool(INTERPRETER.match(os.path.basename(f['module']))))


def names(frames):
    return [f['function'] for f in frames]


def profile(d, script, freq, seconds):
    """Profile a running workloads/@script for @seconds at @freq Hz: the ended session's id."""
    p, _ = start(d, PYTHON, os.path.join(WORKLOADS, script), '60')
    sid = d.json('attach', p.pid, '--freq', freq, '--duration', seconds)['session']
    d.wait_ended(sid)
    p.kill()
    p.wait()
    return sid


def check_numpy(d):
    sid = profile(d, 'py-numpy.py', 397, 3)
    clean = d.json('hotpaths', sid, '--limit', '5')
    every = d.json('hotpaths', sid, '--limit', '5', '--python-frames', 'all')
    check(clean['python_frames'] == 'clean' and every['python_frames'] == 'all',
          'views %r, %r' % (clean['python_frames'], every['python_frames']))
    path = clean['paths'][0]['frames']
    print('clean: hottest path (leaf first, %d frames) %s' % (len(path), names(path)))
    check(any('blas' in os.path.basename(f['module']) for f in path), 'no BLAS frame: %r' % names(path))
    check('dense_layer' in names(path) and 'train' in names(path), 'Python frames missing: %r' % names(path))
    check(not [f for f in path if is_interpreter(f)],
          'interpreter frames in the clean view: %r' % [f['function'] for f in path if is_interpreter(f)])
    # Leaf first: BLAS, then numpy's frames, then dense_layer and its Python callers.
    i = names(path).index('dense_layer')
    check(not [f for f in path[:i] if is_python(f)] and names(path)[i + 1] == 'train',
          'not Python -> native -> BLAS: %r' % names(path))
    # The same path in the full view: same Python frames, now with the interpreter's between.
    py = [f['function'] for f in path if is_python(f)]
    same = [x for x in every['paths'] if [f['function'] for f in x['frames'] if is_python(f)] == py
            and any('blas' in os.path.basename(f['module']) for f in x['frames'])]
    check(same, 'no path with Python frames %r in the full view' % py)
    full = same[0]['frames']
    # CPython 3.11 runs a Python-to-Python call in the same C frame: the interpreter's
    # frames are between dense_layer and numpy (the @ operator's C dispatch) and under
    # <module> (the interpreter's main).
    j = names(full).index('dense_layer')
    between = [f['function'] for f in full[:j] if is_interpreter(f)]
    print('all: the same path has %d frames; between numpy and dense_layer: %s'
          % (len(full), between))
    check(between, 'no interpreter frame between numpy and dense_layer in the full view: %r'
          % names(full)[:j + 1])
    check(len(full) > len(path), 'full view %d frames, clean %d' % (len(full), len(path)))
    # The sample counts are the same: totals, the BLAS kernel's, the path's.
    check(clean['total_samples'] == every['total_samples'], 'total samples %d vs %d'
          % (clean['total_samples'], every['total_samples']))
    blas = lambda top: sorted((f['function'], f['total_samples']) for f in top['functions']
                              if 'blas' in os.path.basename(f['module']))
    tc = d.json('top', sid, '--limit', '200')
    ta = d.json('top', sid, '--limit', '2000', '--python-frames', 'all')
    print('BLAS functions (clean) %r, (all) %r' % (blas(tc), blas(ta)))
    check(blas(tc) and blas(tc) == blas(ta), 'BLAS samples differ: %r vs %r' % (blas(tc), blas(ta)))
    check(sum(f['self_samples'] for f in tc['functions']) == tc['total_samples'],
          'clean top: self samples add up to %d of %d' % (sum(f['self_samples'] for f in tc['functions']),
                                                          tc['total_samples']))
    check(not [f for f in tc['functions'] if is_interpreter(f) and f['self_samples']],
          'interpreter functions with self samples in the clean top: %r'
          % [f['function'] for f in tc['functions'] if is_interpreter(f) and f['self_samples']][:5])
    # Exporters: the profile request and the folded stacks.
    for view in ('clean', 'all'):
        prof = d.request({'v': 1, 'cmd': 'profile', 'session': sid, 'python_frames': view})
        check(prof.get('ok') and prof['python_frames'] == view, 'profile %s: %r' % (view, prof.get('error')))
        used = {i for s in prof['stacks'] for i in s}
        interp = [prof['frames'][i] for i in used if is_interpreter(prof['frames'][i])]
        check(len(used) == len(prof['frames']), 'profile %s: %d frames listed, %d used'
              % (view, len(prof['frames']), len(used)))
        check(bool(interp) == (view == 'all'), 'profile %s: %d interpreter frames' % (view, len(interp)))
    folded = {}
    for view in ('clean', 'all'):
        _, out, _ = d.ctl('export', sid, '--format', 'folded', '--python-frames', view)
        folded[view] = sum(int(l.rsplit(' ', 1)[1]) for l in out.splitlines() if l)
    check(folded['clean'] == folded['all'] == clean['total_samples'], 'folded sums %r' % folded)
    _, out, _ = d.ctl('hotpaths', sid, '--limit', '1')
    check('interpreter frames hidden' in out, 'human hotpaths does not say the view:\n' + out)


def check_waits(d):
    sid = profile(d, 'py-waits.py', 997, 4)
    paths = d.json('hotpaths', sid, '--limit', '200')['paths']
    below = {}
    for x in paths:
        n = names(x['frames'])
        if 'sleeper' in n:
            i = n.index('sleeper')
            if i > 0:
                below[n[i - 1]] = below.get(n[i - 1], 0) + x['samples']
    print('waits: frames right under sleeper (clean view), with samples: %r' % below)
    check([f for f in below if 'nanosleep' in f], 'no clock_nanosleep under sleeper: %r' % below)
    check('PyEval_RestoreThread' in below, 'no GIL wait (PyEval_RestoreThread) under sleeper: %r' % below)
    check(not [f for f in below if f.startswith('python3') or f.startswith('libpython')],
          'interpreter frames right under sleeper: %r' % below)
    # Off the CPU: python3.11 has no frame pointers and keeps data in rbp, so the
    # frame-pointer walk from clock_nanosleep or the GIL's condition wait reads
    # garbage; the stacks go on into the interpreter (CFI), never to [unknown].
    stacks = d.json('offcpu', sid, '--limit', '20')['stacks']
    unknown = [s for s in stacks if any(f['module'] == '[unknown]' for f in s['frames'])]
    into = []
    for s in stacks:
        mods = [os.path.basename(f['module']) for f in s['frames'] if f.get('kind') != 'kernel']
        if mods and mods[0] == 'libc.so.6':
            rest = [m for m in mods if m != 'libc.so.6']
            into.append(rest[0] if rest else None)
    print('waits off the CPU: %d stacks, %d with [unknown] frames; after libc: %r' % (
        len(stacks), len(unknown), into))
    check(not unknown, 'off-CPU stacks with [unknown] frames: %r' % [
        [(f['function'], f['module']) for f in s['frames']] for s in unknown[:2]])
    check(into and all(m and INTERPRETER.match(m) for m in into),
          'off-CPU stacks do not go from libc into the interpreter: %r' % into)


def check_native(d):
    w = d.spawn(binary('SPIN_THREADS'), '--seconds', '30')
    sid = d.json('attach', w.pid, '--freq', '397', '--duration', '1.5')['session']
    d.wait_ended(sid)
    w.kill()
    w.wait()
    a = d.json('hotpaths', sid, '--limit', '20')['paths']
    b = d.json('hotpaths', sid, '--limit', '20', '--python-frames', 'all')['paths']
    check(a == b, 'a C program reads differently in the two views')


def test():
    require_root_bpf()
    out = subprocess.run([PYTHON, '-c', 'import sys, numpy; print(sys.version_info >= (3, 11))'],
                         capture_output=True, text=True)
    if out.stdout.strip() != 'True':
        skip('%s is not CPython 3.11+ with numpy: %s' % (PYTHON, out.stderr.strip()[-200:]))
    with Profd() as d:
        check_numpy(d)
        check_waits(d)
        check_native(d)


if __name__ == '__main__':
    run(test)
