"""py-leak.py - a pure-Python leak: remember() appends ~1 MiB of small
objects a second to a list that is never emptied (CPython's small-object
arenas, mapped 1 MiB at a time, and the list's own array grow with it).
Prints "ready", then runs for the seconds given (default 60)."""
import sys
import time


def remember(history, step):
    """The leak: every call keeps 2,000 small tuples for good."""
    for i in range(2000):
        history.append((step, i, 'x' * 40))


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60
    history = []
    print('ready', flush=True)
    end = time.monotonic() + seconds
    step = 0
    while time.monotonic() < end:
        remember(history, step)
        step += 1
        time.sleep(0.1)


if __name__ == '__main__':
    main()
