"""gradwire.run and gradwire.sweep: the command line's `run`, in this
process (the GIL released) or across processes, with results read back."""

import json
import os
import re
import shutil
import tempfile
import threading

from . import _gradwire, _toml
from ._results import Error, Run, Sweep

__all__ = ["Error", "keys", "replay", "run", "sweep", "version"]


def _program():
    """The gradwire program, for runs across processes (procs=N): the build
    tree's beside a module imported from there, else the installed one
    (<prefix>/bin beside <prefix>/lib/python3/dist-packages), else PATH's."""
    here = os.path.dirname(os.path.abspath(__file__))
    in_build = here == os.path.join(os.path.dirname(_gradwire.build_exe), "python", "gradwire")
    installed = os.path.normpath(os.path.join(here, "..", "..", "..", "..", "bin", "gradwire"))
    for exe in ([_gradwire.build_exe] if in_build else []) + [installed, shutil.which("gradwire")]:
        if exe and os.access(exe, os.X_OK):
            return exe
    return None


if not os.environ.get("GRADWIRE_EXE") and _program():
    os.environ["GRADWIRE_EXE"] = _program()


def version():
    """(version, git commit) of this build."""
    return _gradwire.version(), _gradwire.commit()


def keys():
    """Every config key: {key: {"type", "default" (TOML text), "allowed", "doc",
    "range" ((lo, hi) for integers and numbers that have one, else None)}}."""
    return _gradwire.schema()


class _Config:
    """The config file to run: the path given, or a dict written as TOML."""

    def __init__(self, config):
        self.tmp = None
        self.where = None
        if isinstance(config, dict):
            try:
                text, self.where = _toml.document(config, _gradwire.schema())
            except ValueError as e:
                raise Error(str(e)) from None
            self.tmp = tempfile.mkdtemp(prefix="gradwire-")
            self.path = os.path.join(self.tmp, "config-from-dict.toml")
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(text)
        elif isinstance(config, (str, os.PathLike)):
            self.path = os.fspath(config)
        else:
            raise TypeError("gradwire: config is a path to a TOML file or a dict shaped like one")

    def out(self, sets, suffix=""):
        """Where the CLI puts the results (experiment.out, else results/<name>),
        resolved by its own config reader; a bad config raises its error."""
        folder, message = _gradwire.results_folder(self.path, _sets(sets))
        if message:
            raise Error(self.explain(message))
        return folder + suffix

    def explain(self, message):
        """A message about the dict's temporary file, about the dict instead:
        "FILE:2:6: train.lr ..." -> 'config["train"]["lr"]: train.lr ...'."""
        if not self.where:
            return message

        def at(m):
            line = int(m.group(1))
            return _toml.pretty(self.where[line - 1]) if 0 < line <= len(self.where) else "the config dict"

        message = re.sub(re.escape(self.path) + r":(\d+)(?::\d+)?", at, message)
        return message.replace(self.path, "the config dict")

    def close(self):
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


class _Tail:
    """Calls on_metrics(record) for each line of metrics.jsonl as the run
    writes it, from a thread of its own (the run holds no GIL). A file
    already there is an earlier run's (replaced: skipped) or, resuming, this
    run's first part (only what is appended is new)."""

    def __init__(self, path, on_metrics, resuming):
        self.path, self.on_metrics = path, on_metrics
        self.old = None
        if os.path.exists(path):
            st = os.stat(path)
            self.old = (st.st_ino, st.st_size if resuming else None)
        self.done = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _open(self):
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return None
        ino = os.fstat(f.fileno()).st_ino
        if self.old and self.old[0] == ino:
            if self.old[1] is None:  # the replaced run's file, not yet removed
                f.close()
                return None
            f.seek(self.old[1])
        return f

    def _loop(self):
        f, pending = None, b""
        try:
            while True:
                finished = self.done.wait(0.1)
                f = f or self._open()
                if f is not None:
                    pending += f.read()
                    *lines, pending = pending.split(b"\n")  # a line not yet whole waits
                    for line in lines:
                        try:
                            record = json.loads(line)
                        except json.JSONDecodeError:
                            continue
                        self.on_metrics(record)
                if finished:
                    return
        except BaseException as e:  # raised again in the caller's thread
            self.error = e
        finally:
            if f is not None:
                f.close()

    def stop(self):
        self.done.set()
        self.thread.join()
        if self.error is not None:
            raise self.error


def _call(args, out_dir, on_metrics, resuming=False):
    tail = _Tail(os.path.join(out_dir, "metrics.jsonl"), on_metrics, resuming) if on_metrics else None
    try:
        status, message = _gradwire.run_cli([str(a) for a in args])
    finally:
        if tail:
            tail.stop()
    if status == 130:
        raise KeyboardInterrupt(f"gradwire: stopped; results and a checkpoint in {out_dir} "
                                f"(gradwire.run(resume={out_dir!r}) goes on)")
    if status != 0:
        raise Error(message or f"gradwire exited with status {status}")


def _sets(set):
    """{key: value} as --set's KEY=VALUE texts."""
    return [f"{k}={_toml.value(v)}" for k, v in (set or {}).items()]


def _common(args, set, procs, force, quiet, report):
    for s in _sets(set):
        args += ["--set", s]
    if procs is not None:
        args += ["--procs", str(procs)]
    if force:
        args.append("--force")
    if quiet:
        args.append("--quiet")
    if not report:
        args.append("--no-report")
    return args


# Functions handed to run(model=..., dataset=...), by the name that
# model.module holds for them ("python:module.qualname"); the torch
# plug-in's bridge looks them up here, in this interpreter.
_objects = {}


def _with_functions(set, procs, model, dataset, loss):
    """`set` with model.kind = "torch" and model.module naming `model` (and
    `dataset`, `loss`), registered for the torch plug-in of this process."""
    if model is None:
        raise TypeError("gradwire.run: dataset= and loss= come with model= (or name them all in a module file: "
                        "model.module)")
    if not all(f is None or callable(f) for f in (model, dataset, loss)):
        raise TypeError("gradwire.run: model=, dataset= and loss= must be functions: model(cfg) -> "
                        "torch.nn.Module, dataset(split, cfg) -> torch.utils.data.Dataset, "
                        "loss(output, target) -> the batch's mean loss")
    if procs is not None:
        raise Error("gradwire.run: functions given as model= live in this process only; across processes "
                    "(procs=) each one imports them: put them in a .py file and name it as model.module")
    name = "python:%s.%s" % (getattr(model, "__module__", "?"), getattr(model, "__qualname__", "model"))
    _objects[name] = {"model": model, "dataset": dataset, "loss": loss}
    set = dict(set or {})
    set["model.kind"] = "torch"
    set["model.module"] = name
    if dataset is not None:
        set["data.dataset"] = "module"
    return set


def run(config=None, set=None, out=None, procs=None, *, resume=None, force=False, quiet=True, report=False,
        on_metrics=None, model=None, dataset=None, loss=None):
    """Trains as the config says and returns its Run.

    config: a TOML file's path, or a dict shaped like one ({"train": {"lr": 0.1}, ...}).
    set: {"train.max_steps": 100, ...}, as --set.
    out: the results folder (default: experiment.out, else results/<experiment.name>).
    procs: run across this many local processes (or "workers"), as --procs.
    resume: a run folder (or checkpoint folder) to continue, as --resume.
    force: replace an earlier run in `out`, as --force.
    on_metrics: called with each metrics.jsonl record (a dict) as it is
    written, from a background thread.
    model: your model(cfg) -> torch.nn.Module, as a function (a notebook's):
    model.kind becomes "torch" (docs/your-model.md). In this process only.
    dataset: your dataset(split, cfg), with model=: data.dataset becomes "module".
    loss: your loss(output, target), with model= (cross-entropy without it).
    """
    if model is not None or dataset is not None or loss is not None:
        set = _with_functions(set, procs, model, dataset, loss)
    if resume is not None:
        resume = os.fspath(resume)
        out = out or (os.path.dirname(os.path.dirname(resume))
                      if os.path.exists(os.path.join(resume, "MANIFEST.json")) else resume)
        args = ["run", "--resume", resume] + ([os.fspath(config)] if config is not None else [])
        _call(_common(args, set, procs, False, quiet, report), out, on_metrics, resuming=True)
        return Run(out)
    if config is None:
        raise TypeError("gradwire.run: give a config (a path or a dict), or resume=RUN_DIR")
    cfg = _Config(config)
    try:
        out = os.fspath(out) if out is not None else cfg.out(set or {})
        args = _common(["run", cfg.path, "--out", out], set, procs, force, quiet, report)
        _call(args, out, on_metrics)
    except Error as e:
        raise Error(cfg.explain(str(e))) from None
    finally:
        cfg.close()
    return Run(out)


def replay(run, set=None, out=None, *, force=False, quiet=True, report=False):
    """Runs a recorded run again in this process, as `gradwire replay`, and
    returns the replay's Run: the run's model bit for bit, or with `set`
    ({"topology.ps.staleness_lr": True, ...}) a variant on the same schedule.

    run: the recorded run's folder (or its Run).
    out: the replay's folder (default: <run>-replay).
    """
    run = os.fspath(run.path if isinstance(run, Run) else run)
    out = os.fspath(out) if out is not None else run.rstrip("/") + "-replay"
    _call(_common(["replay", run, "--out", out], set, None, force, quiet, report), out, None)
    return Run(out)


def sweep(config, over, set=None, out=None, procs=None, *, force=False, quiet=True, report=False):
    """Runs a grid, as --sweep, and returns its Sweep.

    over: {"topology.workers": [1, 2, 4], "experiment.seed": [1, 2]} (the last key fastest).
    """
    if not over:
        raise TypeError("gradwire.sweep: `over` names at least one key and its values")
    cfg = _Config(config)
    try:
        out = os.fspath(out) if out is not None else cfg.out(set or {}, "-sweep")
        args = ["run", cfg.path, "--out", out]
        for k, values in over.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise TypeError(f"gradwire.sweep: over[{k!r}] is a non-empty list of values")
            args += ["--sweep", f"{k}=" + ",".join(_toml.value(v) for v in values)]
        _call(_common(args, set, procs, force, quiet, report), out, None)
    except Error as e:
        raise Error(cfg.explain(str(e))) from None
    finally:
        cfg.close()
    return Sweep(out)
