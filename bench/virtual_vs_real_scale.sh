#!/usr/bin/env bash
# Virtual time's predictions against real runs at N = 8 and 16 processes.
#
# On a 2-core machine 16 processes cannot each have a core, so the steps
# are made delay-dominated, as on nodes of their own: a small MLP (one
# hidden layer of 32) whose batch computes in well under a millisecond,
# and [[nodes]] delays (half the workers DELAY ms a step, half 1.5 x
# DELAY, each plus a uniform jitter of DELAY / 2 drawn from the worker's
# seeded stream, the same draws in both clocks). The real processes mostly
# sleep, as they would wait on their own nodes.
#
# The model is fitted once, on a real run of 2 processes (the parameter
# server across processes, virtual_vs_real.py fit, "process-hosts"): its
# shard's update time (from its trace) and the link latency at which its
# step time is matched. A batch's compute time is measured on this machine
# (virtual.step_ms = 0), and the nodes' delays and jitter are added to it
# as in the real run (a real run's compute_ms holds its delays: replayed,
# they would count twice). Nothing is fitted
# at 8 or 16: each virtual run there is a prediction. Each N runs ROUNDS
# real runs; the table gives their mean (and spread) against the one
# prediction, for mean staleness, step time and the time to TARGET test
# accuracy (worker 0's snapshots every 10 steps, evaluated during the run
# at the time each was taken).
#
#   bench/virtual_vs_real_scale.sh [STEPS] [ROUNDS]   (a build in build/; defaults 300 3)
#   MODE=ssp DELAY=20 TARGET=0.70 bench/virtual_vs_real_scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-300}
ROUNDS=${2:-3}
MODE=${MODE:-async}
DELAY=${DELAY:-20}
TARGET=${TARGET:-0.70}
GW=${BUILD_DIR:-build}/gradwire
py=bench/virtual_vs_real.py
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

config() { # N -> the config for N workers
  local n=$1 half=$(($1 / 2))
  cat <<TOML
[experiment]
name = "virtual-vs-real-scale"
trace = false
[model]
kind = "mlp"
hidden = [32]
[data]
test_subset = 2000
[topology]
kind = "parameter-server"
workers = $n

[topology.ps]
mode = "$MODE"
staleness_bound = 2
[train]
epochs = 100
max_steps = $STEPS
batch_size = 32
lr = 0.05
momentum = 0.0
log_every = 1
eval = "during"
eval_steps = 10
target_accuracy = $TARGET
[[nodes]]
count = $half
delay_ms = $DELAY
jitter_ms = $(python3 -c "print($DELAY / 2)")
[[nodes]]
count = $((n - half))
delay_ms = $(python3 -c "print($DELAY * 1.5)")
jitter_ms = $(python3 -c "print($DELAY / 2)")
TOML
}

virtual_of() { # N REAL_DIR_FITTED -> the virtual run's command (without --out)
  echo "$GW" run "$tmp/n$1.toml" -q --no-report --set experiment.clock=virtual \
    --set virtual.apply_gbps="$(python3 $py apply "$2")" \
    --set virtual.hosts="$1" --set virtual.workers_per_host=1 --set virtual.nic=false
}

for n in 2 8 16; do config "$n" >"$tmp/n$n.toml"; done
"$GW" run "$tmp/n2.toml" -q --no-report --procs 2 --out "$tmp/fit-real" --set experiment.trace=true >/dev/null
# shellcheck disable=SC2207
fit_cmd=($(virtual_of 2 "$tmp/fit-real"))
lat=$(python3 $py fit "$tmp/fit-real" "$tmp/fit-virtual" 2 process-hosts "${fit_cmd[@]}")
sets=()
for o in $lat; do sets+=(--set "$o"); done

echo "# virtual time's predictions, $MODE PS, MLP 784-32-10, batch 32, $STEPS steps, delays $DELAY / $(python3 -c "print($DELAY * 1.5)") ms + jitter, $ROUNDS real rounds, $(date -u +%F), $(nproc) cores"
echo "fitted at N = 2 processes: ${lat//transport./}, apply $(python3 $py apply "$tmp/fit-real") GB/s"
echo
echo "| case | real mean staleness | predicted | error | real step ms | predicted | error | real s to $TARGET | predicted | error |"
echo "|---|---|---|---|---|---|---|---|---|---|"
python3 $py predicted "N=2 (the fit)" "$tmp/fit-real" "$tmp/fit-virtual"
for n in 8 16; do
  reals=""
  for round in $(seq 1 "$ROUNDS"); do
    "$GW" run "$tmp/n$n.toml" -q --no-report --procs "$n" --out "$tmp/real-$n-$round" >/dev/null
    reals+=${reals:+,}$tmp/real-$n-$round
  done
  # shellcheck disable=SC2207
  cmd=($(virtual_of "$n" "$tmp/fit-real"))
  "${cmd[@]}" "${sets[@]}" --out "$tmp/virtual-$n" >/dev/null
  python3 $py predicted "N=$n processes" "$reals" "$tmp/virtual-$n"
done
