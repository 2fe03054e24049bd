#!/usr/bin/env bash
# Two builds of gradwire side by side, interleaved round by round (this VM
# drifts by 20-30%, so only interleaved runs compare), on the paths a
# change to the runtime can move. Each round runs, for A then B:
#   ring training, 1 and 2 processes (examples/ring.toml, 600 steps, samples/s);
#   the async parameter server across 2 processes (1,000 steps, updates/s);
#   gradwire bench allreduce --procs 2 at 256 KiB, 1 MiB and 4 MiB (busbw GB/s).
#
#   bench/ab_builds.sh A_GRADWIRE B_GRADWIRE [ROUNDS]
# Run it from the older tree of the two: both builds read its examples (a
# newer build reads keys that have moved since, with a warning; an older
# one cannot read the new names).
# e.g. a CPU-only build of an earlier commit against build/gradwire:
#   git worktree add /tmp/before <commit> && cmake -S /tmp/before -B /tmp/before/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DGRADWIRE_CUDA=OFF -DBUILD_TESTING=OFF && cmake --build /tmp/before/build --target gradwire
#   bench/ab_builds.sh /tmp/before/build/gradwire build/gradwire 5
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: ab_builds.sh A_GRADWIRE B_GRADWIRE [ROUNDS]}
B=${2:?usage: ab_builds.sh A_GRADWIRE B_GRADWIRE [ROUNDS]}
ROUNDS=${3:-5}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Each run writes a fresh results folder; a run that fails prints FAILED
# (a figure is never read from an earlier run's summary).
ring() { # bin procs -> samples/s
  local args=(run examples/ring.toml -q --no-report --set train.max_steps=600 --set train.eval_every=1000
              --set topology.workers=$2 --out "$tmp/r")
  [[ $2 -gt 1 ]] && args+=(--procs $2)
  rm -rf "$tmp/r"
  "$1" "${args[@]}" >/dev/null || { echo FAILED; return; }
  $PY -c "import json; print(round(json.load(open('$tmp/r/summary.json'))['samples_per_sec']))"
}
# The flat topology.shards, which builds before [topology.ps] read as well
# as later ones (with a warning), so that both sides take the same command.
ps() { # bin -> updates/s
  rm -rf "$tmp/p"
  "$1" run examples/ps-async.toml --procs 2 -q --no-report --set topology.workers=2 --set topology.shards=1 \
    --set train.max_steps=1000 --out "$tmp/p" >/dev/null || { echo FAILED; return; }
  $PY -c "import json; s=json.load(open('$tmp/p/summary.json')); print(round(sum(w['steps'] for w in s['per_worker']) / s['train_seconds']))"
}
allreduce() { # bin -> busbw at 256K 1M 4M
  "$1" bench allreduce --procs 2 -b 256K -e 4M -f 4 -n 200 -w 20 2>/dev/null | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $5}'
}
printf "%-6s %-5s %9s %9s %8s  %s\n" side round ring1 ring2 ps "allreduce 256K 1M 4M (GB/s)"
for r in $(seq "$ROUNDS"); do
  for side in A B; do
    bin=$A
    [[ $side == B ]] && bin=$B
    printf "%-6s %-5s %9s %9s %8s  %s\n" "$side" "$r" "$(ring "$bin" 1)" "$(ring "$bin" 2)" "$(ps "$bin")" "$(allreduce "$bin")"
  done
done
