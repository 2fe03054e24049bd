#!/usr/bin/env bash
# One shipped example config runs with `gradwire run` as a user would start
# it, cut short (a few steps, a small test subset), and writes every output
# a run or a sweep promises, its report included: no config in examples/
# may rot. A config that asks for a GPU, on a machine without one, must be
# refused with the error that says so (exit 2). tests/CMakeLists.txt makes
# one test of each example, so that each has its own time limit and ctest
# runs them beside the rest of the suite. The full-length studies are
# examples and benchmarks, not tests.
# Usage: examples_run.sh GRADWIRE SOURCE_DIR NAME   (examples/NAME.toml)
set -u
gw=$1
src=$2
name=$3
f=$src/examples/$name.toml
scale=${GRADWIRE_TIME_SCALE:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: examples/$name.toml: $*"; [[ -f $tmp/out.txt ]] && sed 's/^/    /' "$tmp/out.txt"; exit 1; }
[[ -f $f ]] || fail "no such file"

# refused_here ERROR WHAT: a config this machine or build cannot run must
# end with exit 2 and an error matching ERROR (WHAT names the lack).
refused_here() {
  timeout $((120 * scale)) "$gw" run "$f" -q --no-report --out "$tmp/run" >"$tmp/out.txt" 2>&1
  local rc=$?
  [[ $rc -eq 2 ]] && grep -qE "$1" "$tmp/out.txt" ||
    fail "$2 here: expected exit 2 and an error saying so, got exit $rc"
  echo "ok   examples/$name.toml ($2 here: refused, as it should be)"
  exit 0
}
grep -q '^device *= *"cuda' "$f" && "$gw" info | grep -q "visible CUDA devices: 0" &&
  refused_here "CUDA device\(s\) are visible|built without CUDA" "no GPU"
# A torch model where this build has no torch plug-in.
grep -qE '^kind *= *"torch"|^rule *= *"' "$f" && "$gw" info | grep -q "^torch models: unavailable" &&
  refused_here "torch plug-in" "no torch plug-in"

# A config with [[faults]] kills a process: it runs as its comment says, across processes.
procs=()
grep -q '^\[\[faults\]\]' "$f" && procs=(--procs workers)
# A virtual-time study of hundreds of workers: one point of 16 here
# (tests/actors/test_virtual_time.cpp runs every topology in virtual time).
grep -q '^clock *= *"virtual"' "$f" && grep -q '^\[sweep\]' "$f" && procs=(--sweep topology.workers=16)
# Without a sweep: 16 workers where it has more, unless [[nodes]] or
# virtual.host_workers fix the count.
workers=$(sed -n 's/^workers *= *\([0-9]*\).*/\1/p' "$f" | head -1)
grep -q '^clock *= *"virtual"' "$f" && ! grep -q '^\[sweep\]' "$f" && ((${workers:-0} > 16)) &&
  ! grep -qE '^\[\[nodes\]\]|^host_workers' "$f" && procs=(--set topology.workers=16)
# Six steps show that a config starts and trains (the first steps' losses
# are in metrics.jsonl); a small test subset keeps each evaluation short.
# (The first 6,000 training images: six steps use fewer, and only those
# are read.) A step of ResNet-20 costs a hundred of the MLP's, and under
# ASan (GRADWIRE_TIME_SCALE) its convolutions are instrumented load by load.
cut=(--set train.max_steps=6 --set train.log_every=2 --set data.train_subset=6000 --set data.test_subset=64)
# A step of the GPT studies (4 workers of 16 windows of 128 bytes) costs
# 0.4 s on 2 cores, and their sweeps have up to 22 points: two steps.
grep -q '^kind *= *"gpt"' "$f" &&
  cut=(--set train.max_steps=2 --set train.log_every=1 --set data.test_subset=16)
if grep -q '^kind *= *"resnet20"' "$f"; then
  cut=(--set train.max_steps=4 --set train.log_every=2 --set data.test_subset=32)
  [[ $scale -gt 1 ]] && cut=(--set train.max_steps=2 --set train.log_every=1 --set data.test_subset=16 --set train.batch_size=8)
fi
# Token data: the example's .bin files made as its comment says.
if grep -q '^dataset *= *"tokens"' "$f"; then
  vocab=$(python3 "$src/scripts/tokenize.py" /usr/share/games/fortunes "$tmp/tokens" --tokenizer chars |
    sed -n 's/.*set model.vocab = \([0-9]*\)$/\1/p')
  [[ -n $vocab ]] || fail "scripts/tokenize.py made no token files"
  cut+=(--set data.path=\"$tmp/tokens\" --set model.vocab="$vocab")
fi
start=$(date +%s.%N)
timeout $((120 * scale)) "$gw" run "$f" "${procs[@]}" -q --out "$tmp/run" "${cut[@]}" >"$tmp/out.txt" 2>&1 ||
  fail "gradwire run exited with $?"

# What one run writes: its config, per-step records, the model, the summary, the report.
check_run() { # DIR
  local d=$1 out
  for out in config.toml metrics.jsonl metrics.csv model.safetensors summary.json report.html; do
    [[ -s $d/$out ]] || fail "${d#"$tmp"/run}: no $out (it has: $(ls "$d" | tr '\n' ' '))"
  done
  grep -q '"status": "completed"' "$d/summary.json" || fail "${d#"$tmp"/run}: summary.json does not say completed"
  grep -q '"loss"' "$d/metrics.jsonl" || fail "${d#"$tmp"/run}: metrics.jsonl holds no step's loss"
}
if [[ -s $tmp/run/sweep.json ]]; then
  for out in sweep.md sweep.csv report.html; do
    [[ -s $tmp/run/$out ]] || fail "a sweep without its $out"
  done
  points=("$tmp"/run/point-*/)
  [[ -d ${points[0]} ]] || fail "a sweep without point folders"
  for p in "${points[@]}"; do check_run "${p%/}"; done
  what="${#points[@]} points"
else
  check_run "$tmp/run"
  what="1 run"
fi
awk -v n="$name" -v w="$what" -v a="$start" -v b="$(date +%s.%N)" \
  'BEGIN { printf "ok   examples/%s.toml (%s, %.1f s)\n", n, w, b - a }'
