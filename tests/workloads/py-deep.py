"""py-deep.py - a pure-Python workload for the Python stack tests: the hot
function inner_hot() runs three calls deep (main -> outer -> middle ->
inner_hot), for the seconds given (default: until killed)."""
import sys
import time


def inner_hot(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def middle(n):
    return inner_hot(n)


def outer(n):
    return middle(n)


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9
    end = time.monotonic() + seconds
    print('ready', flush=True)
    while time.monotonic() < end:
        outer(20000)


if __name__ == '__main__':
    main()
