# A module with its own data, for torch_model.sh: dataset(split, cfg) gives
# 16-feature vectors of 4 Gaussian classes (numpy arrays and numpy int
# targets, as users' datasets often hold), model(cfg) a small MLP over them.
# [model.args] bad = "..." makes dataset() misbehave in the named way.
import numpy as np
import torch
from torch import nn


class Blobs(torch.utils.data.Dataset):
    def __init__(self, n, seed, bad):
        rng = np.random.default_rng(seed)
        self.centers = np.random.default_rng(7).normal(size=(4, 16)).astype(np.float32) * 2
        self.y = rng.integers(0, 4, size=n)
        self.x = self.centers[self.y] + rng.normal(size=(n, 16)).astype(np.float32)
        self.bad = bad

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        if self.bad == "shape" and i == 5:
            return self.x[i][:8], self.y[i]
        if self.bad == "target" and i == 3:
            return self.x[i], 1.5
        if self.bad == "item" and i == 2:
            return self.x[i]
        if self.bad == "raise" and i == 4:
            raise KeyError("sample %d is missing" % i)
        return self.x[i], self.y[i]


def dataset(split, cfg):
    bad = cfg["model"]["args"].get("bad", "")
    return Blobs(2000 if split == "train" else 400, 1 if split == "train" else 2, bad)


def model(cfg):
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
