#!/usr/bin/env python3
"""profd's configuration: /etc/profd/profd.conf syntax read with --config,
command-line flags override the file, --check-config prints the effective
settings and exits 0, and a bad file or value is a clear error (file:line)
with exit status 2. Needs no root: --check-config stops before anything is
opened."""
import os
import subprocess
import sys
import tempfile

PROFD = sys.argv[1]
failures = 0


def check(cond, what, r=None):
    global failures
    if not cond:
        failures += 1
        print('FAIL: %s' % what)
        if r is not None:
            print('  rc %d\n  stdout: %s\n  stderr: %s' % (r.returncode, r.stdout, r.stderr))


def profd(*args):
    return subprocess.run([PROFD] + list(args), capture_output=True, text=True, timeout=30)


def settings(text):
    out = {}
    for line in text.splitlines():
        if '=' in line:
            k, v = line.split('=', 1)
            out[k.strip()] = v.strip()
    return out


with tempfile.TemporaryDirectory(prefix='issue7-config-') as d:
    conf = os.path.join(d, 'profd.conf')
    with open(conf, 'w') as f:
        f.write('# a comment\n'
                '[daemon]\n'
                'db = /srv/profd/p.db\n'
                'socket = /run/p.sock\n'
                'log_level = debug\n'
                'default_freq_hz = 397\n'
                'offcpu = no\n'
                'flush_interval_s = 20\n'
                '\n'
                '[retention]\n'
                'retention_days = 14\n'
                'max_db_bytes = 2G\n'
                'merge_windows_after_s = 7200\n'
                'merged_window_s = 300\n'
                '\n'
                '[fleet]\n'
                'host_name = box-7\n'
                'clickhouse_url = https://ch.example:8443\n'
                'clickhouse_password = s3cret\n'
                'fleet_interval_s = 30\n'
                '\n'
                '[limits]\n'
                'max_sessions = 4\n'
                'max_threads_per_session = 128\n'
                'max_stacks_per_session = 5000\n'
                'ring_buffer_bytes = 8M\n')

    r = profd('--config', conf, '--check-config')
    s = settings(r.stdout)
    check(r.returncode == 0, '--check-config of a valid file exits 0', r)
    check(s.get('db') == '/srv/profd/p.db' and s.get('socket') == '/run/p.sock' and
          s.get('log_level') == 'debug' and s.get('default_freq_hz') == '397' and
          s.get('offcpu') == 'no' and s.get('flush_interval_s') == '20',
          '[daemon] settings read', r)
    check(s.get('retention_days') == '14' and s.get('max_db_bytes') == str(2 << 30) and
          s.get('merge_windows_after_s') == '7200' and s.get('merged_window_s') == '300',
          '[retention] settings read (2G = %d bytes)' % (2 << 30), r)
    check(s.get('host_name') == 'box-7' and s.get('clickhouse_url') == 'https://ch.example:8443' and
          s.get('fleet_interval_s') == '30' and 'clickhouse_password' not in s and 's3cret' not in r.stdout,
          '[fleet] settings read, the password not printed', r)
    check(s.get('max_sessions') == '4' and s.get('max_threads_per_session') == '128' and
          s.get('max_stacks_per_session') == '5000' and s.get('ring_buffer_bytes') == str(8 << 20),
          '[limits] settings read', r)

    # Flags override the file, wherever they stand relative to --config.
    r = profd('--db', '/tmp/x.db', '--config', conf, '--check-config', '--max-sessions', '2',
              '--retention-days', '0', '--max-db-bytes', '64M', '--merge-windows-after', '0')
    s = settings(r.stdout)
    check(r.returncode == 0 and s.get('db') == '/tmp/x.db' and s.get('max_sessions') == '2' and
          s.get('retention_days') == '0' and s.get('max_db_bytes') == str(64 << 20) and
          s.get('max_threads_per_session') == '128' and s.get('merge_windows_after_s') == '0' and
          s.get('merged_window_s') == '300', 'flags override the file', r)

    # Off-CPU tracing is on unless turned off; the flag takes the usual spellings of a boolean.
    empty = os.path.join(d, 'empty.conf')
    open(empty, 'w').close()
    r = profd('--config', empty, '--check-config')
    check(r.returncode == 0 and settings(r.stdout).get('offcpu') == 'yes', 'offcpu defaults to yes', r)
    check(settings(r.stdout).get('flush_interval_s') == '5', 'flush_interval_s defaults to 5', r)
    r = profd('--config', conf, '--check-config', '--flush-interval', '1')
    check(r.returncode == 0 and settings(r.stdout).get('flush_interval_s') == '1',
          '--flush-interval overrides the file', r)
    for value, shown in [('off', 'no'), ('FALSE', 'no'), ('1', 'yes'), ('on', 'yes')]:
        r = profd('--config', conf, '--check-config', '--offcpu', value)
        check(r.returncode == 0 and settings(r.stdout).get('offcpu') == shown,
              '--offcpu %s reads as %s' % (value, shown), r)

    # The output of --check-config is itself a valid configuration file.
    again = os.path.join(d, 'again.conf')
    with open(again, 'w') as f:
        f.write(r.stdout)
    r2 = profd('--config', again, '--check-config')
    check(r2.returncode == 0 and r2.stdout == r.stdout, '--check-config output reads back', r2)

    # Errors: file:line and what is wrong; exit status 2.
    for text, needle in [
            ('[daemon]\nmax_sessions = 3\n', "'max_sessions' belongs in section [limits]"),
            ('[limits]\nmax_sessions = 0\n', 'max_sessions must be an integer from 1 to'),
            ('[limits]\nmax_sessions = lots\n', "not 'lots'"),
            ('[daemon]\ncolour = blue\n', "unknown setting 'colour'"),
            ('[daemon]\ndb = relative.db\n', 'db must be an absolute path'),
            ('[daemon]\nlog_level = loud\n', 'log_level must be error, warning, info or debug'),
            ('[retention]\nmax_db_bytes = 10X\n', 'max_db_bytes must be a size'),
            ('[retention]\nmerged_window_s = 1\n', 'merged_window_s must be an integer from 2 to 86400'),
            ('[fleet]\nclickhouse_url = clickhouse:8123\n', 'clickhouse_url must be an http:// or https:// URL'),
            ('[fleet]\nfleet_interval_s = 0\n', 'fleet_interval_s must be an integer from 1 to 86400'),
            ('[limits]\nring_buffer_bytes = 3M\n', 'ring_buffer_bytes must be a power of 2'),
            ('[daemon]\noffcpu = sometimes\n', "offcpu must be yes or no, not 'sometimes'"),
            ('[daemon]\nflush_interval_s = 0\n', 'flush_interval_s must be an integer from 1 to 3600'),
            ('[daemon]\n\njust words\n', 'syntax error')]:
        bad = os.path.join(d, 'bad.conf')
        with open(bad, 'w') as f:
            f.write(text)
        r = profd('--config', bad, '--check-config')
        line = text.rstrip('\n').count('\n') + 1
        check(r.returncode == 2 and needle in r.stderr and '%s:%d:' % (bad, line) in r.stderr,
              'bad file %r: error names %s:%d and says %r' % (text, bad, line, needle), r)

    # The examples of the documentation are files profd reads: profd(8)'s CONFIGURATION
    # section and docs/operations.md's.
    docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'docs')
    with open(os.path.join(docs, 'man', 'profd.8')) as f:
        man = f.read().split('.SH CONFIGURATION', 1)[1]
    with open(os.path.join(docs, 'operations.md')) as f:
        ops = f.read()
    examples = {'profd(8)': man.split('.nf\n', 1)[1].split('.fi\n', 1)[0],
                'docs/operations.md': ops.split('```ini\n', 1)[1].split('```', 1)[0]}
    for where, text in examples.items():
        example = os.path.join(d, 'example.conf')
        with open(example, 'w') as f:
            f.write(text.replace('\\-', '-'))
        r = profd('--config', example, '--check-config')
        check(r.returncode == 0 and 'offcpu = ' in r.stdout,
              'the configuration example of %s reads' % where, r)

    r = profd('--config', os.path.join(d, 'missing.conf'), '--check-config')
    check(r.returncode == 2 and 'No such file' in r.stderr, 'a missing --config file is an error', r)
    r = profd('--config', conf, '--check-config', '--max-stacks', '3')
    check(r.returncode == 2 and 'invalid --max-stacks' in r.stderr, 'a bad flag value', r)
    r = profd('--help')
    check(r.returncode == 0 and '--check-config' in r.stdout and '--retention-days' in r.stdout and
          'Examples:' in r.stdout, '--help lists the new options with examples', r)

print('%d failure(s)' % failures if failures else 'PASS')
sys.exit(1 if failures else 0)
