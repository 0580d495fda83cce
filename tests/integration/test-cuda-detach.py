#!/usr/bin/env python3
"""Ending a session with CUDA probes on the real libcudart does not stop
profd's other sessions. Each uprobe profd removes costs the kernel a wait of
~75 ms for RCU grace periods (uprobe_unregister_sync(), Linux 6.12+), and a
cuda,nvtx session on cuda-work-shared holds ~60 of them: done on the event
loop, every other session's sampling, memory readings and every answer
stopped for ~4 s per CUDA session that ended. Asserted as a user sees it:
a spin workload's session, reading RSS every 0.25 s meanwhile, has no gap
of more than 8 readings while two CUDA sessions end, loses no sample, and
the CUDA sessions' probes are all gone from the kernel afterwards."""
import json
import os
import subprocess
import time

from profdtest import Profd, check, require_root_bpf, require_tool, run, skip

INTERVAL_S = 0.25
MAX_GAP_READINGS = 8  # 2 s; the stall was ~4 s per CUDA session, 8 s here
CUDA_SESSIONS = 2


def profd_uprobes(pid):
    """The uprobes (entry and return) the process @pid holds, per bpftool."""
    out = subprocess.run(['bpftool', '--json', 'perf', 'show'], capture_output=True, text=True,
                         check=True).stdout
    return [x for x in json.loads(out or '[]')
            if x.get('pid') == pid and x.get('fd_type') in ('uprobe', 'uretprobe')]


def test():
    require_root_bpf()
    require_tool('bpftool', 'bpftool')
    shared = os.environ.get('CUDA_WORK_SHARED')
    if not shared or not os.path.exists(shared):
        skip('nvcc was not found at build time (/usr/local/cuda/bin or PATH): no CUDA workloads')
    with Profd() as d:
        spin = d.spin('1', seconds=60)
        spin_sid = d.json('attach', spin.pid, '--events', 'cpu,rss', '--memory-interval',
                          str(INTERVAL_S))['session']
        # The spin session's first flush symbolizes its modules once; let it pass.
        time.sleep(1.5)

        work = [d.spawn_waiting(shared) for _ in range(CUDA_SESSIONS)]
        sids = [d.json('attach', w.pid, '--events', 'cpu,cuda,nvtx')['session'] for w in work]
        held = len(profd_uprobes(d.proc.pid))
        print('uprobes held by profd with %d CUDA sessions: %d' % (CUDA_SESSIONS, held))
        check(held >= 40 * CUDA_SESSIONS, 'too few probes to show a stall: %d' % held)
        for w in work:
            d.go(w)
        for sid in sids:
            s = d.wait_ended(sid)
            check(s['end_reason'] == 'target_exited', 'CUDA session end %r' % s['end_reason'])
            g = d.json('gpu', sid)
            launches = sum(k['launches'] for k in g['kernels'])
            check(launches == 30, 'CUDA session %d: %d launches, want 30' % (sid, launches))
        time.sleep(1.0)
        d.ctl('detach', spin_sid)
        s = d.wait_ended(spin_sid)

        m = d.json('memory', spin_sid)['rss']
        t = [x['t_s'] for x in m['series']]
        gaps = [(round(b - a, 2), round(a, 2)) for a, b in zip(t, t[1:])]
        worst = max(gaps)
        print('spin session: %d RSS readings every %.2f s, longest gap %.2f s at %.2f s; '
              '%d samples, %d lost' % (len(t), INTERVAL_S, worst[0], worst[1], s['samples'],
                                       s['lost_samples']))
        check(len(t) >= 8, 'too few RSS readings: %r' % t)
        check(worst[0] <= MAX_GAP_READINGS * INTERVAL_S,
              'the spin session read no RSS for %.2f s from %.2f s while the CUDA sessions '
              'ended (the event loop stalled): %r' % (worst[0], worst[1], t))
        check(s['lost_samples'] == 0 and s['samples'] > 0,
              'spin session samples %d, lost %d' % (s['samples'], s['lost_samples']))

        # Off the loop is not never: every probe is removed from the kernel.
        deadline = time.time() + 60
        while profd_uprobes(d.proc.pid) and time.time() < deadline:
            time.sleep(0.25)
        left = profd_uprobes(d.proc.pid)
        check(not left, '%d uprobes still attached 60 s after the sessions ended' % len(left))


run(test)
