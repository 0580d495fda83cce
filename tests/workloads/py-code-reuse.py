"""py-code-reuse.py - code objects that come and go at the same address, for
the Python frame cache (daemon/symbols/python.c): each round compiles a new
gen_a (file gen_a.py) or gen_b (gen_b.py), alternately, runs it for
ROUND_S seconds, then frees it. The two sources are the same size, so
CPython's allocator gives the next round's code object the block the last
one freed: a profiler that knew a code object by its address alone would
name every later round after the first.

Usage: py-code-reuse.py SECONDS. Prints "ready" before the first round, and
at the end "rounds N reused M": M rounds whose code object took the
address of one of the other function's."""
import gc
import sys
import time

ROUND_S = 0.05
SOURCE = """def %s(n):
    s = 0
    for i in range(n):
        s += i
    return s
"""


def main():
    seconds = float(sys.argv[1])
    seen = {'gen_a': set(), 'gen_b': set()}
    rounds = reused = 0
    print('ready', flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        name = 'gen_a' if rounds % 2 == 0 else 'gen_b'
        other = 'gen_b' if name == 'gen_a' else 'gen_a'
        ns = {}
        exec(compile(SOURCE % name, name + '.py', 'exec'), ns)
        f = ns[name]
        addr = id(f.__code__)
        reused += addr in seen[other]
        seen[name].add(addr)
        stop = time.monotonic() + ROUND_S
        while time.monotonic() < stop:
            f(2000)
        del f, ns
        gc.collect()
        rounds += 1
    print('rounds %d reused %d' % (rounds, reused), flush=True)


if __name__ == '__main__':
    main()
