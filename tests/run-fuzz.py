#!/usr/bin/env python3
"""Run a libFuzzer binary on a copy of a seed corpus with the given limits;
exit 0 if it found nothing, 1 with its report if it crashed (and print the
executions it made)."""
import re
import shutil
import subprocess
import sys
import tempfile

fuzzer, seeds, args = sys.argv[1], sys.argv[2], sys.argv[3:]
with tempfile.TemporaryDirectory(prefix='fuzz-') as d:
    corpus = shutil.copytree(seeds, d + '/corpus')
    r = subprocess.run([fuzzer] + args + ['-artifact_prefix=' + d + '/', corpus],
                       capture_output=True, text=True)
    runs = re.findall(r'Done (\d+) runs in (\d+) second', r.stderr)
    if runs:
        print('fuzz: %s executions in %s s, no crash' % runs[-1])
    if r.returncode != 0:
        print(r.stderr[-6000:])
        for name in sorted(__import__('os').listdir(d)):
            if name.startswith(('crash-', 'leak-', 'timeout-', 'oom-')):
                print('reproducer: ' + name + ' ' + repr(open(d + '/' + name, 'rb').read()[:300]))
        sys.exit(1)
