#!/usr/bin/python3
"""PyTorch side of bench/recovery_vs_torchrun.sh: DDP (gloo, loopback) of
the MLP 784-256-128-10 on Fashion-MNIST, batch 64 per process, SGD lr 0.05
momentum 0.9, started by `torchrun --max-restarts 1`. Rank 0 writes a
checkpoint (model, optimizer, step) every --every steps, atomically
(temporary file, rename). In the first attempt, rank --kill-rank kills
itself with SIGKILL after its step --kill-step; torchrun restarts every
worker, which load the last checkpoint and go on. Prints, from rank 0 of
the restarted attempt, the unix time of its first step after the restart
and the step it resumed at; the killed rank prints the time of the kill.

  torchrun --nproc_per_node 3 --max_restarts 1 bench/torch_elastic.py --dir D --steps 400
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from torch_train import load, mlp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--kill-rank", type=int, default=2)
    ap.add_argument("--kill-step", type=int, default=250)
    a = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    torch.set_num_threads(1)
    torch.manual_seed(1)
    dist.init_process_group("gloo")
    x, y = load(True)
    x, y = x[rank::world], y[rank::world]
    model = torch.nn.parallel.DistributedDataParallel(mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ckpt = os.path.join(a.dir, "checkpoint.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    n = x.shape[0] // 64
    for step in range(start, a.steps):
        i = step % n
        opt.zero_grad()
        F.cross_entropy(model(x[i * 64:(i + 1) * 64]), y[i * 64:(i + 1) * 64]).backward()
        opt.step()
        done = step + 1
        if attempt > 0 and rank == 0 and step == start:
            print(f"first_step_after_restart={time.time():.6f} resumed_at={start}", flush=True)
        if rank == 0 and done % a.every == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": done}, tmp)
            os.replace(tmp, ckpt)
        if attempt == 0 and rank == a.kill_rank and done == a.kill_step:
            print(f"killed_at={time.time():.6f} step={done}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    if rank == 0:
        print(f"finished={time.time():.6f}", flush=True)


if __name__ == "__main__":
    main()
