#!/usr/bin/env bash
# Data-parallel training across 2 emulated hosts (scripts/emulated_hosts.sh:
# each its own network, hostname, IPC and /dev/shm, joined by veth pairs
# and a bridge), gradwire vs PyTorch DDP (gloo), side by side in one run:
# MLP 784-256-128-10 on Fashion-MNIST, batch 64 per worker, SGD lr 0.05
# momentum 0.9, one thread per process. gradwire: the sync ring of
# examples/ring.toml, one rank per host, its buckets summed by the job's
# collective communicator (topology.ring.allreduce = "auto" across hosts: TCP
# lanes), and again by the ring of actors (topology.ring.allreduce = "actors",
# UCX's TCP); DDP: bench/torch_ddp.py --env, gloo on the hosts' eth0.
# Scaling efficiency is (throughput_2 / 2) / throughput_1, against one
# process on this machine; medians over ROUNDS interleaved rounds.
#
#   sudo bench/hosts_train_vs_ddp.sh [ROUNDS]   (root; python3-torch; a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
source bench/hosts_peer.sh
STEPS=600
gw_args=(run examples/ring.toml -q --no-report --set train.max_steps=$STEPS --set train.eval_every=1000)
declare -A G T A eff
for r in $(seq "$ROUNDS"); do
  "$GW" "${gw_args[@]}" --set topology.workers=1 --out "$tmp/g1-$r" >/dev/null
  G[1]+="$($PY -c "import json; print(json.load(open('$tmp/g1-$r/summary.json'))['samples_per_sec'])") "
  mkdir -p "$tmp/logs-g$r"
  GW_HOSTS_LOG=$tmp/logs-g$r scripts/emulated_hosts.sh 2 -- "$GW" "${gw_args[@]}" --set topology.workers=2 \
    --out "$tmp/g2-$r" || { cat "$tmp/logs-g$r"/*; exit 1; }
  G[2]+="$($PY -c "import json; print(json.load(open('$tmp/g2-$r/summary.json'))['samples_per_sec'])") "
  GW_HOSTS_LOG=$tmp/logs-g$r scripts/emulated_hosts.sh 2 -- "$GW" "${gw_args[@]}" --set topology.workers=2 \
    --set 'topology.ring.allreduce="actors"' --out "$tmp/a2-$r" || { cat "$tmp/logs-g$r"/*; exit 1; }
  A[2]+="$($PY -c "import json; print(json.load(open('$tmp/a2-$r/summary.json'))['samples_per_sec'])") "
  T[1]+="$(cd bench && $PY torch_ddp.py --procs 1 --steps $STEPS | sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p') "
  mkdir -p "$tmp/logs-t$r"
  (cd bench && GW_HOSTS_LOG=$tmp/logs-t$r ../scripts/emulated_hosts.sh 2 -- $PY torch_ddp.py --env --steps $STEPS) ||
    { cat "$tmp/logs-t$r"/*; exit 1; }
  T[2]+="$(sed -n 's/.*samples_per_sec=\([0-9.]*\).*/\1/p' "$tmp/logs-t$r/rank-0.txt") "
  echo "round $r/$ROUNDS done" >&2
done
printf "%-10s %12s %16s %12s\n" "" "1 process" "2 hosts (TCP)" "efficiency"
for side in gradwire gw-actors ddp; do
  case $side in
    gradwire) a=${G[1]}; b=${G[2]} ;;
    gw-actors) a=${G[1]}; b=${A[2]} ;;
    *) a=${T[1]}; b=${T[2]} ;;
  esac
  m1=$(echo $a | tr ' ' '\n' | median); m2=$(echo $b | tr ' ' '\n' | median)
  eff[$side]=$(echo "$m2 / 2 / $m1 * 100" | bc -l)
  printf "%-10s %12.0f %16.0f %11.1f%%\n" $side "$m1" "$m2" "${eff[$side]}"
done
printf "efficiency ratio: gradwire / ddp %.2f, collective / actors %.2f\n" \
  "$(echo "${eff[gradwire]} / ${eff[ddp]}" | bc -l)" "$(echo "${eff[gradwire]} / ${eff[gw-actors]}" | bc -l)"
