#!/usr/bin/env bash
# A stop request ends a run that is in the middle of a long step: the step
# is abandoned between two layers, and the run ends after the step before,
# with its results and a checkpoint of that step kept, which resumes.
#  - SIGTERM, sent once the first step's record is written (so that the
#    second step, several seconds long here, is under way), is answered
#    within that step: the run says it stopped in the middle of step 2, and
#    summary.json says interrupted after 1 step.
#  - The checkpoint of step 1 resumes to the end.
#  - A ring of 3 workers stopped in a long step: a worker in its batch
#    gives it up between two blocks, and the job's checkpoint resumes to
#    the uninterrupted run's model.
#  - A stopped ring of 2 workers skips the final evaluation and the
#    snapshots not yet evaluated (evaluations that can outlast a stop's
#    grace); its model is written for `gradwire eval`.
#  - A rank waiting in the rendezvous for a rank that never comes (rank 0
#    of 2, started alone, as srun starts it when the other rank's node
#    failed) ends at SIGTERM, saying whom it waited for, exit 130, instead
#    of sitting out the rendezvous timeout.
#  - A rank waiting at the job's last barrier for rank 0 (stalled by a
#    [[faults]] stall after its last step) ends at SIGTERM, exit 130,
#    saying so, while rank 0 is still stopped: its close does not wait out
#    the frame the stalled rank never took, nor crash on it. Rank 0 then
#    goes on and writes its summary.json.
# Usage: stop_signals.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$(realpath "${1:?usage: stop_signals.sh GRADWIRE SOURCE_DIR}")
src=${2:?usage: stop_signals.sh GRADWIRE SOURCE_DIR}
tmp=$(mktemp -d)
trap 'kill "$pid" ${pid0:-} 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
pid0=
bad() { echo "FAIL: $*" >&2; fail=1; }
pid=

# term_when COMMAND...: once COMMAND succeeds (a state of $pid's run: a
# record written, a port listening; looked at twice a second, 10 minutes
# at most as a hang guard), SIGTERM to $pid; its exit status in $rc.
term_when() {
  for _ in $(seq 1 1200); do
    "$@" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -TERM "$pid"
  rc=0
  wait "$pid" || rc=$?
  pid=
}

# A GPT whose step takes seconds (5 s on a 2-core AVX-512 VM): context 2048.
long=(-q --no-report --out "$tmp/long" --set model.context=2048 --set train.batch_size=24 --set train.max_steps=2
      --set train.log_every=1 --set train.eval=\"after\" --set data.test_subset=8)
"$gw" run "$src/examples/lm.toml" "${long[@]}" > "$tmp/long.txt" 2>&1 &
pid=$!
term_when grep -qs '"type":"step"' "$tmp/long/metrics.jsonl" # the first step's record
grep -q "stopped in the middle of step 2: the run ends after step 1" "$tmp/long.txt" ||
  bad "SIGTERM in step 2 did not stop it between layers (exit $rc): $(tail -3 "$tmp/long.txt")"
python3 - "$tmp/long/summary.json" <<'PY' || bad "summary.json: $(head -c 400 "$tmp/long/summary.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "interrupted" and s["steps"] == 1, (s["status"], s["steps"])
PY
[[ -f $tmp/long/checkpoints/step-000000001/MANIFEST.json ]] ||
  bad "no checkpoint of step 1 after the stop: $(ls "$tmp/long/checkpoints" 2>&1)"
"$gw" run --resume "$tmp/long" -q --no-report > "$tmp/resume.txt" 2>&1 || bad "the resume failed: $(tail -3 "$tmp/resume.txt")"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(not (s['status'] == 'completed' and s['steps'] == 2))" \
  "$tmp/long/summary.json" || bad "the resumed run did not complete its 2 steps: $(head -c 300 "$tmp/long/summary.json")"

# A ring of 2 workers in one process: SIGTERM once the first step's
# record is written. The stop skips the final evaluation (of the whole
# validation text here, seconds long) and the snapshots not yet evaluated:
# no eval record, final_test_* null, and the closing line names `gradwire eval`.
ring=(-q --no-report --out "$tmp/ring" --set topology.kind=\"ring\" --set topology.workers=2 --set train.threads=1
      --set train.max_steps=2000 --set train.log_every=1 --set train.eval_steps=1 --set train.eval=\"after\")
"$gw" run "$src/examples/lm.toml" "${ring[@]}" > "$tmp/ring.txt" 2>&1 &
pid=$!
term_when grep -qs '"type":"step"' "$tmp/ring/metrics.jsonl"
grep -q "gradwire eval $tmp/ring" "$tmp/ring.txt" || bad "the stopped ring's closing line (exit $rc): $(tail -3 "$tmp/ring.txt")"
python3 - "$tmp/ring" <<'PY' || bad "the stopped ring's results: $(head -c 400 "$tmp/ring/summary.json")"
import json, os, sys
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
assert s["status"] == "interrupted", s["status"]
assert s["final_test_accuracy"] is None and s["final_test_loss"] is None, (s["final_test_accuracy"], s["final_test_loss"])
records = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
assert not [r for r in records if r["type"] == "eval"], "an evaluation after the stop"
assert os.path.exists(os.path.join(d, "model.safetensors"))
PY

# A ring of 3 workers in one process whose steps take seconds (context
# 768): SIGTERM once the first step's record is written. A worker in step
# 2's batch gives it up between two of the GPT's blocks, and the job ends
# at a step every worker reached, with its checkpoint, which resumes to the
# uninterrupted run's model, tensor for tensor.
r3=(-q --no-report --set topology.kind=\"ring\" --set topology.workers=3 --set train.threads=1 --set model.context=768
    --set train.batch_size=12 --set train.max_steps=3 --set train.log_every=1 --set train.eval=\"after\"
    --set data.test_subset=8)
"$gw" run "$src/examples/lm.toml" "${r3[@]}" --out "$tmp/r3-full" > "$tmp/r3-full.txt" 2>&1 ||
  bad "the uninterrupted 3-worker ring: $(tail -3 "$tmp/r3-full.txt")"
"$gw" run "$src/examples/lm.toml" "${r3[@]}" --out "$tmp/r3" > "$tmp/r3.txt" 2>&1 &
pid=$!
term_when grep -qs '"type":"step"' "$tmp/r3/metrics.jsonl"
[[ $rc -eq 130 ]] && grep -q "stopped in the middle of step 2: it holds after step 1" "$tmp/r3.txt" ||
  bad "SIGTERM in the 3-worker ring's step 2 gave up no worker's step (exit $rc): $(tail -3 "$tmp/r3.txt")"
ls "$tmp/r3/checkpoints"/step-*/MANIFEST.json > /dev/null 2>&1 || bad "the stopped 3-worker ring wrote no checkpoint"
"$gw" run --resume "$tmp/r3" -q --no-report > "$tmp/r3-resume.txt" 2>&1 ||
  bad "the 3-worker ring's resume: $(tail -3 "$tmp/r3-resume.txt")"
/usr/bin/python3 "$src/tests/scheduler/torch/same_tensors.py" "$tmp/r3-full/model.safetensors" "$tmp/r3/model.safetensors" 0 ||
  bad "the 3-worker ring stopped in a step and resumed differs from the uninterrupted run"

# Rank 0 of 2 alone: SIGTERM once it listens for the others.
port=$((20000 + RANDOM % 20000))
GRADWIRE_RANK=0 GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$port \
  "$gw" run "$src/examples/ring.toml" -q --no-report --set topology.workers=2 --out "$tmp/alone" > "$tmp/alone.txt" 2>&1 &
pid=$!
term_when python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)))" # it listens
[[ $rc -eq 130 ]] && grep -q "stopped (Ctrl-C or SIGTERM) waiting for rank(s) 1 of 2" "$tmp/alone.txt" ||
  bad "rank 0 waiting in the rendezvous: exit $rc at SIGTERM: $(tail -2 "$tmp/alone.txt")"

# Rank 1 at the last barrier, rank 0 stopped for 6 s after its step 3.
cat > "$tmp/stall.toml" <<'EOF'
[experiment]
name = "barrier-wait"
trace = true
[model]
kind = "mlp"
[topology]
kind = "ring"
workers = 2
[train]
max_steps = 3
batch_size = 32
[transport]
peer_timeout_ms = 60000
[[faults]]
kind = "stall"
rank = 0
at_step = 3
seconds = 6
EOF
port=$((20000 + RANDOM % 20000))
export GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$port
GRADWIRE_RANK=0 "$gw" run "$tmp/stall.toml" -q --no-report --out "$tmp/stall" > "$tmp/stall0.txt" 2>&1 &
pid0=$!
GRADWIRE_RANK=1 "$gw" run "$tmp/stall.toml" -q --no-report --out "$tmp/stall" > "$tmp/stall1.txt" 2>&1 &
pid=$!
unset GRADWIRE_SIZE GRADWIRE_RENDEZVOUS
state_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; } # T: stopped
# Rank 1 writes its trace part just before the barrier; rank 0 is then in its stall.
at_barrier() { test -f "$tmp/stall/trace-rank1.part.json" && [[ $(state_of "$pid0") == T ]]; }
term_when at_barrier
state0=$(state_of "$pid0")
[[ $rc -eq 130 ]] && grep -q "barrier 1 stopped (Ctrl-C or SIGTERM) waiting for rank 0" "$tmp/stall1.txt" ||
  bad "rank 1 at the last barrier: exit $rc at SIGTERM: $(tail -3 "$tmp/stall1.txt")"
[[ $state0 == T ]] || bad "rank 1 ended only after rank 0's 6 s stall (rank 0's state: ${state0:-gone})"
rc0=0
wait "$pid0" || rc0=$?
python3 - "$tmp/stall/summary.json" <<'PY' || bad "rank 0 after rank 1's stop (exit $rc0): $(tail -2 "$tmp/stall0.txt")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "completed" or (s["status"] == "failed" and "rank 1" in s["error"]), s
PY

[[ $fail -eq 0 ]] && echo "stop signals: a long step is stopped between layers, its run resumes; a ring of 3 stops within a step and resumes exactly; a stopped ring skips its final evaluation; a rendezvous wait and a barrier wait end"
exit $fail
