#!/usr/bin/python3
"""PyTorch side of bench/ps_procs_vs_rpc.sh: an asynchronous parameter
server over torch.distributed.rpc (TensorPipe), 1 server + N workers, MLP
784-256-128-10, batch 64, SGD lr 0.05 momentum 0.9 on the server, one
thread per process. Each worker loops: fetch parameters, compute a
gradient on its shard, push it (the server applies it at once). Prints the
server's updates/s.

  /usr/bin/python3 bench/torch_rpc_ps.py --workers 2 --steps 300
"""
import argparse
import os
import threading
import time

import torch
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_train import load, mlp


class Server:
    def __init__(self):
        torch.manual_seed(1)
        self.model = mlp()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.lock = threading.Lock()
        self.updates = 0
        self.t0 = None

    def params(self):
        with self.lock:
            return [p.detach().clone() for p in self.model.parameters()]

    def push(self, grads):
        with self.lock:
            if self.t0 is None:
                self.t0 = time.perf_counter()
            for p, g in zip(self.model.parameters(), grads):
                p.grad = g
            self.opt.step()
            self.updates += 1

    def rate(self):
        with self.lock:
            return self.updates / (time.perf_counter() - self.t0)


SERVER = None


def get_params():
    return SERVER.params()


def push(grads):
    SERVER.push(grads)


def rate():
    return SERVER.rate()


def run(rank, world, steps, port, addr="127.0.0.1"):
    global SERVER
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, _transports=["uv"])
    if rank == 0:
        SERVER = Server()
        rpc.init_rpc("server", rank=0, world_size=world, rpc_backend_options=opts)
    else:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world, rpc_backend_options=opts)
        x, y = load(True)
        x, y = x[rank - 1::world - 1], y[rank - 1::world - 1]
        model = mlp()
        n = x.shape[0] // 64
        for step in range(steps):
            for p, v in zip(model.parameters(), rpc.rpc_sync("server", get_params)):
                p.data.copy_(v)
            model.zero_grad()
            i = step % n
            F.cross_entropy(model(x[i * 64:(i + 1) * 64]), y[i * 64:(i + 1) * 64]).backward()
            rpc.rpc_sync("server", push, args=([p.grad for p in model.parameters()],))
        if rank == 1:
            print(f"updates_per_sec={rpc.rpc_sync('server', rate):.1f}", flush=True)
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--env", action="store_true",
                    help="one process of a job: rank, size and the server's host:port from GRADWIRE_RANK, "
                         "GRADWIRE_SIZE and GRADWIRE_RENDEZVOUS (scripts/emulated_hosts.sh); rank 0 serves; "
                         "gloo and TensorPipe on GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME (eth0)")
    a = ap.parse_args()
    if a.env:
        host, port = os.environ["GRADWIRE_RENDEZVOUS"].rsplit(":", 1)
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")  # rpc's own gloo group
        os.environ.setdefault("TP_SOCKET_IFNAME", "eth0")    # TensorPipe's uv transport
        run(int(os.environ["GRADWIRE_RANK"]), int(os.environ["GRADWIRE_SIZE"]), a.steps, int(port), host)
        return
    mp.spawn(run, args=(a.workers + 1, a.steps, 29700 + os.getpid() % 1000), nprocs=a.workers + 1)


if __name__ == "__main__":
    main()
