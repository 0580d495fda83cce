#!/usr/bin/env python3
"""A profd told not to trace off-CPU time (offcpu = no, --offcpu no) does not
load the off-CPU programs, whose sched_switch hook would run at every
context switch of the machine, and says so wherever a user looks:

- bpftool shows none of the off-CPU programs held by profd (a profd with
  the defaults, checked first, holds offcpu_switch);
- profctl attach without --events (the default events) gets a session of
  cpu and rss, so the session's events say what it traces, and it samples;
- an attach that asks for offcpu is refused (EOPNOTSUPP) with the reason,
  through the protocol and through profctl, and no session starts;
- profd's log says that off-CPU tracing is off."""
import time

from profdtest import Profd, bpf_programs_of, check, require_root_bpf, require_tool, run

WORKLOAD = 'import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.001)\n'
REASON = 'off-CPU tracing is off in this profd: offcpu = no in its configuration'


def test():
    require_root_bpf()
    require_tool('bpftool', 'bpftool')
    with Profd() as d:
        names = bpf_programs_of(d.proc.pid)
        check('offcpu_switch' in names, 'a default profd holds no offcpu_switch program: %s'
              % sorted(names))

    with Profd(['--offcpu', 'no']) as d:
        names = bpf_programs_of(d.proc.pid)
        check(names and not any(n.startswith('offcpu') for n in names),
              'profd --offcpu no holds %s' % sorted(names))
        w = d.spawn('/usr/bin/python3', '-c', WORKLOAD)
        time.sleep(0.5)

        r = d.request({'cmd': 'attach', 'pid': w.pid, 'events': ['cpu', 'offcpu']})
        check(not r.get('ok') and r.get('error', {}).get('code') == 'EOPNOTSUPP' and
              REASON in r['error'].get('message', ''),
              'attach with events offcpu: %r' % r)
        rc, out, err = d.ctl('attach', str(w.pid), '--events', 'cpu,offcpu', check_rc=False)
        check(rc != 0 and REASON in err, 'profctl attach --events cpu,offcpu: rc %d, %r' % (rc, err))
        sessions = d.json('sessions')['sessions']
        check(not sessions, 'refused attaches left sessions: %r' % sessions)

        # What a user types: profctl attach without --events.
        sid = d.json('attach', w.pid, '--duration', '2', '--wait')['session']
        s = d.json('session', sid)['session']
        check(s['events'] == ['cpu', 'rss'], 'default events without off-CPU: %r' % s['events'])
        check(s['samples'] > 0, 'the session sampled nothing: %r' % s)
        check('Off-CPU tracing off' in d.logtext(), 'the log does not say off-CPU tracing is off')
        print('profd --offcpu no: programs %s; default attach traced %s, %d samples'
              % (sorted(names), ','.join(s['events']), s['samples']))


if __name__ == '__main__':
    run(test)
