#!/usr/bin/env python3
"""gradwire's GPT against the same GPT in PyTorch (bench/torch_gpt.py:
nanoGPT's modules, names and layouts), in fp32 on the CPU.

gpt_parity_dump writes a small GPT's initial weights as model.safetensors,
the batches of 20 AdamW steps with gradient clipping, its loss and gradient
norm at each step, and the trained model's logits on a validation batch.
This script loads the same weights into PyTorch, trains on the same
batches with torch.optim.AdamW and clip_grad_norm_, and requires:
  - each step's loss within 1e-4 relative of gradwire's;
  - each step's gradient norm (before clipping) within 1e-4 relative;
  - the trained model's validation logits within 1e-4 (relative to their size).
Usage: gpt_parity.py PATH/TO/gpt_parity_dump
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh --test installs python3-torch)")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench"))
from torch_gpt import GPT, adamw  # noqa: E402 (after the path it lives on)


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        s, e = t["data_offsets"]
        assert t["dtype"] == "F32", (name, t["dtype"])
        out[name] = torch.from_numpy(np.frombuffer(raw[8 + n + s:8 + n + e], dtype="<f4").reshape(t["shape"]).copy())
    return out


def close(got, want, tol):
    return abs(got - want) <= tol * max(1.0, abs(want))


def main():
    torch.set_num_threads(1)
    dump = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([dump, d], check=True)
        run = json.load(open(f"{d}/run.json"))
        model = GPT(run)
        missing, unexpected = model.load_state_dict(read_safetensors(f"{d}/init.safetensors"), strict=False)
        assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)  # the tied head is not stored twice
        opt = adamw(model, run["lr"], tuple(run["betas"]), run["eps"], run["weight_decay"])
        B, T, V = run["batch"], run["context"], run["vocab"]
        xs = np.fromfile(f"{d}/x.bin", dtype="<i4").reshape(-1, B, T)
        ys = np.fromfile(f"{d}/y.bin", dtype="<i4").reshape(-1, B, T)
        bad = 0
        for s, (x, y) in enumerate(zip(xs, ys)):
            logits = model(torch.from_numpy(x).long())
            loss = F.cross_entropy(logits.view(-1, V), torch.from_numpy(y).long().view(-1))
            opt.zero_grad()
            loss.backward()
            norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), run["clip_norm"]))
            opt.step()
            ok = close(loss.item(), run["losses"][s], 1e-4) and close(norm, run["grad_norms"][s], 1e-4)
            bad += not ok
            print(f"step {s:2d}: loss torch {loss.item():.7f} gradwire {run['losses'][s]:.7f}, "
                  f"grad norm torch {norm:.6f} gradwire {run['grad_norms'][s]:.6f}{'' if ok else '  <- differs'}")
        with torch.no_grad():
            vx = torch.from_numpy(np.fromfile(f"{d}/val_x.bin", dtype="<f4").reshape(B, T)).long()
            want = model(vx).view(-1, V).numpy()
        got = np.fromfile(f"{d}/val_logits.bin", dtype="<f4").reshape(-1, V)
        worst = float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want))))
        print(f"validation logits: worst difference {worst:.2e} (relative to max(1, |logit|))")
        if bad or worst > 1e-4:
            print(f"FAIL: {bad} step(s) differ beyond 1e-4, logits differ by {worst:.2e}")
            return 1
        print("PASS: 20 AdamW steps with clipping agree with PyTorch to 1e-4")
        return 0


if __name__ == "__main__":
    sys.exit(main())
