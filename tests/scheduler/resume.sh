#!/usr/bin/env bash
# Checkpoints and exact resume, as a user runs them.
#  - Every lock-step topology at 3 workers (single, ring, ring with peer
#    actors and overlap, the sharded update, hierarchical, sync parameter
#    server, local SGD, D-PSGD; and a GPT with AdamW alone, on a ring and
#    on a sync parameter server): a run with checkpoints, resumed from an
#    earlier checkpoint of its own in a copy of its folder, ends with the
#    same model.safetensors, byte for byte, as the uninterrupted run.
#    Resuming replays nothing: the second run starts at the checkpoint's
#    step (its metrics.jsonl says so) with the state read from disk.
#  - Across processes: a 3-process ring saved with --procs 3 resumes in one
#    process (a different process count), and the reverse, bit for bit.
#  - Ctrl-C (SIGINT once rank 0 has written a step record) writes a
#    checkpoint; resuming from it ends where the uninterrupted run ends.
#  - Checkpoints by time (checkpoint_every_s) fall on one step of every
#    worker, on the topology's grid, and resume bit for bit.
#  - The async parameter server resumes and completes (not bitwise).
#  - Bad checkpoints are refused naming the file and the fault: a flipped
#    byte, a truncated part, a missing manifest, another model, another
#    worker count.
# Usage: resume.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# Runs that must outlast a signal or a timer use the whole training set;
# under sanitizers (GRADWIRE_TIME_SCALE > 1, every step several times
# slower) a quarter of it lasts as long, and the script's time under ASan
# was 318 s.
whole=0
[ "${GRADWIRE_TIME_SCALE:-1}" -gt 1 ] && whole=15000

# Small and quick: 3,000 training images, 2 epochs, checkpoints every 10 steps.
common=(-q --no-report --set data.train_subset=3000 --set data.test_subset=500 --set train.epochs=2
        --set train.checkpoint_every=10 --set train.keep_checkpoints=100 --set train.eval=\"after\")

# exact NAME CONFIG FROM_STEP [--set ...]: the full run, then a resume from FROM_STEP.
exact() {
  local name=$1 config=$2 from=$3
  shift 3
  "$gw" run "$src/examples/$config" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.txt" 2>&1 ||
    { bad "$name: the full run failed: $(tail -3 "$tmp/$name.txt")"; return; }
  [ -f "$tmp/$name/checkpoints/step-$(printf %09d "$from")/MANIFEST.json" ] ||
    { bad "$name: no checkpoint of step $from ($(ls "$tmp/$name/checkpoints" 2>&1 | tr '\n' ' '))"; return; }
  cp -r "$tmp/$name" "$tmp/$name.resumed"
  rm "$tmp/$name.resumed/model.safetensors" "$tmp/$name.resumed/summary.json"
  "$gw" run --resume "$tmp/$name.resumed" --from-step "$from" -q --no-report >"$tmp/$name.r.txt" 2>&1 ||
    { bad "$name: the resume failed: $(tail -3 "$tmp/$name.r.txt")"; return; }
  /usr/bin/python3 -c "import json,sys; sys.exit(not any(r.get('type') == 'resume' and r.get('step') == int(sys.argv[2]) for r in map(json.loads, open(sys.argv[1]))))" \
    "$tmp/$name.resumed/metrics.jsonl" "$from" || bad "$name: metrics.jsonl has no resume record at step $from"
  if cmp -s "$tmp/$name/model.safetensors" "$tmp/$name.resumed/model.safetensors"; then
    echo "ok: $name resumed from step $from equals the uninterrupted run"
  else
    bad "$name: resumed from step $from, the model differs from the uninterrupted run's"
  fi
}

exact single default.toml 30
exact ring ring.toml 20 --set topology.workers=3
exact ring-overlap ring.toml 20 --set topology.workers=3 --set topology.ring.overlap=true --set topology.ring.bucket_kb=256
exact ring-sharded ring.toml 20 --set topology.workers=3 --set topology.ring.sharded_update=true
exact hierarchical hierarchical.toml 20 --set topology.workers=4
exact ps-sync ps-async.toml 20 --set topology.workers=3 --set topology.ps.mode=\"sync\" --set topology.ps.shards=2
exact local-sgd local-sgd.toml 16 --set topology.workers=3 --set train.checkpoint_every=8
exact dpsgd gossip-dpsgd.toml 20 --set topology.workers=3
# Compressed rings: the error-feedback residual (and PowerSGD's Q) resume too.
exact ring-topk ring.toml 20 --set topology.workers=3 --set compression.kind=\"topk\"
exact ring-powersgd ring.toml 20 --set topology.workers=3 --set compression.kind=\"powersgd\"
exact ring-own-step ring.toml 20 --set topology.workers=3 --set compression.kind=\"topk\" --set compression.update=true --set train.optimizer=\"adamw\" --set train.lr=0.002
exact diloco local-sgd.toml 16 --set topology.workers=3 --set train.checkpoint_every=8 --set topology.kind=\"diloco\"
exact dpsgd-choco gossip-dpsgd.toml 20 --set topology.workers=3 --set compression.kind=\"topk\" --set compression.ratio=0.1
# Compressed pushes: each worker's residuals, one per shard, resume too.
exact ps-sign ps-async.toml 20 --set topology.workers=3 --set topology.ps.mode=\"sync\" --set topology.ps.shards=2 --set compression.kind=\"sign\"
exact diloco-topk local-sgd.toml 16 --set topology.workers=3 --set train.checkpoint_every=8 --set topology.kind=\"diloco\" --set topology.ps.shards=2 --set compression.kind=\"topk\"
# A GPT with AdamW, clipping and a cosine schedule: its moments and step count resume too.
gpt=(--set model.layers=1 --set model.d_model=32 --set model.context=32 --set train.max_steps=40 --set train.threads=1)
exact gpt-single lm.toml 20 "${gpt[@]}"
exact gpt-ring lm.toml 20 "${gpt[@]}" --set topology.kind=\"ring\" --set topology.workers=3
exact gpt-ring-dropout lm.toml 20 "${gpt[@]}" --set topology.kind=\"ring\" --set topology.workers=3 --set model.dropout=0.2
exact gpt-single-dropout lm.toml 20 "${gpt[@]}" --set model.dropout=0.2
exact gpt-ps-sync lm.toml 20 "${gpt[@]}" --set topology.kind=\"parameter-server\" --set topology.workers=3 --set topology.ps.shards=2

# Across processes, and at another process count.
exact ring-procs ring.toml 20 --set topology.workers=3 --procs 3
cp -r "$tmp/ring" "$tmp/ring.to-procs"
rm "$tmp/ring.to-procs/model.safetensors"
"$gw" run --resume "$tmp/ring.to-procs" --from-step 20 --procs 3 -q --no-report >"$tmp/to-procs.txt" 2>&1 ||
  bad "ring saved in one process, resumed on 3: $(tail -3 "$tmp/to-procs.txt")"
cmp -s "$tmp/ring/model.safetensors" "$tmp/ring.to-procs/model.safetensors" ||
  bad "ring saved in one process and resumed on 3 processes differs from the uninterrupted run"
cmp -s "$tmp/ring/model.safetensors" "$tmp/ring-procs.resumed/model.safetensors" ||
  bad "ring saved on 3 processes and resumed in one differs from the one-process run"

# Ctrl-C writes a checkpoint (the workers agree on a step first); its
# resume ends as the uninterrupted run. The whole training set (a quarter
# under sanitizers), so that the run is still going when the signal comes.
# The two configs differ in log_every (kept in the file's metadata): compare the tensors.
same_tensors() { /usr/bin/python3 "$src/tests/scheduler/torch/same_tensors.py" "$1" "$2" 0 > /dev/null; }
# interrupted NAME CONFIG [--set ...]: the whole run, then one stopped by
# SIGINT once it has written a step record, resumed: the same tensors.
interrupted() {
  local name=$1 config=$2
  shift 2
  local long=(--set data.train_subset=$whole --set train.checkpoint_every=0 "$@")
  "$gw" run "$src/examples/$config" "${common[@]}" "${long[@]}" --out "$tmp/$name-full" >"$tmp/$name-full.txt" 2>&1 ||
    bad "$name, full training set: $(tail -3 "$tmp/$name-full.txt")"
  "$gw" run "$src/examples/$config" "${common[@]}" "${long[@]}" --set train.log_every=5 --out "$tmp/$name-int" \
    >"$tmp/$name-int.txt" 2>&1 &
  local pid=$! rc
  for _ in $(seq 1 600); do grep -q '"type":"step"' "$tmp/$name-int/metrics.jsonl" 2>/dev/null && break; sleep 0.05; done
  kill -INT $pid
  wait $pid
  rc=$?
  [ $rc = 130 ] || bad "$name, Ctrl-C: exit $rc, expected 130"
  ls "$tmp/$name-int/checkpoints"/step-*/MANIFEST.json >/dev/null 2>&1 || bad "$name: Ctrl-C wrote no checkpoint"
  "$gw" run --resume "$tmp/$name-int" -q --no-report >"$tmp/$name-int.r.txt" 2>&1 ||
    bad "$name, resume after Ctrl-C: $(tail -3 "$tmp/$name-int.r.txt")"
  if same_tensors "$tmp/$name-full/model.safetensors" "$tmp/$name-int/model.safetensors"; then
    echo "ok: $name stopped by Ctrl-C at $(ls "$tmp/$name-int/checkpoints") resumed equals the uninterrupted run"
  else
    bad "$name: resumed after Ctrl-C, the model differs from the uninterrupted run's"
  fi
}
interrupted ring ring.toml --set topology.workers=3
interrupted single default.toml

# Checkpoints by time (train.checkpoint_every_s): the workers pause at
# their next boundary and all snapshot one step, which falls on the
# topology's grid; resumed from the first one, the run ends as it did.
# timed NAME CONFIG GRID [--set ...]
timed() {
  local name=$1 config=$2 grid=$3
  shift 3
  "$gw" run "$src/examples/$config" "${common[@]}" --set data.train_subset=$whole --set train.checkpoint_every=0 \
    --set train.checkpoint_every_s=0.05 "$@" --out "$tmp/$name" >"$tmp/$name.txt" 2>&1 ||
    { bad "$name: the run with checkpoints by time failed: $(tail -3 "$tmp/$name.txt")"; return; }
  local first
  first=$(ls "$tmp/$name/checkpoints" 2>/dev/null | head -1)
  [ -n "$first" ] || { bad "$name: no checkpoint by time: $(grep -v "^ok" "$tmp/$name.txt" | tail -3)"; return; }
  first=$((10#${first#step-}))
  [ $((first % grid)) = 0 ] || bad "$name: a checkpoint by time at step $first, off the grid of $grid"
  cp -r "$tmp/$name" "$tmp/$name.resumed"
  rm "$tmp/$name.resumed/model.safetensors"
  "$gw" run --resume "$tmp/$name.resumed" --from-step "$first" -q --no-report >"$tmp/$name.r.txt" 2>&1 ||
    { bad "$name: the resume from step $first failed: $(tail -3 "$tmp/$name.r.txt")"; return; }
  cmp -s "$tmp/$name/model.safetensors" "$tmp/$name.resumed/model.safetensors" &&
    echo "ok: $name resumed from its checkpoint by time (step $first) equals the uninterrupted run" ||
    bad "$name: resumed from its checkpoint by time (step $first), the model differs"
}
timed ring-timed ring.toml 1 --set topology.workers=3
timed ring-timed-procs ring.toml 1 --set topology.workers=3 --procs 3
timed ps-sync-timed ps-async.toml 10 --set topology.workers=3 --set topology.ps.mode=\"sync\" --set topology.ps.shards=2
timed local-sgd-timed local-sgd.toml 16 --set topology.workers=3 --set topology.local_steps=8
timed single-timed default.toml 1

# Async parameter server: resumes and completes.
"$gw" run "$src/examples/ps-async.toml" "${common[@]}" --set topology.workers=3 --out "$tmp/async" >"$tmp/async.txt" 2>&1 ||
  bad "async PS: $(tail -3 "$tmp/async.txt")"
"$gw" run --resume "$tmp/async" --from-step 20 -q --no-report >"$tmp/async.r.txt" 2>&1 ||
  bad "async PS resume: $(tail -3 "$tmp/async.r.txt")"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['status'] != 'completed' or s['resumed_from'] != 20)" \
  "$tmp/async/summary.json" || bad "async PS resume: summary.json does not say completed, resumed from 20"

# Bad checkpoints: refused, exit 2, naming the file and the fault.
refused() { # NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2
  shift 2
  local rc=0
  "$gw" run "$@" -q --no-report >"$tmp/$name.bad.txt" 2>&1 || rc=$?
  [ $rc = 2 ] || bad "$name: exit $rc, expected 2: $(tail -2 "$tmp/$name.bad.txt")"
  grep -q -- "$want" "$tmp/$name.bad.txt" || bad "$name: the error does not say '$want': $(tail -2 "$tmp/$name.bad.txt")"
}
ck="$tmp/ring/checkpoints/step-000000020"
cp -r "$tmp/ring" "$tmp/flip"
part="$tmp/flip/checkpoints/step-000000020/part-worker-1.gwc"
printf '\x55' | dd of="$part" bs=1 seek=5000 conv=notrunc status=none
refused flipped "part-worker-1.gwc: checksum mismatch" --resume "$tmp/flip" --from-step 20
cp -r "$tmp/ring" "$tmp/cut"
truncate -s 3000 "$tmp/cut/checkpoints/step-000000020/part-worker-2.gwc"
refused truncated "part-worker-2.gwc: 3000 bytes" --resume "$tmp/cut" --from-step 20
cp -r "$tmp/ring" "$tmp/nomanifest"
rm "$tmp/nomanifest/checkpoints/step-000000020/MANIFEST.json"
refused no-manifest "no complete checkpoint of step 20" --resume "$tmp/nomanifest" --from-step 20
# A manifest's "run" keys are typed before use (a string where seconds go
# was json's own type error, naming neither file nor key).
cp -r "$tmp/ring" "$tmp/badrun"
/usr/bin/python3 -c "import json,sys; p=sys.argv[1]; m=json.load(open(p)); m['run']={'train_seconds': 'soon'}; json.dump(m, open(p, 'w'))" \
  "$tmp/badrun/checkpoints/step-000000020/MANIFEST.json"
refused run-seconds "MANIFEST.json: run.train_seconds is \"soon\", not a number of seconds" --resume "$tmp/badrun" --from-step 20
/usr/bin/python3 -c "import json,sys; p=sys.argv[1]; m=json.load(open(p)); m['run']={'lost_workers': [1, 'x']}; json.dump(m, open(p, 'w'))" \
  "$tmp/badrun/checkpoints/step-000000020/MANIFEST.json"
refused run-lost "MANIFEST.json: run.lost_workers is \[1,\"x\"\], not a list of ranks" --resume "$tmp/badrun" --from-step 20
refused other-model "the checkpoint is of model = \"mlp\", this run has \"lenet5\"" --resume "$tmp/ring" --from-step 20 \
  --set model.kind=\"lenet5\"
refused other-workers "the checkpoint is of workers = 3, this run has 2" --resume "$ck" --set topology.workers=2
refused not-a-run "no complete checkpoint under" --resume "$tmp" "$src/examples/ring.toml"

[ $fail = 0 ] && echo "resume: all checks passed"
exit $fail
