"""py-threads.py - two Python threads running different functions for the
seconds given: thread 'alpha' in alpha_work(), thread 'beta' in beta_work(),
then 40 idle threads, which CPython lists before them (newest first), so a
profiler has to look past them to find the busy threads' state.
Prints "tid NAME TID" for each busy thread, then "ready"."""
import sys
import threading
import time


def alpha_work(end):
    x = 0
    while time.monotonic() < end:
        for i in range(1000):
            x += i
    return x


def beta_work(end):
    s = ''
    while time.monotonic() < end:
        for i in range(1000):
            s = str(i)
    return s


def run(fn, end, started, tids):
    tids.append((threading.current_thread().name, threading.get_native_id()))
    started.release()
    fn(end)


def main():
    end = time.monotonic() + (float(sys.argv[1]) if len(sys.argv) > 1 else 1e9)
    started = threading.Semaphore(0)
    tids = []
    threads = [threading.Thread(target=run, name=name, args=(fn, end, started, tids))
               for name, fn in (('alpha', alpha_work), ('beta', beta_work))]
    for t in threads:
        t.start()
    for t in threads:
        started.acquire()
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(40)]
    for t in idle:
        t.start()
    for name, tid in tids:
        print('tid %s %d' % (name, tid))
    print('ready', flush=True)
    for t in threads:
        t.join()


if __name__ == '__main__':
    main()
