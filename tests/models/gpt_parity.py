#!/usr/bin/env python3
"""gradwire's GPT against the same GPT in PyTorch (nanoGPT's modules, names
and layouts), in fp32 on the CPU.

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
import math
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh --test installs python3-torch)")
    sys.exit(77)


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


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()  # exact (erf)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab"], d), wpe=nn.Embedding(c["context"], d),
            h=nn.ModuleList([Block(d, c["heads"]) for _ in range(c["layers"])]), ln_f=nn.LayerNorm(d)))
        self.lm_head = nn.Linear(d, c["vocab"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx):
        t = idx.size(1)
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


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
        decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and ".wte." not in n and ".wpe." not in n]
        rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and ".wte." not in n and ".wpe." not in n)]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": run["weight_decay"]},
                                 {"params": rest, "weight_decay": 0.0}],
                                lr=run["lr"], betas=tuple(run["betas"]), eps=run["eps"])
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
