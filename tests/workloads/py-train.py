"""py-train.py - a small PyTorch CPU training loop for scripts/demo: an MLP
trained on a synthetic data set whose samples are built in Python by a
DataLoader with worker processes (forked anew each epoch, so a profiler
that follows children sees them). Prints "ready" after the first step,
then trains for the seconds given (default: until killed), then prints
"steps N in S s": the training steps made after "ready" and their time
(bench/malloc's throughput figure)."""
import math
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    """Samples made on the fly in Python: the data-loading cost."""

    def __init__(self, n, features):
        self.n, self.features = n, features

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.tensor([math.sin(i * 0.01 + k) for k in range(self.features)])
        return augment(x), i % 10


def augment(x):
    return x * 0.5 + torch.randn_like(x) * 0.1


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.hidden = nn.Linear(features, 512)
        self.out = nn.Linear(512, 10)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


def train_step(model, opt, loss_fn, x, y):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1e9
    torch.set_num_threads(1)
    model = Model(256)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = DataLoader(SyntheticImages(2048, 256), batch_size=64, num_workers=2)
    end = time.monotonic() + seconds
    ready = False
    steps, t0 = 0, 0.0
    while time.monotonic() < end:
        for x, y in data:
            train_step(model, opt, loss_fn, x, y)
            if not ready:
                print('ready', flush=True)
                ready = True
                t0 = time.monotonic()
            else:
                steps += 1
            if time.monotonic() >= end:
                break
    print('steps %d in %.3f s' % (steps, time.monotonic() - t0), flush=True)


if __name__ == '__main__':
    main()
