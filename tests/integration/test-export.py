#!/usr/bin/env python3
"""Exports read back by their consumers' rules, on a real profd and a real
workload: folded stacks sum to the session's samples (and to top's total
with --from/--to), Chrome trace JSON has a named track per worker thread
with complete events of hot_function, speedscope JSON has a sampled
profile per worker whose weights add up to samples x period, analyze finds
the dominant function and says which checks had no data."""
import gzip
import json
import os

from profdtest import Profd, binary, check, require_root_bpf, run


def folded_sum(text):
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(' ')
        check(stack and count.isdigit(), 'malformed folded line %r' % line)
        total += int(count)
    return total


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        sid, _ = d.profile_run([spin, '--seconds', '5', '--weights', '1,2,3'], 4)
        pid = d.json('session', sid)['session']['pid']
        top = d.json('top', sid, '--limit', '3')
        total = top['total_samples']
        check(total >= 300, 'only %d samples' % total)
        check(top['functions'][0]['function'] == 'hot_function', 'top: %r' % top['functions'][0])

        # Folded stacks: one line per stack, counts adding up to the session's samples.
        _, folded, _ = d.ctl('export', sid, '--format', 'folded')
        check(folded_sum(folded) == total, 'folded sums to %d, top says %d' % (folded_sum(folded), total))
        hot = [l for l in folded.splitlines() if l.rpartition(' ')[0].endswith('do_work;hot_function')]
        check(hot and all('worker_main;run_period;do_work;hot_function' in l for l in hot),
              'no worker_main;run_period;do_work;hot_function stack in:\n' + folded[:2000])

        # --from/--to: the same windows as top --from/--to, fewer samples than the whole.
        part = d.json('top', sid, '--from', '1', '--to', '3')
        _, folded_part, _ = d.ctl('export', sid, '--format', 'folded', '--from', '1', '--to', '3')
        check(0 < folded_sum(folded_part) == part['total_samples'] < total,
              'range 1..3 s: folded %d, top %d, whole %d' % (folded_sum(folded_part), part['total_samples'], total))
        rc, _, err = d.ctl('export', sid, '--format', 'folded', '--from', '3', '--to', '1', check_rc=False)
        check(rc == 2 and '--from' in err, 'from > to: rc %d, %r' % (rc, err))

        th = d.json('threads', sid)
        workers = {t['tid']: t['name'] for t in th['threads'] if t['name'].startswith('worker-')}
        check(len(workers) == 3, 'workers: %r' % workers)

        # Chrome trace: thread_name metadata per worker, X events of hot_function on their tracks.
        out = os.path.join(d.dir, 'trace.json')
        d.ctl('export', sid, '--format', 'chrome-trace', '-o', out)
        with open(out) as f:
            trace = json.load(f)
        events = trace['traceEvents']
        names = {e['tid']: e['args']['name'] for e in events if e['ph'] == 'M' and e['name'] == 'thread_name'}
        for tid, name in workers.items():
            check(names.get(tid) == name, 'trace names thread %d %r, expected %r' % (tid, names.get(tid), name))
            hot_events = [e for e in events if e['ph'] == 'X' and e['tid'] == tid and e['name'] == 'hot_function']
            check(hot_events and all(e['dur'] > 0 and e['ts'] >= 0 and e['pid'] == pid for e in hot_events),
                  'no hot_function events on %s\'s track' % name)
        check(trace['otherData']['lost_samples'] == top['lost_samples'], 'otherData %r' % trace['otherData'])
        # Within each track, complete events nest (what trace viewers require): an
        # event that starts inside another ends inside it. The outermost events of
        # all tracks last the samples times the period.
        period_us = 1e6 / 397
        root_us = 0
        for tid in {e['tid'] for e in events if e['ph'] == 'X'}:
            xs = sorted((e for e in events if e['ph'] == 'X' and e['tid'] == tid),
                        key=lambda e: (e['ts'], -e['dur']))
            open_ends = []
            for e in xs:
                while open_ends and open_ends[-1] <= e['ts'] + 1e-3:
                    open_ends.pop()
                end = e['ts'] + e['dur']
                check(not open_ends or end <= open_ends[-1] + 1e-3,
                      'event %s at %.3f+%.3f us on thread %d overlaps its parent' % (e['name'], e['ts'], e['dur'], tid))
                if not open_ends:
                    root_us += e['dur']
                open_ends.append(end)
        check(abs(root_us - total * period_us) < total * period_us * 0.01 + 1,
              'outermost events last %.0f us, %d samples x %.0f us' % (root_us, total, period_us))

        # speedscope: a sampled profile per worker, weights = samples x period in ns.
        out = os.path.join(d.dir, 'profile.speedscope.json')
        d.ctl('export', sid, '--format', 'speedscope', '-o', out)
        with open(out) as f:
            ss = json.load(f)
        check(ss['$schema'] == 'https://www.speedscope.app/file-format-schema.json', 'schema %r' % ss.get('$schema'))
        frames = ss['shared']['frames']
        profiles = {p['name']: p for p in ss['profiles']}
        weight_sum = 0
        for tid, name in workers.items():
            p = profiles.get('%s (TID %d)' % (name, tid))
            check(p and p['type'] == 'sampled' and p['unit'] == 'nanoseconds', 'profile of %s: %r' % (name, p and p['type']))
            check(len(p['samples']) == len(p['weights']) and p['endValue'] == sum(p['weights']), 'weights of %s' % name)
            check(any(frames[s[-1]]['name'] == 'hot_function' for s in p['samples']), 'no hot_function leaf for %s' % name)
            weight_sum += sum(p['weights'])
        all_weights = sum(sum(p['weights']) for p in ss['profiles'])
        check(all_weights == total * (10**9 // 397), 'speedscope weights %d, expected %d' % (all_weights, total * (10**9 // 397)))

        # pprof is gzip-compressed protobuf (go tool pprof reads it in test-pprof).
        out = os.path.join(d.dir, 'cpu.pb.gz')
        d.ctl('export', sid, '--format', 'pprof', '-o', out)
        with gzip.open(out) as f:
            check(len(f.read()) > 100, 'pprof file is nearly empty')

        # analyze: the dominant function is a finding; rules without data say so.
        a = d.json('analyze', sid)
        hot = [f for f in a['findings'] if f['rule'] == 'hot-function']
        check(hot and hot[0]['evidence']['function'] == 'hot_function' and hot[0]['severity'] == 'high',
              'analyze findings: %r' % a['findings'])
        nodata = {c['rule']: c['detail'] for c in a['checks'] if c['status'] == 'no data'}
        for rule in ('cache-misses', 'cuda-synchronize'):
            check(rule in nodata, '%s not reported as "no data": %r' % (rule, a['checks']))
        # RSS is recorded by default: checked, and a workload that does not grow passes.
        mem = [c for c in a['checks'] if c['rule'] == 'memory-growth']
        check(mem and mem[0]['status'] == 'ok' and 'RSS' in mem[0]['detail'], 'memory-growth: %r' % mem)
        _, text, _ = d.ctl('analyze', sid)
        check('[high] hot_function' in text and 'no data' in text, 'analyze output:\n' + text)


run(test)
