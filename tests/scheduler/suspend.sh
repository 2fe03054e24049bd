#!/usr/bin/env bash
# A whole job suspended mid-run for longer than every timeout, as SLURM's
# scontrol suspend, gang scheduling, Ctrl-Z or a debugger stop it (every
# process at once, SIGSTOP; here [[faults]] kind = "suspend", after a
# worker's step), goes on when it runs again: no worker judged silent, no request given
# up, every step done. Lock-step runs end with the same model, bit for
# bit, as the same run never suspended. train.step_timeout_s = 2 (requests
# and allreduce rounds: 4 s), suspended for 5 s. (With 1 s, a worker starved
# by a loaded machine was, now and then, silent for 1 s after the stop.)
# Usage: suspend.sh path/to/gradwire path/to/source
set -uo pipefail
GW=$1
src=$2
. "$src/tests/check_support.sh"
suspend='[[faults]]\nkind = "suspend"\nrank = 1\nat_step = 40\nseconds = 5.0'

# run NAME EXAMPLE FAULT [ARGS...]: the example for 120 steps with a 2 s
# step timeout (and FAULT's [[faults]] table, if any).
run() {
  local name=$1 example=$2 fault=$3
  shift 3
  { cat "$src/examples/$example"; printf '\n%b\n' "$fault"; } >"$work/$name.toml"
  local rc=0
  timeout $((120 * ${GRADWIRE_TIME_SCALE:-1})) "$GW" run "$work/$name.toml" --set train.step_timeout_s=2 \
    --set train.max_steps=120 "$@" "${small[@]}" -q --no-report --out "$work/$name" >"$work/$name.txt" 2>&1 || rc=$?
  [ $rc = 0 ] || { bad "$name: exited $rc, expected 0"; sed 's/^/    /' "$work/$name.txt"; touch "$work/failed"; }
}

# went_on NAME: completed, every worker every step, nobody lost.
went_on() {
  /usr/bin/python3 - "$work/$1/summary.json" <<'PY' || { bad "$1: summary.json (above)"; sed 's/^/    /' "$work/$1.txt"; }
import json, sys
s = json.load(open(sys.argv[1]))
ok = (s['status'] == 'completed' and not s.get('faults') and s['lost_workers'] == []
      and all(w['steps'] == s['steps_per_worker'] for w in s['per_worker']))
if not ok:
    print(json.dumps({k: s.get(k) for k in ('status', 'lost_workers', 'faults', 'steps_per_worker')}), file=sys.stderr)
sys.exit(not ok)
PY
}

# In one process: the coordinator, the ring's rounds and the shards'
# replies all wait across the stop. AD-PSGD's rank 3 is 3x slower, an
# emulated slowdown: a stop that lands in its computation must not make it
# sleep twice the stop (it did, silent past the timeout, now and then).
# Each run is its own process, stopped for 5 s of its 7 or so: they go
# four at a time (in the background, their failures kept in
# $work/failed), so that one's stop is another's running time.
in_process=(ring ps-async local-sgd gossip-dpsgd gossip-adpsgd hierarchical)
for ex in "${in_process[@]:0:4}"; do run "$ex" "$ex.toml" "$suspend" & done
wait
for ex in "${in_process[@]:4}"; do run "$ex" "$ex.toml" "$suspend" & done
# The same stop, landing for sure inside the slow worker's computation
# (mid_step: after its gradients, before its emulated 3x slowdown): its
# sleep counts only the time it ran, not the 5 s it was stopped. (Timed
# from the step's start, it slept twice the stop, silent past the 2 s
# step timeout; a stop after a step could not show it.)
run adpsgd-mid gossip-adpsgd.toml '[[faults]]\nkind = "suspend"\nrank = 3\nat_step = 20\nseconds = 5.0\nmid_step = true' &
run ring-plain ring.toml '' &
wait
[ -e "$work/failed" ] && fail=1
for ex in "${in_process[@]}"; do
  went_on "$ex"
  has "$work/$ex.txt" 'rank 1: suspends the job (this process) for 5 s after step 40'
  has "$work/$ex.txt" 'this process did not run for'
done
went_on adpsgd-mid
has "$work/adpsgd-mid.txt" 'rank 3: suspends the job (this process) for 5 s in the computation of step 21'
/usr/bin/python3 "$src/tests/transport/same_model.py" "$work/ring/model.safetensors" "$work/ring-plain/model.safetensors" \
  >/dev/null || bad "ring: the suspended run's model differs from the same run's never suspended"

# Across 3 processes, all stopped at once after rank 1's step 40: each
# rank's transport sees its own stop and gives its peers a fresh timeout.
for ex in ring ps-sync; do
  base=$ex.toml set=()
  [ $ex = ps-sync ] && base=ps-async.toml set=(--set topology.ps.mode=sync)
  run "procs-$ex" "$base" "$suspend" --procs 3 --set topology.workers=3 --set transport.peer_timeout_ms=2000 "${set[@]}"
  went_on "procs-$ex"
  has "$work/procs-$ex.txt" 'rank 1: suspends the job (3 processes on this host) for 5 s after step 40'
  [ "$(grep -c 'this process did not run for' "$work/procs-$ex.txt")" = 3 ] ||
    bad "procs-$ex: each of the 3 processes should see its own stop"
  run "procs-$ex-plain" "$base" '' --procs 3 --set topology.workers=3 "${set[@]}"
  /usr/bin/python3 "$src/tests/transport/same_model.py" "$work/procs-$ex/model.safetensors" \
    "$work/procs-$ex-plain/model.safetensors" >/dev/null ||
    bad "procs-$ex: the suspended run's model differs from the same run's never suspended"
done

[ $fail = 0 ] && echo "ok: suspended jobs go on, with the models of runs never suspended"
exit $fail
