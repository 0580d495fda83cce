#!/usr/bin/env python3
"""profctl resymbolize: a stripped program is profiled and its frames are
stored as module+offset with their build ID; once its debug file appears
where profd looks (a .build-id tree under PROFD_DEBUG_PATH), resymbolize
names them and top shows the hot function with its source line."""
import os
import shutil
import tempfile

from profdtest import Profd, binary, build_id, check, require_root_bpf, run, wait_for_threads


def test():
    require_root_bpf()
    stripped, debug = binary('SPIN_STRIPPED'), binary('SPIN_DEBUG')
    debug_root = tempfile.mkdtemp(prefix='profd-debug-')
    try:
        with Profd(env={'PROFD_DEBUG_PATH': debug_root}) as d:
            w = d.spawn(stripped, '--seconds', '3', '--weights', '3')
            wait_for_threads(w.pid, 2)
            sid = d.json('attach', w.pid, '--freq', '199')['session']
            w.wait(timeout=30)
            d.wait_ended(sid)

            before = d.json('top', sid, '--limit', '3')
            f = before['functions'][0]
            print('before: %s (%s), %d unsymbolized frames' % (f['function'], f['module'],
                                                              before['unsymbolized_frames']))
            check(f['function'].startswith('spin-threads-stripped+0x') and f['file'] is None,
                  'stripped hot frame was named %r before its debug info existed' % f['function'])
            check(before['unsymbolized_frames'] > 0, 'no unsymbolized frames counted')

            # The debug file appears, as a -dbgsym package would install it.
            bid = build_id(stripped)
            check(bid == build_id(debug), 'debug file has another build ID')
            dest = os.path.join(debug_root, '.build-id', bid[:2], bid[2:] + '.debug')
            os.makedirs(os.path.dirname(dest))
            shutil.copy(debug, dest)

            res = d.json('resymbolize', sid)
            print('resymbolize: %r' % res)
            check(res['frames_named'] > 0, 'resymbolize named nothing: %r' % res)
            after = d.json('top', sid, '--limit', '3')
            f = after['functions'][0]
            print('after: %s (%s:%s)' % (f['function'], f['file'], f['line']))
            check(f['function'] == 'hot_function', 'top function after resymbolize: %r' % f['function'])
            check(f['file'] and f['file'].endswith('spin-threads.c') and f['line'],
                  'no source line after resymbolize: %r:%r' % (f['file'], f['line']))
            check(after['unsymbolized_frames'] < before['unsymbolized_frames'],
                  'unsymbolized count did not drop')
            check(after['total_samples'] == before['total_samples'], 'samples changed')
            _, out, _ = d.ctl('resymbolize', sid)
            check('named' in out, 'human output %r' % out)
    finally:
        shutil.rmtree(debug_root, ignore_errors=True)


run(test)
