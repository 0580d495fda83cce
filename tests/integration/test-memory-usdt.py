#!/usr/bin/env python3
"""Allocation samples from a process that samples its own allocations (the
otel_memory:alloc/free USDT probes of OpenTelemetry's contract, fired by
libprofd-alloc.so, which the workload links), as a user sees them in profctl
memory:
- profd attaches the two USDT probes and no uprobe on malloc or free (the
  probes string names the library, not libc), and says the process samples;
- every alloc probe the library fired while watched (it counts them while
  the probes' semaphores are set, and prints them at exit) arrives as a
  sample, none lost;
- the 1 MiB/s leak is a leak suspect named leak_objects (the caller of the
  sampler, not the sampler the probe fires in), with its live bytes within
  the sampling noise of what the process leaked (it starts leaking 2 s after
  "ready", once profd is attached);
- the churning allocations, freed at once, are not live.
"""
import re

from profdtest import Profd, check, require_root_bpf, run, binary

MIB = 1024 * 1024


def functions(stack):
    return [f['function'] for f in stack['frames']]


def test():
    require_root_bpf()
    usdt = binary('USDT_ALLOC')
    with Profd() as d:
        # A sample every 128 KiB on average: ~110 of the leak's 14 MiB (at the default 512 KiB,
        # ~28: a run estimated 1.51x what leaked, 2.7 standard deviations out).
        w = d.spawn_env({'PROFD_ALLOC_STATS': '1', 'PROFD_ALLOC_SAMPLE_BYTES': '131072'}, usdt,
                        'leak', '--seconds', '14', '--rate-kib', '1024', '--delay', '2')
        line = w.stdout.readline()
        check(line.strip() == 'ready', 'workload printed %r, not ready' % line)
        att = d.json('attach', w.pid, '--events', 'cpu,malloc')
        sid = att['session']
        out, _ = w.communicate(timeout=60)
        d.wait_ended(sid)
        print('workload: %r' % out)
        leaked = re.search(r'^leaked (\d+)$', out, re.M)
        stats = re.search(r'^profd-alloc: (\d+) sampled, (\d+) while watched', out, re.M)
        check(leaked and stats, 'workload output: %r' % out)
        leaked, fired = int(leaked.group(1)), int(stats.group(2))
        m = d.json('memory', sid)
        a = m['allocations']
        check(a is not None, 'allocations not traced with --events ...,malloc')
        print('probes: %r, sampler %r; %d sampled, %d freed, %d lost' % (
            a['probes'], a['sampler'], a['sampled'], a['free_calls'], a['lost']))
        check(a['sampler'] == 'process', 'sampler %r, expected the process' % a['sampler'])
        check((a['probes'] or '').startswith('otel_memory USDT: libprofd-alloc.so') and
              'libc' not in a['probes'],
              'probes: %r' % a['probes'])
        check(a['lost'] == 0, '%d samples lost' % a['lost'])
        # The workload keeps frame pointers: every stack reaches main.
        check(a['truncated_stacks'] == 0, '%d truncated stacks' % a['truncated_stacks'])
        # The library counts the alloc probes it fired while profd's probes were attached
        # (their semaphores set): every one of them arrives.
        check(a['sampled'] > 100, 'only %d sampled allocations in ~13 s of ~65 MiB/s' % a['sampled'])
        check(a['sampled'] == fired, '%d sampled allocations stored, the process fired %d'
              % (a['sampled'], fired))
        # Its frees: the churn frees at once, so nearly every sampled block is freed.
        check(a['free_calls'] >= 0.9 * (a['sampled'] - 40),
              '%d frees of %d sampled blocks; the churn frees each at once' % (a['free_calls'], a['sampled']))
        suspects = a['leak_suspects']
        check(suspects and suspects[0]['function'] == 'leak_objects',
              'leak suspects: %r' % [(s['function'], functions(s)) for s in suspects])
        check(all('leak_objects' in functions(s) for s in suspects),
              'a stack that does not leak is a suspect: %r' % [functions(s) for s in suspects])
        live = suspects[0]['live_bytes']
        # 14 s of 1 MiB/s attached; with ~110 samples the noise is ~10%; allow 50%.
        check(leaked > 8 * MIB, 'the process leaked only %d bytes' % leaked)
        print('leak_objects: live bytes estimated at %d (%d samples); ~%d leaked while attached'
              % (live, suspects[0]['samples'], leaked))
        check(0.5 * leaked <= live <= 1.5 * leaked,
              'leak_objects live bytes estimated at %d, ~%d leaked while attached' % (live, leaked))
        churn = [s for s in a['top_live'] if 'churn_objects' in functions(s)]
        check(all(s['live_bytes'] <= 2 * 128 * 1024 for s in churn),
              'churned blocks counted live: %r' % [(s['live_bytes'], s['samples']) for s in churn])
        _, text, _ = d.ctl('memory', sid)
        check('sampled by the process itself' in text and 'leak_objects' in text,
              'profctl memory text:\n' + text)


run(test)
