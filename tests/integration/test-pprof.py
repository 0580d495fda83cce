#!/usr/bin/env python3
"""pprof export read by go tool pprof (Debian's golang-go): its top function
is profctl top's, and its sample total matches the session's."""
import os
import re

from profdtest import Profd, binary, check, go_pprof_top, require_root_bpf, run, require_tool


def test():
    require_root_bpf()
    go = require_tool('go', 'golang-go')
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        sid, _ = d.profile_run([spin, '--seconds', '4', '--weights', '1,2,3'], 4)
        top = d.json('top', sid, '--limit', '1')
        out = os.path.join(d.dir, 'cpu.pb.gz')
        d.ctl('export', sid, '--format', 'pprof', '-o', out)
        text, first = go_pprof_top(go, d.dir, [out])
        check(first == top['functions'][0]['function'],
              'pprof top function %r, profctl top %r' % (first, top['functions'][0]['function']))
        # "Total samples = 2.40s": samples x period.
        m = re.search(r'Total samples = ([\d.]+)(ms|s)\b', text)
        check(m, 'no total in pprof output')
        seconds = float(m.group(1)) / (1000 if m.group(2) == 'ms' else 1)
        expect = top['total_samples'] / 397
        check(abs(seconds - expect) <= 0.01 * expect + 0.01,
              'pprof total %.3f s, expected %d samples / 397 Hz = %.3f s' % (seconds, top['total_samples'], expect))
        check('lost samples %d' % top['lost_samples'] in text, 'loss counters not in the pprof comments')
        # The executable's mapping comes first, with its build ID.
        check(re.search(r'Build ID: [0-9a-f]{40}', text), 'no build ID in pprof output')


run(test)
