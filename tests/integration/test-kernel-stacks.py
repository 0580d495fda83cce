#!/usr/bin/env python3
"""A real profd on a process that spends its time in the kernel (dd reading
/dev/zero): samples taken in the kernel carry the kernel call stack, then the
user stack that made the system call. profile_sample tells the two modes
apart by the interrupted instruction's address and walks the kernel stack
only in kernel mode, so a wrong test there shows here as kernel leaves
missing, or as kernel frames below user ones."""
import os
import shutil

from profdtest import Profd, check, require_root_bpf, run


def test():
    require_root_bpf()
    dd = shutil.which('dd') or '/bin/dd'
    with Profd() as d:
        # 1 MiB reads of /dev/zero: read_zero() clears the buffer in the kernel,
        # ~95% of dd's CPU time on this VM.
        w = d.spawn(dd, 'if=/dev/zero', 'of=/dev/null', 'bs=1M', 'count=100000000')
        sid = d.json('attach', w.pid, '--freq', '397', '--duration', '4')['session']
        d.wait_ended(sid, timeout=30)

        funcs = d.json('top', sid, '--limit', '10000')['functions']
        kernel_pct = sum(f['self_pct'] for f in funcs if f['kind'] == 'kernel')
        print('kernel leaves: %.1f%% of self samples; hottest: %s (%s)'
              % (kernel_pct, funcs[0]['function'], funcs[0]['kind']))
        check(kernel_pct >= 50, 'only %.1f%% of dd samples end in the kernel' % kernel_pct)

        # Every stack is kernel frames first, then user frames, never mixed; a
        # kernel-leaf path goes on into the user code that made the call (libc's read or write).
        paths = d.json('hotpaths', sid, '--limit', '20')['paths']
        seen_kernel_path = False
        for p in paths:
            kinds = [f['kind'] == 'kernel' for f in p['frames']]
            user_from = kinds.index(False) if False in kinds else len(kinds)
            check(not any(kinds[user_from:]), 'kernel frame below a user frame: %r'
                  % [(f['function'], f['kind']) for f in p['frames']])
            if user_from > 0:
                seen_kernel_path = True
                user = p['frames'][user_from:]
                check(user and os.path.basename(user[0]['module'] or '').startswith('libc.so'),
                      'kernel path without the libc call that made it (read, write): %r'
                      % [(f['function'], f['module']) for f in user])
        check(seen_kernel_path, 'no path with a kernel frame among the 20 hottest')


run(test)
