#!/usr/bin/env bash
# What a parameter-server rule written in Python (topology.ps.rule) costs
# against the same rule built in: examples/study-staleness-scale.toml's
# "async + staleness lr" point (virtual time, 4 shards, two epochs of
# Fashion-MNIST) at each worker count, once with topology.ps.staleness_lr and
# once with tests/scheduler/rules/staleness_lr.py:StalenessLR, alternating
# over ROUNDS rounds. Prints, per count: the wall seconds of each (median),
# their ratio, the rule calls (pushes to all shards), the extra
# microseconds per push, the test accuracy of each, and whether the two
# models are the same bytes (virtual time is one order of pushes).
#
#   bench/python_rule_cost.sh [ROUNDS] [WORKERS...]   (a build in build/ with the torch plug-in)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
shift || true
COUNTS=("${@:-16 1024}")
read -r -a COUNTS <<< "${COUNTS[*]}"
B=${BUILD_DIR:-build}
[[ -x $B/gradwire ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
if "$B/gradwire" info | grep -q "torch models: unavailable"; then
  echo "this build has no torch plug-in, whose Python runs the rule (scripts/setup.sh --test, then rebuild)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed '/^\[sweep\]/,$d' examples/study-staleness-scale.toml > "$tmp/point.toml" # one point: no sweep
rule=$PWD/tests/scheduler/rules/staleness_lr.py:StalenessLR
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

printf '%8s %10s %10s %7s %9s %10s %9s %9s %s\n' workers builtin_s python_s ratio pushes extra_us acc_built acc_py same_bytes
for n in "${COUNTS[@]}"; do
  built="" python=""
  for round in $(seq 1 "$ROUNDS"); do
    for kind in built python; do
      out=$tmp/$kind-$n
      args=(--set topology.ps.staleness_lr=true)
      [[ $kind == python ]] && args=(--set topology.ps.rule="\"$rule\"")
      t0=$(date +%s.%N)
      "$B/gradwire" run "$tmp/point.toml" -q --no-report --force --out "$out" --set topology.workers="$n" "${args[@]}" >/dev/null
      t=$(echo "$(date +%s.%N) - $t0" | bc)
      if [[ $kind == built ]]; then built+="$t "; else python+="$t "; fi
    done
    echo "$n workers: round $round/$ROUNDS (built in: $built; python: $python)" >&2
  done
  tb=$(echo $built | tr ' ' '\n' | median)
  tp=$(echo $python | tr ' ' '\n' | median)
  /usr/bin/python3 - "$tmp/built-$n" "$tmp/python-$n" "$n" "$tb" "$tp" <<'PY'
import json, struct, sys
b, p, n, tb, tp = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
sb, sp = (json.load(open(d + "/summary.json")) for d in (b, p))
pushes = sp["staleness"]["count"]  # every push to every shard: the rule calls
def body(d):
    raw = open(d + "/model.safetensors", "rb").read()
    return raw[8 + struct.unpack("<Q", raw[:8])[0]:]
print("%8d %10.2f %10.2f %7.2f %9d %10.1f %9.4f %9.4f %s" % (n, tb, tp, tp / tb, pushes, (tp - tb) / pushes * 1e6,
      sb["final_test_accuracy"], sp["final_test_accuracy"], body(b) == body(p)))
PY
done
