# A linear model whose output is NaN at its training step [model.args]
# nan_at (each replica counts its own steps), for torch_model.sh: a
# diverging torch model ends the run with status "diverged".
from torch import nn


class NanAt(nn.Module):
    def __init__(self, at):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
        self.at, self.steps = at, 0

    def forward(self, x):
        out = self.net(x)
        if self.training:
            self.steps += 1
            if self.steps == self.at:
                return out * float("nan")
        return out


def model(cfg):
    return NanAt(cfg["model"]["args"]["nan_at"])
