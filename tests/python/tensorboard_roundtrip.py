"""TensorBoard's event files read back: every record's TFRecord framing and
masked CRC-32C (Debian's python3-crc32c), every event parsed with Python's
protobuf (the messages of scheduler/app/tensorboard_event.proto, compiled
here with protoc), and every scalar equal to its metrics.jsonl value.
The files written as the run goes (experiment.tensorboard) and by
`gradwire export --tensorboard` afterwards hold the same scalars.
Exits 77 (skipped) without protoc, protobuf or crc32c.

Usage: tensorboard_roundtrip.py GRADWIRE SOURCE_DIR"""

import glob
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile

gw, src = sys.argv[1], sys.argv[2]
try:
    import crc32c
    import google.protobuf  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e} (Debian: python3-protobuf python3-crc32c)")
    sys.exit(77)
if subprocess.run(["which", "protoc"], capture_output=True).returncode != 0:
    print("SKIP: protoc not installed (Debian: protobuf-compiler)")
    sys.exit(77)


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_events(path, event_type):
    """Every event of a file, each record's CRCs checked."""
    out = []
    with open(path, "rb") as f:
        blob = f.read()
    i = 0
    while i < len(blob):
        if i + 12 > len(blob):
            fail(f"{path}: {len(blob) - i} stray bytes at offset {i}")
        header = blob[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", blob[i + 8:i + 12])
        if len_crc != masked(header):
            fail(f"{path}: record at {i}: the length's CRC is wrong")
        data = blob[i + 12:i + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[i + 12 + length:i + 16 + length])
        if data_crc != masked(data):
            fail(f"{path}: record at {i}: the data's CRC is wrong")
        e = event_type()
        e.ParseFromString(data)
        out.append(e)
        i += 16 + length
    return out


def scalars(tb):
    """{(run, tag, step): value} of every event file under tb/."""
    found = {}
    files = sorted(glob.glob(os.path.join(tb, "**", "events.out.tfevents.*"), recursive=True))
    if not files:
        fail(f"no event files under {tb}")
    for path in files:
        run = os.path.relpath(os.path.dirname(path), tb)
        events = read_events(path, pb.Event)
        if not events or events[0].file_version != "brain.Event:2":
            fail(f"{path}: the first event does not give file_version brain.Event:2")
        for e in events[1:]:
            for v in e.summary.value:
                found[(run, v.tag, e.step)] = v.simple_value
    return found


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


tmp = tempfile.mkdtemp()
subprocess.run(["protoc", f"--python_out={tmp}", f"-I{src}/scheduler/app",
                f"{src}/scheduler/app/tensorboard_event.proto"], check=True)
sys.path.insert(0, tmp)
pb = importlib.import_module("tensorboard_event_pb2")

out = os.path.join(tmp, "run")
subprocess.run([gw, "run", f"{src}/examples/ps-async.toml", "-q", "--no-report", "--out", out,
                "--set", "topology.workers=3", "--set", "train.max_steps=60", "--set", "train.log_every=10",
                "--set", "train.eval_steps=30", "--set", "data.test_subset=500",
                "--set", "train.lr_schedule=\"cosine\"", "--set", "experiment.tensorboard=true"], check=True)
live = scalars(os.path.join(out, "tb"))

with open(os.path.join(out, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
want = {}
for r in records:
    if r["type"] == "step":
        run = f"worker-{r['worker']}"
        for key, tag in [("loss", "train/loss"), ("staleness", "staleness/mean"), ("staleness_p99", "staleness/p99"),
                         ("comm_ms", "time/comm_ms"), ("bytes_sent", "bytes/sent_mb")]:
            want[(run, tag, r["step"])] = r[key] * (1e-6 if key == "bytes_sent" else 1)
        if r["worker"] == 0:
            want[(".", "train/lr", r["step"])] = r["lr"]
    elif r["type"] == "eval":
        want[(".", "eval/test_accuracy", r["step"])] = r["test_accuracy"]
        want[(".", "eval/test_loss", r["step"])] = r["test_loss"]
workers = {k[0] for k in want if k[0].startswith("worker-")}
if workers != {"worker-0", "worker-1", "worker-2"}:
    fail(f"metrics.jsonl's step records name workers {sorted(workers)}")
for key, value in want.items():
    if key not in live:
        fail(f"no scalar {key} in tb/ (run, tag, step)")
    if live[key] != f32(value):
        fail(f"{key}: {live[key]} in tb/, {value} in metrics.jsonl")
lrs = sorted((k[2], v) for k, v in live.items() if k[1] == "train/lr")
if not (len(lrs) >= 3 and lrs[-1][1] < lrs[0][1]):
    fail(f"train/lr does not follow the cosine schedule: {lrs}")
if not any(k[1] == "train/samples_per_sec" and v > 0 for k, v in live.items()):
    fail("no train/samples_per_sec")

subprocess.run([gw, "export", "--tensorboard", out], check=True, capture_output=True)
exported = scalars(os.path.join(out, "tb"))
if exported != live:
    diff = set(exported.items()) ^ set(live.items())
    fail(f"export --tensorboard differs from the live files in {len(diff)} scalars, e.g. {sorted(diff)[:3]}")
print(f"tensorboard: {len(live)} scalars in {len(glob.glob(os.path.join(out, 'tb', '**', 'events.*'), recursive=True))} "
      "files, every CRC and value checked; export writes the same")
