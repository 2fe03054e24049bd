#!/usr/bin/env bash
# What experiment.record costs an async parameter server and AD-PSGD, two ways:
#  - directly: gradwire-bench-record times a shard's recording of an update
#    (a pull answered and a push applied, the apply written at once), and
#    the script sets it against the run's step time and each shard's
#    update rate (the share of a shard's time it takes); and an AD-PSGD
#    store's recording of a step (read, send, a neighbour's average, apply);
#  - end to end: examples/ps-async.toml (4 workers, 2 shards, one process)
#    and examples/gossip-adpsgd.toml (4 workers, one 3x slow) with
#    experiment.record on and off, alternating over ROUNDS rounds (this VM
#    drifts), median step times compared. The goal: under 1% of step time,
#    or the record goes off by default.
#
#   bench/record_cost.sh [ROUNDS] [STEPS]   (a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
STEPS=${2:-1500}
B=${BUILD_DIR:-build}
[[ -x $B/gradwire && -x $B/gradwire-bench-record ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
step_s() { /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['train_seconds'] / s['steps_per_worker'])" "$1"; }

# medians CONFIG: alternating record on and off over ROUNDS rounds, the
# median step times "on off" (each round's figures to stderr).
medians() {
  local on="" off="" name
  name=$(basename "$1" .toml)
  for round in $(seq 1 "$ROUNDS"); do
    for rec in true false; do
      out="$tmp/$name-r$round-$rec"
      "$B/gradwire" run "$1" -q --no-report --out "$out" --set train.max_steps="$STEPS" --set train.epochs=100 \
        --set train.eval=\"after\" --set experiment.trace=false --set experiment.record=$rec >/dev/null
      if [[ $rec == true ]]; then on+="$(step_s "$out/summary.json") "; else off+="$(step_s "$out/summary.json") "; fi
    done
    echo "$name: round $round/$ROUNDS done (on: $on; off: $off)" >&2
  done
  echo "$(echo $on | tr ' ' '\n' | median) $(echo $off | tr ' ' '\n' | median)"
}

read -r t_on t_off < <(medians examples/ps-async.toml)
last="$tmp/ps-async-r$ROUNDS-true/summary.json"
per_update_ns=$("$B/gradwire-bench-record" "$tmp" 200000 4 | tee /dev/stderr | sed -E 's/.* ([0-9.]+) ns per update.*/\1/')
echo "# experiment.record: examples/ps-async.toml (4 workers, 2 shards, one process), $STEPS steps, $ROUNDS rounds (medians)"
printf "step time, record off: %.3f ms\n" "$(echo "$t_off * 1000" | bc -l)"
printf "step time, record on:  %.3f ms\n" "$(echo "$t_on * 1000" | bc -l)"
printf "end to end: on / off = %.4f (each round's figures above: the spread is wider than the difference)\n" \
  "$(echo "$t_on / $t_off" | bc -l)"
/usr/bin/python3 - "$last" "$per_update_ns" "$t_on" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); ns = float(sys.argv[2]); step = float(sys.argv[3])
r = s["record"]; shards = r["files"]
rate = r["updates"] / shards / s["train_seconds"]  # updates a second at one shard
print(f"record: {r['bytes_per_update']:.2f} bytes per update, {r['updates']} updates in {r['bytes']} bytes")
print(f"directly: {ns:.0f} ns per update = {100 * ns * 1e-9 / step:.3f}% of a worker's step "
      f"(one update at each shard, the shards in parallel); {100 * ns * 1e-9 * rate:.3f}% of each shard's time "
      f"at its {rate:.0f} updates/s (goal: under 1%)")
PY

# AD-PSGD: each worker's store records its own step's events.
read -r a_on a_off < <(medians examples/gossip-adpsgd.toml)
last="$tmp/gossip-adpsgd-r$ROUNDS-true/summary.json"
per_step_ns=$("$B/gradwire-bench-record" "$tmp" 200000 4 mixer | tee /dev/stderr | sed -E 's/.* ([0-9.]+) ns per step.*/\1/')
echo "# experiment.record: examples/gossip-adpsgd.toml (AD-PSGD, 4 workers, one 3x slow, one process), $STEPS steps (medians)"
printf "step time, record off: %.3f ms; on: %.3f ms; on / off = %.4f\n" "$(echo "$a_off * 1000" | bc -l)" \
  "$(echo "$a_on * 1000" | bc -l)" "$(echo "$a_on / $a_off" | bc -l)"
/usr/bin/python3 - "$last" "$per_step_ns" "$a_on" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); ns = float(sys.argv[2]); step = float(sys.argv[3])
r = s["record"]
print(f"record: {r['bytes_per_update']:.2f} bytes per step (headers included), {r['updates']} steps in {r['bytes']} bytes")
print(f"directly: {ns:.0f} ns per step = {100 * ns * 1e-9 / step:.3f}% of a worker's step (goal: under 1%)")
PY
