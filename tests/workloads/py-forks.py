"""py-forks.py - a parent that imports numpy (dozens of shared libraries
mapped) and then forks short-lived workers one after another, as a PyTorch
DataLoader does at every epoch: each worker multiplies matrices in
worker_step() for a while and exits. Prints 'ready' once numpy is loaded,
then waits for one line (or EOF) on stdin before it forks, so that a test
can attach first; prints 'done' after the last worker and waits for
another line (or EOF) before it exits, so that a test can look at what the
profiler kept of the workers. Usage: py-forks.py [WORKERS] [SECONDS_EACH]."""
import os
import sys
import time

import numpy as np


def worker_step(a, b, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = (a @ b) / 256.0
    return a


def main(workers, seconds):
    a = np.random.rand(128, 128)
    b = np.random.rand(128, 128)
    print('ready', flush=True)
    sys.stdin.readline()
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            worker_step(a, b, seconds)
            os._exit(0)
        os.waitpid(pid, 0)
    print('done', flush=True)
    sys.stdin.readline()


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40,
         float(sys.argv[2]) if len(sys.argv) > 2 else 0.25)
