"""py-waits.py - Python threads that wait: sleeper() calls time.sleep(0) in
a loop (each call leaves the interpreter for clock_nanosleep and then takes
the GIL back), while spinner() runs pure Python and holds the GIL, so the
sleeper also waits for the GIL (PyEval_RestoreThread). The GIL's switch interval
is 0.5 ms (a tenth of the default) so that the sleeper makes ~2,000 calls a second,
enough on-CPU time in clock_nanosleep itself for a few seconds of samples to see it.
Prints "tid NAME TID" for both threads, then "ready"; runs for the seconds given."""
import sys
import threading
import time


def sleeper(end):
    while time.monotonic() < end:
        time.sleep(0)


def spinner(end):
    x = 0
    while time.monotonic() < end:
        for i in range(1000):
            x ^= i * 7


def main(seconds):
    sys.setswitchinterval(0.0005)
    end = time.monotonic() + seconds
    threads = [threading.Thread(target=f, args=(end,), name=f.__name__) for f in (sleeper, spinner)]
    for t in threads:
        t.start()
    for t in threads:
        print('tid %s %d' % (t.name, t.native_id), flush=True)
    print('ready', flush=True)
    for t in threads:
        t.join()


if __name__ == '__main__':
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1e9)
