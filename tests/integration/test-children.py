#!/usr/bin/env python3
"""--children: a process the target forks after the attach (a data-loader
worker) is sampled in the same session, its frames symbolized against its
own mappings; without --children it is not. A Python job that forks 40
workers one after another (as a DataLoader does each epoch), each with
numpy's dozens of libraries mapped: every worker is sampled with its Python
function, profd's open files stay bounded (each worker's stacks are
unwound with a Dwfl of its own, which held every library the worker maps:
profd ran out of fds on a PyTorch job in 20 s) and fall back once the
workers exit, and a stack limit the 40 workers' stacks exceed in all is
never reached (an exited worker's stacks are freed)."""
import os
import select
import time

from profdtest import Profd, binary, check, require_root_bpf, run

WORKLOADS = os.environ.get('PY_WORKLOADS', os.path.join(os.path.dirname(__file__), '..', 'workloads'))
PYTHON = '/usr/bin/python3'
# profd's fds above its idle count, at most: 32 cached Dwfls times the few
# files a worker's stacks go through, with room (2,068 above before the fix).
FDS_ABOVE_IDLE = 700
# Distinct stacks a session keeps at once: the 40 workers make more than
# this in all, fewer at a time; those of an exited worker are freed.
MAX_STACKS = 600


def profile(d, follow):
    w = d.spawn(binary('FORK_CHILD'), '1', '2')
    w.stdout.readline()  # "pid N": still in its delay, the child does not exist yet
    args = ['attach', w.pid, '--freq', '199'] + (['--children'] if follow else [])
    sid = d.json(*args)['session']
    child = int(w.stdout.readline().split()[-1])
    w.wait(timeout=30)
    d.wait_ended(sid)
    th = d.json('threads', sid)['threads']
    top = d.json('top', sid, '--limit', '10')['functions']
    return sid, child, th, {f['function'] for f in top if f['self_samples'] > 0}


def one_child(d):
    sid, child, th, funcs = profile(d, True)
    print('with --children: threads %r, functions %r' % (
        [(t['pid'], t['tid'], t['name'], t['samples']) for t in th], sorted(funcs)))
    kid = [t for t in th if t['pid'] == child]
    check(kid and kid[0]['samples'] > 50, 'child %d missing from session %d: %r' % (child, sid, th))
    check(kid[0]['name'] == 'child-worker', 'child thread name %r' % kid[0]['name'])
    check(d.json('session', sid)['session']['children'] is True, 'session does not record --children')
    paths = d.json('hotpaths', sid, '--limit', '5')['paths']
    # User frames only: a sample taken in an interrupt has kernel frames above 'spin'.
    child_paths = [[f['function'] for f in p['frames'] if f.get('kind') != 'kernel'] for p in paths
                   if any(f['function'] == 'child_work' for f in p['frames'])]
    check(child_paths and child_paths[0][:2] == ['spin', 'child_work'] and 'main' in child_paths[0],
          "child's stacks not symbolized in its own address space: %r" % child_paths[:1])

    sid, child, th, funcs = profile(d, False)
    print('without --children: threads %r' % [(t['pid'], t['tid'], t['name']) for t in th])
    check(not [t for t in th if t['pid'] == child], 'child %d sampled without --children' % child)
    check('child_work' not in funcs, 'child_work sampled without --children')


def fds(pid):
    return len(os.listdir('/proc/%d/fd' % pid))


def many_workers(d):
    idle = fds(d.proc.pid)
    w = d.spawn_waiting(PYTHON, os.path.join(WORKLOADS, 'py-forks.py'), '40', '0.25')
    sid = d.json('attach', w.pid, '--children', '--freq', '499')['session']
    d.go(w)
    peak = idle
    while w.poll() is None and not select.select([w.stdout], [], [], 0.1)[0]:
        peak = max(peak, fds(d.proc.pid))
    check(w.stdout.readline().strip() == 'done', 'py-forks.py did not finish its workers')
    # The workers are gone, the parent waits: profd frees what it held for
    # them within a second or two (their Dwfls, and so their open files).
    deadline = time.time() + 5
    while fds(d.proc.pid) > idle + 40 and time.time() < deadline:
        time.sleep(0.1)
    after = fds(d.proc.pid)
    d.go(w)
    w.wait(timeout=30)
    s = d.wait_ended(sid)
    th = d.json('threads', sid, '--all')['threads']
    workers = {t['pid'] for t in th if t['pid'] != w.pid and t['samples'] > 0}
    top = {f['function']: f for f in d.json('top', sid, '--limit', '200')['functions']}
    step = top.get('worker_step', {}).get('total_samples', 0)
    print('40 workers: %d sampled, %d samples, worker_step in %d; profd fds idle %d, peak %d, '
          'after the workers %d; lost %d, truncated %d, dropped at the stack limit %d' % (
              len(workers), s['samples'], step, idle, peak, after, s['lost_samples'],
              s['truncated_stacks'], s['limit_dropped_samples']))
    check(s['limit_dropped_samples'] == 0, '%d samples dropped at %d stacks: the exited workers\' '
          'stacks were kept' % (s['limit_dropped_samples'], MAX_STACKS))
    check(len(workers) >= 35, 'only %d of 40 workers sampled' % len(workers))
    check(step >= 0.5 * s['samples'], 'worker_step in %d of %d samples' % (step, s['samples']))
    check(peak - idle <= FDS_ABOVE_IDLE, 'profd held %d fds (%d when idle)' % (peak, idle))
    check(after <= idle + 40, 'profd still holds %d fds (%d when idle) after the workers exited' % (
        after, idle))


def test():
    require_root_bpf()
    with Profd() as d:
        one_child(d)
    with Profd(['--max-stacks', str(MAX_STACKS)]) as d:
        many_workers(d)


run(test)
