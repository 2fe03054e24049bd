#!/usr/bin/env bash
# train.device = "cuda" for a torch model: the module on the GPU, gradwire's
# buffers in host memory, parameters and buffers copied in before forward
# and gradients (and BatchNorm's statistics) back after each step.
#  - The staging itself, on the CPU (GRADWIRE_TORCH_STAGED=1 makes the CPU
#    stage as the GPU does): a CNN with BatchNorm on a 3-worker ring, in
#    one process and across 3, and with its own loss, trains to the same
#    bytes as the direct views; its summary names the device.
#  - Where torch sees no CUDA device (Debian's python3-torch is CPU only),
#    "cuda" is refused naming the reason, as are a [[nodes]] device other
#    than train.device's and train.precision = "bf16".
#  - Where it does, 20 steps on the GPU are within 1e-3 of the CPU's.
# Exits 77 (ctest: "Skipped") without the torch plug-in or Fashion-MNIST.
# Usage: torch_device.sh GRADWIRE SOURCE_DIR
set -uo pipefail
NEEDS_MNIST=1 . "$2/tests/scheduler/torch/support.sh"
cat > "$tmp/cnn.toml" <<TOML
[model]
kind = "torch"
module = "$src/tests/scheduler/torch/cnn.py"
[model.args]
width = 6
[data]
train_subset = 4096
test_subset = 500
[train]
max_steps = 20
batch_size = 32
[topology]
kind = "ring"
workers = 3
TOML
cfg=$tmp/cnn.toml
printf 'import sys\nsys.path.insert(0, "%s")\nimport torch.nn.functional as F\nfrom cnn import model\n\n\ndef loss(output, target):\n    return F.cross_entropy(output, target, label_smoothing=0.1)\n' \
  "$src/tests/scheduler/torch" > "$tmp/smooth.py"
run direct
GRADWIRE_TORCH_STAGED=1 run staged
same direct staged 0
GRADWIRE_TORCH_STAGED=1 run staged-procs --procs 3
same direct staged-procs 0
run loss --set model.module="\"$tmp/smooth.py\""
GRADWIRE_TORCH_STAGED=1 run staged-loss --set model.module="\"$tmp/smooth.py\""
same loss staged-loss 0
echo "ok: the GPU's staging through host memory gives the direct views' bytes (ring, 1 and 3 processes, own loss)"

if $py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  run cuda --set train.device='"cuda"'
  $py -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['per_worker'][0]['device'] == 'cuda', s['per_worker'][0]" \
    "$tmp/cuda/summary.json" || fail "summary.json: the device"
  same direct cuda 1e-3 # the GPU's float rounding
else
  rc=0
  timeout 120 "$gw" run "$tmp/cnn.toml" -q --no-report --out "$tmp/nocuda" --set train.device='"cuda"' > "$tmp/nocuda.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -qF "train.device = 'cuda': this Python's torch" "$tmp/nocuda.log" &&
    grep -qF "sees no CUDA device" "$tmp/nocuda.log" || fail "cuda without a CUDA torch: exit $rc: $(tail -3 "$tmp/nocuda.log")"
  echo "ok: no CUDA device for torch here: refused, saying why"
fi
refused() { # NAME WANT ARGS...
  local name=$1 want=$2 rc=0
  shift 2
  timeout 60 "$gw" run "$tmp/$name.toml" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/$name.log" || fail "$name: exit $rc, want 2 and '$want': $(tail -3 "$tmp/$name.log")"
}
{ cat "$tmp/cnn.toml"; printf '[[nodes]]\nname = "gpu"\ncount = 3\ndevice = "cuda"\n'; } > "$tmp/nodes.toml"
refused nodes "(group 'gpu'): device = \"cuda\", but a torch model computes where train.device = \"cpu\" says"
cp "$tmp/cnn.toml" "$tmp/bf16.toml"
refused bf16 "a torch model computes in its own dtypes" --set train.device='"cuda"' --set train.precision='"bf16"'
echo "ok: a torch model's device"
