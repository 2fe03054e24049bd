# A small CNN with BatchNorm (its running statistics are buffers, kept in
# gradwire's state buffer) for torch_model.sh; [model.args] width sets it.
from torch import nn


def model(cfg):
    w = cfg["model"]["args"].get("width", 8)
    return nn.Sequential(nn.Conv2d(1, w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(w, 2 * w, 5, padding=2), nn.BatchNorm2d(2 * w), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2 * w * 49, 10))
