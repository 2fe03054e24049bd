#!/usr/bin/env python3
"""same_model.py A B: exits 0 when two model.safetensors files (or run
folders holding one) hold the same tensors, bit for bit; otherwise says
which tensors differ and exits 1. The JSON header's metadata (the run's
config) may differ."""
import json, os, struct, sys


def tensors(path):
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    sys.exit("the models hold different tensors: %s vs %s" % (sorted(a), sorted(b)))
diff = [k for k in a if a[k] != b[k]]
if diff:
    sys.exit("the models differ in %s" % ", ".join(diff))
print("%d tensors, bit for bit the same" % len(a))
