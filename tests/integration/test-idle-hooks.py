#!/usr/bin/env python3
"""An idle profd costs its machine nothing: the BPF programs that hook every
process of the machine (offcpu_switch on sched_switch, offcpu_wakeup on
sched_wakeup, the vm_* programs on page_fault_user and the brk, mmap,
munmap and mremap system calls) are attached only while a session uses
them. What a user of a shared box can check with bpftool:

- a profd with no session holds no link to any of them;
- a session with the offcpu and rss events attaches them all, and a second
  such session keeps them attached when the first ends: its off-CPU
  intervals keep coming;
- when the last session ends they are all detached again;
- a session after that attaches them anew and records off-CPU intervals
  and address-space changes as the first did;
- the CPU sampler, whose cpu-clock event is opened on every CPU (the BPF
  program keeps the targets' samples), does not run its program on the
  ticks of idle CPUs (exclude_idle): attached to a process that sleeps, on
  a machine at rest, profile_sample runs on few of the ticks.
  (BPF run counts: kernel.bpf_stats_enabled, set for the check.)"""
import os
import time

from profdtest import (Profd, bpf_prog_infos, bpf_programs_of, check, require_root_bpf,
                       require_tool, run)

HOOKS = {'offcpu_switch', 'offcpu_wakeup', 'vm_brk_entry', 'vm_brk_exit', 'vm_mmap_exit',
         'vm_munmap_exit', 'vm_mremap_exit', 'vm_fault'}
# Naps (off-CPU intervals), and a 1 MiB mapping made, touched and unmapped each time.
WORKLOAD = ('import mmap, time\nwhile True:\n    m = mmap.mmap(-1, 1 << 20)\n    m[0] = 1\n'
            '    m.close()\n    time.sleep(0.002)\n')


def attach(d, pid):
    r = d.request({'cmd': 'attach', 'pid': pid, 'events': ['cpu', 'offcpu', 'rss']})
    check(r.get('ok'), 'attach to %d: %r' % (pid, r))
    return r['id']


def detach(d, sid):
    check(d.request({'cmd': 'detach', 'session': sid}).get('ok'), 'detach %d failed' % sid)


def offcpu_intervals(d, sid):
    """Off-CPU intervals stored for @sid (the request makes profd flush first)."""
    rows = d.json('sql', 'SELECT coalesce(sum(count), 0) FROM offcpu WHERE session_id = %d' % sid)
    return rows['rows'][0][0]


def hooks_left(d, when):
    left = bpf_programs_of(d.proc.pid, links_only=True) & HOOKS
    check(not left, '%s, profd still has %s attached' % (when, sorted(left)))


def sampler_runs(d):
    """profile_sample's runs so far (bpftool run_cnt), 0 if it is not loaded."""
    return sum(p.get('run_cnt', 0) for p in bpf_prog_infos(d.proc.pid)
               if p.get('name') == 'profile_sample')


def check_idle_ticks(d):
    """A session on a sleeping process: profile_sample runs on under a quarter of the
    machine's ticks in 3 s (each idle CPU would add 999 a second without exclude_idle)."""
    sleeper = d.spawn('/usr/bin/python3', '-c', 'import time; time.sleep(60)')
    stats = '/proc/sys/kernel/bpf_stats_enabled'
    with open(stats) as f:
        old = f.read().strip()
    with open(stats, 'w') as f:
        f.write('1')
    try:
        att = d.json('attach', sleeper.pid, '--freq', '999')
        if att['event'] != 'cpu-clock':
            print('idle ticks: event %s, not cpu-clock: not checked' % att['event'])
            return
        time.sleep(0.5)
        before = sampler_runs(d)
        time.sleep(3)
        runs = sampler_runs(d) - before
        ticks = 999 * (os.cpu_count() or 1) * 3
        print('idle ticks: profile_sample ran %d times in 3 s, of %d ticks of the machine'
              % (runs, ticks))
        check(runs < ticks / 4, 'profile_sample ran %d times in 3 s on a machine at rest'
              ' (%d ticks): idle CPUs are sampled' % (runs, ticks))
        detach(d, att['session'])
    finally:
        with open(stats, 'w') as f:
            f.write(old)
        sleeper.kill()
        sleeper.wait()


def test():
    require_root_bpf()
    require_tool('bpftool', 'bpftool')
    with Profd() as d:
        hooks_left(d, 'with no session')
        w1 = d.spawn('/usr/bin/python3', '-c', WORKLOAD)
        w2 = d.spawn('/usr/bin/python3', '-c', WORKLOAD)
        time.sleep(0.5)

        a = attach(d, w1.pid)
        names = bpf_programs_of(d.proc.pid, links_only=True)
        check(HOOKS <= names, 'a session with offcpu and rss: attached %s, missing %s'
              % (sorted(names), sorted(HOOKS - names)))
        b = attach(d, w2.pid)
        time.sleep(1)
        detach(d, a)
        names = bpf_programs_of(d.proc.pid, links_only=True)
        check(HOOKS <= names, 'session %d still runs, yet %s were detached'
              % (b, sorted(HOOKS - names)))
        before = offcpu_intervals(d, b)
        time.sleep(1.5)
        after = offcpu_intervals(d, b)
        check(after > before, 'session %d: no off-CPU interval after the other session ended'
              ' (%d, then %d)' % (b, before, after))
        detach(d, b)
        hooks_left(d, 'after the last session ended')

        c = attach(d, w1.pid)
        time.sleep(1.5)
        detach(d, c)
        hooks_left(d, 'after a second round')
        n = offcpu_intervals(d, c)
        vm = d.json('sql', 'SELECT vm_events FROM sessions WHERE id = %d' % c)['rows'][0][0]
        check(n > 0, 'a session after the hooks were detached records no off-CPU interval')
        check(vm and vm > 0, 'a session after the hooks were detached records no'
              ' address-space change: vm_events %r' % vm)
        print('idle: no hook attached; session %d: %d off-CPU intervals after session %d ended;'
              ' session %d after a full detach: %d intervals, %d address-space changes'
              % (b, after - before, a, c, n, vm))
        for w in (w1, w2):
            w.kill()
            w.wait()
        check_idle_ticks(d)


if __name__ == '__main__':
    run(test)
