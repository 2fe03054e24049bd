# A parameter-server rule of your own, in Python (docs/your-algorithm.md),
# for examples/ps-python-rule.toml: each push applied at
# lr / staleness^power, a softer damping than the built-in
# topology.ps.staleness_lr (power 1), with a count of what it saw.


class StalenessPower:
    power = 0.5

    def __init__(self, cfg):
        self.pushes = 0
        self.workers = cfg["topology"]["workers"]

    def push(self, params, grad, rank, staleness, version):
        # params: this shard's parameters (numpy float32, writable);
        # grad: its copy of the pushed gradient. The return value is the
        # learning rate's factor for the shard's optimizer.
        self.pushes += 1
        return 1.0 / max(1, staleness) ** self.power
