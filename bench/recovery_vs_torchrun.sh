#!/usr/bin/env bash
# Recovery from a lost worker, gradwire's elastic ring against PyTorch DDP
# under torchrun, side by side on the same model and the same step.
#
# Both: MLP 784-256-128-10 on Fashion-MNIST, 3 processes on this machine,
# batch 64 each, SGD lr 0.05 momentum 0.9, rank 2 killed (SIGKILL, from
# inside, at a step: the same on a machine of any speed) after step 250.
#  - gradwire: `--procs 3`, topology.ring.sharded_update = false, a lost process
#    named after transport.peer_timeout_ms = 1000 (heartbeats every 200 ms);
#    the survivors re-form a ring of 2 from their memory, no restart, no
#    disk read. Checkpoints every 100 steps, as on the other side.
#  - PyTorch: `torchrun --max_restarts 1 --monitor_interval 1` (the agent
#    looks at its workers every second, favourable to it: the default is
#    5 s); rank 0 checkpoints every 100 steps; torchrun restarts every
#    worker, which load the checkpoint and go on.
#  - gradwire again with train.restarts = 1: the launcher starts a new
#    process for rank 2, which joins on rank 0's rendezvous port and is let
#    into the ring at the next step boundary with a live peer's state: back
#    at 3 workers, as torchrun's restart is.
# Measured: unix time of the kill to unix time of the first step done after
# recovery (for gradwire with a restart, also to the first step of the ring
# of 3 again), and steps lost (work redone or abandoned, per worker).
#
#   bench/recovery_vs_torchrun.sh [ROUNDS]      (needs python3-torch and a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
GW=${BUILD_DIR:-build}/gradwire
PY=/usr/bin/python3
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
{ cat examples/ring.toml; printf '\n[[faults]]\nkind = "kill"\nrank = 2\nat_step = 250\n'; } >"$tmp/ring.toml"

gw_s="" gw_lost="" pt_s="" pt_lost="" gw_full=""
for round in $(seq 1 "$ROUNDS"); do
  "$GW" run "$tmp/ring.toml" --procs 3 -q --no-report --out "$tmp/gw$round" --set topology.workers=3 \
    --set topology.ring.sharded_update=false --set transport.peer_timeout_ms=1000 --set train.max_steps=400 \
    --set train.checkpoint_every=100 --set train.eval=\"after\" >"$tmp/gw$round.txt" 2>&1
  kill_t=$(sed -n 's/.*killed after step .* unix time \([0-9.]*\)).*/\1/p' "$tmp/gw$round.txt")
  back_t=$(sed -n 's/.*first step of the re-formed ring .* (unix time \([0-9.]*\)).*/\1/p' "$tmp/gw$round.txt")
  lost=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['faults'][0]['steps_lost'])" "$tmp/gw$round/summary.json")
  gw_s+="$(echo "$back_t - $kill_t" | bc -l) "
  gw_lost+="$lost "

  "$GW" run "$tmp/ring.toml" --procs 3 -q --no-report --out "$tmp/gwr$round" --set topology.workers=3 \
    --set topology.ring.sharded_update=false --set transport.peer_timeout_ms=1000 --set train.max_steps=3000 \
    --set train.epochs=20 --set train.checkpoint_every=100 --set train.restarts=1 --set train.eval=\"after\" >"$tmp/gwr$round.txt" 2>&1
  kill_t=$(sed -n 's/.*killed after step .* unix time \([0-9.]*\)).*/\1/p' "$tmp/gwr$round.txt")
  full_t=$(sed -n 's/.*first step of the re-formed ring .* (unix time \([0-9.]*\)).*/\1/p' "$tmp/gwr$round.txt" | sed -n 2p)
  grep -q 'worker 2 is back' "$tmp/gwr$round.txt" && [[ -n $full_t ]] ||
    { echo "gradwire round $round: the new process did not rejoin:" >&2; tail -20 "$tmp/gwr$round.txt" >&2; exit 1; }
  gw_full+="$(echo "$full_t - $kill_t" | bc -l) "

  mkdir -p "$tmp/pt$round"
  (cd bench && OMP_NUM_THREADS=1 $PY torchrun_compat.py --nproc_per_node 3 --max_restarts 1 --monitor_interval 1 \
     --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$((29500 + round)) \
     torch_elastic.py --dir "$tmp/pt$round" --steps 400 --every 100 --kill-rank 2 --kill-step 250) >"$tmp/pt$round.txt" 2>&1 || true
  kill_t=$(sed -n 's/.*killed_at=\([0-9.]*\).*/\1/p' "$tmp/pt$round.txt" | head -1)
  back_t=$(sed -n 's/.*first_step_after_restart=\([0-9.]*\).*/\1/p' "$tmp/pt$round.txt" | head -1)
  resumed=$(sed -n 's/.*resumed_at=\([0-9]*\).*/\1/p' "$tmp/pt$round.txt" | head -1)
  [[ -n $kill_t && -n $back_t ]] || { echo "torchrun round $round did not recover:" >&2; tail -20 "$tmp/pt$round.txt" >&2; exit 1; }
  pt_s+="$(echo "$back_t - $kill_t" | bc -l) "
  pt_lost+="$((250 - resumed)) "
  echo "round $round/$ROUNDS done" >&2
done
g=$(echo $gw_s | tr ' ' '\n' | median)
p=$(echo $pt_s | tr ' ' '\n' | median)
echo "# recovery from a lost worker: 3 processes, MLP, rank 2 killed after step 250, $ROUNDS rounds (medians)"
printf "gradwire elastic ring:  %.3f s from the kill to the first step after recovery (rounds: %s), steps lost: %s\n" "$g" "$gw_s" "$gw_lost"
printf "torchrun (DDP, restart): %.3f s (rounds: %s), steps lost: %s\n" "$p" "$pt_s" "$pt_lost"
printf "ratio: gradwire recovers %.1fx faster\n" "$(echo "$p / $g" | bc -l)"
f=$(echo $gw_full | tr ' ' '\n' | median)
printf "gradwire, back at 3 workers (a new process, train.restarts = 1): %.3f s from the kill (rounds: %s); ratio to torchrun's restart: %.1fx\n" \
  "$f" "$gw_full" "$(echo "$p / $f" | bc -l)"
