#!/usr/bin/env python3
"""Just-in-time code outside every file mapping is named from the JIT's
/tmp/perf-PID.map (what CPython 3.12's perf trampoline, the JVM's
perf-map-agent, V8 and LuaJIT write)."""
import platform

from profdtest import Profd, binary, check, require_root_bpf, run, skip


def test():
    require_root_bpf()
    if platform.machine() != 'x86_64':
        skip('the JIT workload emits x86-64 code')
    jit = binary('JIT_MAP')
    with Profd() as d:
        w = d.spawn(jit, '4')
        w.stdout.readline()  # the map file is written
        sid = d.json('attach', w.pid, '--unwind', 'fp')['session']
        w.wait(timeout=30)
        d.wait_ended(sid)
        top = d.json('top', sid, '--limit', '3')
        f = top['functions'][0]
        print('top: %r' % f)
        check(f['function'] == 'jit_hot_loop', 'top function %r, expected jit_hot_loop' % f['function'])
        check(f['module'].endswith('perf-%d.map' % w.pid), 'module %r' % f['module'])
        share = d.user_self_share(sid, 'jit_hot_loop')
        check(share >= 0.80, 'jit_hot_loop has %.3f of the user-space self samples' % share)
        # The JIT frame keeps a frame pointer, so main is below it.
        paths = d.json('hotpaths', sid, '--limit', '1')['paths']
        names = [fr['function'] for fr in paths[0]['frames']]
        print('hottest path: ' + ' <- '.join(map(str, names)))
        check(names[0] == 'jit_hot_loop' and 'main' in names, 'path %r' % names)


run(test)
