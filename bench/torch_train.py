#!/usr/bin/python3
"""PyTorch side of bench/train_vs_torch.sh: the same models, batch size,
optimizer (SGD lr 0.05, momentum 0.9), thread count and data (Fashion-MNIST
IDX files, pixels / 255) as gradwire-bench-train. Prints one key=value line.

Run with Debian's /usr/bin/python3 (python3-torch). Also usable to check
accuracy: --epochs N trains N full epochs and reports test accuracy.
"""
import argparse
import gzip
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic == 0x803:
            rows, cols = struct.unpack(">II", f.read(8))
            return np.frombuffer(f.read(), np.uint8).reshape(n, 1, rows, cols)
        return np.frombuffer(f.read(), np.uint8).astype(np.int64)


def load(train):
    p = "train" if train else "t10k"
    x = read_idx(os.path.join(DATA, f"{p}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(DATA, f"{p}-labels-idx1-ubyte.gz"))
    return torch.from_numpy(x), torch.from_numpy(y)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def lenet5():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                         nn.Linear(84, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=0, help="train full epochs and report accuracy")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    x, y = load(True)
    net = {"mlp": mlp, "lenet5": lenet5}[a.model]()
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def step(xb, yb):
        opt.zero_grad()
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        opt.step()
        return loss

    if a.epochs:
        t0 = time.perf_counter()
        for _ in range(a.epochs):
            perm = torch.randperm(len(y))
            for i in range(0, len(y), a.batch):
                idx = perm[i:i + a.batch]
                step(x[idx], y[idx])
        secs = time.perf_counter() - t0
        xt, yt = load(False)
        with torch.no_grad():
            acc = (net(xt).argmax(1) == yt).float().mean().item()
        print(f"model={a.model} threads={a.threads} epochs={a.epochs} test_accuracy={acc:.4f} "
              f"samples_per_sec={a.epochs * len(y) / secs:.0f}")
        return

    perm = torch.randperm(len(y))
    pos = [0]

    def batch():
        if pos[0] + a.batch > len(y):
            pos[0] = 0
        idx = perm[pos[0]:pos[0] + a.batch]
        pos[0] += a.batch
        return x[idx], y[idx]

    for _ in range(a.warmup):
        step(*batch())
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step(*batch())
    secs = time.perf_counter() - t0
    print(f"model={a.model} threads={a.threads} batch={a.batch} "
          f"samples_per_sec={a.steps * a.batch / secs:.0f} step_ms={secs / a.steps * 1e3:.4f} "
          f"omp_wait_policy={os.environ.get('OMP_WAIT_POLICY', 'default')}")


if __name__ == "__main__":
    main()
