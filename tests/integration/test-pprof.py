#!/usr/bin/env python3
"""pprof export read by go tool pprof (Debian's golang-go): its top function
is profctl top's, and its sample total matches the session's."""
import os
import re
import shutil
import subprocess

from profdtest import Profd, binary, check, require_root_bpf, run, skip, require_tool


def test():
    require_root_bpf()
    go = require_tool('go', 'golang-go')
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        sid, _ = d.profile_run([spin, '--seconds', '4', '--weights', '1,2,3'], 4)
        top = d.json('top', sid, '--limit', '1')
        out = os.path.join(d.dir, 'cpu.pb.gz')
        d.ctl('export', sid, '--format', 'pprof', '-o', out)
        env = dict(os.environ, HOME=d.dir, GOCACHE=os.path.join(d.dir, 'gocache'),
                   GOPATH=os.path.join(d.dir, 'gopath'), GOFLAGS='-mod=mod', GOTOOLCHAIN='local')
        p = subprocess.run([go, 'tool', 'pprof', '-top', '-symbolize=none', out],
                           capture_output=True, text=True, env=env, timeout=300)
        print(p.stdout[:1500])
        check(p.returncode == 0, 'go tool pprof failed (%d): %s' % (p.returncode, p.stderr))
        lines = p.stdout.splitlines()
        head = [i for i, l in enumerate(lines) if l.split()[:2] == ['flat', 'flat%']]
        check(head, 'no table in go tool pprof -top output')
        first = lines[head[0] + 1].split()
        check(first[-1] == top['functions'][0]['function'],
              'pprof top function %r, profctl top %r' % (first[-1], top['functions'][0]['function']))
        # "Total samples = 2.40s": samples x period.
        m = re.search(r'Total samples = ([\d.]+)(ms|s)\b', p.stdout)
        check(m, 'no total in pprof output')
        seconds = float(m.group(1)) / (1000 if m.group(2) == 'ms' else 1)
        expect = top['total_samples'] / 397
        check(abs(seconds - expect) <= 0.01 * expect + 0.01,
              'pprof total %.3f s, expected %d samples / 397 Hz = %.3f s' % (seconds, top['total_samples'], expect))
        check('lost samples %d' % top['lost_samples'] in p.stdout, 'loss counters not in the pprof comments')
        # The executable's mapping comes first, with its build ID.
        check(re.search(r'Build ID: [0-9a-f]{40}', p.stdout), 'no build ID in pprof output')


run(test)
