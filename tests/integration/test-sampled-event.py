#!/usr/bin/env python3
"""A second event sampled with stacks beside the CPU event: with --events
cpu,page-faults, `top --event page-faults` shows the function that faults
(touch_pages), while the CPU top shows where the time goes (spin_a_bit).
A hardware event on a machine without a PMU (cache-misses here) leaves the
session running, recorded and reported as unsupported, never as 0 samples."""
from profdtest import Profd, binary, check, require_root_bpf, run


def test():
    require_root_bpf()
    with Profd() as d:
        w = d.spawn(binary('FAULT_PAGES'), '3')
        w.stdout.readline()
        att = d.json('attach', w.pid, '--events', 'cpu,page-faults', '--freq', '199')
        sid = att['session']
        w.wait(timeout=30)
        s = d.wait_ended(sid)
        check(s['sampled_event'] == 'page-faults' and s['sampled_event_status'] == 'ok',
              'session: %r / %r' % (s['sampled_event'], s['sampled_event_status']))
        pf = d.json('top', sid, '--event', 'page-faults', '--limit', '5')
        cpu = d.json('top', sid, '--limit', '5')
        print('page-faults: %d samples, top %r' % (pf['total_samples'],
                                                    [(f['function'], f['self_pct']) for f in pf['functions'][:3]]))
        print('cpu: %d samples, top %r' % (cpu['total_samples'],
                                           [(f['function'], f['self_pct']) for f in cpu['functions'][:3]]))
        check(pf['event'] == 'page-faults' and pf['total_samples'] > 20, 'page-fault samples: %r' % pf['total_samples'])
        # The fault happens in the kernel's fault path under touch_pages.
        tp = [f for f in pf['functions'] if f['function'] == 'touch_pages']
        check(tp and tp[0]['total_pct'] >= 80, 'touch_pages total %% of page faults: %r' % tp)
        check(cpu['functions'][0]['function'] == 'spin_a_bit', 'CPU top %r' % cpu['functions'][0]['function'])
        paths = d.json('hotpaths', sid, '--event', 'page-faults', '--limit', '1')['paths']
        check('touch_pages' in [f['function'] for f in paths[0]['frames']], 'page-fault path %r' % paths[0])
        rc, _, err = d.ctl('top', sid, '--event', 'cache-misses', check_rc=False)
        check(rc == 1 and 'did not sample' in err, 'top --event of an event not sampled: %r' % err)

        # cache-misses: a hardware event. Without a PMU the session runs and says so.
        w = d.spawn(binary('FAULT_PAGES'), '2')
        w.stdout.readline()
        sid = d.json('attach', w.pid, '--events', 'cpu,cache-misses')['session']
        w.wait(timeout=30)
        s = d.wait_ended(sid)
        print('cache-misses: %s' % s['sampled_event_status'])
        check(s['samples'] > 0, 'the CPU samples stopped with an unsupported second event')
        if s['sampled_event_status'] == 'unsupported':
            rc, _, err = d.ctl('top', sid, '--event', 'cache-misses', check_rc=False)
            check(rc == 1 and 'unsupported' in err, 'top --event cache-misses: rc %d %r' % (rc, err))
        else:
            check(d.json('top', sid, '--event', 'cache-misses')['total_samples'] > 0,
                  'cache-misses sampled on a PMU, but no samples')


run(test)
