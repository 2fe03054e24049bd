#!/usr/bin/python3
"""PyTorch DDP side of bench/train_procs_vs_ddp.sh: MLP 784-256-128-10 on
Fashion-MNIST, batch 64 per process, SGD lr 0.05 momentum 0.9, one thread
per process, gloo over loopback, each rank its own shard. Rank 0 prints
samples_per_sec (aggregate over ranks) after a warm-up.

  /usr/bin/python3 bench/torch_ddp.py --procs 2 --steps 600

--env: one rank of a job started elsewhere (scripts/emulated_hosts.sh): rank
and size from GRADWIRE_RANK and GRADWIRE_SIZE, rank 0's address from
GRADWIRE_RENDEZVOUS (its port + 7), gloo on GLOO_SOCKET_IFNAME (eth0).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_train import load, mlp


def run(rank, world, steps, warmup, port, addr="127.0.0.1", ifname="lo"):
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    os.environ["GLOO_SOCKET_IFNAME"] = ifname
    torch.set_num_threads(1)
    torch.manual_seed(1)
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load(True)
    x, y = x[rank::world], y[rank::world]
    model = mlp()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = x.shape[0] // 64
    t0 = None
    for step in range(steps + warmup):
        if step == warmup:
            if world > 1:
                dist.barrier()
            t0 = time.perf_counter()
        i = step % n
        opt.zero_grad()
        F.cross_entropy(model(x[i * 64:(i + 1) * 64]), y[i * 64:(i + 1) * 64]).backward()
        opt.step()
    if world > 1:
        dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        print(f"procs={world} samples_per_sec={steps * 64 * world / secs:.1f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--env", action="store_true", help="one rank of a job started elsewhere (see above)")
    a = ap.parse_args()
    port = 29600 + os.getpid() % 1000
    if a.env:
        host, rv_port = os.environ["GRADWIRE_RENDEZVOUS"].rsplit(":", 1)
        run(int(os.environ["GRADWIRE_RANK"]), int(os.environ["GRADWIRE_SIZE"]), a.steps, a.warmup, int(rv_port) + 7,
            host, os.environ.get("GLOO_SOCKET_IFNAME", "eth0"))
    elif a.procs == 1:
        run(0, 1, a.steps, a.warmup, port)
    else:
        mp.spawn(run, args=(a.procs, a.steps, a.warmup, port), nprocs=a.procs)


if __name__ == "__main__":
    main()
