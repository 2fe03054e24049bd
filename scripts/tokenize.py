#!/usr/bin/env python3
"""Token files for data.dataset = "tokens" from any text, in nanoGPT's
format: OUT/train.bin and OUT/val.bin (token ids as little-endian uint16,
nothing else) and OUT/meta.json (the vocabulary size and, for chars, the
characters in id order).

  scripts/tokenize.py TEXT OUT [--tokenizer bytes|chars] [--val-fraction F]

TEXT is a file or a folder of them (regular files in name order; files
holding a NUL byte are skipped as not text; lines that are only "%", the
fortune files' separators, are dropped, as data.dataset = "text" does).
bytes: each byte is its id (vocabulary 256, the same ids data.dataset =
"text" trains on). chars: each distinct character an id, in sorted order,
as nanoGPT's shakespeare_char (vocabulary: the distinct characters). The
last --val-fraction of the ids (0.1) is val.bin. It prints the
model.vocab to set.
"""
import argparse
import json
import os
import struct
import sys


def read_text(path):
    names = [path]
    if os.path.isdir(path):
        names = sorted(os.path.join(path, n) for n in os.listdir(path))
        names = [n for n in names if os.path.isfile(n) and not os.path.islink(n)]
    out = []
    for n in names:
        with open(n, "rb") as f:
            b = f.read()
        if b"\0" in b:
            continue
        out.extend(line for line in b.splitlines(keepends=True) if line not in (b"%\n", b"%"))
    return b"".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("text")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", choices=["bytes", "chars"], default="bytes")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    a = ap.parse_args()
    if not 0 < a.val_fraction < 1:
        sys.exit("tokenize.py: --val-fraction must be in (0, 1)")
    data = read_text(a.text)
    if not data:
        sys.exit(f"tokenize.py: {a.text} holds no text")
    meta = {"tokenizer": a.tokenizer}
    if a.tokenizer == "bytes":
        ids = list(data)
        meta["vocab_size"] = 256
    else:
        text = data.decode("utf-8", errors="replace")
        chars = sorted(set(text))
        if len(chars) > 65536:
            sys.exit(f"tokenize.py: {len(chars)} distinct characters do not fit uint16 ids")
        stoi = {c: i for i, c in enumerate(chars)}
        ids = [stoi[c] for c in text]
        meta["vocab_size"] = len(chars)
        meta["itos"] = chars
    n_val = int(len(ids) * a.val_fraction)
    os.makedirs(a.out, exist_ok=True)
    for name, part in (("train.bin", ids[: len(ids) - n_val]), ("val.bin", ids[len(ids) - n_val :])):
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(struct.pack(f"<{len(part)}H", *part))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f)
    print(f"{a.out}: {len(ids) - n_val} training and {n_val} validation ids; set model.vocab = {meta['vocab_size']}")


if __name__ == "__main__":
    main()
