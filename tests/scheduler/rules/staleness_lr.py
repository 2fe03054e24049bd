# Parameter-server rules in Python (topology.ps.rule, docs/your-algorithm.md),
# for tests/scheduler/python_rule.sh: the built-in staleness lr three ways.
import numpy as np


class StalenessLR:
    """The shard's optimizer steps at lr / max(1, staleness): the built-in
    topology.ps.staleness_lr."""

    def __init__(self, cfg):
        self.pushes = 0

    def push(self, params, grad, rank, staleness, version):
        self.pushes += 1
        return 1.0 / max(1, staleness)


class PlainSGD:
    """Updates the parameters itself: SGD at lr / max(1, staleness), no
    momentum, the step size in float32 as the shard's optimizer has it."""

    def __init__(self, cfg):
        self.lr = np.float32(cfg["train"]["lr"])

    def push(self, params, grad, rank, staleness, version):
        params -= (self.lr * np.float32(1.0 / max(1, staleness))) * grad
        return None


class Doubled:
    """A new gradient and its factor: twice the gradient at half the lr,
    which is the plain async rule bit for bit (powers of two are exact)."""

    def __init__(self, cfg):
        pass

    def push(self, params, grad, rank, staleness, version):
        return grad * 2, 0.5


class Raises:
    def __init__(self, cfg):
        pass

    def push(self, params, grad, rank, staleness, version):
        if version == 5:
            raise ValueError("no version 5 here")
        return 1.0


class Wrong:
    def __init__(self, cfg):
        pass

    def push(self, params, grad, rank, staleness, version):
        return "fast"
