#!/usr/bin/env python3
"""analyze on a real imbalanced workload (spin-threads --weights 1,1,6: the
third worker does 6/8 of the work): the imbalance is a high-severity finding
naming worker-3, with its samples and max/mean ratio as evidence, the dominant hot_function is one
too, the sleeping main thread is not called starved, and the rules whose
data was not recorded say "no data" with what they need."""
from profdtest import Profd, binary, check, require_root_bpf, run


def test():
    require_root_bpf()
    spin = binary('SPIN_THREADS')
    with Profd() as d:
        sid, _ = d.profile_run([spin, '--seconds', '4', '--weights', '1,1,6'], 4)
        a = d.json('analyze', sid)
        findings = {f['rule']: f for f in a['findings']}
        checks = {c['rule']: c for c in a['checks']}
        print('findings: %r' % sorted(findings))
        imb = findings.get('thread-imbalance')
        check(imb, 'no thread-imbalance finding: %r' % a)
        # 6 / mean(1, 1, 6) = 2.25 over the workers; more when the main thread has a
        # few samples too (it then counts as a busy thread and lowers the mean).
        check(imb['severity'] == 'high' and imb['evidence']['straggler_name'] == 'worker-3',
              'imbalance finding %r' % imb)
        check(imb['evidence']['max_over_mean'] >= 1.8, 'max/mean %r' % imb['evidence'])
        th = d.json('threads', sid)
        workers = {t['name']: t['samples'] for t in th['threads'] if t['name'].startswith('worker-')}
        share = workers['worker-3'] / sum(workers.values())
        check(abs(share - 0.75) <= 0.1, 'worker-3 has %.2f of the workers\' samples, expected 0.75' % share)
        check(imb['evidence']['max_samples'] == workers['worker-3'], 'evidence %r, threads %r' % (imb['evidence'], workers))
        check('worker-3' in imb['title'], 'title %r' % imb['title'])
        check(findings.get('hot-function', {}).get('evidence', {}).get('function') == 'hot_function',
              'hot-function finding %r' % findings.get('hot-function'))
        # High findings first.
        sev = [f['severity'] for f in a['findings']]
        check(sev == sorted(sev, key=lambda s: s != 'high'), 'not sorted by severity: %r' % sev)
        check(checks.get('main-thread-starved', {}).get('status') == 'ok',
              'main thread (asleep) judged: %r' % checks.get('main-thread-starved'))
        check(checks.get('memory-growth', {}).get('status') == 'ok',
              'memory-growth (RSS recorded by default, flat): %r' % checks.get('memory-growth'))
        for rule, needs in [('cache-misses', 'counters'), ('tiny-kernel-launches', 'CUDA')]:
            c = checks.get(rule)
            check(c and c['status'] == 'no data' and needs in c['detail'], '%s: %r' % (rule, c))
        _, text, _ = d.ctl('analyze', sid)
        check('[high]' in text and 'worker-3' in text and 'suggestion:' in text, 'human analyze:\n' + text)


run(test)
