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
