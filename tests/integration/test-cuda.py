#!/usr/bin/env python3
"""CUDA runtime and NVTX probes on real nvcc-built programs (cuda-work.cu),
one with -cudart shared (probes in libcudart.so) and one with the static
runtime (probes found by symbol in the executable), attached after start.
This machine has no GPU: every CUDA call fails, and the probes still see
each call. Asserted as profctl reports them: the two kernels by demangled
name, launch counts, grid and block, launching stacks; copies by direction
and bytes; synchronization calls; allocations asked and failed (none live:
a failed cudaMalloc returns no memory, the report says so); the NVTX range
tree with its call counts. The launches happen after the attach, but
__cudaRegisterFunction ran before it (static constructors, before main):
kernels are named from the program's symbols, not from registration. A third build at -O2 inlines NVTX v3's calls:
profd must say they are not traced, not report an empty tree as fact."""
import os

from profdtest import Profd, check, require_root_bpf, run, skip

MIB = 1 << 20
ITERATIONS = 5


def check_program(d, path, runtime):
    w = d.spawn_waiting(path)
    sid = d.json('attach', w.pid, '--events', 'cpu,cuda,nvtx')['session']
    d.go(w)
    s = d.wait_ended(sid)
    check(s['end_reason'] == 'target_exited', 'session end %r' % s['end_reason'])
    g = d.json('gpu', sid)
    files = {p['file'] for p in g['probes'] if p['what'] == 'cudaMalloc' and p['status'] == 'attached'}
    print('%s: cudaMalloc probed in %r' % (runtime, files))
    if runtime == 'shared':
        check(any('libcudart.so' in f for f in files), 'shared runtime: probes in %r' % files)
    else:
        check(any(f.endswith('cuda-work-static') for f in files), 'static runtime: probes in %r' % files)
    check(g['lost_calls'] == 0 and g['unnamed_launches'] == 0 and g['truncated_stacks'] == 0 and
          g['missing_stacks'] == 0, 'lost, unnamed, truncated, missing: %r' %
          [g[k] for k in ('lost_calls', 'unnamed_launches', 'truncated_stacks', 'missing_stacks')])

    k = {(x['name'], x['api']): x for x in g['kernels']}
    print('%s kernels: %r' % (runtime, [(x['name'], x['api'], x['launches'], x['grid'], x['block'])
                                        for x in g['kernels']]))
    sk = k.get(('scale_kernel(float*, int)', '__cudaLaunchKernel'))
    ak = k.get(('add_kernel(float*, int)', '__cudaLaunchKernel'))
    direct = k.get(('add_kernel(float*, int)', 'cudaLaunchKernel'))
    check(sk and sk['launches'] == 3 * ITERATIONS and sk['grid'] == '4,2,1' and sk['block'] == '128,1,1',
          'scale_kernel: %r' % sk)
    check(ak and ak['launches'] == 2 * ITERATIONS and ak['grid'] == '8,1,1' and ak['block'] == '64,1,1',
          'add_kernel: %r' % ak)
    check(direct and direct['launches'] == ITERATIONS and direct['grid'] == '2,1,1' and
          direct['block'] == '32,1,1' and 'backward()' in direct['stack'],
          'add_kernel by cudaLaunchKernel (named from its host function): %r' % direct)
    check(len(g['kernels']) == 3, 'each launch counted once (cudaLaunchKernel runs inside '
          '__cudaLaunchKernel): %r' % g['kernels'])
    check('forward()' in sk['stack'] and 'backward()' in ak['stack'],
          'launching stacks: %r / %r' % (sk['stack'], ak['stack']))
    check(sk['errors'] == sk['launches'], 'launches fail without a GPU: %r' % sk)

    copies = {c['direction']: c for c in g['copies'] if c['api'] == 'cudaMemcpy'}
    check(copies.get('HtoD', {}).get('bytes') == 4096 * ITERATIONS and copies['HtoD']['calls'] == ITERATIONS,
          'HtoD copies %r' % copies)
    check(copies.get('DtoH', {}).get('bytes') == 1024 * ITERATIONS, 'DtoH copies %r' % copies)

    syncs = [x for x in g['syncs'] if x['api'] == 'cudaDeviceSynchronize']
    check(syncs and sum(x['calls'] for x in syncs) == ITERATIONS and 'backward()' in syncs[0]['stack'],
          'syncs %r' % g['syncs'])

    m = g['memory']
    check(m['allocations'] == 2 * ITERATIONS and m['failed_allocations'] == 2 * ITERATIONS,
          'allocations %r' % m)
    check(m['requested_bytes'] == ITERATIONS * (MIB + 64 * 1024), 'requested %d' % m['requested_bytes'])
    check(m['live_bytes'] == 0 and m['allocated_bytes'] == 0, 'no allocation succeeded: %r' % m)
    api = {a['api']: a for a in g['api']}
    check(api['cudaMalloc']['calls'] == 2 * ITERATIONS and api['cudaMalloc']['errors'] == 2 * ITERATIONS,
          'cudaMalloc stats %r' % api['cudaMalloc'])
    check(api['cudaMalloc']['min_ms'] <= api['cudaMalloc']['avg_ms'] <= api['cudaMalloc']['max_ms'],
          'min <= avg <= max: %r' % api['cudaMalloc'])
    _, out, _ = d.ctl('gpu', sid)
    check('scale_kernel(float*, int)' in out and 'failed allocations returned no memory' in out,
          'profctl gpu:\n' + out)

    r = d.json('ranges', sid)
    ranges = {(x['kind'], x['path']): x for x in r['ranges']}
    print('%s ranges: %r' % (runtime, [(x['path'], x['calls'], x['depth']) for x in r['ranges']]))
    want = {('push', 'train'): (1, 0), ('push', 'train > step'): (ITERATIONS, 1),
            ('push', 'train > step > forward'): (ITERATIONS, 2),
            ('push', 'train > step > backward'): (ITERATIONS, 2), ('mark', 'checkpoint'): (1, 0)}
    for key, (calls, depth) in want.items():
        x = ranges.get(key)
        check(x and x['calls'] == calls and x['depth'] == depth, 'range %r: %r' % (key, x))
    check(ranges[('push', 'train')]['total_ms'] >= ranges[('push', 'train > step')]['total_ms'],
          'a range holds its nested ranges: %r' % r['ranges'])
    check(r['nvtx_unmatched'] == 0, 'unmatched pops %d' % r['nvtx_unmatched'])
    _, out, _ = d.ctl('ranges', sid)
    check('      forward' in out and '    step' in out, 'tree indentation:\n' + out)

    # analyze reads the CUDA data: its CUDA rules are checked, not "no data".
    an = d.json('analyze', sid)
    checks = {c['rule']: c for c in an['checks']}
    for rule in ('cuda-synchronize', 'tiny-kernel-launches'):
        c = checks.get(rule)
        check(c and c['status'] == 'ok', '%s %s: analyze %r (findings %r)' % (runtime, rule, c, an['findings']))
    check(' kernel launches (' in checks['tiny-kernel-launches']['detail'],
          'launch count: %r' % checks['tiny-kernel-launches'])


def test():
    require_root_bpf()
    shared, static, o2 = (os.environ.get(n) for n in ('CUDA_WORK_SHARED', 'CUDA_WORK_STATIC', 'CUDA_WORK_O2'))
    if not shared or not os.path.exists(shared):
        skip('nvcc was not found at build time (/usr/local/cuda/bin or PATH): no CUDA workloads')
    with Profd() as d:
        check_program(d, shared, 'shared')
        check_program(d, static, 'static')

        w = d.spawn_waiting(o2)
        sid = d.json('attach', w.pid, '--events', 'cpu,cuda,nvtx')['session']
        d.go(w)
        d.wait_ended(sid)
        g = d.json('gpu', sid)
        inl = [p for p in g['probes'] if p['what'] == 'NVTX v3 calls']
        print('-O2: %r' % inl)
        check(inl and inl[0]['status'].startswith('inlined') and inl[0]['file'].endswith('cuda-work-o2'),
              'NVTX v3 inlined at -O2 must be reported: %r' % g['probes'])
        check(sum(x['launches'] for x in g['kernels']) == 6 * ITERATIONS, 'launches at -O2: %r' % g['kernels'])
        _, out, _ = d.ctl('gpu', sid)
        check('inlined: not traced' in out, 'profctl gpu shows the inlined NVTX:\n' + out)


run(test)
