#!/usr/bin/env bash
# A hostile rank joins a running async parameter server (ranks 0 and 1 real
# gradwire processes) and sends every malformed frame kind; then it leaves
# without a word. The job must carry on without it and finish, with no
# crash, and rank 0 must say what it refused.
#   hostile_rank.sh GRADWIRE HOSTILE_RANK SOURCE_DIR
set -uo pipefail
gw=${1:?usage: hostile_rank.sh GRADWIRE HOSTILE_RANK SOURCE_DIR}
hostile=${2:?usage: hostile_rank.sh GRADWIRE HOSTILE_RANK SOURCE_DIR}
src=${3:?usage: hostile_rank.sh GRADWIRE HOSTILE_RANK SOURCE_DIR}
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && echo "kept $work" || rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
port=$(/usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
export GRADWIRE_SIZE=3 GRADWIRE_RENDEZVOUS=127.0.0.1:$port GRADWIRE_TOKEN=hostile-test
run=(run "$src/examples/ps-async.toml" --set topology.workers=3 --set train.epochs=1 --set transport.peer_timeout_ms=1000
     -q --no-report --out "$work/out")
GRADWIRE_RANK=0 timeout 120 "$gw" "${run[@]}" >"$work/r0.txt" 2>&1 &
r0=$!
GRADWIRE_RANK=1 timeout 120 "$gw" "${run[@]}" >"$work/r1.txt" 2>&1 &
r1=$!
GRADWIRE_RANK=2 timeout 120 "$hostile" >"$work/r2.txt" 2>&1
rc2=$?
wait $r0; rc0=$?
wait $r1; rc1=$?
[ $rc2 = 0 ] || { bad "the hostile rank itself failed ($rc2)"; cat "$work/r2.txt"; }
grep -q "attacking" "$work/r2.txt" || bad "the hostile rank never got into the job"
[ $rc0 = 0 ] || { bad "rank 0 exited $rc0 under attack"; cat "$work/r0.txt"; }
[ $rc1 = 0 ] || { bad "rank 1 exited $rc1 under attack"; cat "$work/r1.txt"; }
grep -q "refused" "$work/r0.txt" || { bad "rank 0 did not say what it refused"; cat "$work/r0.txt"; }
grep -q "carrying on without worker 2" "$work/r0.txt" || bad "rank 0 did not carry on without the hostile rank"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['status'] != 'completed' or s['lost_workers'] != [2])" \
  "$work/out/summary.json" || bad "the job under attack did not complete with worker 2 lost"
echo "rank 0 refused $(grep -c 'refused' "$work/r0.txt") frame(s) or more (the first 20 are logged)"

# A rank that keeps its link alive (heartbeats) and never steps: after
# train.step_timeout_s the async parameter server cuts it off and finishes
# without it, well before the silent rank would leave on its own.
port=$(/usr/bin/python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
export GRADWIRE_RENDEZVOUS=127.0.0.1:$port
run=(run "$src/examples/ps-async.toml" --set topology.workers=3 --set train.epochs=1 --set train.step_timeout_s=2
     -q --no-report --out "$work/silent")
GRADWIRE_RANK=2 "$hostile" silent 300 >"$work/s2.txt" 2>&1 &
s2=$!
GRADWIRE_RANK=0 timeout 120 "$gw" "${run[@]}" >"$work/s0.txt" 2>&1 &
r0=$!
GRADWIRE_RANK=1 timeout 120 "$gw" "${run[@]}" >"$work/s1.txt" 2>&1
rc1=$?
wait $r0; rc0=$?
kill $s2 2>/dev/null; wait $s2 2>/dev/null
grep -q "silent, heartbeats only" "$work/s2.txt" || bad "the silent rank never got into the job: $(cat "$work/s2.txt")"
[ $rc0 = 0 ] || { bad "rank 0 exited $rc0 beside a silent rank"; cat "$work/s0.txt"; }
[ $rc1 = 0 ] || { bad "rank 1 exited $rc1 beside a silent rank"; cat "$work/s1.txt"; }
grep -q "cut off: worker rank 2 silent" "$work/s0.txt" || { bad "rank 0 did not cut the silent rank off"; cat "$work/s0.txt"; }
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['status'] != 'completed' or s['lost_workers'] != [2])" \
  "$work/silent/summary.json" || bad "the job beside a silent rank did not complete with worker 2 lost"
[ $fail = 0 ] && echo "hostile rank: the job finished without it"
exit $fail
