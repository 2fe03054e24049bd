"""The `gradwire` Python module: run (a path and a dict), sweep, load (a
run, a sweep, a killed run), keys, errors as gradwire.Error with the CLI's
message, on_metrics streaming, and Ctrl-C (SIGINT, sent at a step the
metrics stream reports) followed by run(resume=...).
Exits 77 (skipped) without pandas.

Usage: PYTHONPATH=<build>/python test_module.py SOURCE_DIR"""

import os
import shutil
import signal
import sys
import tempfile

try:
    import pandas  # noqa: F401
except ImportError:
    print("SKIP: pandas not installed (Debian: python3-pandas)")
    sys.exit(77)
import gradwire

src = sys.argv[1]
tmp = tempfile.mkdtemp()
small = {"data.test_subset": 500, "train.eval_steps": 1000}


def check(cond, msg):
    if not cond:
        print("FAIL:", msg, file=sys.stderr)
        sys.exit(1)


def expect_error(fn, *parts):
    try:
        fn()
    except gradwire.Error as e:
        for p in parts:
            check(p in str(e), f"the error {str(e)!r} does not say {p!r}")
        return str(e)
    check(False, f"no gradwire.Error (expected one saying {parts})")


# keys: the schema, for listing and validating keys.
keys = gradwire.keys()
check("train.lr" in keys and keys["train.lr"]["doc"], "keys() lacks train.lr or its doc")
check(keys["topology.workers"]["range"] == (1, 1024) and keys["train.lr"]["range"] == (1e-12, 1e6) and
      keys["model.kind"]["range"] is None, "keys() gives the wrong ranges: " + str(keys["topology.workers"]))
check(keys["topology.kind"]["allowed"] and "ring" in keys["topology.kind"]["allowed"], "topology.kind's values")

# run: a path, --set values from Python values, results read back.
streamed = []
r = gradwire.run(f"{src}/examples/ring.toml", set={"train.max_steps": 40, "topology.workers": 3, **small},
                 out=f"{tmp}/ring", on_metrics=streamed.append)
check(r.summary["status"] == "completed", f"status {r.summary['status']}")
check(r.summary["workers"] == 3, "topology.workers from set= did not apply")
check(r.summary["gradwire"]["commit"] == gradwire.version()[1], "summary.json's commit is not this build's")
steps = r.metrics[r.metrics["type"] == "step"]
check(len(steps) > 0 and steps["loss"].notna().all(), "no step records with a loss")
check(sorted(r.per_worker["worker"]) == [0, 1, 2], f"per_worker: {list(r.per_worker['worker'])}")
check(len(streamed) == len(r.records) and streamed == r.records,
      f"on_metrics streamed {len(streamed)} records, metrics.jsonl has {len(r.records)}")

# run: a dict shaped like the TOML file.
d = gradwire.run({"experiment": {"name": "from-dict"}, "model": {"hidden": [32]},
                  "train": {"max_steps": 20, "batch_size": 32}, "data": {"test_subset": 500}}, out=f"{tmp}/dict")
check(d.config["model"]["hidden"] == [32] and d.summary["steps"] == 20, "the dict config did not apply")

# Errors carry the CLI's message: file, line and key.
expect_error(lambda: gradwire.run(f"{src}/examples/ring.toml", set={"train.lrr": 0.1}, out=f"{tmp}/bad"),
             "unknown key 'train.lrr'", "did you mean 'train.lr'")
# A dict config's errors name the key as the dict holds it, never the temporary file behind it.
e = expect_error(lambda: gradwire.run({"train": {"lr": "fast"}}, out=f"{tmp}/bad2"), "config['train']['lr']",
                 "train.lr must be")
check("config-from-dict" not in e, f"the error names the temporary file: {e!r}")
expect_error(lambda: gradwire.run({"train": {"lr": {"value": 0.1}}}, out=f"{tmp}/bad3"),
             "config['train']['lr'] is a dict, but train.lr is a key, not a section")
expect_error(lambda: gradwire.run(f"{src}/examples/ring.toml", out=f"{tmp}/ring", set=small),
             "already holds a run")

# sweep: one row per point, the varied key a column.
s = gradwire.sweep(f"{src}/examples/ps-async.toml", over={"topology.workers": [1, 2]},
                   set={"train.max_steps": 20, **small}, out=f"{tmp}/sweep")
check(list(s.table["topology.workers"]) == [1, 2], f"sweep table:\n{s.table}")
check(len(s.runs) == 2 and all(x.summary["status"] == "completed" for x in s.runs), "sweep runs")

# replay: an async run across 2 processes again in this process, bit for
# bit; a variant on its schedule.
a = gradwire.run(f"{src}/examples/ps-async.toml", set={"train.max_steps": 30, "topology.workers": 2, **small},
                 procs=2, out=f"{tmp}/async")
same = gradwire.replay(a)
check(same.path == f"{tmp}/async-replay" and same.summary["replay"]["record"]["entries"] > 0, "replay's summary")
with open(f"{tmp}/async/model.safetensors", "rb") as x, open(f"{tmp}/async-replay/model.safetensors", "rb") as y:
    tensors = lambda b: b[8 + int.from_bytes(b[:8], "little"):]
    check(tensors(x.read()) == tensors(y.read()), "the replay's model differs from the run's")
slr = gradwire.replay(a, set={"topology.ps.staleness_lr": True}, out=f"{tmp}/async-slr")
check(slr.summary["staleness"]["histogram"] == a.summary["staleness"]["histogram"], "what-if changed the schedule")
expect_error(lambda: gradwire.replay(a, set={"topology.ps.push_pull": False}, out=f"{tmp}/no"),
             "topology.ps.push_pull decides how workers and shards exchange")

# load: a run, a sweep, and a run killed before its summary (a cut last line).
check(isinstance(gradwire.load(f"{tmp}/sweep"), gradwire.Sweep), "load(sweep)")
check(gradwire.load(f"{tmp}/ring").summary == r.summary, "load(run)")
shutil.copytree(f"{tmp}/ring", f"{tmp}/killed")
os.remove(f"{tmp}/killed/summary.json")
with open(f"{tmp}/killed/metrics.jsonl", "a") as f:
    f.write('{"type": "step", "worker": 0, "lo')
k = gradwire.load(f"{tmp}/killed")
check(k.summary is None and len(k.metrics) == len(r.metrics), "a killed run's metrics")
expect_error(lambda: gradwire.load(tmp), "not a gradwire run folder")

# Ctrl-C mid-run: SIGINT at the first record past step 100 stops the run at
# a step boundary; KeyboardInterrupt; the run resumes to its end.
sent = []


def interrupt(record):
    if record.get("type") == "step" and record["step"] >= 100 and not sent:
        sent.append(record["step"])
        os.kill(os.getpid(), signal.SIGINT)


total = 4000
try:
    gradwire.run(f"{src}/examples/default.toml", out=f"{tmp}/stopped", on_metrics=interrupt,
                 set={"train.max_steps": total, "train.log_every": 10, "train.threads": 1, **small})
    check(False, f"the run ended without KeyboardInterrupt (SIGINT sent at step {sent})")
except KeyboardInterrupt as e:
    check("resume" in str(e), f"KeyboardInterrupt says {e}")
stopped = gradwire.load(f"{tmp}/stopped")
check(stopped.summary["status"] == "interrupted", f"status after SIGINT: {stopped.summary['status']}")
at = stopped.summary["steps"]
check(sent and sent[0] <= at < total, f"stopped at step {at}, SIGINT sent at {sent}")
done = gradwire.run(resume=f"{tmp}/stopped")
check(done.summary["status"] == "completed" and done.summary["steps"] == total,
      f"resumed: {done.summary['status']} at {done.summary['steps']}")
check(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "Python's SIGINT handler was not put back")

shutil.rmtree(tmp)
print(f"python module: run, dict config, errors, sweep, replay, load, SIGINT at step {at} and resume to {total}: ok")
