"""Results folders as Python objects: a run's (summary.json, metrics.jsonl,
config.toml) and a sweep's (sweep.json, sweep.csv, point-NNN/). Any folder
gradwire wrote can be read: a finished run, one killed mid-run (no
summary.json, perhaps a cut last line in metrics.jsonl), a sweep, or a run
from an older version (fields it lacks are simply absent)."""

import json
import os
import tomllib


class Error(Exception):
    """A gradwire error: a bad config, key or folder, with the CLI's message."""


def _pandas():
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("gradwire's tables need pandas (Debian: python3-pandas)") from e
    return pandas


def _records(path):
    """metrics.jsonl's records; a line cut short by a kill is skipped."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the last line of a run killed while writing it
    return out


class Run:
    """One run's results folder."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        if not os.path.isdir(self.path):
            raise Error(f"{path}: no such results folder")
        if not any(os.path.exists(os.path.join(self.path, f)) for f in ("summary.json", "metrics.jsonl")):
            raise Error(f"{path}: not a gradwire run folder (no summary.json or metrics.jsonl)")

    def __repr__(self):
        s = self.summary
        status = s.get("status", "?") if s else "no summary.json (stopped before its end)"
        return f"<gradwire.Run {self.path}: {status}>"

    @property
    def summary(self):
        """summary.json as a dict, or None for a run killed before writing it."""
        p = os.path.join(self.path, "summary.json")
        if not os.path.exists(p):
            return None
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    @property
    def config(self):
        """config.toml (the resolved config the run used) as a dict."""
        p = os.path.join(self.path, "config.toml")
        if not os.path.exists(p):
            return None
        with open(p, "rb") as f:
            return tomllib.load(f)

    @property
    def records(self):
        """metrics.jsonl's records as dicts, in order."""
        return _records(os.path.join(self.path, "metrics.jsonl"))

    @property
    def metrics(self):
        """metrics.jsonl as a DataFrame: one row per record; `type` says which
        ("step": a worker's window, "eval", "worker": its final figures,
        "fault", "resume"); fields a record lacks are NaN."""
        pd = _pandas()
        return pd.json_normalize(self.records, sep="_")

    @property
    def per_worker(self):
        """One row per worker (summary.json's per_worker; for a run stopped
        before its summary, the "worker" records written so far)."""
        pd = _pandas()
        s = self.summary
        rows = s.get("per_worker", []) if s else [r for r in self.records if r.get("type") == "worker"]
        return pd.json_normalize(rows, sep="_")


class Sweep:
    """A sweep's folder: the comparison table and every point's run."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        if not os.path.exists(os.path.join(self.path, "sweep.json")):
            raise Error(f"{path}: not a gradwire sweep folder (no sweep.json)")

    def __repr__(self):
        return f"<gradwire.Sweep {self.path}: {len(self.runs)} point(s)>"

    @property
    def data(self):
        """sweep.json as a dict (points and rows)."""
        with open(os.path.join(self.path, "sweep.json"), encoding="utf-8") as f:
            return json.load(f)

    @property
    def table(self):
        """sweep.csv as a DataFrame: one row per point (repeats averaged),
        the varied keys as the first columns."""
        return _pandas().read_csv(os.path.join(self.path, "sweep.csv"))

    @property
    def runs(self):
        """Every point's Run that left a results folder, in order."""
        points = sorted(d for d in os.listdir(self.path) if d.startswith("point-"))
        out = []
        for d in points:
            try:
                out.append(Run(os.path.join(self.path, d)))
            except Error:
                continue  # a point that failed before writing anything
        return out


def load(path):
    """The run or sweep in a results folder (any gradwire wrote)."""
    if os.path.exists(os.path.join(path, "sweep.json")):
        return Sweep(path)
    return Run(path)
