#!/usr/bin/env bash
# topology.ps.rule: an async parameter server's rule in Python
# (tests/scheduler/rules/staleness_lr.py):
#  - at 16 workers in virtual time (one order of pushes), the staleness lr
#    written in Python gives the built-in topology.ps.staleness_lr's model bit
#    for bit, under async and under SSP (bound 2); a rule that updates the parameters itself (numpy, momentum
#    0) is within float rounding of it (1e-6; the same bits here); (2 x gradient, factor 0.5) is the plain
#    async rule bit for bit;
#  - in one process and across 3 processes it trains (test accuracy above
#    40%, 4x chance, in 150 steps of 3 workers), its staleness
#    reported, and summary.json names the rule; the run across 3
#    processes replays bit for bit (gradwire replay);
#  - a rule that raises (its traceback), returns what is no factor, names
#    no class, a missing file, a sync server and a rule beside the
#    built-in staleness lr are refused with exit 2, saying so.
# Exits 77 (ctest: "Skipped") without the torch plug-in (its Python runs the rule).
# Usage: python_rule.sh GRADWIRE SOURCE_DIR
set -uo pipefail
NEEDS_MNIST=1 . "$2/tests/scheduler/torch/support.sh"
rules=$src/tests/scheduler/rules/staleness_lr.py
cat > "$tmp/base.toml" <<TOML
[data]
train_subset = 4096
test_subset = 500
[train]
max_steps = 40
[topology]
kind = "parameter-server"
workers = 16

[topology.ps]
mode = "async"
shards = 2
[experiment]
clock = "virtual"
TOML
cfg=$tmp/base.toml
run builtin --set topology.ps.staleness_lr=true
run python --set topology.ps.rule="\"$rules:StalenessLR\""
same builtin python 0
run builtin-plain --set topology.ps.staleness_lr=true --set train.momentum=0
run python-plain --set topology.ps.rule="\"$rules:PlainSGD\"" --set train.momentum=0
same builtin-plain python-plain 1e-6
run async --set train.momentum=0 # (momentum 0.9 on 16 plain async workers diverges)
run doubled --set topology.ps.rule="\"$rules:Doubled\"" --set train.momentum=0
same async doubled 0
$py -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['rule'].endswith('staleness_lr.py:StalenessLR'), s['rule']" \
  "$tmp/python/summary.json" || fail "summary.json does not name the rule"
# SSP (bound 2) with the rule: the built-in SSP staleness lr's model, bit for bit.
run builtin-ssp --set topology.ps.staleness_lr=true --set topology.ps.mode='"ssp"' --set topology.ps.staleness_bound=2
run python-ssp --set topology.ps.rule="\"$rules:StalenessLR\"" --set topology.ps.mode='"ssp"' --set topology.ps.staleness_bound=2
same builtin-ssp python-ssp 0

# Real time: in one process, and the shards' rank with its own interpreter across 3.
for procs in 1 3; do
  args=(--set experiment.clock='"real"' --set topology.workers=3 --set train.max_steps=150 --set topology.ps.rule="\"$rules:StalenessLR\"")
  [ $procs -gt 1 ] && args+=(--procs $procs)
  run "real-$procs" "${args[@]}"
  $py -c "import json, sys; s = json.load(open(sys.argv[1])); print('real time, %s process(es):' % sys.argv[2], s['final_test_accuracy'], s['staleness']['mean'])
assert s['status'] == 'completed' and s['final_test_accuracy'] > 0.4 and s['staleness']['mean'] > 0, s" \
    "$tmp/real-$procs/summary.json" $procs || fail "the rule across $procs process(es) did not train"
done
# The real-time run across 3 processes replays bit for bit, the rule applying the record's order.
timeout 120 "$gw" replay "$tmp/real-3" -q --no-report --out "$tmp/real-3-replay" > "$tmp/replay.log" 2>&1 ||
  fail "replay: $(tail -5 "$tmp/replay.log")"
grep -q "holds the run's parameters, bit for bit" "$tmp/replay.log" || fail "replay: $(tail -3 "$tmp/replay.log")"
same real-3 real-3-replay 0
echo "ok: a Python rule is the built-in rule, bit for bit (async and SSP), trains in and across processes, and replays"

refused raises "staleness_lr.py:Raises.push raised:" --set topology.ps.rule="\"$rules:Raises\""
grep -qF "ValueError: no version 5 here" "$tmp/raises.log" && grep -qF "staleness_lr.py\", line" "$tmp/raises.log" ||
  fail "no traceback: $(cat "$tmp/raises.log")"
refused wrong "Wrong.push returned 'fast'; it returns None (it updated params itself), the learning rate's factor" \
  --set topology.ps.rule="\"$rules:Wrong\""
refused noclass "staleness_lr.py defines no Nope" --set topology.ps.rule="\"$rules:Nope\""
refused nofile "topology.ps.rule: $tmp/nowhere.py does not exist" --set topology.ps.rule="\"$tmp/nowhere.py:R\""
refused format "FILE.py:Class expected" --set topology.ps.rule="\"$rules\""
refused sync "a rule in Python takes each push of an asynchronous parameter server" \
  --set topology.ps.rule="\"$rules:StalenessLR\"" --set topology.ps.mode='"sync"'
refused both "the rule replaces the built-in async rule" --set topology.ps.rule="\"$rules:StalenessLR\"" \
  --set topology.ps.staleness_lr=true
echo "ok: a parameter-server rule in Python"
