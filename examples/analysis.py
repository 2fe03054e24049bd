#!/usr/bin/env python3
"""A notebook's analysis as a script: load a sweep with the gradwire Python
module, plot staleness against workers and test accuracy against time, and
save the figure as a PNG.

    PYTHONPATH=build/python python3 examples/analysis.py results/study-staleness-sweep
    PYTHONPATH=build/python python3 examples/analysis.py --run      # runs a small sweep first

With --run it sweeps the asynchronous parameter server over 1, 2 and 4
workers (examples/ps-async.toml, 300 steps each) into results/analysis-sweep.
"""

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

import gradwire  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sweep", nargs="?", default="results/analysis-sweep", help="a sweep's results folder")
    p.add_argument("--run", action="store_true", help="run the small sweep into SWEEP first")
    p.add_argument("--out", default=None, help="the PNG (default SWEEP/analysis.png)")
    a = p.parse_args()
    if a.run:
        gradwire.sweep(os.path.join(here, "ps-async.toml"), over={"topology.workers": [1, 2, 4]}, out=a.sweep,
                       set={"train.max_steps": 300, "train.eval_steps": 100, "data.test_subset": 2000}, force=True)
    s = gradwire.load(a.sweep)
    if not isinstance(s, gradwire.Sweep):
        sys.exit(f"analysis.py: {a.sweep} is a run, not a sweep")
    t = s.table.sort_values("topology.workers")

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(t["topology.workers"], t["staleness_mean"], "o-", label="mean")
    left.plot(t["topology.workers"], t["staleness_p99"], "s--", label="p99")
    left.set(xlabel="workers", ylabel="staleness (versions)", title="staleness of applied gradients")
    left.set_xscale("log", base=2)
    left.legend()
    for run in s.runs:
        m = run.metrics
        ev = m[m["type"] == "eval"]
        right.plot(ev["time"], 100 * ev["test_accuracy"], "o-", label=f"{run.summary['workers']} worker(s)")
    right.set(xlabel="seconds", ylabel="test accuracy (%)", title="test accuracy against time")
    right.legend()
    fig.tight_layout()
    out = a.out or os.path.join(a.sweep, "analysis.png")
    fig.savefig(out, dpi=100)
    print(f"analysis: {out}")


if __name__ == "__main__":
    main()
