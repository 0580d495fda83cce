"""procstat - what the benchmarks read about a process from /proc (proc(5)):
its CPU time and its status lines. One copy for bench/cost, bench/daemon,
bench/malloc and bench/query."""
import os

TICK = os.sysconf('SC_CLK_TCK')


def cpu_seconds(pid):
    """utime + stime of @pid, all threads, in seconds (/proc/PID/stat fields 14, 15)."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def status_kib(pid, key):
    """A kB line of /proc/PID/status (VmRSS, VmHWM, RssAnon, ...) in KiB; 0 if absent."""
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    return 0


def rss_split_kib(pid):
    """The RSS of @pid now, in KiB, from /proc/PID/smaps: 'bpf_maps' (BPF maps
    mapped into the process: a ring buffer's data pages are mapped twice in a
    row, so that a record that wraps reads contiguously, and count twice;
    an mmap'able array such as the CFI rows), 'files' (regular files: ELF
    files, the database's shared memory), 'anon' (the rest: heap, anonymous
    mappings, stacks)."""
    split = {'bpf_maps': 0, 'files': 0, 'anon': 0}
    kind = 'anon'
    with open('/proc/%d/smaps' % pid) as f:
        for line in f:
            fields = line.split()
            if not fields[0].endswith(':'):  # a mapping's header: start-end perms offset dev inode [path]
                path = fields[5] if len(fields) > 5 else ''
                kind = ('bpf_maps' if path == 'anon_inode:bpf-map'
                        else 'files' if path.startswith('/') else 'anon')
            elif fields[0] == 'Rss:':
                split[kind] += int(fields[1])
    return split
