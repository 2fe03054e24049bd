#!/usr/bin/env bash
# GPT training throughput, gradwire vs PyTorch, side by side in one run.
#
# The same GPT (4 layers, 4 heads, d_model 128 and 256, context 128 and 256,
# vocabulary 256, batch 16) on windows of the fortunes corpus, AdamW with
# clipping, fp32 on the CPU, at 1 and 2 threads. PyTorch runs with
# OMP_WAIT_POLICY=PASSIVE and its default, and the better is the peer. The
# two sides alternate over ROUNDS rounds and medians are compared.
# PyTorch gets OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to the thread
# count as well as torch.set_num_threads: Debian's build otherwise runs its
# OpenBLAS pool on every core, and a "1-thread" run would use both. Also
# printed: gradwire's FLOP/s as a fraction of the machine's sgemm limit
# (the better of OpenBLAS and oneDNN at 1024^3, measured in each round).
#
#   bench/gpt_vs_torch.sh [ROUNDS]     (needs: scripts/setup.sh --bench, a build in build/)
#   SHAPES="128:128" bench/gpt_vs_torch.sh 1     (d_model:context pairs)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SHAPES=${SHAPES:-"128:128 256:256"}
BIN=${BUILD_DIR:-build}/gradwire-bench-train
PY=/usr/bin/python3
[[ -x $BIN ]] || { echo "build first: scripts/build.sh gradwire-bench-train" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
steps_for() { [[ ${1%%:*} -ge 256 ]] && echo 12 || echo 30; }

declare -A GW TP TD SG FL
for round in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do SG[$t]+="$($BIN --sgemm --threads $t | field sgemm_gflops) "; done
  for shape in $SHAPES; do
    d=${shape%%:*} ctx=${shape##*:} s=$(steps_for "$shape")
    args=(--layers 4 --heads 4 --context "$ctx" --batch 16 --steps "$s" --warmup 3)
    for t in 1 2; do
      out=$($BIN --model gpt --d-model "$d" "${args[@]}" --threads $t)
      GW[$shape,$t]+="$(echo "$out" | field tokens_per_sec) "
      FL[$shape]=$(echo "$out" | field train_flops_per_sample)
      TP[$shape,$t]+="$(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t $PY bench/torch_gpt.py --d-model "$d" "${args[@]}" --threads $t | field tokens_per_sec) "
      TD[$shape,$t]+="$(OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t $PY bench/torch_gpt.py --d-model "$d" "${args[@]}" --threads $t | field tokens_per_sec) "
    done
  done
  echo "round $round/$ROUNDS done" >&2
done

printf "\n%-9s %3s  %12s  %12s  %12s  %7s  %s\n" d:ctx thr "gradwire t/s" "torch pasv" "torch dflt" ratio "gradwire vs sgemm limit"
for shape in $SHAPES; do
  ctx=${shape##*:}
  for t in 1 2; do
    g=$(echo ${GW[$shape,$t]} | tr ' ' '\n' | median)
    p=$(echo ${TP[$shape,$t]} | tr ' ' '\n' | median)
    q=$(echo ${TD[$shape,$t]} | tr ' ' '\n' | median)
    lim=$(echo ${SG[$t]} | tr ' ' '\n' | median)
    awk -v s="$shape" -v t=$t -v g="$g" -v p="$p" -v q="$q" -v f="${FL[$shape]}" -v c="$ctx" -v l="$lim" 'BEGIN {
      peer = p > q ? p : q
      gf = g / c * f / 1e9
      printf "%-9s %3d  %12.0f  %12.0f  %12.0f  %6.2fx  %.1f of %.1f GFLOP/s (%.0f%%)\n", s, t, g, p, q, g / peer, gf, l, 100 * gf / l
    }'
  done
done
echo "(ratio: gradwire's tokens/s over the better PyTorch setting; medians of $ROUNDS rounds)"
