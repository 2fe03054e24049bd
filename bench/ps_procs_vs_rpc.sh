#!/usr/bin/env bash
# Asynchronous parameter server across local processes, gradwire vs a
# torch.distributed.rpc parameter server (TensorPipe), side by side: MLP
# 784-256-128-10, batch 64, 1 shard, 2 workers, one thread per process.
# gradwire: --procs 2 (the shard on rank 0 beside worker 0, pulls and
# pushes as requests over UCX); PyTorch: a server process and 2 workers
# (fetch parameters, compute, push the gradient). Prints the server's
# updates/s (applied gradients per second), medians over ROUNDS rounds:
# torch's as its server reports it when its rank 1 finishes, both workers
# still running, counted from the first push it receives; gradwire's the
# same way, from its shard's first push while both its workers run
# (bench/ps_rates.py), and over its whole job, whose start is before the
# first update and whose end is the worker away from the shard alone.
# torch rpc runs over TCP (TensorPipe's uv transport); gradwire runs twice:
# over UCX's shared memory, and over TCP only (transport.tls = "tcp", no
# shared-memory references), the same path as the peer.
#
#   bench/ps_procs_vs_rpc.sh [ROUNDS]    (needs python3-torch and a build in build/)
set -euo pipefail
shopt -s inherit_errexit # a run that fails inside $(...) stops the script
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
GW=${BUILD_DIR:-build}/gradwire
PY=/usr/bin/python3
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
G= W= C= CW= T=
gw_updates() { # extra --set args... -> "whole concurrent" updates/s
  "$GW" run examples/ps-async.toml --procs 2 -q --set topology.workers=2 --set topology.ps.shards=1 \
    --set train.max_steps=1000 --out "$tmp/gw" --force "$@" >/dev/null
  $PY bench/ps_rates.py "$tmp/gw"
}
torch_side() { T+="$(cd bench && $PY torch_rpc_ps.py --workers 2 --steps 300 2>/dev/null | sed -n 's/.*updates_per_sec=\([0-9.]*\).*/\1/p') "; }
# The side that goes first alternates (the VM runs slower for a while after a busy run).
for r in $(seq "$ROUNDS"); do
  ((r % 2)) || torch_side
  rates=$(gw_updates)
  W+="${rates% *} " G+="${rates#* } "
  rates=$(gw_updates --set 'transport.tls="tcp"' --set transport.shm_refs=false)
  CW+="${rates% *} " C+="${rates#* } "
  ((r % 2)) && torch_side
  echo "round $r/$ROUNDS done" >&2
done
m() { echo $1 | tr ' ' '\n' | median; }
g=$(m "$G"); gw=$(m "$W"); c=$(m "$C"); cw=$(m "$CW"); t=$(m "$T")
printf "updates/s while both workers run: gradwire %.0f, torch.distributed.rpc %.0f, ratio %.2fx (gradwire's whole job: %.0f, %.2fx)\n" \
  "$g" "$t" "$(echo "$g / $t" | bc -l)" "$gw" "$(echo "$gw / $t" | bc -l)"
printf "the same over TCP only: gradwire %.0f, ratio %.2fx (whole job: %.0f, %.2fx)\n" \
  "$c" "$(echo "$c / $t" | bc -l)" "$cw" "$(echo "$cw / $t" | bc -l)"
