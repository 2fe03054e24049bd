#!/usr/bin/env bash
# gradwire against PyTorch DDP on the same torch module and batches:
#  - `gradwire batches` prints each worker's samples step by step; the two
#    workers' shards are disjoint and every batch full;
#  - a 2-worker sync ring on the torch MLP equals DDP (gloo, 2 processes,
#    scripts/ddp_baseline.py fed those batches) after 50 SGD-with-momentum
#    steps to 1e-5 relative, every tensor;
#  - the CNN with BatchNorm (running statistics included) equals it to 1e-5
#    after 10 steps. Further on, a ReLU whose input lies within rounding of
#    zero can flip on one side only, and a CNN's runs part (docs/your-model.md);
#  - the same batches in another step order end far apart (> 1e-3): the
#    comparison can fail.
# Exits 77 (ctest: "Skipped") without the torch plug-in or Fashion-MNIST.
# Usage: torch_ddp.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$(cd "$2" && pwd)
py=/usr/bin/python3
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > "$tmp/ddp.toml" <<TOML
[experiment]
name = "ddp-parity"
[model]
kind = "torch"
module = "$src/tests/scheduler/torch/mlp.py"
[model.args]
hidden = 64
[data]
train_subset = 4096
test_subset = 500
[train]
max_steps = 50
batch_size = 32
lr = 0.05
momentum = 0.9
[topology]
kind = "ring"
workers = 2
TOML
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi

parity() { # NAME STEPS TOLERANCE ARGS...: gradwire's ring against DDP on its batches
  local name=$1 steps=$2 tol=$3
  shift 3
  "$gw" run "$tmp/ddp.toml" -q --no-report --out "$tmp/$name" --set train.max_steps="$steps" "$@" \
    > "$tmp/$name.log" 2>&1 || fail "$name: $(tail -20 "$tmp/$name.log")"
  "$gw" batches "$tmp/ddp.toml" --steps "$steps" "$@" > "$tmp/$name.jsonl" 2> "$tmp/$name.batches.log" ||
    fail "$name: gradwire batches: $(cat "$tmp/$name.batches.log")"
  $py "$src/scripts/ddp_baseline.py" "$tmp/$name/config.toml" "$tmp/$name.jsonl" --out "$tmp/$name.ddp.safetensors" \
    > "$tmp/$name.ddp.log" 2>&1 || fail "$name: ddp_baseline.py: $(tail -20 "$tmp/$name.ddp.log")"
  compare "$tmp/$name/model.safetensors" "$tmp/$name.ddp.safetensors" "$tol" || fail "$name: gradwire and DDP differ"
}
compare() { # A B TOLERANCE [--far]: every tensor of A within TOLERANCE (relative L2) of B's; --far: some beyond it
  $py "$src/tests/scheduler/torch/same_tensors.py" "$@"
}

parity mlp 50 1e-5
# The order printed: 2 workers x 50 steps of 32 distinct samples, disjoint shards.
$py - "$tmp/mlp.jsonl" <<'PY' || fail "gradwire batches printed another order than a ring's"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["worker"], r["step"]) for r in recs] == [(w, s) for w in (0, 1) for s in range(1, 51)], "lines out of order"
seen = [set(), set()]
for r in recs:
    assert len(r["samples"]) == 32 and len(set(r["samples"])) == 32, r
    assert all(0 <= i < 4096 for i in r["samples"]), r
    assert not seen[r["worker"]] & set(r["samples"]), "a sample twice within an epoch"
    seen[r["worker"]] |= set(r["samples"])
assert not seen[0] & seen[1], "the workers' shards overlap"
PY
parity cnn 10 1e-5 --set model.module="\"$src/tests/scheduler/torch/cnn.py\"" --set model.args.width=8

# The comparison fails on other batches: the same ones, steps reversed.
$py -c 'import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); r["step"] = 51 - r["step"]; print(json.dumps(r))' "$tmp/mlp.jsonl" > "$tmp/reversed.jsonl"
$py "$src/scripts/ddp_baseline.py" "$tmp/mlp/config.toml" "$tmp/reversed.jsonl" --out "$tmp/reversed.safetensors" \
  > "$tmp/reversed.log" 2>&1 || fail "ddp_baseline.py on reversed batches: $(tail -5 "$tmp/reversed.log")"
compare "$tmp/mlp/model.safetensors" "$tmp/reversed.safetensors" 1e-3 --far > /dev/null ||
  fail "reversed batches did not change DDP's model"
echo "ok: gradwire's ring equals PyTorch DDP on the same batches"
