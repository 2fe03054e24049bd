#!/usr/bin/env bash
# Where a GPU training step's time goes, gradwire and PyTorch side by side:
# gradwire's GPU time per backend operation (GRADWIRE_CUDA_PROFILE=1: CUDA
# events around each call, warm-up left out) with cuDNN's timing of every
# convolution algorithm it tried (GRADWIRE_CUDNN_LOG=1), then PyTorch's
# kernel table (torch.profiler) for the same model, batch and steps, plain
# FP32 (allow_tf32 off).
#
#   bench/gpu_profile.sh [BUILD] [MODEL] [BATCH] [STEPS]   (default build resnet20 256 30)
#   (on a machine without Debian's packages: scripts/gpu_bundle.sh here, then
#    source .gpu/env.sh && bench/gpu_profile.sh .gpu there)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build}/gradwire-bench-train
MODEL=${2:-resnet20}
BATCH=${3:-256}
STEPS=${4:-30}
PY=${PY:-python3}
echo "## gradwire: $MODEL, batch $BATCH, $STEPS steps (GPU time over all $STEPS)"
GRADWIRE_CUDA_PROFILE=1 GRADWIRE_CUDNN_LOG=1 "$BIN" --model "$MODEL" --batch "$BATCH" \
  --steps "$STEPS" --warmup 10 --device cuda:0 2>&1
echo "## PyTorch: $MODEL, batch $BATCH, plain FP32, $STEPS steps profiled"
$PY bench/torch_train.py --model "$MODEL" --batch "$BATCH" --steps "$STEPS" --warmup 10 \
  --device cuda:0 --strict-fp32 --profile "$STEPS" 2>&1
