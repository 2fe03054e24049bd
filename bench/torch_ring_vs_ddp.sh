#!/usr/bin/env bash
# A torch module under gradwire's sync ring against PyTorch DDP on the same
# module and batches, side by side in one run: examples/torch_cnn.py
# (width 16, 57k parameters) on Fashion-MNIST, batch 64 per worker, SGD
# lr 0.05 momentum 0.9, one thread per worker, OMP_WAIT_POLICY=PASSIVE.
#  - the headline: 2 processes each. gradwire: --procs 2, the ring over UCX
#    shared memory, its samples/s from summary.json (steps only, its
#    evaluation excluded). DDP: scripts/ddp_baseline.py, gloo over
#    loopback, fed `gradwire batches` of the same config, timed over the
#    same steps after one warm-up step.
#  - in one process: the same ring with 2 workers as threads against 1
#    worker (topology.workers = 1): what the 2 workers gain when each
#    forward and backward holds the GIL while Python builds its graph.
# The VM drifts: the sides alternate over ROUNDS rounds and the medians
# are compared.
#
# MODEL=resnet18: bench/torch/resnet18_gray.py (torchvision's resnet18 with a
# one-channel first convolution, 11.2M parameters) in place of the CNN.
#
#   [MODEL=cnn|resnet18] bench/torch_ring_vs_ddp.sh [ROUNDS] [STEPS]   (a build in build/ with the torch plug-in)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-300}
PY=/usr/bin/python3
GW=${BUILD_DIR:-build}/gradwire
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE
common=(--set topology.kind='"ring"' --set topology.workers=2 --set train.max_steps="$STEPS" --set train.momentum=0.9
        --set train.eval='"after"' --set data.test_subset=64)
"$GW" info | grep -q "torch models: available" || { echo "this build has no torch plug-in: scripts/setup.sh --test" >&2; exit 1; }
cfg=examples/torch-cnn.toml
if [[ ${MODEL:-cnn} == resnet18 ]]; then
  cfg=$tmp/resnet18.toml
  sed "s|^module = .*|module = \"$PWD/bench/torch/resnet18_gray.py\"|" examples/torch-cnn.toml > "$cfg"
fi
"$GW" batches "$cfg" "${common[@]}" > "$tmp/batches.jsonl"
gw() { # TAG ARGS...: samples/s of gradwire's training steps
  local tag=$1
  shift
  "$GW" run "$cfg" -q --no-report --force --out "$tmp/$tag" "${common[@]}" "$@" > "$tmp/$tag.log" 2>&1 ||
    { tail -20 "$tmp/$tag.log" >&2; exit 1; }
  $PY -c "import json, sys; print(json.load(open(sys.argv[1]))['samples_per_sec'])" "$tmp/$tag/summary.json"
}
ddp() {
  [[ -f $tmp/procs/config.toml ]] || gw procs --procs 2 > /dev/null
  $PY scripts/ddp_baseline.py "$tmp/procs/config.toml" "$tmp/batches.jsonl" --warmup 1 |
    $PY -c "import json, sys; print(json.loads(sys.stdin.read())['samples_per_s'])"
}
procs=() torch=() threads2=() threads1=()
for r in $(seq "$ROUNDS"); do
  procs+=("$(gw procs --procs 2)")
  torch+=("$(ddp)")
  threads2+=("$(gw threads2)")
  threads1+=("$(gw threads1 --set topology.workers=1)")
  echo "round $r: gradwire 2 processes ${procs[-1]}, DDP 2 processes ${torch[-1]}," \
       "gradwire in one process: 2 workers ${threads2[-1]}, 1 worker ${threads1[-1]} samples/s"
done
$PY - "${procs[*]}" "${torch[*]}" "${threads2[*]}" "${threads1[*]}" <<'PY'
import statistics, sys
g, d, t2, t1 = (statistics.median(map(float, a.split())) for a in sys.argv[1:5])
print("median, 2 processes: gradwire ring %.0f, PyTorch DDP %.0f samples/s: ratio %.3f (goal >= 1.5)" % (g, d, g / d))
print("median, one process: 2 workers %.0f, 1 worker %.0f samples/s: %.2fx (2 processes: %.2fx of 1 worker)"
      % (t2, t1, t2 / t1, g / t1))
PY
