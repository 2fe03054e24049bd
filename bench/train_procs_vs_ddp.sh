#!/usr/bin/env bash
# Data-parallel training across local processes, gradwire vs PyTorch DDP
# (gloo), side by side in one run: MLP 784-256-128-10 on Fashion-MNIST,
# batch 64 per worker, SGD lr 0.05 momentum 0.9, one thread per process.
# gradwire runs examples/ring.toml with --procs 1 (one worker) and
# --procs 2 (the sync ring over UCX shared memory); DDP with 1 and 2
# processes. Prints aggregate samples/s and the scaling efficiency
# (throughput_2 / 2) / throughput_1 of each, medians over ROUNDS
# interleaved rounds (this VM drifts). A third line runs two independent
# 1-worker gradwire processes at once (no exchange, no synchronisation):
# the machine's own ceiling for 2 processes (shared caches and memory
# bandwidth, the host's other tenants), against which the ring's
# efficiency is read. Both sides train only: no test-set evaluation during
# the run (torch_ddp.py has none; gradwire's, on rank 0's coordinator
# thread, took a CPU from a worker for ~55 ms of a ~600 ms run here, while
# one process has a spare CPU for it). A fourth line runs gradwire's
# 2 processes over TCP only (transport.tls = "tcp", every byte copied, no
# shared-memory references): the path DDP's gloo takes, its TCP over
# loopback; "auto" sums there through the collective communicator's own
# TCP lanes, and a fifth line runs the same over the ring of actors
# (topology.ring.allreduce = "actors", UCX's TCP) for the ratio. A sixth sums
# the 2 processes' buckets through the communicator on shared memory
# (topology.ring.allreduce = "collective") instead of the ring of actors that
# "auto" takes on one host.
#
#   bench/train_procs_vs_ddp.sh [ROUNDS]    (needs python3-torch and a build in build/)
set -euo pipefail
shopt -s inherit_errexit # a run that fails inside $(...) stops the script
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
GW=${BUILD_DIR:-build}/gradwire
PY=/usr/bin/python3
STEPS=600
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
gw_run() { # procs [tag] -> samples/s (training only, from summary.json); tag "tcp": TCP only; "coll": the communicator
  local out
  out=$(mktemp -d -p "$tmp") # a fresh folder each run: gradwire never overwrites one
  local args=(run examples/ring.toml -q --set train.max_steps=$STEPS --set train.eval_every=1000
              --set topology.workers=$1 --out "$out")
  [[ $1 -gt 1 ]] && args+=(--procs $1)
  [[ ${2:-} == tcp* ]] && args+=(--set 'transport.tls="tcp"' --set transport.shm_refs=false)
  [[ ${2:-} == tcpact ]] && args+=(--set 'topology.ring.allreduce="actors"')
  [[ ${2:-} == coll ]] && args+=(--set 'topology.ring.allreduce="collective"')
  "$GW" "${args[@]}" >/dev/null
  $PY -c "import json; print(json.load(open('$out/summary.json'))['samples_per_sec'])"
}
gw_pair() { # two independent 1-worker processes at once -> their aggregate samples/s
  gw_run 1 >"$tmp/pa" &
  gw_run 1 >"$tmp/pb"
  wait $!
  echo "$(cat "$tmp/pa") + $(cat "$tmp/pb")" | bc -l
}
declare -A G T
I= C= K= A=
for r in $(seq "$ROUNDS"); do
  for p in 1 2; do
    G[$p]+="$(gw_run $p) "
    T[$p]+="$(cd bench && $PY torch_ddp.py --procs $p --steps $STEPS | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p') "
  done
  I+="$(gw_pair) "
  C+="$(gw_run 2 tcp) "
  A+="$(gw_run 2 tcpact) "
  K+="$(gw_run 2 coll) "
  echo "round $r/$ROUNDS done" >&2
done
printf "%-10s %12s %12s %12s\n" "" "1 process" "2 processes" "efficiency"
for side in gradwire ddp; do
  if [[ $side == gradwire ]]; then a=${G[1]}; b=${G[2]}; else a=${T[1]}; b=${T[2]}; fi
  m1=$(echo $a | tr ' ' '\n' | median); m2=$(echo $b | tr ' ' '\n' | median)
  printf "%-10s %12.0f %12.0f %11.1f%%\n" $side "$m1" "$m2" "$(echo "$m2 / 2 / $m1 * 100" | bc -l)"
done
m1=$(echo ${G[1]} | tr ' ' '\n' | median); mi=$(echo $I | tr ' ' '\n' | median)
printf "%-10s %12.0f %12.0f %11.1f%%   (2 independent 1-worker processes at once: this machine's ceiling)\n" \
  independent "$m1" "$mi" "$(echo "$mi / 2 / $m1 * 100" | bc -l)"
mc=$(echo $C | tr ' ' '\n' | median)
printf "%-10s %12.0f %12.0f %11.1f%%   (gradwire over TCP only, every byte copied: gloo's path; auto: the communicator's lanes)\n" \
  "gw tcp" "$m1" "$mc" "$(echo "$mc / 2 / $m1 * 100" | bc -l)"
ma=$(echo $A | tr ' ' '\n' | median)
printf "%-10s %12.0f %12.0f %11.1f%%   (the same over the ring of actors, UCX's TCP: lanes / actors %.2f)\n" \
  "gw tcp act" "$m1" "$ma" "$(echo "$ma / 2 / $m1 * 100" | bc -l)" "$(echo "$mc / $ma" | bc -l)"
mk=$(echo $K | tr ' ' '\n' | median); mg=$(echo ${G[2]} | tr ' ' '\n' | median)
printf "%-10s %12.0f %12.0f %11.1f%%   (buckets summed by the collective communicator, shared memory: actors' ring / it %.2f)\n" \
  "gw coll" "$m1" "$mk" "$(echo "$mk / 2 / $m1 * 100" | bc -l)" "$(echo "$mg / $mk" | bc -l)"
