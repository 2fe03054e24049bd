#!/usr/bin/env python3
"""Train a gradwire torch config under PyTorch DDP (gloo), on gradwire's batches.

The peer side of gradwire's parity test and benchmark against DDP, and a
tool for anyone comparing the two: the module, seed, learning rate and
momentum come from the gradwire config (a run's resolved config.toml is
best: it names the module by its absolute path), and each rank takes, step
by step, the samples that `gradwire batches` printed for the worker of its
rank.

    gradwire run my.toml --out results/my
    gradwire batches my.toml --steps 50 > batches.jsonl
    python3 scripts/ddp_baseline.py results/my/config.toml batches.jsonl --out ddp.safetensors

One process per worker, started here (torch.multiprocessing), over gloo on
this host. Supported: model.kind = "torch", data.dataset = "fashion-mnist"
or "mnist" (IDX files, data.train_subset, data.normalize), train.optimizer =
"sgd" with a constant learning rate (momentum, nesterov, weight_decay).
Anything else is refused, naming the key. Rank 0 writes the final
state_dict as safetensors (--out) and prints one JSON line: steps, world,
seconds and samples/s over the steps after --warmup.
"""
import os
import sys

# This folder holds scripts/tokenize.py, which would shadow the standard
# library's tokenize for torch: look here last.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

import argparse
import gzip
import importlib.util
import json
import struct
import tempfile
import time

try:
    import tomllib
except ImportError:  # Python < 3.11
    sys.exit("ddp_baseline.py needs Python 3.11 or later (tomllib)")

import numpy as np


class ConfigError(Exception):
    pass


def get(cfg, key, default=None):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def check_supported(cfg, path):
    def refuse(key, why):
        raise ConfigError("%s: %s = %r: %s" % (path, key, get(cfg, key), why))
    if get(cfg, "model.kind") != "torch":
        refuse("model.kind", "ddp_baseline.py trains torch modules only")
    if get(cfg, "data.dataset", "fashion-mnist") not in ("fashion-mnist", "mnist"):
        refuse("data.dataset", "ddp_baseline.py reads IDX datasets only (fashion-mnist, mnist)")
    if get(cfg, "train.optimizer", "sgd") != "sgd":
        refuse("train.optimizer", "ddp_baseline.py runs SGD only")
    if get(cfg, "train.lr_schedule", "constant") != "constant":
        refuse("train.lr_schedule", "ddp_baseline.py keeps the learning rate constant")
    for key in ("train.warmup_epochs", "train.warmup_steps", "train.momentum_warmup_epochs", "train.clip_norm",
                "train.lr_base_batch"):
        if get(cfg, key, 0):
            refuse(key, "not supported by ddp_baseline.py")
    if get(cfg, "train.accumulate", 1) != 1:
        refuse("train.accumulate", "not supported by ddp_baseline.py")


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 8:
        raise ConfigError("%s: not an IDX file of unsigned bytes" % path)
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(folder, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ConfigError("%s: no %s(.gz)" % (folder, stem))


def load_train(cfg):
    """The training set as gradwire loads it: pixels / 255, the subset's first
    images, standardised with their mean and std when data.normalize."""
    folder = get(cfg, "data.path", "") or "/usr/share/datasets/fashion-mnist"
    images = read_idx(find(folder, "train-images-idx3-ubyte"))
    labels = read_idx(find(folder, "train-labels-idx1-ubyte"))
    n = get(cfg, "data.train_subset", 0) or len(labels)
    x = images[:n].astype(np.float32) * np.float32(1.0 / 255.0)
    if get(cfg, "data.normalize", True):
        v = x.astype(np.float64).ravel()
        mean = v.sum() / v.size
        sd = np.sqrt(max((v * v).sum() / v.size - mean * mean, 1e-12))
        x = ((x.astype(np.float64) - mean) / sd).astype(np.float32)
    return x.reshape(n, 1, x.shape[1], x.shape[2]), labels[:n].astype(np.int64)


def read_batches(path):
    by_worker = {}
    with open(path) as f:
        for line_no, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
                by_worker.setdefault(int(rec["worker"]), []).append((int(rec["step"]), rec["samples"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ConfigError("%s:%d: not a line of `gradwire batches` (%s)" % (path, line_no, e))
    world = len(by_worker)
    if sorted(by_worker) != list(range(world)):
        raise ConfigError("%s: workers %s, not 0 to %d" % (path, sorted(by_worker), world - 1))
    steps = min(len(v) for v in by_worker.values())
    return [[s for _, s in sorted(by_worker[r])[:steps]] for r in range(world)]


def load_module(cfg, config_path):
    module = get(cfg, "model.module", "")
    if not os.path.isabs(module):
        module = os.path.join(os.path.dirname(os.path.abspath(config_path)), module)
    spec = importlib.util.spec_from_file_location("gradwire_user_module", module)
    if spec is None or not os.path.exists(module):
        raise ConfigError("%s: model.module = %r: no such file" % (config_path, module))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def write_safetensors(path, state):
    header, blobs, offset = {}, [], 0
    for name, t in state.items():
        if not t.is_floating_point():
            continue
        data = t.detach().to("cpu").contiguous().float().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rank_main(rank, args, cfg, batches, store):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    torch.set_num_threads(args.threads or int(get(cfg, "train.threads", 1)))
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=len(batches))
    x, y = load_train(cfg)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    torch.manual_seed(int(get(cfg, "experiment.seed", 1)))
    mod = load_module(cfg, args.config)
    net = mod.model(cfg)
    loss_fn = getattr(mod, "loss", None) or F.cross_entropy  # the module's own loss, as gradwire trains it
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=float(get(cfg, "train.lr", 0.05)),
                          momentum=float(get(cfg, "train.momentum", 0.9)),
                          nesterov=bool(get(cfg, "train.nesterov", False)),
                          weight_decay=float(get(cfg, "train.weight_decay", 0.0)))
    mine = batches[rank]
    t0 = None
    for step, samples in enumerate(mine):
        if step == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        idx = torch.tensor(samples, dtype=torch.int64)
        loss = loss_fn(ddp(x[idx]), y[idx])
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - t0 if t0 is not None else 0.0
    if rank == 0:
        if args.out:
            write_safetensors(args.out, net.state_dict())
        timed = len(mine) - min(args.warmup, len(mine))
        samples = timed * sum(len(b[0]) for b in batches)
        print(json.dumps({"steps": len(mine), "world": len(batches), "timed_steps": timed, "seconds": seconds,
                          "samples_per_s": samples / seconds if seconds > 0 else 0.0}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", help="the gradwire config (a run's config.toml)")
    ap.add_argument("batches", help="`gradwire batches` output for that config")
    ap.add_argument("--out", help="write rank 0's final state_dict here (safetensors)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per rank (default train.threads)")
    ap.add_argument("--warmup", type=int, default=0, help="steps before the timed ones")
    args = ap.parse_args()
    try:
        with open(args.config, "rb") as f:
            cfg = tomllib.load(f)
        check_supported(cfg, args.config)
        batches = read_batches(args.batches)
    except (OSError, ConfigError, tomllib.TOMLDecodeError) as e:
        sys.exit("ddp_baseline.py: %s" % e)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(args, cfg, batches, os.path.join(tmp, "store")), nprocs=len(batches), join=True)


if __name__ == "__main__":
    main()
