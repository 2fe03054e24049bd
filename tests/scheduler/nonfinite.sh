#!/usr/bin/env bash
# A NaN loss or gradient, injected by step ([[faults]] kind = "nan": the
# struck worker's next step computes NaN through its whole backward), and
# train.on_nonfinite:
#  - stop (the default), on the async parameter server, a sync ring (also
#    with topology.ring.overlap: judged before each bucket goes) and in virtual time: exit 2, summary.json's status "diverged" with the worker
#    and step, the metrics written before it kept;
#  - skip: the step's gradient is dropped, a warning names worker and step,
#    and the run completes with a finite model that still learnt;
#  - continue: the NaN reaches the parameters, as it did before the check;
#  - skip with topology.ring.overlap (buckets sent during backward) is refused.
# Usage: nonfinite.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > "$tmp/nan.toml" <<'TOML'
[model]
kind = "mlp"
hidden = [64]
[data]
dataset = "synthetic"
synthetic_train = 3000
synthetic_test = 500
[train]
max_steps = 30
batch_size = 32
log_every = 2
momentum = 0
[topology]
kind = "parameter-server"
workers = 3

[topology.ps]
mode = "async"
[[faults]]
kind = "nan"
rank = 1
at_step = 5
TOML
summary() { # NAME PYTHON-EXPR over s (summary.json)
  /usr/bin/python3 -c "import json, sys; s = json.load(open(sys.argv[1])); assert $2, s" "$tmp/$1/summary.json" ||
    fail "$1: summary.json: $(cat "$tmp/$1/summary.json" 2>&1 | head -c 600)"
}
run() { # NAME WANT_RC ARGS...
  local name=$1 want=$2 rc=0
  shift 2
  timeout 120 "$gw" run "$tmp/nan.toml" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || rc=$?
  [ $rc -eq "$want" ] || fail "$name: exit $rc, want $want: $(tail -5 "$tmp/$name.log")"
}

for t in async ring overlap virtual; do
  args=()
  [ $t = ring ] && args=(--set topology.kind='"ring"')
  [ $t = overlap ] && args=(--set topology.kind='"ring"' --set topology.ring.overlap=true)
  [ $t = virtual ] && args=(--set experiment.clock='"virtual"')
  run "stop-$t" 2 "${args[@]}"
  grep -q "worker 1: diverged at step 6: the loss is nan" "$tmp/stop-$t.log" || fail "stop-$t: $(tail -3 "$tmp/stop-$t.log")"
  summary "stop-$t" 's["status"] == "diverged" and s["diverged"] == {"worker": 1, "step": 6}'
done
[ -s "$tmp/stop-async/metrics.jsonl" ] || fail "the diverged run kept no metrics"

run skip 0 --set train.on_nonfinite='"skip"'
grep -q 'worker 1: step 6: a NaN or infinite loss or gradient, skipped' "$tmp/skip.log" || fail "skip: no warning: $(cat "$tmp/skip.log")"
summary skip 's["status"] == "completed" and s["final_test_accuracy"] > 0.3'
run continue 0 --set train.on_nonfinite='"continue"'
summary continue 's["status"] == "completed" and s["final_test_accuracy"] < 0.3'

rc=0
"$gw" run "$tmp/nan.toml" -q --no-report --out "$tmp/overlap" --set topology.kind='"ring"' --set topology.ring.overlap=true \
  --set train.on_nonfinite='"skip"' > "$tmp/overlap.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q 'train.on_nonfinite = "skip" drops a step' "$tmp/overlap.log" || fail "overlap + skip: exit $rc: $(cat "$tmp/overlap.log")"
echo "ok: non-finite losses and gradients"
