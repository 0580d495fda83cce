#!/usr/bin/env python3
"""GPU memory growth and generic probes, on fake-cudart: a program that
defines cudaMalloc, cudaFree, cudaMemcpy and cudaDeviceSynchronize itself
and makes them succeed (this machine has no GPU: the real runtime fails
every allocation). profd finds them by symbol in the executable, as it
finds a statically linked runtime. The workload leaks 4 x 1 MiB from
alloc_cache() and frees its 4 x 256 KiB from alloc_temp(); `profctl gpu`
must show 4 MiB live, attributed to alloc_cache's stack, frees matched by
pointer, the copies and the wait. --uprobe fake-cudart:work_unit counts
the 7 calls of work_unit (each sleeps 20 ms: a lower bound, not a timing).A CUDA library dlopen()ed after the attach (as cuInit() loads libcuda.so)
gets its probes within a flush or two, and only then is it used. With
--children, a child the target forks gets the probes too. A process that
makes more probed calls per second than --uprobe-max-rate has its probes
detached, and the report says so."""
import re
import time

from profdtest import Profd, binary, check, require_root_bpf, run

MIB = 1 << 20


def test():
    require_root_bpf()
    with Profd() as d:
        w = d.spawn_waiting(binary('FAKE_CUDART'))
        att = d.json('attach', w.pid, '--events', 'cpu,cuda', '--uprobe', 'fake-cudart:work_unit')
        sid = att['session']
        d.go(w)
        s = d.wait_ended(sid)
        check(s['end_reason'] == 'target_exited', 'session end %r' % s['end_reason'])
        g = d.json('gpu', sid)
        attached = {(p['what'], p['status']) for p in g['probes']}
        check(('cudaMalloc', 'attached') in attached and ('fake-cudart:work_unit', 'attached') in attached,
              'probes: %r' % g['probes'])
        check(('cuLaunchKernel', 'missing') in attached, 'a function found nowhere is listed missing')

        m = g['memory']
        print('memory: %r' % {k: v for k, v in m.items() if k not in ('by_stack', 'timeline')})
        check(m['allocations'] == 8 and m['failed_allocations'] == 0, 'allocations %r' % m)
        check(m['requested_bytes'] == 4 * MIB + 4 * 256 * 1024, 'requested %d' % m['requested_bytes'])
        check(m['allocated_bytes'] == 5 * MIB, 'allocated %d' % m['allocated_bytes'])
        check(m['frees'] == 4 and m['freed_bytes'] == MIB, 'frees %d freeing %d' % (m['frees'], m['freed_bytes']))
        check(m['live_bytes'] == 4 * MIB, 'live bytes %d, leaked 4 MiB' % m['live_bytes'])
        check(m['peak_live_bytes'] >= 4 * MIB, 'peak %d' % m['peak_live_bytes'])
        check(m['timeline'] and m['timeline'][-1]['live_bytes'] == 4 * MIB, 'timeline %r' % m['timeline'])
        top = m['by_stack'][0]
        print('top allocating stack: live %d, %r' % (top['live_bytes'], top['stack'][:4]))
        check(top['live_bytes'] == 4 * MIB and 'alloc_cache' in top['stack'],
              'the leak is alloc_cache\'s: %r' % top)
        temp = [x for x in m['by_stack'] if 'alloc_temp' in x['stack']]
        check(temp and temp[0]['live_bytes'] == 0 and temp[0]['allocated_bytes'] == MIB,
              'alloc_temp frees all it allocates: %r' % temp)

        copies = {(c['api'], c['direction']): c for c in g['copies']}
        c = copies.get(('cudaMemcpy', 'HtoD'))
        check(c and c['calls'] == 4 and c['bytes'] == 4 * 8192 and c['errors'] == 0, 'copies %r' % g['copies'])
        syncs = [x for x in g['syncs'] if x['api'] == 'cudaDeviceSynchronize']
        check(syncs and syncs[0]['calls'] == 1 and 'main' in syncs[0]['stack'], 'syncs %r' % g['syncs'])
        api = {a['api']: a for a in g['api']}
        check(api['cudaMalloc']['calls'] == 8 and api['cudaMalloc']['errors'] == 0, 'api %r' % api.get('cudaMalloc'))
        check(api['cudaFree']['calls'] == 4, 'cudaFree calls %r' % api.get('cudaFree'))

        up = {u['probe']: u for u in g['uprobes']}
        wu = up.get('fake-cudart:work_unit')
        print('work_unit: %r' % wu)
        check(wu and wu['calls'] == 7, 'work_unit calls: %r' % wu)
        check(wu['min_ms'] >= 19.9 and wu['total_ms'] >= 7 * 19.9, 'work_unit sleeps 20 ms a call: %r' % wu)

        _, out, _ = d.ctl('gpu', sid)
        check('live 4.0 MiB' in out and '4 frees releasing 1.0 MiB' in out and 'fake-cudart:work_unit' in out, 'profctl gpu table:\n' + out)

        # Bad --uprobe input: a clear error, nothing attached.
        rc, _, err = d.ctl('attach', w.pid, '--uprobe', 'nocolon', check_rc=False)
        check(rc != 0 and 'LIB:SYMBOL' in err, 'bad --uprobe: rc %d %r' % (rc, err))
        rc, _, err = d.ctl('attach', w.pid, '--uprobe', 'libc:', check_rc=False)
        check(rc != 0 and 'LIB:SYMBOL' in err, 'empty SYMBOL, refused by profd: rc %d %r' % (rc, err))

        # A session detached while a thread waits inside cudaDeviceSynchronize:
        # the next session on the process must still count that thread's calls
        # (the open call is forgotten at the detach, not left to look nested).
        w = d.spawn_waiting(binary('FAKE_CUDART'), '--block-in-sync')
        first = d.json('attach', w.pid, '--events', 'cpu,cuda')['session']
        d.go(w)
        check(w.stdout.readline().strip() == 'syncing', 'workload did not reach the sync')
        d.json('detach', first)
        second = d.json('attach', w.pid, '--events', 'cpu,cuda')['session']
        d.go(w)
        d.wait_ended(second)
        m = d.json('gpu', second)['memory']
        check(m['allocations'] == 8 and m['live_bytes'] == 4 * MIB,
              'after a detach mid-call, the next session counts allocations: %r' % m)


        # A runtime library loaded after the attach.
        w = d.spawn_waiting(binary('DLOPEN_CUDART'), binary('LIBCUDART_FAKE'))
        sid = d.json('attach', w.pid, '--events', 'cpu,cuda')['session']
        g = d.json('gpu', sid)
        check(('cudaMalloc', 'missing') in {(p['what'], p['status']) for p in g['probes']},
              'before the dlopen cudaMalloc is missing: %r' % g['probes'])
        d.go(w)
        check(w.stdout.readline().strip() == 'loaded', 'workload did not load the library')
        deadline = time.time() + 20
        while time.time() < deadline:
            g = d.json('gpu', sid)
            late = [p for p in g['probes'] if p['what'] == 'cudaMalloc' and p['status'] == 'attached']
            if late:
                break
            time.sleep(0.2)
        check(late and late[0]['file'].endswith('libcudart.so.1'), 'probes after the dlopen: %r' % g['probes'])
        check(('cudaMalloc', 'missing') not in {(p['what'], p['status']) for p in g['probes']},
              'a symbol attached later is no longer listed missing: %r' % g['probes'])
        d.go(w)
        d.wait_ended(sid)
        m = d.json('gpu', sid)['memory']
        check(m['allocations'] == 3 and m['live_bytes'] == 6 * MIB, 'allocations after the dlopen: %r' % m)


        # A child the target forks, followed with --children.
        w = d.spawn_waiting(binary('FAKE_CUDART'), '--fork')
        sid = d.json('attach', w.pid, '--children', '--freq', '397', '--events', 'cpu,offcpu,cuda')['session']
        d.go(w)
        line = w.stdout.readline().split()
        check(len(line) == 2 and line[0] == 'child', 'no child announced: %r' % line)
        child = int(line[1])
        deadline = time.time() + 20
        while time.time() < deadline:
            g = d.json('gpu', sid)
            mine = [p for p in g['probes'] if p['pid'] == child and p['what'] == 'cudaMalloc'
                    and p['status'] == 'attached']
            if mine:
                break
            time.sleep(0.2)
        check(mine, 'no probes in the child %d: %r' % (child, [p for p in g['probes'] if p['status'] == 'attached']))
        d.go(w)
        d.wait_ended(sid)
        m = d.json('gpu', sid)['memory']
        check(m['allocations'] == 2 and m['live_bytes'] == 2 * MIB and 'alloc_cache' in m['by_stack'][0]['stack'],
              'the child\'s allocations: %r' % m)


        # Too many probed calls a second: the probes go, the session stays. The kernel takes
        # seconds to remove them (~75 ms a link) but they record nothing from the detach on:
        # the calls reported are at most those entered before it, which the status gives.
        total = 4000000
        w = d.spawn_waiting(binary('FAKE_CUDART'), '--calls', str(total))
        sid = d.json('attach', w.pid, '--events', 'cpu,cuda', '--uprobe-max-rate', '1000')['session']
        d.go(w)
        d.wait_ended(sid)
        g = d.json('gpu', sid)
        stop = [p for p in g['probes'] if p['what'] == 'all probes']
        calls = sum(a['calls'] for a in g['api'] if a['api'] == 'cudaDeviceSynchronize')
        print('rate limit: %r, %d of %d calls reported' % (stop, calls, total))
        status = stop[0]['status'] if stop else ''
        entered = re.search(r'after (\d+) since the attach', status)
        check(status.startswith('detached:') and 'over the limit of 1000/s' in status and entered,
              'probes detached over the rate: %r' % g['probes'])
        entered = int(entered.group(1)) if entered else 0
        # A call entered between the count and the detach itself, a few at most, may be reported.
        check(0 < calls <= entered + 16 and entered < total,
              'calls reported after the detach: %d, %d entered before it, of %d' % (calls, entered, total))
        _, out, _ = d.ctl('gpu', sid)
        check('all probes: detached:' in out, 'profctl gpu shows the detach:\n' + out)


run(test)
