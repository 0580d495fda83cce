"""py-numpy.py - Python calling into native code: dense_layer() multiplies
two matrices with numpy (BLAS) in a loop, for the seconds given."""
import sys
import time

import numpy as np


def dense_layer(a, b):
    return a @ b


def train(seconds):
    a = np.random.rand(256, 256)
    b = np.random.rand(256, 256)
    end = time.monotonic() + seconds
    print('ready', flush=True)
    while time.monotonic() < end:
        dense_layer(a, b)


if __name__ == '__main__':
    train(float(sys.argv[1]) if len(sys.argv) > 1 else 1e9)
