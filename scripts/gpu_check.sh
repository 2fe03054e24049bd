#!/usr/bin/env bash
# Everything a GPU machine is lent for, in one run, in order of importance:
# the whole CUDA test suite first, then the GPT and the image models against
# PyTorch (one round each), with the GPT's bf16 step broken down by
# operation. Runs from the repository root of a copy that holds a bundle
# made here by scripts/gpu_bundle.sh (default .gpu), on a
# machine whose Python has PyTorch 2 with CUDA. Each stage's output goes to
# LOGS (default $OUT where the device tool sets it, else .gpu/logs) as it
# comes, so a run cut short keeps what it measured.
#
#   scripts/gpu_check.sh [BUNDLE]       (PY=... for another Python)
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-.gpu}
logs=${LOGS:-${OUT:-$bundle/logs}}
[[ -x $bundle/test_cuda ]] || { echo "gpu_check.sh: no bundle in $bundle (scripts/gpu_bundle.sh)" >&2; exit 1; }
mkdir -p "$logs"
# shellcheck source=/dev/null
source "$bundle/env.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$logs/gpu.txt"
rc=0
stage() { # name, command...: runs it, its output to the terminal and to LOGS/name.txt
  local name=$1
  shift
  echo "==== $name: $*"
  "$@" 2>&1 | tee "$logs/$name.txt"
  local s=${PIPESTATUS[0]}
  echo "==== $name: exit $s"
  [[ $s -eq 0 ]] || rc=1
}
stage test_cuda timeout 400 "$bundle/test_cuda" --durations yes
if grep -q "no CUDA device visible" "$logs/test_cuda.txt"; then
  echo "gpu_check.sh: this machine shows no GPU to the bundle (see above): nothing to measure" >&2
  exit 1
fi
BUILD_DIR=$bundle stage gpt_vs_torch timeout 300 bench/gpu_gpt_vs_torch.sh 1
# Where a bf16 GPT step's GPU time goes, by backend operation (op_timer.hpp),
# at the benchmark's long context: what to tune next.
GRADWIRE_CUDA_PROFILE=1 stage gpt_profile timeout 120 "$bundle/gradwire-bench-train" --model gpt --layers 6 \
  --heads 6 --d-model 384 --context 1024 --batch 16 --steps 30 --warmup 5 --device cuda:0 --precision bf16
BUILD_DIR=$bundle MODELS="mlp resnet20" BATCHES=256 stage train_vs_torch timeout 240 bench/gpu_train_vs_torch.sh 1
exit $rc
