#!/usr/bin/env bash
# What checkpoints cost a step: a 2-process ring (MLP on Fashion-MNIST,
# batch 64 per worker, --procs 2) with train.checkpoint_every = 100 against
# the same run without checkpoints, alternating over ROUNDS rounds (this VM
# drifts), medians compared. Each checkpoint copies every worker's
# replica and optimizer state at a step boundary (the only part a step
# waits for) and is persisted by a background thread on rank 0: part
# files, fsync, MANIFEST.json last.
#
#   bench/checkpoint_overhead.sh [ROUNDS] [EPOCHS]   (a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
EPOCHS=${2:-2}
GW=${BUILD_DIR:-build}/gradwire
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# Seconds per step (train_seconds / steps per worker), and what was persisted.
step_s() { /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['train_seconds'] / s['steps_per_worker'])" "$1"; }

none="" every="" direct=""
for round in $(seq 1 "$ROUNDS"); do
  for k in 0 100; do
    out="$tmp/r$round-$k"
    "$GW" run examples/ring.toml --procs 2 -q --no-report --out "$out" --set train.epochs="$EPOCHS" \
      --set train.eval=\"after\" --set train.checkpoint_every=$k >/dev/null
    if [[ $k == 0 ]]; then none+="$(step_s "$out/summary.json") "; else every+="$(step_s "$out/summary.json") "; fi
    [[ $k == 100 ]] && info=$(/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['checkpoints']; print(s['written'], s['persist_seconds'])" "$out/summary.json")
    # What the workers' steps paid directly: the snapshot spans in trace.json, per step.
    [[ $k == 100 ]] && direct+="$(/usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1] + '/trace.json')); s = json.load(open(sys.argv[1] + '/summary.json'))
snap = sum(e['dur'] for e in d['traceEvents'] if e.get('name') == 'snapshot') * 1e-6 / 2  # per worker
print(snap / s['train_seconds'])" "$out") "
  done
  echo "round $round/$ROUNDS done" >&2
done
t0=$(echo $none | tr ' ' '\n' | median)
t1=$(echo $every | tr ' ' '\n' | median)
part=$(du -b "$out"/checkpoints/*/part-worker-0.gwc | tail -1 | cut -f1)
read -r written persist <<<"$info"
echo "# checkpoint overhead: 2-process ring, MLP, batch 64 per worker, $EPOCHS epochs, $ROUNDS rounds (medians)"
printf "step time without checkpoints:   %.3f ms  (rounds: %s)\n" "$(echo "$t0 * 1000" | bc -l)" "$none"
printf "step time, checkpoint_every=100: %.3f ms  (rounds: %s)\n" "$(echo "$t1 * 1000" | bc -l)" "$every"
printf "end to end: %+.2f%% of step time (the rounds' spread is wider than this: see them above)\n" "$(echo "($t1 / $t0 - 1) * 100" | bc -l)"
printf "paid by the steps directly (snapshot copies, trace.json): %.3f%% of training time (median; goal: at most 3.5%%)\n" \
  "$(echo "$(echo $direct | tr ' ' '\n' | median) * 100" | bc -l)"
printf "last run: %s checkpoints of 2 parts x %s bytes, persisted in %.3f s on rank 0's background thread\n" \
  "$written" "$part" "$persist"
