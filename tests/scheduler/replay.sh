#!/usr/bin/env bash
# Record and replay of asynchronous runs, as a user runs them.
#  - An async parameter server of 3 processes, one worker 3x slow with its
#    own batch size, shards spread over the ranks: the replay in one
#    process writes the run's model.safetensors bit for bit, and records
#    the same schedule byte for byte. Twice, so two arrival orders.
#  - Separate pulls with DC-ASGD across 3 processes, SSP in one process
#    with 3 shards, async DiLoCo across 3 processes (also with dynamic
#    local steps, whose rounds follow measured speeds), top-k compressed
#    pushes across 3 processes, AD-PSGD across 3 processes (and a what-if
#    with another lr on its schedule), and a run in virtual time: each
#    replays bit for bit.
#  - What-if: --set topology.ps.staleness_lr=true keeps the schedule (the same
#    record, every update at its recorded staleness) and changes the model.
#  - A killed run (rank 0 killed at its step 25, so the job ends): the
#    replay follows its record to the last update every shard holds, the
#    same bits twice, and says how many entries it left out.
#  - A record cut inside an entry is followed to its last whole entry.
#  - A paired sweep ([sweep] paired = true) replays each variant after the
#    first on the first's record of its seed and tables both differences;
#    a variant that would change the schedule is refused before any run.
#  - Refused, naming the file or key, without a hang: a record that
#    diverges from the replay (a staleness changed), a missing shard's
#    record, a file that is no record, a key that changes the schedule, a
#    run without a record; AD-PSGD: a worker's record that ends before its
#    close, a missing worker's record, a graph changed.
# Usage: replay.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
tool=$src/tests/scheduler/record_tool.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
q=(-q --no-report)

cat >"$tmp/async.toml" <<'EOF'
[experiment]
name = "async"
[model]
kind = "mlp"
hidden = [64]
[data]
train_subset = 3000
test_subset = 500
[topology]
kind = "parameter-server"
workers = 3

[topology.ps]
mode = "async"
shards = 2
shard_placement = "spread"
[[nodes]]
count = 2
[[nodes]]
count = 1
slowdown = 3.0
batch_size = 32
[train]
epochs = 2
batch_size = 64
lr = 0.05
momentum = 0.9
eval = "after"
EOF

# same NAME: the replay of $tmp/NAME holds its model and its record.
same() {
  local run=$tmp/$1 rep=$tmp/$1-replay
  "$gw" replay "$run" "${q[@]}" >"$run.replay.txt" 2>&1 || { bad "$1: the replay failed: $(tail -3 "$run.replay.txt")"; return; }
  grep -q "holds the run's parameters, bit for bit" "$run.replay.txt" || bad "$1: gradwire says: $(tail -1 "$run.replay.txt")"
  /usr/bin/python3 "$tool" same-tensors "$run/model.safetensors" "$rep/model.safetensors" ||
    { bad "$1: the replay's model differs from the run's"; return; }
  for f in "$run"/record/*.gwr; do
    cmp -s "$f" "$rep/record/$(basename "$f")" || bad "$1: the replay's $(basename "$f") differs from the run's"
  done
  echo "ok: $1 replays bit for bit ($(grep -o '[0-9]* [A-Za-z -]*followed' "$run.replay.txt"))"
}

# run NAME [gradwire run options...]
run() {
  local name=$1
  shift
  "$gw" run "$tmp/async.toml" "${q[@]}" --out "$tmp/$name" "$@" >"$tmp/$name.txt" 2>&1 ||
    { bad "$name: the run failed: $(tail -3 "$tmp/$name.txt")"; return 1; }
}

run procs3 --procs 3 && same procs3
run procs3b --procs 3 && same procs3b
if [ -d "$tmp/procs3/record" ] && [ -d "$tmp/procs3b/record" ]; then
  if diff -rq "$tmp/procs3/record" "$tmp/procs3b/record" >/dev/null; then
    echo "note: the two 3-process runs happened to take their updates in the same order"
  else
    echo "ok: the two 3-process runs took their updates in different orders; each replayed exactly"
  fi
fi
run pulls --procs 3 --set topology.ps.push_pull=false --set topology.ps.dc_lambda=0.04 && same pulls
run ssp --set topology.ps.mode=\"ssp\" --set topology.ps.staleness_bound=1 --set topology.ps.shards=3 && same ssp
run adiloco --procs 3 --set topology.kind=\"diloco\" --set topology.ps.mode=\"async\" --set topology.local_steps=4 \
  --set topology.diloco.outer_lr=0.35 --set topology.diloco.outer_momentum=0.0 --set train.optimizer=\"adamw\" --set train.lr=0.002 &&
  same adiloco
run adylu --procs 3 --set topology.kind=\"diloco\" --set topology.ps.mode=\"async\" --set topology.local_steps=6 \
  --set topology.diloco.dynamic_local_steps=true --set topology.diloco.outer_lr=0.35 --set topology.diloco.outer_momentum=0.0 \
  --set train.optimizer=\"adamw\" --set train.lr=0.002 && same adylu
run virtual --set experiment.clock=\"virtual\" --set virtual.step_ms=5 && same virtual
run topk --procs 3 --set compression.kind=\"topk\" --set compression.ratio=0.05 && same topk
run adpsgd --procs 3 --set topology.kind=\"gossip\" --set topology.gossip.mode=\"adpsgd\" && same adpsgd
if [ -f "$tmp/adpsgd/record/mixer-2.gwr" ]; then
  "$gw" replay "$tmp/adpsgd" "${q[@]}" --set train.lr=0.02 --out "$tmp/adpsgd-lr" >"$tmp/adpsgd-lr.txt" 2>&1 ||
    bad "adpsgd what-if: the replay failed: $(tail -3 "$tmp/adpsgd-lr.txt")"
  diff -rq "$tmp/adpsgd/record" "$tmp/adpsgd-lr/record" >/dev/null ||
    bad "adpsgd what-if: train.lr changed the schedule (the records differ)"
  /usr/bin/python3 "$tool" same-tensors "$tmp/adpsgd/model.safetensors" "$tmp/adpsgd-lr/model.safetensors" &&
    bad "adpsgd what-if: train.lr left the model as it was"
  echo "ok: AD-PSGD what-if with another lr keeps every store event and changes the model"
fi

# What-if on procs3's schedule.
if [ -d "$tmp/procs3/record" ]; then
  "$gw" replay "$tmp/procs3" "${q[@]}" --set topology.ps.staleness_lr=true --out "$tmp/slr" >"$tmp/slr.txt" 2>&1 ||
    bad "what-if: the replay failed: $(tail -3 "$tmp/slr.txt")"
  diff -rq "$tmp/procs3/record" "$tmp/slr/record" >/dev/null ||
    bad "what-if: staleness_lr changed the schedule (the records differ)"
  [ "$(/usr/bin/python3 "$tool" stalenesses "$tmp/procs3/record")" = "$(/usr/bin/python3 "$tool" stalenesses "$tmp/slr/record")" ] ||
    bad "what-if: the staleness sequences differ"
  /usr/bin/python3 "$tool" same-tensors "$tmp/procs3/model.safetensors" "$tmp/slr/model.safetensors" &&
    bad "what-if: staleness_lr left the model as it was"
  /usr/bin/python3 -c "
import json, sys
a, b = (json.load(open(sys.argv[i] + '/summary.json')) for i in (1, 2))
sys.exit(a['staleness']['histogram'] != b['staleness']['histogram'] or b['replay']['overrides'] != ['topology.ps.staleness_lr=true'])" \
    "$tmp/procs3" "$tmp/slr" || bad "what-if: summary.json's staleness histogram or replay overrides are not the run's"
  echo "ok: what-if with staleness_lr keeps the schedule and its stalenesses, and changes the model"
fi

# A killed run: rank 0 (coordinator, results) killed after its step 25.
cat "$tmp/async.toml" >"$tmp/killed.toml"
printf '[[faults]]\nkind = "kill"\nrank = 0\nat_step = 25\n' >>"$tmp/killed.toml"
"$gw" run "$tmp/killed.toml" "${q[@]}" --procs 3 --out "$tmp/killed" >"$tmp/killed.txt" 2>&1 &&
  bad "killed: the run succeeded"
[ -f "$tmp/killed/model.safetensors" ] && bad "killed: a model was written"
if "$gw" replay "$tmp/killed" "${q[@]}" >"$tmp/killed.r.txt" 2>&1 &&
   "$gw" replay "$tmp/killed" "${q[@]}" --out "$tmp/killed-2" >"$tmp/killed.r2.txt" 2>&1; then
  cmp -s "$tmp/killed-replay/model.safetensors" "$tmp/killed-2/model.safetensors" ||
    bad "killed: two replays of one record differ"
  grep -q "the run did not finish" "$tmp/killed.r.txt" || bad "killed: $(tail -1 "$tmp/killed.r.txt")"
  /usr/bin/python3 -c "
import json, subprocess, sys
shards = lambda d: [json.loads(l) for l in subprocess.check_output([sys.executable, sys.argv[1], 'entries', d]).splitlines()]
s = json.load(open(sys.argv[3] + '/summary.json'))['replay']['record']
run, replayed = shards(sys.argv[2] + '/record'), shards(sys.argv[3] + '/record')
ran, recorded = sum(map(len, replayed)), sum(map(len, run))
assert recorded > 0 and ran == s['entries'] and ran + s['entries_left_out'] == recorded, (ran, recorded, s)
# A push is recorded before it is answered, so every shard holds worker 0's
# last push (step 24) and none after it.
for shard in run:
    mine = [e[2] for e in shard if e[0] == 'a' and e[1] == 0]
    assert mine and mine[-1] == 24, mine[-3:]
# The replay follows each shard's record in order, up to a cut that is the
# same for every shard: another worker's push that reached one shard and not
# another before the kill ends what can be followed, on worker 0's steps too.
def subsequence(part, whole):
    it = iter(whole)
    return all(any(e == f for f in it) for e in part)
assert all(subsequence(a, b) for a, b in zip(replayed, run)) and len(replayed) == len(run), 'not a cut of the run'
assert 0 < s['steps_per_worker'][0] <= 25, s
" "$tool" "$tmp/killed" "$tmp/killed-replay" &&
    echo "ok: a killed run replays to its last whole update, the same bits twice" ||
    bad "killed: the replay's record is not a cut of the run's, or the run's lacks worker 0's last push"
else
  bad "killed: the replay failed: $(tail -3 "$tmp/killed.r.txt" "$tmp/killed.r2.txt" 2>/dev/null)"
fi

# A paired sweep: each variant after the first also replayed on the
# first's record of its seed; the table gives both differences.
cat "$tmp/async.toml" >"$tmp/paired.toml"
cat >>"$tmp/paired.toml" <<'EOF'
[sweep]
paired = true
"experiment.seed" = [1, 2]
[sweep.variants]
"plain" = { "topology.ps.staleness_lr" = false }
"staleness lr" = { "topology.ps.staleness_lr" = true }
EOF
if "$gw" run "$tmp/paired.toml" "${q[@]}" --out "$tmp/paired" >"$tmp/paired.txt" 2>&1; then
  for i in 002 003; do
    base=$tmp/paired/point-00$((10#$i - 2))
    [ -f "$tmp/paired/point-$i-paired/model.safetensors" ] || bad "paired: no replay in point-$i-paired"
    diff -rq "$base/record" "$tmp/paired/point-$i-paired/record" >/dev/null ||
      bad "paired: point-$i-paired did not follow the schedule of $(basename "$base")"
  done
  /usr/bin/python3 -c "
import json, sys
rows = json.load(open(sys.argv[1]))['paired']
assert [r['figure'] for r in rows] == ['final_test_accuracy', 'final_test_loss'], rows
assert all(r['seeds'] == 2 and r['variant'] == 'staleness lr' for r in rows), rows
assert all(isinstance(r[k], float) for r in rows for k in ('unpaired_difference', 'paired_difference', 'paired_sd')), rows" \
    "$tmp/paired/sweep.json" || bad "paired: sweep.json's paired rows"
  grep -q "## Paired: each variant against the first" "$tmp/paired/sweep.md" || bad "paired: sweep.md has no paired table"
  echo "ok: a paired sweep replays each variant on the first's schedule and tables both differences"
else
  bad "paired: the sweep failed: $(tail -3 "$tmp/paired.txt")"
fi
sed -i 's/"staleness lr" = { "topology.ps.staleness_lr" = true }/"ssp" = { "topology.ps.mode" = "ssp" }/' "$tmp/paired.toml"
"$gw" run "$tmp/paired.toml" "${q[@]}" --out "$tmp/paired-ssp" >"$tmp/paired-ssp.txt" 2>&1 &&
  bad "paired: a variant that changes the schedule was not refused"
if grep -q 'paired = true: \[sweep.variants\] "ssp" is replayed on the first variant.s schedule' "$tmp/paired-ssp.txt" &&
   [ ! -d "$tmp/paired-ssp/point-000" ]; then
  echo "ok: refused before any run, a paired variant that changes the schedule"
else
  bad "paired: the refusal: $(tail -2 "$tmp/paired-ssp.txt")"
fi

# Refusals. refused NAME PATTERN RUN_DIR [replay options...]
refused() {
  local name=$1 pattern=$2
  shift 2
  timeout 60 "$gw" replay "$@" "${q[@]}" --out "$tmp/refused-$name" >"$tmp/$name.txt" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] || [ $rc -eq 124 ]; then
    bad "$name: not refused (exit $rc)"
  elif ! grep -q -- "$pattern" "$tmp/$name.txt"; then
    bad "$name: the error does not say '$pattern': $(tail -2 "$tmp/$name.txt")"
  else
    echo "ok: refused, $name: $(grep -m1 error "$tmp/$name.txt" | cut -c1-160)"
  fi
}
if [ -d "$tmp/procs3/record" ]; then
  cp -r "$tmp/procs3" "$tmp/cut"
  f=$tmp/cut/record/shard-0.gwr
  truncate -s $(($(stat -c %s "$f") - 1)) "$f"
  "$gw" replay "$tmp/cut" "${q[@]}" >"$tmp/cut.txt" 2>&1 || bad "cut: the replay failed: $(tail -2 "$tmp/cut.txt")"
  /usr/bin/python3 -c "import json,sys; sys.exit(not json.load(open(sys.argv[1]))['replay']['record']['file_cut'])" \
    "$tmp/cut-replay/summary.json" && echo "ok: a record cut inside an entry is followed to its last whole entry" ||
    bad "cut: summary.json does not say the record was cut"

  cp -r "$tmp/procs3" "$tmp/same-bytes"
  /usr/bin/python3 "$tool" tamper "$tmp/same-bytes/record/shard-1.gwr" -1
  cmp -s "$tmp/procs3/record/shard-1.gwr" "$tmp/same-bytes/record/shard-1.gwr" ||
    bad "record_tool.py writes another encoding than gradwire's"
  cp -r "$tmp/procs3" "$tmp/diverged"
  /usr/bin/python3 "$tool" tamper "$tmp/diverged/record/shard-1.gwr" 40
  refused diverged "the replay diverged from the record" "$tmp/diverged"
  cp -r "$tmp/procs3" "$tmp/missing" && rm "$tmp/missing/record/shard-0.gwr"
  refused missing-shard "no record of shard 0" "$tmp/missing"
  cp -r "$tmp/procs3" "$tmp/garbage" && echo "not a record" >"$tmp/garbage/record/shard-1.gwr"
  refused not-a-record "shard-1.gwr: not a gradwire record" "$tmp/garbage"
  refused schedule-key "topology.ps.push_pull decides how workers and shards exchange" "$tmp/procs3" --set topology.ps.push_pull=false
fi
if [ -d "$tmp/adpsgd/record" ]; then
  cp -r "$tmp/adpsgd" "$tmp/ad-cut"
  f=$tmp/ad-cut/record/mixer-1.gwr
  truncate -s $(($(stat -c %s "$f") - 2)) "$f" # its close and more: a worker that never finished
  refused adpsgd-unfinished "an AD-PSGD replay follows whole runs" "$tmp/ad-cut"
  cp -r "$tmp/adpsgd" "$tmp/ad-missing" && rm "$tmp/ad-missing/record/mixer-2.gwr"
  refused adpsgd-missing "no record of worker 2's store" "$tmp/ad-missing"
  refused adpsgd-graph "topology.gossip.graph decides how workers and shards exchange" "$tmp/adpsgd" --set topology.gossip.graph=\"complete\"
fi
run unrecorded --set experiment.record=false && refused no-record "no record (the run had experiment.record = false" "$tmp/unrecorded"
refused no-folder "no such results folder" "$tmp/nowhere"
exit $fail
