#!/usr/bin/env bash
# Real processes: ring allreduce across 2 and 4 processes over shared memory
# and TCP (exact sums checked by the bench itself: a wrong sum exits 4);
# a process with the wrong job token is refused; a killed peer is reported
# by rank within the liveness bound, and nothing hangs.
# Usage: multiprocess.sh path/to/gradwire
set -uo pipefail
GW=$1
fail=0
work=$(mktemp -d)
r1=
trap 'rm -rf "$work"; [ -n "$r1" ] && kill -9 $r1 2>/dev/null' EXIT
say() { printf '%s\n' "$*"; }
bad() { say "FAIL: $*"; fail=1; }
has() { grep -q -- "$2" "$1" || { bad "$1 lacks '$2'"; sed 's/^/    /' "$1"; }; }
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for case in "2 posix,cma" "2 tcp" "4 posix,cma" "3 tcp"; do
  set -- $case
  out=$work/ar_$1_$2.txt
  if timeout 120 "$GW" bench allreduce --procs "$1" --tls "$2" -b 4K -e 4M -f 32 -n 3 -w 1 --spin-us 50 >"$out" 2>&1; then
    rows=$(grep -cE '^ +[0-9]+ .* ok$' "$out")
    [ "$rows" = 3 ] || { bad "allreduce $1 procs over $2: $rows of 3 sizes ok"; cat "$out"; }
  else
    bad "allreduce $1 procs over $2 exited $?"; cat "$out"
  fi
done

# Wrong token: rank 1 is refused by rank 0 and says why.
p=$(port)
GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$p GRADWIRE_TOKEN=right GRADWIRE_RANK=0 \
  timeout 30 "$GW" bench allreduce -b 4K -e 4K -n 1 -w 0 >"$work/tok0.txt" 2>&1 &
r0=$!
GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$p GRADWIRE_TOKEN=wrong GRADWIRE_RANK=1 \
  timeout 30 "$GW" bench allreduce -b 4K -e 4K -n 1 -w 0 >"$work/tok1.txt" 2>&1
rc=$?
kill $r0 2>/dev/null; wait $r0 2>/dev/null
[ $rc = 2 ] || bad "wrong token: rank 1 exited $rc, expected 2"
has "$work/tok1.txt" "wrong job token"
has "$work/tok0.txt" "refused a process"

# Killed peer: rank 0 reports rank 1 by number within the liveness bound
# (5 s), over shared memory (UCX) and over TCP (the communicator's lanes).
for tls in default tcp; do
tlsarg=()
[ $tls = tcp ] && tlsarg=(--tls tcp)
p=$(port)
export GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$p GRADWIRE_TOKEN=k
GRADWIRE_RANK=0 timeout 60 "$GW" bench allreduce "${tlsarg[@]}" -b 1M -e 1M -n 1000000 -w 0 --spin-us 50 >"$work/kill0.txt" 2>&1 &
r0=$!
GRADWIRE_RANK=1 "$GW" bench allreduce "${tlsarg[@]}" -b 1M -e 1M -n 1000000 -w 0 --spin-us 50 >"$work/kill1.txt" 2>&1 &
r1=$!  # the process itself (not a timeout wrapper): it is the one to kill
# Killed once both ranks are in the job: rank 0 prints its header after the
# barrier every rank passes (a state, not a time).
for _ in $(seq 1 1200); do grep -q "^# gradwire allreduce" "$work/kill0.txt" 2>/dev/null && break; sleep 0.05; done
grep -q "^# gradwire allreduce" "$work/kill0.txt" || bad "killed peer: the two ranks never got into the job"
kill -9 $r1
wait $r1 2>/dev/null
r1=
start=$(date +%s)
wait $r0; rc=$?
took=$(( $(date +%s) - start ))
[ $rc = 3 ] || bad "killed peer ($tls): rank 0 exited $rc, expected 3"
[ $took -le 30 ] || bad "killed peer ($tls): rank 0 took $took s to notice (liveness bound 5 s)"
has "$work/kill0.txt" "rank 1 failed"
unset GRADWIRE_SIZE GRADWIRE_RENDEZVOUS GRADWIRE_TOKEN
done

# A bad rendezvous address fails every rank with a message; the launcher
# passes the status on.
timeout 60 "$GW" bench allreduce --procs 2 -b 4K -e 4K --rendezvous no-such-host.invalid:5000 >"$work/launch.txt" 2>&1
rc=$?
[ $rc = 2 ] || bad "a job with an unknown rendezvous host exited $rc, expected 2"
has "$work/launch.txt" "rendezvous host 'no-such-host.invalid'"

# Training across processes: the same sync ring config gives the same
# model in one process and in 2 (shared memory) or 3 (TCP) processes.
src=$(cd "$(dirname "$0")/../.." && pwd)
# The first 12,000 training images and 1,000 test images: 40 steps use no
# more, and each process then reads only those (a 4-process ring under ASan:
# 11.3 -> 6.9 s).
small=(--set data.train_subset=12000 --set data.test_subset=1000)
common=(--set train.max_steps=40 --set train.log_every=10 -q "${small[@]}")
close() { /usr/bin/python3 -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) < 0.01 else 1)" "$1" "$2"; }
topo() { /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['final_test_loss'], s['processes'], s['replica_spread'], s['allreduce'])" "$1"; }
# Over TCP alone "auto" sums through the communicator's lanes; "actors"
# keeps the ring of actors over UCX's TCP. The ring of actors across
# processes holds the bits of the ring in one process; the communicator
# does at 2 ranks, and at 3 adds in an order of its own (close, below).
for case in "2 posix,cma auto" "3 tcp auto" "3 tcp actors"; do
  set -- $case
  "$GW" run "$src/examples/ring.toml" --set topology.workers=$1 "${common[@]}" --out "$work/in_$1" --force \
    >"$work/in_$1.txt" 2>&1 || { bad "in-process ring of $1 failed"; cat "$work/in_$1.txt"; }
  timeout 120 "$GW" run "$src/examples/ring.toml" --procs $1 --set topology.workers=$1 --set transport.tls=\"$2\" \
    --set topology.ring.allreduce=\"$3\" "${common[@]}" --out "$work/mp_$1" --force >"$work/mp_$1.txt" 2>&1 ||
    { bad "ring across $1 processes ($2, $3) failed"; cat "$work/mp_$1.txt"; }
  read -r _ _ _ path <<<"$(topo "$work/mp_$1/summary.json")"
  [ $3 = actors ] && [ "$path" != actors ] && bad "topology.ring.allreduce = \"actors\" ran through $path"
  [ $2 = tcp ] && [ $3 = auto ] && [ "$path" != collective ] && bad "auto over TCP alone ran through $path, not the communicator"

  a=$(topo "$work/in_$1/summary.json" | cut -d' ' -f1)
  read -r b procs spread _ <<<"$(topo "$work/mp_$1/summary.json")"
  if [ "$path" = collective ] && [ $1 -ge 3 ]; then
    close "$a" "$b" || bad "ring of $1 through the communicator: test loss $b, far from $a in one process"
  else
    [ "$a" = "$b" ] || bad "ring of $1: test loss $a in one process, $b across processes"
  fi
  [ "$procs" = "$1" ] || bad "summary.json says processes=$procs, expected $1"
  [ "$spread" = "0.0" ] || bad "replicas across processes differ (spread $spread)"
  ! grep -q "is gone" "$work/mp_$1.txt" || bad "a completed run across $1 processes reported a peer lost"
  grep -qE '"worker":1[,}]' "$work/mp_$1/metrics.jsonl" || bad "rank 0's metrics.jsonl lacks worker 1's records"
  # trace.json: rank 0 merged every rank's spans (one process row each) and removed the parts.
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(sorted({e['pid'] for e in d['traceEvents'] if e['name']=='compute'}) != list(range(int(sys.argv[2]))))" \
    "$work/mp_$1/trace.json" $1 || bad "trace.json of the ring across $1 processes lacks a rank's compute spans"
  ls "$work/mp_$1"/*.part.json >/dev/null 2>&1 && bad "trace parts left in the results folder"
done
# Sync parameter server: the same model in 1 and 3 processes (3 workers: the
# shard sums in rank order, whatever order pushes arrive in); async over 4
# processes and local SGD over 2 train.
ps=(run "$src/examples/ps-async.toml" --set topology.workers=3 --set 'topology.ps.mode="sync"' "${common[@]}")
"$GW" "${ps[@]}" --out "$work/ps1" >"$work/ps1.txt" 2>&1 || { bad "sync PS in one process failed"; cat "$work/ps1.txt"; }
timeout 120 "$GW" "${ps[@]}" --procs 3 --out "$work/ps2" >"$work/ps2.txt" 2>&1 || { bad "sync PS across 3 processes failed"; cat "$work/ps2.txt"; }
[ "$(topo "$work/ps1/summary.json" | cut -d' ' -f1)" = "$(topo "$work/ps2/summary.json" | cut -d' ' -f1)" ] ||
  bad "sync parameter server: different models in 1 and 3 processes"
# Shards spread over the ranks (shard i on rank i mod 3): the same model again.
timeout 120 "$GW" "${ps[@]}" --procs 3 --set 'topology.ps.shard_placement="spread"' --out "$work/ps2s" >"$work/ps2s.txt" 2>&1 ||
  { bad "sync PS with spread shards across 3 processes failed"; cat "$work/ps2s.txt"; }
[ "$(topo "$work/ps1/summary.json" | cut -d' ' -f1)" = "$(topo "$work/ps2s/summary.json" | cut -d' ' -f1)" ] ||
  bad "sync parameter server: spread shards give a different model"
timeout 120 "$GW" run "$src/examples/ps-async.toml" --procs 3 --set topology.workers=3 --set topology.ps.shards=3 \
  --set 'topology.ps.shard_placement="spread"' "${common[@]}" --out "$work/ps3s" >"$work/ps3s.txt" 2>&1 ||
  { bad "async PS with a shard on each of 3 processes failed"; cat "$work/ps3s.txt"; }
timeout 120 "$GW" run "$src/examples/ps-async.toml" --procs 4 "${common[@]}" --out "$work/ps4" >"$work/ps4.txt" 2>&1 ||
  { bad "async PS across 4 processes failed"; cat "$work/ps4.txt"; }
timeout 120 "$GW" run "$src/examples/local-sgd.toml" --procs 2 --set topology.workers=2 "${common[@]}" --out "$work/ls2" \
  >"$work/ls2.txt" 2>&1 || { bad "local SGD across 2 processes failed"; cat "$work/ls2.txt"; }
# Every other topology trains across 4 processes (AD-PSGD with its requests
# and a slow worker), and the ring with overlap (ring peer actors) across 2.
for case in "gossip-dpsgd 4" "gossip-adpsgd 4" "hierarchical 4"; do
  set -- $case
  timeout 120 "$GW" run "$src/examples/$1.toml" --procs $2 --set topology.workers=$2 "${common[@]}" --out "$work/$1" \
    >"$work/$1.txt" 2>&1 || { bad "$1 across $2 processes failed"; cat "$work/$1.txt"; }
done
timeout 120 "$GW" run "$src/examples/ring.toml" --procs 2 --set topology.ring.overlap=true "${common[@]}" --out "$work/ov" \
  >"$work/ov.txt" 2>&1 || { bad "ring with overlap across 2 processes failed"; cat "$work/ov.txt"; }
[ "$(topo "$work/ov/summary.json" | cut -d' ' -f1)" = "$(topo "$work/in_2/summary.json" | cut -d' ' -f1)" ] ||
  bad "ring with overlap across processes differs from the ring in one process"
# The ring's buckets summed by the collective communicator
# (topology.ring.allreduce = "collective": shared-memory sums here): every
# replica the same; at 2 processes the same model as the ring of actors
# in one process, with overlap too; at 3 a model that trains as well;
# with speed balancing the shares still move.
same() { /usr/bin/python3 "$src/tests/transport/same_model.py" "$1" "$2" >/dev/null; }
coll=(--set 'topology.ring.allreduce="collective"')
timeout 120 "$GW" run "$src/examples/ring.toml" --procs 2 "${coll[@]}" "${common[@]}" --out "$work/c2" >"$work/c2.txt" 2>&1 ||
  { bad "collective ring across 2 processes failed"; cat "$work/c2.txt"; }
same "$work/in_2" "$work/c2" || bad "collective ring of 2 differs from the ring of actors in one process"
grep -q '"allreduce": "collective"' "$work/c2/summary.json" || bad "the collective ring's summary does not say so"
timeout 120 "$GW" run "$src/examples/ring.toml" --procs 2 "${coll[@]}" --set topology.ring.overlap=true --set topology.ring.bucket_kb=256 \
  "${common[@]}" --out "$work/c2o" >"$work/c2o.txt" 2>&1 || { bad "collective ring with overlap failed"; cat "$work/c2o.txt"; }
same "$work/in_2" "$work/c2o" || bad "collective ring of 2 with overlap and 256 KiB buckets differs from the ring in one process"
timeout 120 "$GW" run "$src/examples/ring.toml" --procs 3 --set topology.workers=3 "${coll[@]}" "${common[@]}" --out "$work/c3" \
  >"$work/c3.txt" 2>&1 || { bad "collective ring across 3 processes failed"; cat "$work/c3.txt"; }
read -r l3 procs3 spread3 _ <<<"$(topo "$work/c3/summary.json")"
[ "$procs3" = 3 ] && [ "$spread3" = "0.0" ] || bad "collective ring of 3: processes $procs3, replica spread $spread3"
close "$l3" "$(topo "$work/in_3/summary.json" | cut -d' ' -f1)" || bad "collective ring of 3: test loss $l3, far from the ring of actors'"
timeout 120 "$GW" run "$src/examples/ring-balanced.toml" --procs 2 --set topology.ring.balance_every=5 "${coll[@]}" "${common[@]}" \
  --out "$work/cbal" >"$work/cbal.txt" 2>&1 || { bad "balanced collective ring failed"; cat "$work/cbal.txt"; }
/usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
w = {p['worker']: p for p in s['per_worker']}
ok = s['replica_spread'] == 0.0 and w[0]['samples'] + w[1]['samples'] == 40 * 128 and w[1]['mean_batch'] < 64 < w[0]['mean_batch']
sys.exit(0 if ok else 1)" "$work/cbal/summary.json" || { bad "balanced collective ring: shares or replicas wrong"; cat "$work/cbal/summary.json"; }
# Checkpointed at step 20 through the communicator and resumed there: the
# same model, bit for bit, as the uninterrupted collective run of 3.
timeout 120 "$GW" run "$src/examples/ring.toml" --procs 3 --set topology.workers=3 "${coll[@]}" --set train.checkpoint_every=20 \
  "${common[@]}" --out "$work/c3ck" >"$work/c3ck.txt" 2>&1 || { bad "collective ring with checkpoints failed"; cat "$work/c3ck.txt"; }
rm -f "$work/c3ck/model.safetensors"
timeout 120 "$GW" run --resume "$work/c3ck" --from-step 20 --procs 3 -q >"$work/c3res.txt" 2>&1 ||
  { bad "collective ring resumed at step 20 failed"; cat "$work/c3res.txt"; }
same "$work/c3" "$work/c3ck" || bad "collective ring of 3 resumed at step 20 differs from the uninterrupted run"
# A rank killed at step 20 (fault injection) while the others sum through
# the communicator: the run fails naming it, the survivors' sums given up
# (not waited out: ctest's timeout would catch a hang).
printf '[[faults]]\nkind = "kill"\nrank = 2\nat_step = 20\n' > "$work/kill.toml"
cat "$src/examples/ring.toml" "$work/kill.toml" > "$work/ring-kill.toml"
rc=0
timeout 120 "$GW" run "$work/ring-kill.toml" --procs 3 --set topology.workers=3 --set train.min_workers=0 "${coll[@]}" \
  "${common[@]}" --out "$work/ckill" >"$work/ckill.txt" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || bad "collective ring with rank 2 killed: exit $rc"
grep -q "rank 2" "$work/ckill.txt" || { bad "collective ring with rank 2 killed: rank 2 not named"; cat "$work/ckill.txt"; }
# Speed balancing across 2 processes (its measurements cross the wire):
# the slow rank's share shrinks, the global batch and the replicas stay.
timeout 120 "$GW" run "$src/examples/ring-balanced.toml" --procs 2 --set topology.ring.balance_every=5 "${common[@]}" \
  --out "$work/bal" >"$work/bal.txt" 2>&1 || { bad "balanced ring across 2 processes failed"; cat "$work/bal.txt"; }
/usr/bin/python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))
w = {p['worker']: p for p in s['per_worker']}
ok = s['replica_spread'] == 0.0 and w[0]['samples'] + w[1]['samples'] == 40 * 128 and w[1]['mean_batch'] < 64 < w[0]['mean_batch']
sys.exit(0 if ok else 1)" "$work/bal/summary.json" || { bad "balanced ring across processes: shares or replicas wrong"; cat "$work/bal/summary.json"; }
# A sweep whose points run across processes: --procs workers gives each
# point as many processes as workers (the scaling study with real processes).
timeout 180 "$GW" run "$src/examples/ring.toml" --procs workers --sweep topology.workers=1,2 "${common[@]}" --no-report \
  --out "$work/sweep" >"$work/sweep.txt" 2>&1 || { bad "a sweep across processes failed"; cat "$work/sweep.txt"; }
/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit([(p['workers'], p['processes']) for p in d['points']] != [(1, 1), (2, 2)])" \
  "$work/sweep/sweep.json" || bad "sweep.json does not show 1 and 2 processes for 1 and 2 workers"
timeout 30 "$GW" run "$src/examples/ring.toml" --procs two -q >"$work/badprocs.txt" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "expected a number of processes" "$work/badprocs.txt" || bad "--procs two: rc=$rc $(cat "$work/badprocs.txt")"
# One worker cannot be spread over processes: an error, not two copies of the run.
timeout 30 "$GW" run "$src/examples/default.toml" --procs 2 -q --out "$work/single2" >"$work/single2.txt" 2>&1
rc=$?
[ $rc = 2 ] && grep -q 'trains one worker in one process' "$work/single2.txt" || bad "single topology on 2 processes: rc=$rc $(cat "$work/single2.txt")"
# A job whose worker count disagrees with its processes says so.
timeout 60 "$GW" run "$src/examples/ring.toml" --procs 2 --set topology.workers=3 -q --out "$work/mis" >"$work/mis.txt" 2>&1
rc=$?
[ $rc = 2 ] || bad "3 workers on 2 processes exited $rc, expected 2"
has "$work/mis.txt" "each process runs one worker"

# Async parameter server: a worker process killed mid-run; rank 0 carries on
# without it and says so (launched by hand, as srun without --kill-on-bad-exit).
# The kill is injected from the config at a step ([[faults]]), not timed from
# outside: the same on a machine of any speed.
p=$(port)
export GRADWIRE_SIZE=3 GRADWIRE_RENDEZVOUS=127.0.0.1:$p GRADWIRE_TOKEN=a
{ cat "$src/examples/ps-async.toml"; printf '\n[[faults]]\nkind = "kill"\nrank = 2\nat_step = 40\n'; } > "$work/lost.toml"
async=(run "$work/lost.toml" --set topology.workers=3 --set train.epochs=1 --set transport.peer_timeout_ms=1000 "${small[@]}" -q --out "$work/lost")
GRADWIRE_RANK=0 timeout 120 "$GW" "${async[@]}" >"$work/lost0.txt" 2>&1 &
r0=$!
GRADWIRE_RANK=1 timeout 120 "$GW" "${async[@]}" >"$work/lost1.txt" 2>&1 &
q1=$!
GRADWIRE_RANK=2 timeout 120 "$GW" "${async[@]}" >"$work/lost2.txt" 2>&1 &
q2=$!
wait $r0; rc=$?
wait $q1
wait $q2; rc2=$?
unset GRADWIRE_SIZE GRADWIRE_RENDEZVOUS GRADWIRE_TOKEN
[ $rc2 = 137 ] || bad "the injected kill: rank 2 exited $rc2, expected 137 (SIGKILL)"
has "$work/lost2.txt" "killed after step 40"
[ $rc = 0 ] || { bad "async PS without a lost worker: rank 0 exited $rc"; cat "$work/lost0.txt"; }
has "$work/lost0.txt" "carrying on without worker 2"
[ -f "$work/lost/summary.json" ] && /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['lost_workers'] != [2])" \
  "$work/lost/summary.json" || bad "summary.json does not list worker 2 as lost"
/usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d['otherData']['missing_ranks'] != [2])" \
  "$work/lost/trace.json" || bad "trace.json of the run that lost rank 2 is not valid or does not say rank 2 is missing"

# The same through the launcher: with --procs 3 the lost rank goes through
# the job's own failure handling, the survivors finish and rank 0 writes the
# results; the launcher exits with rank 0's status.
rc=0
timeout 120 "$GW" run "$work/lost.toml" --procs 3 --set topology.workers=3 --set train.epochs=1 \
  --set transport.peer_timeout_ms=1000 "${small[@]}" -q --no-report --out "$work/lost3" >"$work/lost3.txt" 2>&1 || rc=$?
[ $rc = 0 ] || { bad "--procs 3 async PS that loses rank 2: the launcher exited $rc"; cat "$work/lost3.txt"; }
has "$work/lost3.txt" "rank 2 was killed by signal 9"
[ -f "$work/lost3/summary.json" ] && /usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['lost_workers'] != [2] or s['status'] != 'completed')" \
  "$work/lost3/summary.json" || bad "--procs 3: summary.json does not show a completed run that lost worker 2"

# A sync ring with the sharded update that loses a rank fails, naming it
# and why it cannot re-form, and still writes its summary with the failure.
{ cat "$src/examples/ring.toml"; printf '\n[[faults]]\nkind = "kill"\nrank = 2\nat_step = 5\n'; } > "$work/ringlost.toml"
rc=0
timeout 120 "$GW" run "$work/ringlost.toml" --procs 3 --set topology.workers=3 --set transport.peer_timeout_ms=1000 \
  "${small[@]}" -q --no-report --out "$work/ringlost" >"$work/ringlost.txt" 2>&1 || rc=$?
[ $rc = 2 ] || { bad "sync ring that loses rank 2: the launcher exited $rc, expected 2"; cat "$work/ringlost.txt"; }
has "$work/ringlost.txt" "rank 2"
has "$work/ringlost.txt" "set it to false for a ring that re-forms"

# The elastic ring (topology.ring.sharded_update = false): it loses rank 2 at its
# step 30, the two survivors re-form a ring of 2 and finish every step with
# equal replicas; summary.json records the fault.
rc=0
timeout 120 "$GW" run "$work/ringlost.toml" --procs 3 --set topology.workers=3 --set transport.peer_timeout_ms=1000 \
  --set topology.ring.sharded_update=false --set train.epochs=1 "${small[@]}" -q --no-report --out "$work/ringgo" >"$work/ringgo.txt" 2>&1 || rc=$?
[ $rc = 0 ] || { bad "elastic ring that loses rank 2: the launcher exited $rc, expected 0"; cat "$work/ringgo.txt"; }
has "$work/ringgo.txt" "the ring goes on without worker 2: 2 workers from step"
/usr/bin/python3 - "$work/ringgo/summary.json" <<'PY' || bad "the elastic ring's summary.json: see above"
import json, sys
s = json.load(open(sys.argv[1]))
f = s['faults']
ok = (s['status'] == 'completed' and s['lost_workers'] == [2] and len(f) == 1 and f[0]['rank'] == 2
      and f[0]['workers_after'] == 2 and f[0]['recovered_at'] is not None and f[0]['at_step'] >= 5
      and f[0]['steps_lost'] <= 1 and s['replica_spread'] == 0
      and all(w['steps'] == s['steps_per_worker'] for w in s['per_worker'][:2]))
if not ok:
    print(json.dumps({k: s[k] for k in ('status', 'lost_workers', 'faults', 'replica_spread', 'steps_per_worker')}), file=sys.stderr)
sys.exit(not ok)
PY
[ -f "$work/ringgo/summary.json" ] && grep -q '"faults"' "$work/ringgo/summary.json" || sed 's/^/    /' "$work/ringgo.txt"
/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); sys.exit(s['status'] != 'failed' or 'rank 2' not in s['error'])" \
  "$work/ringlost/summary.json" || bad "the failed sync ring wrote no summary.json with its failure"

# Ranks on one host whose UCX shared-memory FIFO elements differ would crash
# inside UCX at the first send: both refuse at connect, exit 2, and leave
# nothing in /dev/shm.
p=$(port)
# Each rank writes its pid before it becomes gradwire (exec keeps it), so
# that only these two ranks' arenas ("/dev/shm/gradwire-<pid>-...") are
# looked for: tests beside this one kill ranks and leave theirs.
as_pid() { local file=$1; shift; echo $$ >"$file"; exec "$@"; }
export -f as_pid
export GRADWIRE_SIZE=2 GRADWIRE_RENDEZVOUS=127.0.0.1:$p GRADWIRE_TOKEN=fifo
GRADWIRE_RANK=0 timeout 60 bash -c 'as_pid "$@"' _ "$work/fifo0.pid" "$GW" run "$src/examples/ring.toml" -q --no-report \
  --set train.max_steps=20 "${small[@]}" --out "$work/fifo0" >"$work/fifo0.txt" 2>&1 &
f0=$!
UCX_POSIX_FIFO_ELEM_SIZE=128 GRADWIRE_RANK=1 timeout 60 bash -c 'as_pid "$@"' _ "$work/fifo1.pid" "$GW" run \
  "$src/examples/ring.toml" -q --no-report --set train.max_steps=20 "${small[@]}" --out "$work/fifo1" >"$work/fifo1.txt" 2>&1
rc1=$?
wait $f0; rc0=$?
unset GRADWIRE_SIZE GRADWIRE_RENDEZVOUS GRADWIRE_TOKEN
[ $rc0 = 2 ] && [ $rc1 = 2 ] || bad "different FIFO element sizes: ranks exited $rc0 and $rc1, expected 2 and 2"
has "$work/fifo0.txt" "FIFO elements"
has "$work/fifo1.txt" "FIFO elements"
for r in 0 1; do
  pid=$(cat "$work/fifo$r.pid" 2>/dev/null)
  [ -n "$pid" ] || { bad "different FIFO element sizes: rank $r wrote no pid"; continue; }
  left=$(ls /dev/shm/gradwire-"$pid"-* 2>/dev/null)
  [ -z "$left" ] || bad "different FIFO element sizes: rank $r left $left in /dev/shm"
done

# Signals reach every rank once through the launcher, and nothing outlives
# it. Each case waits for rank 0 to have opened its results (an observable
# state, not a time), then signals the launcher.
long=(run "$src/examples/ring.toml" --procs 2 -q --no-report --set train.epochs=200)
started() { for _ in $(seq 1 600); do [ -f "$1/metrics.jsonl" ] && return 0; sleep 0.05; done; return 1; }
gone() { for _ in $(seq 1 600); do pgrep -f -- "--out $1" >/dev/null || return 0; sleep 0.05; done; return 1; }
"$GW" "${long[@]}" --out "$work/sigterm" >"$work/sigterm.txt" 2>&1 &
launcher=$!
started "$work/sigterm" || bad "SIGTERM case: rank 0 never opened its results"
kill -TERM $launcher
wait $launcher; rc=$?
[ $rc = 130 ] || bad "SIGTERM to the launcher: it exited $rc, expected 130 (the job stopped at a step boundary)"
/usr/bin/python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['status'] != 'interrupted')" \
  "$work/sigterm/summary.json" || bad "SIGTERM to the launcher: no interrupted summary.json"
gone "$work/sigterm" || bad "SIGTERM to the launcher: ranks left running"
"$GW" "${long[@]}" --out "$work/sigkill" >"$work/sigkill.txt" 2>&1 &
launcher=$!
started "$work/sigkill" || bad "SIGKILL case: rank 0 never opened its results"
kill -KILL $launcher
wait $launcher 2>/dev/null
gone "$work/sigkill" || { bad "the launcher killed by SIGKILL left orphan ranks"; pkill -9 -f -- "--out $work/sigkill"; }

[ $fail = 0 ] && say "multiprocess: all checks passed"
exit $fail
