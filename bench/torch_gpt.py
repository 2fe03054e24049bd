#!/usr/bin/python3
"""PyTorch side of bench/gpt_vs_torch.sh, and the PyTorch GPT that
tests/models/gpt_parity.py checks gradwire's against.

The model is nanoGPT's (its module names, so gradwire's model.safetensors
loads into it): token and position embeddings, pre-LayerNorm blocks of
causal self-attention and a GELU (erf) MLP of width 4d, a final LayerNorm
and a head tied to the token embedding. PyTorch 1.13 (Debian 12) has no
fused scaled_dot_product_attention: attention here is its matmuls and
softmax, as nanoGPT's fallback path.

As a benchmark: trains on windows of the fortunes corpus with AdamW
(lr 3e-4, betas 0.9/0.95, weight decay 0.1 on weight matrices) and
clipping at 1, as gradwire-bench-train --model gpt does, and prints one
key=value line with tokens_per_sec. On a GPU (`--device cuda`, for
bench/gpu_gpt_vs_torch.sh): `--sdpa` takes PyTorch 2's fused
scaled_dot_product_attention, `--bf16` autocasts the step to bf16, and
the line adds peak_mib (torch.cuda.max_memory_allocated).
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads = heads

    fused = False  # set by --sdpa: PyTorch 2's scaled_dot_product_attention

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if CausalSelfAttention.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
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
    """`c` holds layers, heads, d_model, context and vocab."""

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
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t, device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def decays(name, p):
    """gradwire's AdamW rule: weight matrices decay; biases, norms and embeddings do not."""
    return p.dim() >= 2 and ".wte." not in name and ".wpe." not in name


def adamw(model, lr, betas, eps, weight_decay):
    named = list(model.named_parameters())
    return torch.optim.AdamW([{"params": [p for n, p in named if decays(n, p)], "weight_decay": weight_decay},
                              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}],
                             lr=lr, betas=betas, eps=eps)


def corpus(path="/usr/share/games/fortunes"):
    """The fortunes files as gradwire reads them: regular files in name
    order, binary ones skipped, '%' separator lines dropped."""
    out = bytearray()
    for name in sorted(os.listdir(path)):
        p = os.path.join(path, name)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        raw = open(p, "rb").read()
        if b"\0" in raw:
            continue
        out += b"".join(line for line in raw.splitlines(keepends=True) if line not in (b"%\n", b"%"))
    return torch.frombuffer(out, dtype=torch.uint8).long()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sdpa", action="store_true", help="fused scaled_dot_product_attention (PyTorch 2)")
    ap.add_argument("--bf16", action="store_true", help="autocast the forward and backward to bf16")
    a = ap.parse_args()
    if a.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"--sdpa: PyTorch {torch.__version__} has no scaled_dot_product_attention")
    CausalSelfAttention.fused = a.sdpa
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    c = dict(layers=a.layers, heads=a.heads, d_model=a.d_model, context=a.context, vocab=256)
    model = GPT(c).to(dev)
    opt = adamw(model, 3e-4, (0.9, 0.95), 1e-8, 0.1)
    data = corpus()
    g = torch.Generator().manual_seed(1)

    def step():
        at = torch.randint(0, len(data) - a.context - 1, (a.batch,), generator=g)
        x = torch.stack([data[i:i + a.context] for i in at]).to(dev)
        y = torch.stack([data[i + 1:i + 1 + a.context] for i in at]).to(dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(a.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    peak = f" peak_mib={torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else ""
    print(f"model=gpt threads={a.threads} batch={a.batch} context={a.context} "
          f"tokens_per_sec={a.steps * a.batch * a.context / secs:.0f} step_ms={secs / a.steps * 1e3:.2f} "
          f"omp_wait_policy={os.environ.get('OMP_WAIT_POLICY', 'default')}{peak}")


if __name__ == "__main__":
    main()
