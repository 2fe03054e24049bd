#!/usr/bin/env bash
# Every shipped example config runs with `gradwire run` as a user would
# start it, cut short (a few steps, a small test subset): no config in
# examples/ may rot. A config that asks for a GPU, on a machine without
# one, must be refused with the error that says so (exit 2).
# Usage: examples_run.sh GRADWIRE SOURCE_DIR
set -u
gw=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
no_gpu=0
"$gw" info | grep -q "visible CUDA devices: 0" && no_gpu=1
for f in "$src"/examples/*.toml; do
  name=$(basename "$f" .toml)
  start=$(date +%s.%N)
  if [ $no_gpu = 1 ] && grep -q '^device *= *"cuda' "$f"; then
    timeout $((120 * ${GRADWIRE_TIME_SCALE:-1})) "$gw" run "$f" -q --no-report --out "$tmp/$name" >"$tmp/$name.txt" 2>&1
    rc=$?
    if [ $rc -eq 2 ] && grep -qE "CUDA device\(s\) are visible|built without CUDA" "$tmp/$name.txt"; then
      echo "ok   examples/$name.toml (no GPU here: refused, as it should be)"
    else
      echo "FAIL: examples/$name.toml needs a GPU and there is none: expected exit 2 and an error saying so, got exit $rc"
      sed 's/^/    /' "$tmp/$name.txt"
      fail=1
    fi
    continue
  fi
  # A config with [[faults]] kills a process: it runs as its comment says, across processes.
  procs=()
  grep -q '^\[\[faults\]\]' "$f" && procs=(--procs workers)
  # A virtual-time study of hundreds of workers: one point of 16 here
  # (tests/actors/test_virtual_time.cpp runs every topology in virtual time).
  grep -q '^clock *= *"virtual"' "$f" && grep -q '^\[sweep\]' "$f" && procs=(--sweep topology.workers=16)
  # ResNet-20 is cut harder: a step of it costs a hundred of the MLP's, and
  # under ASan (GRADWIRE_TIME_SCALE) its hand-written convolutions are
  # instrumented load by load (a sweep of 4 points at 12 steps ran past 6 min).
  # Under sanitizers, batches of 8 and 2 steps: study-cifar still took
  # 209 s of ASan's stage at 4 steps of 32.
  # (The first 6,000 training images: a dozen steps use fewer, and only
  # those are read.)
  cut=(--set train.max_steps=12 --set train.log_every=4 --set data.train_subset=6000 --set data.test_subset=300)
  if grep -q '^kind *= *"resnet20"' "$f"; then
    cut=(--set train.max_steps=4 --set train.log_every=2 --set data.test_subset=64)
    [ "${GRADWIRE_TIME_SCALE:-1}" -gt 1 ] &&
      cut=(--set train.max_steps=2 --set train.log_every=1 --set data.test_subset=32 --set train.batch_size=8)
  fi
  if ! timeout $((120 * ${GRADWIRE_TIME_SCALE:-1})) "$gw" run "$f" "${procs[@]}" -q --no-report --out "$tmp/$name" "${cut[@]}" \
      >"$tmp/$name.txt" 2>&1; then
    echo "FAIL: examples/$name.toml"
    sed 's/^/    /' "$tmp/$name.txt"
    fail=1
    continue
  fi
  # A run's results folder or a sweep's: either way its summary.
  if [ ! -s "$tmp/$name/summary.json" ] && [ ! -s "$tmp/$name/sweep.json" ]; then
    echo "FAIL: examples/$name.toml wrote neither summary.json nor sweep.json in its --out folder"
    fail=1
    continue
  fi
  awk -v n="$name" -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "ok   examples/%s.toml (%.1f s)\n", n, b - a }'
done
exit $fail
