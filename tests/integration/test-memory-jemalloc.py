#!/usr/bin/env python3
"""Allocation samples jemalloc's own profiler took, read from the heap profiles
it writes (MALLOC_CONF prof:true,lg_prof_interval:N), as a user sees them in
profctl memory:
- a C process leaking 2 MiB/s from leak_chunk() under libjemalloc with its
  profiler on: profd attaches no uprobe (the probes string names the heap
  profiles, not libjemalloc's functions), says the process samples, loses
  nothing; leak_chunk is the leak suspect, named by it (not by jemalloc's
  frames), with live bytes within the sampling noise of the RSS growth, and
  the verdict is a leak;
- a leak in a child forked after the attach (a data-loader worker), with
  --children: the child's own profiles (named by its PID) are read, and its
  leak_chunk is the leak suspect, from the child's samples;
- the same process with the profiler on but no interval dumps: nothing to
  read, so profd probes libjemalloc's functions, and says so.
Skips where libjemalloc (Debian's libjemalloc2) is not installed.
"""
import os
import shutil
import tempfile

from profdtest import Profd, check, check_leak_estimate, require_root_bpf, run, binary, skip

JEMALLOC = '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2'
# A profile every MiB allocated, a sample every 128 KiB on average.
CONF = 'prof:true,prof_prefix:%s,lg_prof_interval:20,lg_prof_sample:17'


def functions(stack):
    return [f['function'] for f in stack['frames']]


def leak(d, conf, seconds, fork=False):
    """alloc-pattern's 2 MiB/s leak under jemalloc with MALLOC_CONF @conf, attached for
    @seconds (@fork: in a child forked 1 s after ready, followed with --children); returns
    the session, the memory report and the workload's PID."""
    more = ['--delay', '1', '--fork', '1'] if fork else []
    w = d.spawn_env({'LD_PRELOAD': JEMALLOC, 'MALLOC_CONF': conf}, binary('ALLOC_PATTERN'),
                    'leak', '--seconds', '60', '--rate-kib', '2048', *more)
    line = w.stdout.readline()
    check(line.strip() == 'ready', 'workload printed %r, not ready' % line)
    att = d.json('attach', w.pid, '--events', 'cpu,rss,malloc', '--duration', str(seconds),
                 '--wait', *(['--children'] if fork else []))
    m = d.json('memory', att['session'])
    w.kill()
    w.wait()
    return att['session'], m, w.pid


def test_profiles(d, tmp):
    prefix = os.path.join(tmp, 'je')
    sid, m, _ = leak(d, CONF % prefix, 8)
    a = m['allocations']
    check(a is not None, 'allocations not traced with --events ...,malloc')
    print('probes %r, sampler %r; %d sampled, %d freed, %d lost, %d truncated' % (
        a['probes'], a['sampler'], a['sampled'], a['free_calls'], a['lost'], a['truncated_stacks']))
    check(a['probes'] == 'jemalloc heap profiles: ' + prefix, 'probes: %r' % a['probes'])
    check(a['sampler'] == 'process', 'sampler %r, expected the process' % a['sampler'])
    check(a['lost'] == 0, '%d samples lost' % a['lost'])
    # ~16 MiB in 64 KiB blocks, each sampled with probability 1 - exp(-1/2): ~100 objects.
    check(a['sampled'] >= 40, 'only %d sampled objects of ~16 MiB leaked' % a['sampled'])
    profiles = [f for f in os.listdir(tmp) if f.endswith('.heap')]
    check(len(profiles) >= 8, 'jemalloc wrote %d heap profiles' % len(profiles))
    suspects = a['leak_suspects']
    check(suspects and suspects[0]['function'] == 'leak_chunk',
          'leak suspects: %r' % [(s['function'], functions(s)) for s in suspects])
    leaf = suspects[0]['frames'][0]
    check('libjemalloc' in (leaf['module'] or ''),
          'the stack starts at %s in %s, not in jemalloc' % (leaf['function'], leaf['module']))
    check(all('libjemalloc' not in (f['module'] or '') for f in suspects[0]['frames'][1:]),
          "jemalloc's profiler frames left in: %r" % functions(suspects[0]))
    # The last profile may be up to 1 MiB of allocations behind the end.
    check_leak_estimate(m, suspects[0])
    _, text, _ = d.ctl('memory', sid)
    check('sampled by the process itself' in text and 'jemalloc heap profiles' in text,
          'profctl memory text:\n' + text)


def test_children(d, tmp):
    sid, m, parent = leak(d, CONF % os.path.join(tmp, 'child'), 8, fork=True)
    a = m['allocations']
    check(a['probes'].startswith('jemalloc heap profiles: '), 'probes: %r' % a['probes'])
    r = d.json('sql', 'SELECT pid, count(*) FROM allocations WHERE session_id = %d GROUP BY pid'
               % sid)
    per_pid = dict(r['rows'])
    print('children: samples per process %r (parent %d)' % (per_pid, parent))
    children = {p: n for p, n in per_pid.items() if p != parent}
    check(len(children) == 1 and max(children.values()) >= 30,
          'samples per process %r: want the forked child' % per_pid)
    suspects = [s for s in a['leak_suspects'] if 'leak_chunk' in functions(s)]
    check(suspects, "the child's leak_chunk is not a leak suspect: %r"
          % [s['function'] for s in a['leak_suspects']])


def test_no_interval(d, tmp):
    _, m, _ = leak(d, 'prof:true,prof_prefix:%s' % os.path.join(tmp, 'none'), 2)
    a = m['allocations']
    print('without lg_prof_interval: probes %r' % a['probes'])
    check(a['sampler'] == 'profd' and 'libjemalloc.so' in (a['probes'] or ''),
          'without interval profiles: sampler %r, probes %r' % (a['sampler'], a['probes']))


def test():
    require_root_bpf()
    if not os.path.exists(JEMALLOC):
        skip('%s not installed (libjemalloc2)' % JEMALLOC)
    tmp = tempfile.mkdtemp(prefix='test-jeprof-')
    try:
        with Profd() as d:
            test_profiles(d, tmp)
            test_children(d, tmp)
            test_no_interval(d, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


run(test)
