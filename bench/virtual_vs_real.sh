#!/usr/bin/env bash
# Virtual time against real runs on this machine, side by side.
#
# Each case runs first on the machine's clock (in one process, or one
# process per worker with --procs), then on the virtual clock fed from that
# run: its compute model replays the real run's per-step compute times
# (train.log_every = 1), and its intra-host link has the latency at which a
# step's messages take the real run's mean exchange time (bandwidth
# unlimited: in one machine a message's cost is its hand-offs, not its
# bytes; a bandwidth fit put the cost on the wrong messages and SSP's
# staleness came out 47-92% high). Fitted: the real run's compute and mean
# exchange. Predicted: staleness (mean, p99) and the step time.
# A second virtual run of N = 4 uses the link fitted at N = 2: what the
# model predicts beyond the run it was fitted on.
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
# case: label, --set overrides, messages on a step's critical path (N: $n),
# and "held" where pulls held for the bound are not the links' time
cases=(
  "async PS|--set topology.kind=parameter-server --set topology.mode=async|2|"
  "SSP s=2|--set topology.kind=parameter-server --set topology.mode=ssp --set topology.staleness_bound=2|4|held"
  "ring|--set topology.kind=ring|2*(n-1)|"
  "AD-PSGD|--set topology.kind=gossip --set topology.gossip=adpsgd --set topology.graph=complete|2|"
)
for where in inproc procs; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name sets hops held <<<"$c"
    declare -A fitted=()
    for n in 2 4; do
      label="$name N=$n $([[ $where == procs ]] && echo "$n processes" || echo "1 process")"
      # shellcheck disable=SC2206
      args=($sets --set topology.workers=$n)
      procs=()
      [[ $where == procs ]] && procs=(--procs "$n")
      real=$tmp/real-$where-${name// /_}-$n
      "$GW" run "$tmp/base.toml" -q --no-report --out "$real" "${args[@]}" "${procs[@]}" >/dev/null
      lat=$(python3 $py calibrate "$real" "$(( ${hops//n/$n} ))" $held)
      fitted[$n]=$lat
      virt=$tmp/virt-$where-${name// /_}-$n
      "$GW" run "$tmp/base.toml" -q --no-report --out "$virt" "${args[@]}" --set experiment.clock=virtual \
        --set virtual.replay="$real/metrics.jsonl" --set virtual.intra_latency_us="$lat" >/dev/null
      python3 $py row "$label, latency fitted here ($lat us)" "$real" "$virt"
      if [[ $n == 4 ]]; then
        pred=$tmp/pred-$where-${name// /_}
        "$GW" run "$tmp/base.toml" -q --no-report --out "$pred" "${args[@]}" --set experiment.clock=virtual \
          --set virtual.replay="$real/metrics.jsonl" --set virtual.intra_latency_us="${fitted[2]}" >/dev/null
        python3 $py row "$label, latency fitted at N=2 (${fitted[2]} us)" "$real" "$pred"
      fi
    done
  done
done
