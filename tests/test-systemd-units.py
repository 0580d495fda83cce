#!/usr/bin/env python3
"""The systemd units pass `systemd-analyze verify` without a single warning
(configured with this build's paths), and profd's log lines carry journald
priorities (<3> error ...) exactly when stderr is the journal's stream
(JOURNAL_STREAM names it), and none otherwise."""
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
profd, unit_dir, src_dir = sys.argv[1], sys.argv[2], sys.argv[3]
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print('FAIL: ' + what)


# journald priorities: run profd so that it logs an error.
with tempfile.TemporaryDirectory(prefix='issue7-units-') as d:
    bad = os.path.join(d, 'bad.conf')
    with open(bad, 'w') as f:
        f.write('[limits]\nmax_sessions = 0\n')
    err_path = os.path.join(d, 'stderr')
    for journal in (True, False):
        with open(err_path, 'w') as err:
            st = os.fstat(err.fileno())
            env = dict(os.environ)
            env.pop('JOURNAL_STREAM', None)
            if journal:
                env['JOURNAL_STREAM'] = '%d:%d' % (st.st_dev, st.st_ino)
            r = subprocess.run([profd, '--config', bad, '--check-config'], stderr=err,
                               stdout=subprocess.DEVNULL, env=env)
        text = open(err_path).read()
        if journal:
            check(r.returncode == 2 and text.startswith('<3>profd: error: invalid configuration'),
                  'under the journal, errors start with <3>: %r' % text)
        else:
            check(r.returncode == 2 and text.startswith('profd: error: invalid configuration'),
                  'on a plain stderr, no priority prefix: %r' % text)
    # JOURNAL_STREAM set, but stderr redirected elsewhere: no prefix.
    with open(err_path, 'w') as err:
        env = dict(os.environ, JOURNAL_STREAM='1:1')
        subprocess.run([profd, '--config', bad, '--check-config'], stderr=err,
                       stdout=subprocess.DEVNULL, env=env)
    text = open(err_path).read()
    check(text.startswith('profd: error:'), 'stderr not the journal stream: %r' % text)

analyze = shutil.which('systemd-analyze')
if not analyze:
    print('SKIP: systemd-analyze is not installed: units not verified')
    sys.exit(1 if failures else SKIP)

with tempfile.TemporaryDirectory(prefix='issue7-units-') as d:
    # The build's copies (ExecStart= points at this build's profd and profctl).
    shutil.copy(os.path.join(unit_dir, 'test-profd.service'), os.path.join(d, 'profd.service'))
    shutil.copy(os.path.join(unit_dir, 'test-profd-snapshot@.service'),
                os.path.join(d, 'profd-snapshot@.service'))
    shutil.copy(os.path.join(src_dir, 'profd.socket'), d)
    shutil.copy(os.path.join(src_dir, 'profd-snapshot@.timer'), d)
    units = ['profd.service', 'profd.socket', 'profd-snapshot@trainer.service',
             'profd-snapshot@trainer.timer']
    r = subprocess.run([analyze, 'verify', '--man=no'] + units, cwd=d, capture_output=True,
                       text=True)
    check(r.returncode == 0 and r.stdout == '' and r.stderr == '',
          'systemd-analyze verify: rc %d\n%s%s' % (r.returncode, r.stdout, r.stderr))
    service = open(os.path.join(d, 'profd.service')).read()
    for directive in ('Type=notify', 'WatchdogSec=', 'StateDirectory=profd',
                      'RuntimeDirectory=profd', 'ProtectSystem=strict', 'ProtectHome=read-only',
                      'CapabilityBoundingSet=CAP_BPF CAP_PERFMON'):
        check(directive in service, 'profd.service lacks %s' % directive)

print('%d failure(s)' % failures if failures else 'PASS')
sys.exit(1 if failures else 0)
