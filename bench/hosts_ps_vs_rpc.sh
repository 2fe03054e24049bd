#!/usr/bin/env bash
# Asynchronous parameter server across emulated hosts
# (scripts/emulated_hosts.sh: each its own network, hostname, IPC and
# /dev/shm, joined by veth pairs and a bridge), gradwire vs a
# torch.distributed.rpc parameter server, side by side, in the shape of
# bench/ps_procs_vs_rpc.sh: MLP 784-256-128-10, batch 64, 1 shard, 2
# workers, one thread per process. gradwire: 2 hosts, the shard on rank 0
# beside worker 0, pulls and pushes over the network (UCX over TCP);
# PyTorch: 3 hosts, a server and 2 workers (bench/torch_rpc_ps.py --env,
# TensorPipe over TCP on eth0). Prints the server's updates/s (applied
# gradients per second), medians over ROUNDS interleaved rounds: torch's
# as its server reports it when its rank 1 finishes, both workers still
# running, counted from the first push it receives; gradwire's the same
# way, from its shard's first push while both its workers run
# (bench/ps_rates.py: the worker beside the shard finishes first, and the
# remote one runs on alone), and over its whole job, from the start of
# training (connections, the first forward pass) to that tail's end.
#
#   sudo bench/hosts_ps_vs_rpc.sh [ROUNDS]   (root; python3-torch; a build in build/)
set -euo pipefail
shopt -s inherit_errexit # a run that fails inside $(...) stops the script
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
source bench/hosts_peer.sh
G= W= T=
gw_side() {
  mkdir -p "$tmp/g$r"
  GW_HOSTS_LOG=$tmp/g$r scripts/emulated_hosts.sh 2 -- "$GW" run examples/ps-async.toml -q --set topology.workers=2 \
    --set topology.ps.shards=1 --set train.max_steps=1000 --out "$tmp/g$r/out" || { cat "$tmp/g$r"/*.txt; exit 1; }
  $PY -c "import json; assert json.load(open('$tmp/g$r/out/summary.json'))['processes'] == 2"
  local rates whole concurrent
  rates=$($PY bench/ps_rates.py "$tmp/g$r/out")
  read -r whole concurrent <<<"$rates"
  G+="$concurrent "
  W+="$whole "
}
torch_side() {
  mkdir -p "$tmp/t$r"
  (cd bench && GW_HOSTS_LOG=$tmp/t$r ../scripts/emulated_hosts.sh 3 -- $PY torch_rpc_ps.py --env --steps 300) ||
    { cat "$tmp/t$r"/*; exit 1; }
  T+="$(sed -n 's/.*updates_per_sec=\([0-9.]*\).*/\1/p' "$tmp/t$r/rank-1.txt") "
}
# The side that goes first alternates: this VM runs slower for a while
# after a busy run (torch rpc's three busy-polling processes), and a fixed
# order hands that to the same side every round.
for r in $(seq "$ROUNDS"); do
  if ((r % 2)); then gw_side; torch_side; else torch_side; gw_side; fi
  echo "round $r/$ROUNDS done" >&2
done
g=$(echo $G | tr ' ' '\n' | median); w=$(echo $W | tr ' ' '\n' | median); t=$(echo $T | tr ' ' '\n' | median)
echo "rounds: gradwire $G(whole job: $W)/ torch rpc $T"
printf "updates/s across emulated hosts, while both workers run: gradwire %.0f, torch.distributed.rpc %.0f, ratio %.2fx\n" \
  "$g" "$t" "$(echo "$g / $t" | bc -l)"
printf "gradwire over its whole job (the remote worker alone at the end): %.0f, ratio %.2fx\n" "$w" "$(echo "$w / $t" | bc -l)"
