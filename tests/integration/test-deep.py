#!/usr/bin/env python3
"""Reports on call stacks 500 frames deep (a session written through
profd's store code by gen-session): flame graph, hot paths, top and every
export finish, and show whole stacks."""
import gzip
import json
import os
import re
import stat
import subprocess
import tempfile

from profdtest import Profd, binary, check, require_root_bpf, run

DEPTH = 500


def test():
    require_root_bpf()
    work = tempfile.mkdtemp(prefix='profd-deep-')
    db = os.path.join(work, 'profd.db')
    gen = subprocess.run([binary('GEN_SESSION'), db, '--seconds', '20', '--threads', '3', '--stacks', '6',
                          '--min-depth', str(DEPTH), '--max-depth', str(DEPTH), '--samples', '6000'],
                         capture_output=True, text=True, timeout=120)
    check(gen.returncode == 0, 'gen-session failed: %s' % gen.stderr)
    print(gen.stdout.strip())
    sid = int(re.match(r'session (\d+):', gen.stdout).group(1))
    with Profd(db=db) as d:
        # The hottest path: the whole stack, leaf first, main last.
        path = d.json('hotpaths', sid, '--limit', '1')['paths'][0]
        names = [f['function'] for f in path['frames']]
        check(len(names) == DEPTH and names[0] == 'leaf_0' and names[-1] == 'main',
              'hot path of %d frames: %r ... %r' % (len(names), names[:2], names[-2:]))
        _, text, _ = d.ctl('hotpaths', sid, '--limit', '3', timeout=60)
        check('leaf_0' in text and 'main' in text, 'hotpaths text lacks the stack:\n' + text[:500])

        top = d.json('top', sid, '--limit', '3')['functions']
        check(top[0]['function'] == 'leaf_0', 'top: %r' % top[:1])

        svg = os.path.join(work, 'deep.svg')
        d.ctl('flamegraph', sid, '-o', svg, timeout=60)
        with open(svg) as f:
            text = f.read()
        boxes = text.count('<g class="f"')
        height = float(re.search(r'<svg [^>]*height="([0-9.]+)"', text).group(1))
        print('flame graph: %d boxes, %.0f px high' % (boxes, height))
        check(boxes >= DEPTH, 'the flame graph has %d boxes, fewer than one stack' % boxes)
        check(height >= DEPTH * 17, 'the flame graph is %.0f px high: not %d rows' % (height, DEPTH))
        check('data-n="leaf_0"' in text and 'data-n="main"' in text, 'the flame graph lacks leaf_0 or main')

        folded = os.path.join(work, 'deep.folded')
        d.ctl('export', sid, '--format', 'folded', '-o', folded, timeout=60)
        with open(folded) as f:
            lines = [l.rsplit(' ', 1)[0].split(';') for l in f if l.strip()]
        check(lines and max(len(l) for l in lines) == DEPTH and all(l[0] == 'main' for l in lines),
              'folded stacks: %d lines, depths %r' % (len(lines), sorted({len(l) for l in lines})))

        pb = os.path.join(work, 'deep.pb.gz')
        d.ctl('export', sid, '--format', 'pprof', '-o', pb, timeout=60)
        with open(pb, 'rb') as f:
            raw = gzip.decompress(f.read())
        check(b'leaf_0' in raw and b'main' in raw, 'the pprof profile lacks the stack names')

        # An existing file that is not a regular file is written, never replaced.
        d.ctl('flamegraph', sid, '-o', '/dev/null', timeout=60)
        d.ctl('export', sid, '--format', 'folded', '-o', '/dev/null', timeout=60)
        check(stat.S_ISCHR(os.stat('/dev/null').st_mode), '-o /dev/null replaced /dev/null')

        trace = os.path.join(work, 'deep.json')
        d.ctl('export', sid, '--format', 'chrome-trace', '-o', trace, timeout=60)
        with open(trace) as f:
            doc = json.load(f)
        events = doc['traceEvents'] if isinstance(doc, dict) else doc
        check(any(e.get('name') == 'leaf_0' for e in events), 'the Chrome trace lacks leaf_0')


run(test)
