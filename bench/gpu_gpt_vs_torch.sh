#!/usr/bin/env bash
# GPT training throughput on one GPU, gradwire vs PyTorch, side by side in
# one run: tokens/s and peak device memory.
#
# nanoGPT's character-level shape (6 layers, 6 heads, d_model 384,
# vocabulary 256) on windows of the fortunes corpus, AdamW with clipping at
# 1, batches copied from host memory every step on both sides, at context
# 256 (batch 64) and 1024 (batch 16). Two headlines, each like with
# like, PyTorch with its fused attention (scaled_dot_product_attention,
# causal):
#  - fp32 on both sides, TF32 off (PyTorch's default for matmuls);
#  - bf16: gradwire's train.precision = "bf16" (GEMMs and attention on
#    the Tensor Cores, the rest fp32) against PyTorch's autocast to bf16 (its GEMMs
#    and its flash attention in bf16).
# The sides alternate over ROUNDS rounds and medians are compared.
#
#   bench/gpu_gpt_vs_torch.sh [ROUNDS]   (needs a GPU, a CUDA build in build/,
#                                         and a Python whose PyTorch 2 sees the GPU)
#   SHAPES="256:64" PY=/opt/venv/bin/python3 bench/gpu_gpt_vs_torch.sh 1   (context:batch pairs)
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SHAPES=${SHAPES:-"256:64 1024:16"}
DEVICE=${DEVICE:-cuda:0}
BIN=${BUILD_DIR:-build}/gradwire-bench-train
PY=${PY:-python3}
MODEL=(--layers 6 --heads 6 --d-model 384)
[[ -x $BIN ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$BIN --model gpt "${MODEL[@]}" --context 64 --batch 2 --steps 1 --warmup 0 --device "$DEVICE" >/dev/null ||
  { echo "gradwire cannot train a GPT on $DEVICE (no GPU, or built without CUDA: see 'gradwire info')" >&2; exit 1; }
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" ||
  { echo "$PY: no PyTorch with CUDA (set PY=...)" >&2; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A GW GM GB GBM TF TM TB BM
for round in $(seq 1 "$ROUNDS"); do
  for shape in $SHAPES; do
    ctx=${shape%%:*} b=${shape##*:}
    args=("${MODEL[@]}" --context "$ctx" --batch "$b" --steps 30 --warmup 5)
    g=$($BIN --model gpt "${args[@]}" --device "$DEVICE")
    gb=$($BIN --model gpt "${args[@]}" --device "$DEVICE" --precision bf16)
    f=$($PY bench/torch_gpt.py "${args[@]}" --device "$DEVICE" --sdpa)
    h=$($PY bench/torch_gpt.py "${args[@]}" --device "$DEVICE" --sdpa --bf16)
    GW[$shape]+="$(echo "$g" | field tokens_per_sec) " GM[$shape]+="$(echo "$g" | field peak_mib) "
    GB[$shape]+="$(echo "$gb" | field tokens_per_sec) " GBM[$shape]+="$(echo "$gb" | field peak_mib) "
    TF[$shape]+="$(echo "$f" | field tokens_per_sec) " TM[$shape]+="$(echo "$f" | field peak_mib) "
    TB[$shape]+="$(echo "$h" | field tokens_per_sec) " BM[$shape]+="$(echo "$h" | field peak_mib) "
    echo "round $round context $ctx: gradwire fp32 $(echo "$g" | field tokens_per_sec)," \
         "bf16 $(echo "$gb" | field tokens_per_sec); torch fp32 $(echo "$f" | field tokens_per_sec)," \
         "bf16 $(echo "$h" | field tokens_per_sec)" >&2
  done
done

m() { echo "$1" | tr ' ' '\n' | median; }
row() { # shape, gradwire's and torch's tokens/s and peak MiB lists
  local g f
  g=$(m "$2") f=$(m "$3")
  printf "%-12s %14.0f %14.0f %6.2fx %10.0f %10.0f\n" "$1" "$g" "$f" "$(echo "$g / $f" | bc -l)" "$(m "$4")" "$(m "$5")"
}
for prec in fp32 bf16; do
  printf "\n%s\n%-12s %14s %14s %7s %10s %10s\n" "$prec" ctx:batch gradwire torch ratio "gw MiB" "torch MiB"
  for shape in $SHAPES; do
    if [[ $prec == fp32 ]]; then row "$shape" "${GW[$shape]}" "${TF[$shape]}" "${GM[$shape]}" "${TM[$shape]}"
    else row "$shape" "${GB[$shape]}" "${TB[$shape]}" "${GBM[$shape]}" "${BM[$shape]}"; fi
  done
done
echo "(tokens/s and peak device memory, medians of $ROUNDS rounds; ratio: gradwire over PyTorch with fused attention)"
