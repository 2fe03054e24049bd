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
# limited again (cores_per_host = 0).
# Links. In one process every message has one latency (intra-host; the
# bandwidth unlimited: in one machine a message's cost is its hand-offs,
# not its bytes). Across processes, for the parameter server, each process
# is a host: the other ranks' workers reach the shard on rank 0 across a
# link of latency L, and rank 0's worker reaches it in-process at r * L,
# with r from the real run (virtual_vs_real.py fit, "process-hosts"). A
# ring or gossip peer is a process of its own, with one latency to all.
# L is the latency at which the virtual run's mean step time is the real
# run's (bisection). A shard's update costs what the real run's trace says
# (virtual.apply_gbps, from its median `apply` span): a pull that arrives
# while the shard applies a push waits and reads the result, as in the real
# run. With COPY=1 a message's tensors also cost their sender a copy at
# this machine's memcpy speed (virtual.copy_gbps; by default copies are
# free: charging them changed nothing this VM resolves, RESULTS.md).
# Fitted: the real run's compute, its shard's update, rank 0's latency
# ratio and its step time.
# Predicted: staleness (mean, p99). A second virtual run of N = 4 uses the
# latencies fitted at N = 2: what the model predicts beyond the run it was
# fitted on, step time included. Each case runs ROUNDS times (a real run
# and its virtual runs): this VM's real runs vary by 10-20% in mean
# staleness from one to the next, so the table compares means over the
# rounds and gives the real runs' spread.
#
#   bench/virtual_vs_real.sh [build] [STEPS] [ROUNDS]   (a build in build/)
#   ONLY='SSP s=2 N=4 4 processes' bench/virtual_vs_real.sh ...   (the cases whose label matches)
#   COPY=1 bench/virtual_vs_real.sh ...   (copies charged at this machine's memcpy speed)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-300}
ROUNDS=${3:-3}
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
echo "# virtual time vs real runs: MLP, batch 64, $STEPS steps per worker, $ROUNDS rounds, $(date -u +%F), $(nproc) cores"
echo "| case | real mean staleness | virtual | error | real p99 | virtual p99 | real step ms | virtual step ms | error |"
echo "|---|---|---|---|---|---|---|---|---|"
# case: label, --set overrides, and the messages on a step's critical path
# (N: $n; they bound the latency search)
cases=(
  "async PS|--set topology.kind=parameter-server --set topology.ps.mode=async|2|ps"
  "SSP s=2|--set topology.kind=parameter-server --set topology.ps.mode=ssp --set topology.ps.staleness_bound=2|2|ps"
  "ring|--set topology.kind=ring|2*(n-1)|peers"
  "AD-PSGD|--set topology.kind=gossip --set topology.gossip.mode=adpsgd --set topology.gossip.graph=complete|2|peers"
)
cores=$(nproc)
declare -A fitted2=()
sets_of() { local o; for o in $1; do printf -- '--set\n%s\n' "$o"; done; } # "k=v k=v" -> --set k=v ...
for where in inproc procs; do
  for c in "${cases[@]}"; do
    IFS='|' read -r name sets hops kind <<<"$c"
    for n in 2 4; do
      label="$name N=$n $([[ $where == procs ]] && echo "$n processes" || echo "1 process")"
      [[ -n ${ONLY:-} && ! $label =~ $ONLY ]] && continue
      # shellcheck disable=SC2206
      args=($sets --set topology.workers=$n)
      procs=() model=one-host hosts=()
      if [[ $where == procs ]]; then
        procs=(--procs "$n")
        [[ $kind == ps ]] && model=process-hosts &&
          hosts=(--set virtual.hosts="$n" --set virtual.workers_per_host=1 --set virtual.nic=false)
      fi
      reals="" virts="" preds="" lats=""
      for round in $(seq 1 "$ROUNDS"); do
        id=$where-${name// /_}-$n-$round
        real=$tmp/real-$id
        "$GW" run "$tmp/base.toml" -q --no-report --out "$real" "${args[@]}" "${procs[@]}" --set experiment.trace=true >/dev/null
        virtual=("$GW" run "$tmp/base.toml" -q --no-report "${args[@]}" "${hosts[@]}" --set experiment.clock=virtual
                 --set virtual.replay="$real/metrics.jsonl" --set virtual.apply_gbps="$(python3 $py apply "$real")"
                 --set virtual.copy_gbps="$([[ -n ${COPY:-} ]] && python3 $py copy "$real" || echo 0)"
                 --set virtual.cores_per_host="$([[ $where == procs ]] && echo 0 || echo "$cores")")
        lat=$(python3 $py fit "$real" "$tmp/virt-$id" "$(( ${hops//n/$n} ))" $model "${virtual[@]}")
        [[ $n == 2 ]] && fitted2[$where-$name-$round]=$lat
        reals+=${reals:+,}$real virts+=${virts:+,}$tmp/virt-$id lats+="${lats:+; }${lat//virtual./}"
        if [[ $n == 4 && -n ${fitted2[$where-$name-$round]:-} ]]; then
          mapfile -t at2 < <(sets_of "${fitted2[$where-$name-$round]}")
          "${virtual[@]}" --out "$tmp/pred-$id" "${at2[@]}" >/dev/null
          preds+=${preds:+,}$tmp/pred-$id
        fi
      done
      python3 $py row "$label, fitted here (${lats//transport./})" "$reals" "$virts"
      [[ -n $preds ]] && python3 $py row "$label, latencies fitted at N=2" "$reals" "$preds"
    done
  done
done
