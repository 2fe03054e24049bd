#!/usr/bin/env bash
# Virtual time against real runs on this machine, side by side.
#
# Each case runs first on the machine's clock (in one process, or one
# process per worker with --procs), then on the virtual clock fed from that
# run: its compute model replays the real run's per-step compute times
# (train.log_every = 1). In one process its host has this machine's cores
# (virtual.cores_per_host = nproc): CAF runs that many actors at a time,
# each handler to its end, so a worker's computation holds a core and the
# other actors wait for one, first come first served, as the model does.
# Across processes the kernel time-slices them instead: the replayed
# compute times already hold the sharing (4 processes on 2 cores measure
# 2.0-2.3 ms a step where one process measures 1.4), so cores are not
# limited again (cores_per_host = 0). Its intra-host link has the latency at which the
# virtual run's mean step time is the real run's (found by bisection;
# bandwidth unlimited: in one machine a message's cost is its hand-offs,
# not its bytes). Fitted: the real run's compute and its step time.
# Predicted: staleness (mean, p99). A second virtual run of N = 4 uses the
# latency fitted at N = 2: what the model predicts beyond the run it was
# fitted on, step time included.
#
#   bench/virtual_vs_real.sh [build] [STEPS]   (a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-300}
GW=$BUILD/gradwire
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/base.toml" <<TOML
[experiment]
name = "virtual-vs-real"
trace = false
[topology]
kind = "parameter-server"
[train]
epochs = 100
max_steps = $STEPS
batch_size = 64
lr = 0.02
momentum = 0.0
log_every = 1
eval_every = 1000
TOML
py=bench/virtual_vs_real.py
echo "# virtual time vs real runs: MLP, batch 64, $STEPS steps per worker, $(date -u +%F), $(nproc) cores"
echo "| case | real mean staleness | virtual | error | real p99 | virtual p99 | real step ms | virtual step ms | error |"
echo "|---|---|---|---|---|---|---|---|---|"
# case: label, --set overrides, and the messages on a step's critical path
# (N: $n; they bound the latency search)
cases=(
  "async PS|--set topology.kind=parameter-server --set topology.mode=async|2"
  "SSP s=2|--set topology.kind=parameter-server --set topology.mode=ssp --set topology.staleness_bound=2|4"
  "ring|--set topology.kind=ring|2*(n-1)"
  "AD-PSGD|--set topology.kind=gossip --set topology.gossip=adpsgd --set topology.graph=complete|2"
)
cores=$(nproc)
for where in inproc procs; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name sets hops <<<"$c"
    declare -A fitted=()
    for n in 2 4; do
      label="$name N=$n $([[ $where == procs ]] && echo "$n processes" || echo "1 process")"
      # shellcheck disable=SC2206
      args=($sets --set topology.workers=$n)
      procs=()
      [[ $where == procs ]] && procs=(--procs "$n")
      real=$tmp/real-$where-${name// /_}-$n
      "$GW" run "$tmp/base.toml" -q --no-report --out "$real" "${args[@]}" "${procs[@]}" >/dev/null
      virtual=("$GW" run "$tmp/base.toml" -q --no-report "${args[@]}" --set experiment.clock=virtual
               --set virtual.replay="$real/metrics.jsonl"
               --set virtual.cores_per_host="$([[ $where == procs ]] && echo 0 || echo "$cores")")
      virt=$tmp/virt-$where-${name// /_}-$n
      lat=$(python3 $py fit "$real" "$virt" "$(( ${hops//n/$n} ))" "${virtual[@]}")
      fitted[$n]=$lat
      python3 $py row "$label, latency fitted here ($lat us)" "$real" "$virt"
      if [[ $n == 4 ]]; then
        pred=$tmp/pred-$where-${name// /_}
        "${virtual[@]}" --out "$pred" --set virtual.intra_latency_us="${fitted[2]}" >/dev/null
        python3 $py row "$label, latency fitted at N=2 (${fitted[2]} us)" "$real" "$pred"
      fi
    done
  done
done
