#!/usr/bin/python3
"""gloo's all_reduce (PyTorch), the peer of gradwire bench allreduce across
emulated hosts (bench/hosts_allreduce_vs_gloo.sh): one rank of a job
started by scripts/emulated_hosts.sh, rank and size from GRADWIRE_RANK and
GRADWIRE_SIZE, rank 0's address from GRADWIRE_RENDEZVOUS (its port + 9),
gloo on GLOO_SOCKET_IFNAME (eth0). Sizes from -b to -e bytes by -f, float32
sums in place (MPI semantics, as the peer), each the mean of -n timed
rounds after -w warm-up ones; rank 0 prints one line per size:
  size_bytes time_us busbw_GBps ok|WRONG
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-b", type=int, default=1024)
    ap.add_argument("-e", type=int, default=16 << 20)
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    a = ap.parse_args()
    rank, world = int(os.environ["GRADWIRE_RANK"]), int(os.environ["GRADWIRE_SIZE"])
    host, port = os.environ["GRADWIRE_RENDEZVOUS"].rsplit(":", 1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = host, str(int(port) + 9)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    size = a.b
    while size <= a.e:
        n = size // 4
        x = torch.full((n,), float(rank + 1))
        for _ in range(a.w):
            dist.all_reduce(x)
        dist.barrier()
        total = 0.0
        for _ in range(a.n):
            x.fill_(float(rank + 1))
            t0 = time.perf_counter()
            dist.all_reduce(x)
            total += time.perf_counter() - t0
        ok = bool((x == world * (world + 1) / 2).all())
        secs = total / a.n
        busbw = size / secs * 2 * (world - 1) / world / 1e9
        if rank == 0:
            print(f"{size} {secs * 1e6:.1f} {busbw:.3f} {'ok' if ok else 'WRONG'}", flush=True)
        size *= a.f
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
