"""same_tensors.py A B TOLERANCE [--far] [--strip TEXT]: every tensor of
safetensors file A within TOLERANCE relative (by norm) of B's, names
included; 0: the tensors' bytes equal (the headers may differ: they hold
each run's config). Exit 1 if not.
  --far         the reverse: some tensor is more than TOLERANCE apart
  --strip TEXT  TEXT in both files' names read as "." (".linear.": the
                built-in MLP's names against a torch module's)"""
import json
import struct
import sys

import numpy as np

args = sys.argv[1:]
far = "--far" in args
if far:
    args.remove("--far")
strip = None
if "--strip" in args:
    i = args.index("--strip")
    strip = args[i + 1]
    del args[i:i + 2]
path_a, path_b, tol = args[0], args[1], float(args[2])


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n:]
    rename = (lambda k: k.replace(strip, ".")) if strip else (lambda k: k)
    return body, {rename(k): np.frombuffer(body[t["data_offsets"][0]:t["data_offsets"][1]], dtype=np.float32)
                  for k, t in header.items()}


def name(p):
    parts = p.split("/")
    return parts[-2] if parts[-1] == "model.safetensors" else parts[-1]


(body_a, a), (body_b, b) = read(path_a), read(path_b)
if sorted(a) != sorted(b):
    sys.exit("%s and %s hold other tensors: %s / %s" % (name(path_a), name(path_b), sorted(a), sorted(b)))
if tol == 0 and not far:
    if body_a != body_b:
        sys.exit("%s and %s: the tensors' bytes differ" % (name(path_a), name(path_b)))
    print("%s = %s, byte for byte" % (name(path_a), name(path_b)))
    sys.exit(0)
worst, where = 0.0, None
for k in sorted(a):
    rel = float(np.linalg.norm(a[k].astype(np.float64) - b[k]) / max(np.linalg.norm(a[k].astype(np.float64)), 1e-30))
    if rel > worst:
        worst, where = rel, k
if far:
    if worst <= tol:
        sys.exit("%s and %s are within %g (%.1e relative at most): they should differ by more"
                 % (name(path_a), name(path_b), tol, worst))
    print("%s and %s differ: %.1e relative at %s" % (name(path_a), name(path_b), worst, where))
    sys.exit(0)
if worst > tol:
    sys.exit("%s: %s is %.3e relative from %s's (tolerance %g)" % (name(path_a), where, worst, name(path_b), tol))
print("%s = %s within %g (%.1e relative at most)" % (name(path_a), name(path_b), tol, worst))
