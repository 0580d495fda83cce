#!/usr/bin/env python3
"""--children: a process the target forks after the attach (a data-loader
worker) is sampled in the same session, its frames symbolized against its
own mappings; without --children it is not."""
from profdtest import Profd, binary, check, require_root_bpf, run


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


def test():
    require_root_bpf()
    with Profd() as d:
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


run(test)
