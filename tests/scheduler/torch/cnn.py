# A small CNN with BatchNorm (its running statistics are buffers, kept in
# gradwire's state buffer) for torch_model.sh and torch_ddp.sh; [model.args]
# width sets it, batchnorm = false leaves the BatchNorm out.
from torch import nn


def model(cfg):
    args = cfg["model"]["args"]
    w = args.get("width", 8)
    norm = [nn.BatchNorm2d(2 * w)] if args.get("batchnorm", True) else []
    return nn.Sequential(nn.Conv2d(1, w, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(w, 2 * w, 5, padding=2), *norm, nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(2 * w * 49, 10))
