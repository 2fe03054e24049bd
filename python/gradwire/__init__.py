"""gradwire from Python: run experiments and sweeps, and read their results.

    import gradwire
    r = gradwire.run("examples/ring.toml", set={"train.max_steps": 100})
    r.metrics.tail()              # metrics.jsonl as a pandas DataFrame
    s = gradwire.sweep("examples/ring.toml", over={"topology.workers": [1, 2, 4]})
    s.table                       # sweep.csv: one row per point, the varied keys as columns
    gradwire.load("results/default").summary
    gradwire.replay(r_async, set={"topology.ps.staleness_lr": True})   # the same schedule, another algorithm

A run goes through the same code as `gradwire run` (in this process, the
GIL released, or across processes with procs=N), writes the same results
folder, and fails with the same message, raised as gradwire.Error.
Ctrl-C stops it at the step boundary as on the command line (the results
and a checkpoint are kept, run(resume=...) goes on) and raises
KeyboardInterrupt.
"""

from ._results import Run, Sweep, load
from ._runs import Error, keys, replay, run, sweep, version

__all__ = ["Error", "Run", "Sweep", "keys", "load", "replay", "run", "sweep", "version"]
