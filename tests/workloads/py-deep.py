"""py-deep.py - a pure-Python workload for the Python stack tests: the hot
function inner_hot() runs three calls deep (main -> outer -> middle ->
inner_hot), for the seconds given (default: until killed).

py-deep.py --units N: fixed work for bench/python: print "ready", wait
0.3 s (the profiler attaches), run N units of work (~1 ms each), then
print the wall time and the process CPU time of the work, in seconds."""
import sys
import time


# Small ints only: the loop allocates nothing, so its time is the
# interpreter's own (which Python-aware stacks charge to inner_hot).
DATA = [i % 200 for i in range(20000)]


def inner_hot(data):
    total = 0
    for x in data:
        total ^= x
    return total


def middle(n):
    return inner_hot(n)


def outer(n):
    return middle(n)


def fixed_work(units):
    print('ready', flush=True)
    time.sleep(0.3)
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(units):
        outer(DATA)
    print('%.6f %.6f' % (time.perf_counter() - start, time.process_time() - cpu), flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == '--units':
        fixed_work(int(sys.argv[2]))
        return
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9
    end = time.monotonic() + seconds
    print('ready', flush=True)
    while time.monotonic() < end:
        outer(DATA)


if __name__ == '__main__':
    main()
