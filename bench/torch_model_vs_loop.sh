#!/usr/bin/env bash
# model.kind = "torch" against a plain PyTorch loop over the same module,
# side by side in one run: examples/torch_cnn.py (width 16, 57k
# parameters) on Fashion-MNIST, batch 64, SGD lr 0.05 momentum 0.9, one
# worker (topology "single"), train.threads = 1 and torch.set_num_threads(1)
# with OMP_WAIT_POLICY=PASSIVE for both. gradwire's figure is its own
# training samples/s (summary.json: steps only, its evaluation excluded);
# the loop's is timed over the same number of steps, after one warm-up
# step each. The VM drifts: the two alternate over ROUNDS rounds and the
# medians are compared.
#
# MODEL=resnet18: bench/torch/resnet18_gray.py (torchvision's resnet18 with a
# one-channel first convolution, 11.2M parameters) in place of the CNN.
#
#   [MODEL=cnn|resnet18] bench/torch_model_vs_loop.sh [ROUNDS] [STEPS]   (a build in build/ with the torch plug-in)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-300}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE
module=$PWD/examples/torch_cnn.py cfg=examples/torch-cnn.toml
if [[ ${MODEL:-cnn} == resnet18 ]]; then
  module=$PWD/bench/torch/resnet18_gray.py cfg=$tmp/resnet18.toml
  sed "s|^module = .*|module = \"$module\"|" examples/torch-cnn.toml > "$cfg"
fi
loop() {
  $PY - "$STEPS" "$module" <<'PY'
import gzip, importlib.util, struct, sys, time
import numpy as np
import torch
spec = importlib.util.spec_from_file_location("bench_module", sys.argv[2])
torch_cnn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_cnn)
torch.set_num_threads(1)
steps = int(sys.argv[1])
def idx(path):
    b = gzip.open(path).read(); d = b[3]
    shape = struct.unpack(">" + "I" * d, b[4:4 + 4 * d])
    return np.frombuffer(b[4 + 4 * d:], dtype=np.uint8).reshape(shape)
root = "/usr/share/datasets/fashion-mnist/"
x = torch.from_numpy(idx(root + "train-images-idx3-ubyte.gz").astype(np.float32) / 255).unsqueeze(1)
x = (x - x.mean()) / x.std()
y = torch.from_numpy(idx(root + "train-labels-idx1-ubyte.gz").astype(np.int64))
torch.manual_seed(1)
net = torch_cnn.model({"model": {"args": {"width": 16}}})
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
perm = torch.randperm(len(x))
def step(i):
    b = perm[(i * 64) % (len(x) - 64):][:64]
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x[b]), y[b]).backward()
    opt.step()
step(0)
t = time.perf_counter()
for i in range(1, steps + 1):
    step(i)
print(64 * steps / (time.perf_counter() - t))
PY
}
gradwire() {
  build/gradwire run "$cfg" -q --no-report --force --out "$tmp/gw" --set topology.kind='"single"' \
    --set train.max_steps="$STEPS" --set train.momentum=0.9 --set train.eval='"after"' --set data.test_subset=64 >/dev/null
  $PY -c "import json; print(json.load(open('$tmp/gw/summary.json'))['samples_per_sec'])"
}
gw=() pt=()
for r in $(seq "$ROUNDS"); do
  gw+=("$(gradwire)")
  pt+=("$(loop)")
  echo "round $r: gradwire ${gw[-1]} samples/s, PyTorch loop ${pt[-1]} samples/s"
done
$PY - "${gw[*]}" "${pt[*]}" <<'PY'
import statistics, sys
g = statistics.median(map(float, sys.argv[1].split())); p = statistics.median(map(float, sys.argv[2].split()))
print("median: gradwire %.0f, PyTorch loop %.0f samples/s: ratio %.3f (goal >= 0.97)" % (g, p, g / p))
PY
