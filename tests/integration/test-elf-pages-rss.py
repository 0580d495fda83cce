#!/usr/bin/env python3
"""A real profd does not keep in its RSS the pages it read from the files
of the process it profiled: libdwfl maps each ELF file whole (private,
writable: rw-p at offset 0 in /proc/PID/smaps), the symbolizer reads its
symbol table and debug info from it, the unwinder its .eh_frame. Once the
session has ended, those mappings of libc.so.6 and of the program hold
almost nothing resident (they held ~100-300 KiB each before profd dropped
them); what they hold is counted from /proc/PID/smaps, written pages
(Anonymous:) apart, which profd must keep."""
import os
import time

from profdtest import Profd, binary, check, require_root_bpf, run

# What a mapping may still hold: a few pages read after the last drop.
MAX_KIB = 64


def elf_images(pid, names):
    """{path: (rss KiB, anonymous KiB)} of the rw-p mappings at offset 0 of
    files whose base name is in @names, summed per path."""
    out, cur = {}, None
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            fields = line.split()
            if '-' in fields[0] and not fields[0].endswith(':'):
                cur = None
                if (len(fields) >= 6 and fields[1] == 'rw-p' and int(fields[2], 16) == 0
                        and os.path.basename(fields[5]) in names):
                    cur = fields[5]
                    out.setdefault(cur, [0, 0])
            elif cur and fields[0] == 'Rss:':
                out[cur][0] += int(fields[1])
            elif cur and fields[0] == 'Anonymous:':
                out[cur][1] += int(fields[1])
    return out


def test():
    require_root_bpf()
    prog = binary('DEEP_NOFP')
    with Profd() as d:
        w = d.spawn(prog, '60')
        sid = d.json('attach', w.pid, '--freq', '999', '--duration', '4')['session']
        s = d.wait_ended(sid, timeout=60)
        check(s['samples'] > 0, 'no samples')
        time.sleep(1)  # the loop's next tick after the session's end
        images = elf_images(d.proc.pid, {'libc.so.6', os.path.basename(prog)})
        for path, (rss, anon) in sorted(images.items()):
            print('%s: %d KiB resident, %d KiB written' % (path, rss, anon))
        check(images, 'profd maps no file of the program or of libc.so.6 as libdwfl does')
        for path, (rss, anon) in images.items():
            check(rss - anon <= MAX_KIB, '%s: %d KiB read from the file still resident'
                  % (path, rss - anon))


run(test)
