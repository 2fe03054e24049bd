#!/usr/bin/env bash
# Asynchronous parameter server across local processes, gradwire vs a
# torch.distributed.rpc parameter server (TensorPipe), side by side: MLP
# 784-256-128-10, batch 64, 1 shard, 2 workers, one thread per process.
# gradwire: --procs 2 (the shard on rank 0 beside worker 0, pulls and
# pushes as requests over UCX); PyTorch: a server process and 2 workers
# (fetch parameters, compute, push the gradient). Prints the server's
# updates/s (applied gradients per second), medians over ROUNDS rounds.
# torch rpc runs over TCP (TensorPipe's uv transport); gradwire runs twice:
# over UCX's shared memory, and over TCP only (transport.tls = "tcp", no
# shared-memory references), the same path as the peer.
#
#   bench/ps_procs_vs_rpc.sh [ROUNDS]    (needs python3-torch and a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
GW=${BUILD_DIR:-build}/gradwire
PY=/usr/bin/python3
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
G= C= T=
gw_updates() { # extra --set args... -> updates/s
  "$GW" run examples/ps-async.toml --procs 2 -q --set topology.workers=2 --set topology.shards=1 \
    --set train.max_steps=1000 --out "$tmp/gw" --force "$@" >/dev/null
  $PY -c "import json; s=json.load(open('$tmp/gw/summary.json')); print(sum(w['steps'] for w in s['per_worker']) / s['train_seconds'])"
}
torch_side() { T+="$(cd bench && $PY torch_rpc_ps.py --workers 2 --steps 300 2>/dev/null | sed -n 's/.*updates_per_sec=\([0-9.]*\).*/\1/p') "; }
# The side that goes first alternates (the VM runs slower for a while after a busy run).
for r in $(seq "$ROUNDS"); do
  ((r % 2)) || torch_side
  G+="$(gw_updates) "
  C+="$(gw_updates --set 'transport.tls="tcp"' --set transport.shm_refs=false) "
  ((r % 2)) && torch_side
  echo "round $r/$ROUNDS done" >&2
done
g=$(echo $G | tr ' ' '\n' | median); c=$(echo $C | tr ' ' '\n' | median); t=$(echo $T | tr ' ' '\n' | median)
printf "updates/s: gradwire %.0f, torch.distributed.rpc %.0f, ratio %.2fx\n" "$g" "$t" "$(echo "$g / $t" | bc -l)"
printf "updates/s over TCP only: gradwire %.0f, torch.distributed.rpc %.0f, ratio %.2fx\n" "$c" "$t" "$(echo "$c / $t" | bc -l)"
