#!/usr/bin/env python3
"""Memory growth, as a user sees it in profctl memory:
- a process leaking 1 MiB/s from leak_chunk(): the RSS slope is within 20% of
  1 MiB/s, leak_chunk() is in the top growth stack and is a leak suspect;
- a process that allocates and frees heavily with flat memory: no leak
  suspect, its allocation rate is reported;
- CPU samples of a process under per-call probes keep their callers where the
  kernel single-steps a probed instruction and where a probed function's return
  goes through the uretprobe trampoline;
- probes trapping more often than --malloc-max-rate are detached, visibly;
- a target that exits mid-session: the series ends cleanly, the report works;
- a leak in a child forked after the attach, followed with --children;
- the same leak under jemalloc and tcmalloc (LD_PRELOAD): their malloc is probed.
"""
import os
import time

from profdtest import Profd, check, require_root_bpf, run, binary

MIB = 1024 * 1024
# Mean bytes between allocation samples where a check counts on enough samples of a leak
# of 64 KiB blocks (the default, 512 KiB, gives ~2 a second at 1 MiB/s).
SAMPLE_BYTES = 128 * 1024


def functions(stack):
    return [f['function'] for f in stack['frames']]


def wait_ready(w):
    line = w.stdout.readline()
    check(line.strip() == 'ready', 'workload printed %r, not ready' % line)


def test_leak(d, alloc):
    w = d.spawn(alloc, 'leak', '--seconds', '60', '--rate-kib', '1024')
    wait_ready(w)
    # One allocation sample per 128 KiB: about 80 of the ~10 MiB leaked. At the default
    # 512 KiB (about 20) a CI run estimated 4.8 MiB live, outside the bound below.
    att = d.json('attach', w.pid, '--events', 'cpu,rss,malloc', '--duration', '10',
                 '--malloc-sample-bytes', str(SAMPLE_BYTES), '--wait')
    sid = att['session']
    m = d.json('memory', sid)
    rss = m['rss']
    check(rss is not None and rss['readings'] >= 8, 'RSS series has %r readings' % (rss and rss['readings']))
    slope = rss['growth_bytes_per_s']
    check(0.8 * MIB <= slope <= 1.2 * MIB,
          'RSS grows %.0f B/s, the workload leaks %d B/s (20%% allowed)' % (slope, MIB))
    check(rss['end_bytes'] > rss['start_bytes'] + 5 * MIB,
          'RSS went from %d to %d bytes in 10 s of a 1 MiB/s leak' % (rss['start_bytes'], rss['end_bytes']))
    a = m['allocations']
    check(a is not None, 'allocations not traced with --events ...,malloc')
    check('libc.so' in (a['probes'] or ''), 'probes: %r' % a['probes'])
    check(a['calls'] > 0 and a['sampled'] > 0, 'calls %r, sampled %r' % (a['calls'], a['sampled']))
    check(a['top_growth'], 'no stack grew')
    top = a['top_growth'][0]
    check('leak_chunk' in functions(top),
          'top growth stack is %s, not the leaking one' % functions(top))
    check(top['function'] == 'leak_chunk', 'the stack is named %r, not by its caller leak_chunk' % top['function'])
    suspects = [s for s in a['leak_suspects'] if 'leak_chunk' in functions(s)]
    check(suspects, 'leak_chunk is not a leak suspect; suspects: %s' %
          [s['function'] for s in a['leak_suspects']])
    check(all('leak_chunk' in functions(s) for s in a['leak_suspects']),
          'a stack that does not leak is a suspect: %s' % [functions(s) for s in a['leak_suspects']])
    # Its estimated live bytes: ~10 MiB leaked; sampling noise with ~80 samples is ~11%.
    live = suspects[0]['live_bytes']
    print('leak_chunk: live bytes estimated at %d from %r samples (%d sampled in all)' % (
        live, suspects[0].get('samples'), a['sampled']))
    check(5 * MIB <= live <= 16 * MIB, 'leak_chunk live bytes estimated at %d, ~10 MiB leaked' % live)
    # analyze turns it into findings: the leak suspect, and the RSS growth.
    findings = d.json('analyze', sid)['findings']
    leak = [f for f in findings if f['rule'] == 'leak-suspect']
    check(leak and leak[0]['evidence']['function'] == 'leak_chunk' and leak[0]['severity'] == 'high',
          'analyze leak findings: %r' % leak)
    check(any(f['rule'] == 'memory-growth' for f in findings), 'no memory-growth finding: %r' % findings)
    # The text report names it too.
    _, out, _ = d.ctl('memory', sid, '--ascii')
    check('leak suspects' in out and 'leak_chunk' in out, 'profctl memory text:\n' + out)
    w.kill()
    w.wait()


def test_churn(d, alloc):
    w = d.spawn(alloc, 'churn', '--seconds', '60', '--threads', '2')
    wait_ready(w)
    time.sleep(0.5)  # the working sets are full
    att = d.json('attach', w.pid, '--events', 'cpu,rss,malloc', '--malloc-max-rate', '0',
                 '--duration', '6', '--wait')
    m = d.json('memory', att['session'])
    check(m['allocations']['stopped_at_s'] is None, 'probes stopped without a rate limit')
    a = m['allocations']
    check(a['leak_suspects'] == [], 'flat churn has leak suspects: %s' %
          [functions(s) for s in a['leak_suspects']])
    check(a['calls_per_s'] > 1000 and a['bytes_per_s'] > 100000,
          'allocation rate %r calls/s, %r B/s' % (a['calls_per_s'], a['bytes_per_s']))
    check(a['free_calls'] > 0.9 * a['calls'], '%d frees for %d allocations' % (a['free_calls'], a['calls']))
    check(abs(m['rss']['growth_bytes_per_s']) < 256 * 1024,
          'flat workload: RSS grows %r B/s' % m['rss']['growth_bytes_per_s'])
    # The sampled allocations are the churn's: their stacks name the function that churns.
    # (Not the blocks live at the end: 2 x 256 blocks of ~2 KiB are ~1 MiB, about two
    # samples at the 512 KiB mean interval, none in one run out of seven.)
    sid = att['session']
    r = d.json('sql', "SELECT count(*), sum(EXISTS (SELECT 1 FROM stack_frames sf JOIN frames f "
               "ON f.id = sf.frame_id WHERE sf.stack_id = a.stack_id AND f.function = 'churn_step')) "
               "FROM allocations a WHERE a.session_id = %d" % sid)
    n, churn = r['rows'][0]
    print('churn: %d sampled allocations, %d on a stack through churn_step' % (n, churn or 0))
    check(n >= 20 and (churn or 0) >= 0.9 * n,
          '%r of %r sampled allocations on a stack through churn_step' % (churn, n))
    check(all('churn_step' in functions(s) for s in a['top_live']),
          'a live stack that does not churn: %s' % [functions(s) for s in a['top_live']])
    w.kill()
    w.wait()


def samples_through(d, sid, kernel_function):
    """CPU samples of session @sid whose stack has kernel frame @kernel_function: how many,
    how many also go through churn_step, how many have an [unknown] frame."""
    through = ("coalesce(sum(t.count * EXISTS (SELECT 1 FROM stack_frames sf JOIN frames f"
               " ON f.id = sf.frame_id WHERE sf.stack_id = t.stack_id AND %s)), 0)")
    r = d.json('sql', "SELECT coalesce(sum(t.count), 0), %s, %s FROM sample_totals t"
               " WHERE t.session_id = %d AND t.stack_id IN (SELECT sf.stack_id FROM stack_frames sf"
               " JOIN frames f ON f.id = sf.frame_id WHERE f.kind = 'kernel' AND f.function = '%s')"
               % (through % "f.function = 'churn_step'", through % "f.module = '[unknown]'", sid,
                  kernel_function))
    return r['rows'][0]


def test_probe_stacks(d, alloc):
    """CPU samples of a process under per-call allocation probes keep their callers."""
    w = d.spawn(alloc, 'churn', '--seconds', '60', '--threads', '2')
    wait_ready(w)
    sid = d.json('attach', w.pid, '--events', 'cpu,malloc', '--malloc-max-rate', '0',
                 '--freq', '999', '--duration', '8', '--wait')['session']
    # Most samples land while the kernel single-steps a probed instruction's copy in
    # the [uprobes] page (under asm_exc_debug), which no CFI covers.
    n, churn, unknown = samples_through(d, sid, 'asm_exc_debug')
    print('probe stacks: %d samples in a single-step, %d through churn_step, %d with [unknown]'
          % (n, churn, unknown))
    check(n > 100 and churn >= 0.9 * n and unknown == 0,
          'single-stepped samples: %d of %d through churn_step, %d with [unknown] frames'
          % (churn, n, unknown))
    # A probed function's return address is the uretprobe trampoline's until it returns,
    # and the trampoline returns through a system call: samples there (nearly all of
    # churn's system calls) must name the caller waiting for that return. Not all: in
    # the system call the kernel has already taken the return off its list (78-85% of
    # them did here, 95-211 samples in 8 s; 44% without the fix).
    n, churn, unknown = samples_through(d, sid, 'entry_SYSCALL_64_after_hwframe')
    print('probe stacks: %d samples in system calls, %d through churn_step, %d with [unknown]'
          % (n, churn, unknown))
    check(n > 40 and churn >= 0.6 * n,
          'samples in system calls: %d of %d through churn_step, %d with [unknown] frames'
          % (churn, n, unknown))
    w.kill()
    w.wait()


def test_rate_limit(d, alloc):
    """Probes that trap too often are detached, and the report says so."""
    w = d.spawn(alloc, 'churn', '--seconds', '60', '--threads', '2')
    wait_ready(w)
    att = d.json('attach', w.pid, '--events', 'cpu,malloc', '--malloc-max-rate', '500',
                 '--duration', '6', '--wait')
    a = d.json('memory', att['session'])['allocations']
    check(a['max_hits_per_s'] == 500, 'max_hits_per_s %r' % a['max_hits_per_s'])
    check(a['stopped_at_s'] is not None and a['stopped_at_s'] < 5,
          'probes trapping >500/s not detached: stopped_at_s %r' % a['stopped_at_s'])
    _, out, _ = d.ctl('memory', att['session'])
    check('probes detached' in out, 'the text report does not say the probes were detached:\n' + out)
    # The kernel takes ~75 ms to remove each probe; meanwhile they record nothing (0.1 s
    # leaves room for calls entered before the stop and for the clocks' conversion).
    r = d.json('sql', 'SELECT count(*), coalesce(sum(a.alloc_ns > s.malloc_stopped_ns + 100000000), 0)'
                      ' FROM allocations a JOIN sessions s ON s.id = a.session_id'
                      ' WHERE s.id = %d' % att['session'])
    recorded, late = r['rows'][0]
    print('rate limit: %d sampled allocations recorded, %d of them after the stop' % (recorded, late))
    check(late == 0, '%d of %d allocations recorded after the probes were stopped' % (late, recorded))
    w.kill()
    w.wait()


def test_exit(d, alloc):
    w = d.spawn(alloc, 'leak', '--seconds', '3')
    wait_ready(w)
    sid = d.json('attach', w.pid, '--events', 'cpu,rss,malloc', '--duration', '30')['session']
    w.wait(timeout=30)
    s = d.wait_ended(sid, timeout=15)
    check(s['end_reason'] == 'target_exited', 'end_reason %r' % s['end_reason'])
    m = d.json('memory', sid)
    rss = m['rss']
    check(rss['readings'] >= 2, 'only %d readings before the exit' % rss['readings'])
    check(rss['last_reading_s'] <= 4.5, 'a reading at %.1f s of a process that exited at ~3 s'
          % rss['last_reading_s'])
    check(m['duration_s'] < 10, 'session of a 3 s process lasted %.1f s' % m['duration_s'])
    check(m['allocations']['calls'] > 0, 'allocations of the exited process lost')
    d.ctl('memory', sid)


def test_children(d, alloc):
    """A leak in a child forked after the attach (a data-loader worker), with --children."""
    w = d.spawn(alloc, 'leak', '--seconds', '20', '--delay', '1', '--fork', '1')
    wait_ready(w)
    att = d.json('attach', w.pid, '--children', '--events', 'cpu,rss,malloc', '--duration', '9',
                 '--malloc-sample-bytes', str(SAMPLE_BYTES), '--wait')
    m = d.json('memory', att['session'])
    pids = [p['pid'] for p in m['rss']['processes']]
    check(len(pids) == 2 and w.pid in pids, 'RSS series of processes %s, want the parent %d and its child'
          % (pids, w.pid))
    child = [p for p in m['rss']['processes'] if p['pid'] != w.pid][0]
    check(child['growth_bytes_per_s'] > 0.5 * MIB, "the child's RSS grows %r B/s" % child['growth_bytes_per_s'])
    suspects = [s for s in m['allocations']['leak_suspects'] if 'leak_chunk' in functions(s)]
    check(suspects, "the child's leak_chunk is not a leak suspect: %s" %
          [s['function'] for s in m['allocations']['leak_suspects']])
    w.kill()
    w.wait()


ALLOCATORS = [('jemalloc', '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2', 'libjemalloc.so'),
              ('tcmalloc', '/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4', 'libtcmalloc.so')]


def test_other_allocators(d, alloc):
    """The probes go where the target's malloc really is: jemalloc, tcmalloc (LD_PRELOAD)."""
    for name, lib, module in ALLOCATORS:
        if not os.path.exists(lib):
            print('%s not installed (%s): not tested' % (name, lib))
            continue
        # 2 MiB/s for 6 s: about 94 of its 64 KiB blocks sampled at 128 KiB. At 512 KiB
        # (about 23) a run now and then sampled too few for a leak suspect (CI saw
        # jemalloc's and tcmalloc's lists empty).
        w = d.spawn_env({'LD_PRELOAD': lib}, alloc, 'leak', '--seconds', '30', '--rate-kib', '2048')
        wait_ready(w)
        att = d.json('attach', w.pid, '--events', 'cpu,malloc', '--duration', '6',
                     '--malloc-sample-bytes', str(SAMPLE_BYTES), '--wait')
        a = d.json('memory', att['session'])['allocations']
        check(module in (a['probes'] or ''), '%s: probes %r' % (name, a['probes']))
        suspects = [s for s in a['leak_suspects'] if 'leak_chunk' in functions(s)]
        check(suspects, '%s: leak_chunk is not a leak suspect: %s' % (name, [s['function'] for s in a['leak_suspects']]))
        leaf = suspects[0]['frames'][0]
        check(module in (leaf['module'] or ''), '%s: the allocating frame is %s in %s' % (name, leaf['function'], leaf['module']))
        w.kill()
        w.wait()


def test():
    require_root_bpf()
    alloc = binary('ALLOC_PATTERN')
    with Profd() as d:
        test_leak(d, alloc)
        test_churn(d, alloc)
        test_probe_stacks(d, alloc)
        test_rate_limit(d, alloc)
        test_exit(d, alloc)
        test_children(d, alloc)
        test_other_allocators(d, alloc)


run(test)
