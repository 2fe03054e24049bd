# Your own PyTorch model under gradwire (examples/torch-cnn.toml): a small
# CNN for 28x28 grey images. gradwire calls model(cfg) with the run's whole
# config as nested dicts; [model.args] arrives as cfg["model"]["args"].
# The contract, and what runs where: docs/your-model.md.
from torch import nn


def model(cfg):
    width = cfg["model"]["args"].get("width", 16)
    return nn.Sequential(
        nn.Conv2d(1, width, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 5, padding=2), nn.BatchNorm2d(2 * width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 7 * 7, 10))
