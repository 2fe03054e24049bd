#!/usr/bin/env bash
# A worker whose computation never returns (here [[faults]] kind = "stall"
# in one process: its thread sleeps for 10 minutes) is judged silent after
# the step timeout; the run then fails with that error and its results
# folder, and the process ends: its other actors stop, the stuck one is
# given up train.stop_wait_s (here 5 s; 60 by default) after it was told
# to stop, and the actor system, which would wait for it for ever, is left
# to the process's end.
# Usage: hung_worker.sh path/to/gradwire path/to/source
set -uo pipefail
GW=$1
src=$2
. "$src/tests/check_support.sh"
{ cat "$src/examples/ring.toml"; printf '\n[[faults]]\nkind = "stall"\nrank = 1\nat_step = 20\nseconds = 600.0\n'; } >"$work/hung.toml"
rc=0
timeout -k 5 $((240 * ${GRADWIRE_TIME_SCALE:-1})) "$GW" run "$work/hung.toml" --set train.step_timeout_s=2 \
  --set train.max_steps=200 --set train.stop_wait_s=5 "${small[@]}" -q --no-report --out "$work/hung" >"$work/hung.txt" 2>&1 || rc=$?
[ $rc = 2 ] || { bad "exited $rc, expected 2 (124 or 137: it hung)"; sed 's/^/    /' "$work/hung.txt"; }
has "$work/hung.txt" 'worker rank 1 silent for 2000 ms'
has "$work/hung.txt" 'still running 5 s after they were told to stop'
/usr/bin/python3 - "$work/hung/summary.json" <<'PY' || bad "summary.json: a failed run's summary naming the silent worker"
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(not (s['status'] == 'failed' and 'worker rank 1 silent' in s['error']))
PY
[ $fail = 0 ] && echo "ok: a worker stuck for good ends the run with its error and results, not a hang"
exit $fail
