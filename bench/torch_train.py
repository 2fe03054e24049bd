#!/usr/bin/python3
"""PyTorch side of bench/train_vs_torch.sh and bench/gpu_train_vs_torch.sh:
the same models, batch size, optimizer (SGD lr 0.05, momentum 0.9), thread
count and data (Fashion-MNIST IDX files, pixels / 255, or synthetic images of
the same shape; ResNet-20 on synthetic 3x32x32 CIFAR-shaped images) as
gradwire-bench-train. Prints one key=value line.

Run with Debian's /usr/bin/python3 (python3-torch), or any Python with a
CUDA build of PyTorch for --device cuda. Also usable to check accuracy:
--epochs N trains N full epochs and reports test accuracy.
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


class BasicBlock(nn.Module):
    """gradwire's residual_block: conv3x3-BN-ReLU-conv3x3-BN plus the input,
    through a 1x1 conv + BN projection when shape changes, then ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + self.short(x))


def resnet20():
    layers, cin = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for stage in range(3):
        cout = 16 << stage
        for b in range(3):
            layers.append(BasicBlock(cin, cout, 2 if stage > 0 and b == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def synthetic(n, shape):
    g = torch.Generator().manual_seed(1)
    return torch.rand((n,) + shape, generator=g), torch.randint(0, 10, (n,), generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=0, help="train full epochs and report accuracy")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    ap.add_argument("--data", default="fashion-mnist", help="fashion-mnist | synthetic")
    ap.add_argument("--strict-fp32", action="store_true",
                    help="no TF32 tensor cores in cuDNN convolutions (PyTorch allows them by "
                         "default; gradwire never uses them)")
    ap.add_argument("--profile", type=int, default=0,
                    help="after the timed steps, profile this many more and print PyTorch's "
                         "table of GPU time per kernel (torch.profiler), to stderr")
    a = ap.parse_args()
    if a.strict_fp32:
        torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    cifar = a.model.startswith("resnet")
    if a.epochs and (cifar or a.data == "synthetic"):
        ap.error("--epochs reports Fashion-MNIST test accuracy: use it with mlp or lenet5 "
                 "and --data fashion-mnist")
    if cifar or a.data == "synthetic":
        x, y = synthetic(8192, (3, 32, 32) if cifar else (1, 28, 28))
    else:
        x, y = load(True)
    net = {"mlp": mlp, "lenet5": lenet5, "resnet20": resnet20}[a.model]().to(dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def step(xb, yb):
        # Host batches copied to the device each step, as gradwire's trainer does.
        xb, yb = xb.to(dev), yb.to(dev)
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
            acc = (net(xt.to(dev)).argmax(1).cpu() == yt).float().mean().item()
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
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step(*batch())
    sync()
    secs = time.perf_counter() - t0
    print(f"model={a.model} threads={a.threads} batch={a.batch} device={a.device} "
          f"samples_per_sec={a.steps * a.batch / secs:.0f} step_ms={secs / a.steps * 1e3:.4f} "
          f"omp_wait_policy={os.environ.get('OMP_WAIT_POLICY', 'default')}")
    if a.profile:
        import sys
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            for _ in range(a.profile):
                step(*batch())
            sync()
        key = "self_cuda_time_total" if dev.type == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=40, max_name_column_width=70),
              file=sys.stderr)


if __name__ == "__main__":
    main()
