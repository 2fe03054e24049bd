#!/usr/bin/env bash
# GPU training throughput, gradwire (cuBLAS + cuDNN) vs PyTorch (CUDA), side
# by side in one run on the same GPU.
#
# Same models (MLP 784-256-128-10 and LeNet-5 on Fashion-MNIST, ResNet-20 on
# synthetic 3x32x32 images), SGD lr 0.05 momentum 0.9, batches copied from
# host memory every step on both sides. PyTorch runs twice: with its
# defaults (cuDNN convolutions may use TF32 tensor cores) and with
# allow_tf32 off (plain FP32, gradwire's arithmetic: the like-for-like
# peer). The sides alternate over ROUNDS rounds and medians are compared.
#
#   bench/gpu_train_vs_torch.sh [ROUNDS]          (needs a GPU, a CUDA build in build/,
#                                                  and a Python whose torch sees the GPU)
#   MODELS=resnet20 BATCHES="128" PY=/opt/venv/bin/python3 bench/gpu_train_vs_torch.sh 3
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MODELS=${MODELS:-"mlp lenet5 resnet20"}
BATCHES=${BATCHES:-"64 256"}
DEVICE=${DEVICE:-cuda:0}
BIN=${BUILD_DIR:-build}/gradwire-bench-train
PY=${PY:-python3}
[[ -x $BIN ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$BIN --model mlp --steps 1 --warmup 0 --device "$DEVICE" >/dev/null ||
  { echo "gradwire cannot train on $DEVICE (no GPU, or built without CUDA: see 'gradwire info')" >&2; exit 1; }
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
  { echo "$PY: no PyTorch with CUDA (set PY=...)" >&2; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
steps_for() { case $1 in mlp) echo 2000 ;; lenet5) echo 1000 ;; *) echo 150 ;; esac; }

declare -A GW TP TS
for round in $(seq 1 "$ROUNDS"); do
  for model in $MODELS; do
    for b in $BATCHES; do
      s=$(steps_for $model)
      g=$($BIN --model $model --batch $b --steps $s --warmup 50 --device "$DEVICE" | field samples_per_sec)
      p=$($PY bench/torch_train.py --model $model --batch $b --steps $s --warmup 50 --device "$DEVICE" | field samples_per_sec)
      q=$($PY bench/torch_train.py --model $model --batch $b --steps $s --warmup 50 --device "$DEVICE" --strict-fp32 | field samples_per_sec)
      GW[$model,$b]+="$g "
      TP[$model,$b]+="$p "
      TS[$model,$b]+="$q "
      # Each measurement as it comes (a run cut short keeps them).
      echo "round $round $model batch $b: gradwire $g, torch fp32 $q, torch defaults $p" >&2
    done
  done
  echo "round $round/$ROUNDS done" >&2
done

$PY -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__)"
printf "\n%-9s %5s  %12s  %12s  %12s  %8s  %8s\n" model batch "gradwire/s" "torch fp32/s" "torch dflt/s" "vs fp32" "vs dflt"
for model in $MODELS; do
  for b in $BATCHES; do
    g=$(echo ${GW[$model,$b]} | tr ' ' '\n' | median)
    p=$(echo ${TP[$model,$b]} | tr ' ' '\n' | median)
    q=$(echo ${TS[$model,$b]} | tr ' ' '\n' | median)
    printf "%-9s %5s  %12.0f  %12.0f  %12.0f  %7.2fx  %7.2fx\n" $model $b "$g" "$q" "$p" \
      "$(awk -v g="$g" -v p="$q" 'BEGIN {print g / p}')" "$(awk -v g="$g" -v p="$p" 'BEGIN {print g / p}')"
  done
done
echo "samples/s, median of $ROUNDS rounds; vs fp32 = gradwire / PyTorch with allow_tf32 off (like for like), vs dflt = gradwire / PyTorch defaults"
