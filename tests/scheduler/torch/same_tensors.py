"""same_tensors.py A B TOLERANCE: every tensor of safetensors file A within
TOLERANCE relative (by norm) of B's, names included; 0: the tensors' bytes
equal (the headers may differ: they hold each run's config). Exit 1 if not."""
import json
import struct
import sys

import numpy as np


def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    body = raw[8 + n:]
    return body, {k: np.frombuffer(body[t["data_offsets"][0]:t["data_offsets"][1]], dtype=np.float32)
                  for k, t in header.items()}


(body_a, a), (body_b, b) = read(sys.argv[1]), read(sys.argv[2])
tol = float(sys.argv[3])
names = lambda p: p.split("/")[-2]
if sorted(a) != sorted(b):
    sys.exit("%s and %s hold other tensors: %s / %s" % (names(sys.argv[1]), names(sys.argv[2]), sorted(a), sorted(b)))
if tol == 0:
    if body_a != body_b:
        sys.exit("%s and %s: the tensors' bytes differ" % (names(sys.argv[1]), names(sys.argv[2])))
    print("%s = %s, byte for byte" % (names(sys.argv[1]), names(sys.argv[2])))
    sys.exit(0)
worst, where = 0.0, None
for k in a:
    rel = float(np.linalg.norm(a[k].astype(np.float64) - b[k]) / max(np.linalg.norm(a[k].astype(np.float64)), 1e-30))
    if rel > worst:
        worst, where = rel, k
if worst > tol:
    sys.exit("%s: %s is %.3e relative from %s's (tolerance %g)" % (names(sys.argv[1]), where, worst,
                                                                     names(sys.argv[2]), tol))
print("%s = %s within %g (%.1e relative at most)" % (names(sys.argv[1]), names(sys.argv[2]), tol, worst))
