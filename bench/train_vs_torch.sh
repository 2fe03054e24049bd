#!/usr/bin/env bash
# Training throughput, gradwire vs PyTorch, side by side in one run.
#
# Same models (MLP 784-256-128-10, LeNet-5, and with MODELS=resnet20 ResNet-20
# on synthetic CIFAR-shaped images), batch 64, SGD lr 0.05 momentum 0.9,
# Fashion-MNIST, 1 and 2 threads. PyTorch runs with its default OpenMP
# settings and with OMP_WAIT_POLICY=PASSIVE (much faster here), and the
# better of the two is the peer. This VM drifts by up to 30%, so the two
# sides alternate over ROUNDS rounds and medians are compared.
#
#   bench/train_vs_torch.sh [ROUNDS]      (needs: scripts/setup.sh --bench, a build in build/)
#   MODELS=lenet5 bench/train_vs_torch.sh  (one model only)
#   MODELS="mlp lenet5 resnet20" bench/train_vs_torch.sh
#   GW_ISA=avx2 MODELS=lenet5 bench/train_vs_torch.sh
#       (gradwire's training runs on its AVX2 kernels on an AVX-512 machine:
#        GRADWIRE_DIRECT_CONV=avx2 and ONEDNN_MAX_CPU_ISA=AVX2 for its runs
#        only; PyTorch, which reads the same oneDNN variable, and the GEMM
#        limit keep the whole machine)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
MODELS=${MODELS:-"mlp lenet5"}
BIN=${BUILD_DIR:-build}/gradwire-bench-train
GW_ENV=()
case ${GW_ISA:-} in
  "") ;;
  avx2) GW_ENV=(GRADWIRE_DIRECT_CONV=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2) ;;
  *) echo "GW_ISA=$GW_ISA: only avx2 can be forced" >&2; exit 2 ;;
esac
PY=/usr/bin/python3
[[ -x $BIN ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
steps_for() { case $1 in mlp) echo 3000 ;; resnet20) echo 40 ;; *) echo 400 ;; esac; }
warmup_for() { [[ $1 == resnet20 ]] && echo 5 || echo 200; }

declare -A GW TP TD SGR SGL
for round in $(seq 1 "$ROUNDS"); do
  # The GEMM limit is measured in every round too, among the runs it is
  # compared with: once at the end, it read 62 GFLOP/s one time and 92 the
  # next on this VM, and a model's share of it swung with that.
  for t in 1 2; do
    for _ in 1 2 3; do
      line=$($BIN --sgemm --threads $t)
      SGR[$t]+="$(echo "$line" | field sgemm_gflops) "
      SGL[$t]+="$(echo "$line" | field sgemm_gflops):$(echo "$line" | sed -n 's/.*library=\([a-z]*\).*/\1/p') "
    done
  done
  for model in $MODELS; do
    s=$(steps_for $model) w=$(warmup_for $model)
    # gradwire's 1- and 2-thread runs back to back, so that drift between
    # them does not land in its scaling ratio; each is also interleaved
    # with PyTorch's runs for the side-by-side ratio.
    for t in 1 2; do
      GW[$model,$t]+="$(env "${GW_ENV[@]}" $BIN --model $model --threads $t --steps $s --warmup $w | field samples_per_sec) "
    done
    for t in 1 2; do
      TP[$model,$t]+="$(OMP_WAIT_POLICY=PASSIVE $PY bench/torch_train.py --model $model --threads $t --steps $s --warmup $w | field samples_per_sec) "
      TD[$model,$t]+="$($PY bench/torch_train.py --model $model --threads $t --steps $((s / 2)) --warmup $w | field samples_per_sec) "
    done
  done
  echo "round $round/$ROUNDS done" >&2
done

declare -A SG FL
for t in 1 2; do
  SG[$t]=$(echo ${SGR[$t]} | tr ' ' '\n' | median)
  # the library of the measurement nearest the median (the limit's own)
  SGL[$t]=$(echo ${SGL[$t]} | tr ' ' '\n' | awk -F: -v m="${SG[$t]}" '
    {d = $1 - m; d = d < 0 ? -d : d; if (NR == 1 || d < best) {best = d; lib = $2}} END {print lib}')
done
# Training FLOPs per sample (forward, weight gradients, input gradients of
# all but the first trainable layer), as the bench binary computes them.
for model in $MODELS; do FL[$model]=$($BIN --model $model --steps 1 --warmup 0 | field train_flops_per_sample); done

printf "\n%-7s %3s  %12s  %12s  %12s  %7s  %s\n" model thr "gradwire/s" "torch pasv/s" "torch dflt/s" "ratio*" "gradwire vs GEMM limit"
for model in $MODELS; do
  for t in 1 2; do
    g=$(echo ${GW[$model,$t]} | tr ' ' '\n' | median)
    p=$(echo ${TP[$model,$t]} | tr ' ' '\n' | median)
    d=$(echo ${TD[$model,$t]} | tr ' ' '\n' | median)
    best=$(awk -v a="$p" -v b="$d" 'BEGIN {print (a > b) ? a : b}')
    ratio=$(awk -v g="$g" -v b="$best" 'BEGIN {printf "%.2fx", g / b}')
    limit=$(awk -v g="$g" -v f="${FL[$model]}" -v s="${SG[$t]}" 'BEGIN {printf "%.0f%% of %.0f GFLOP/s sgemm (%d thr, %s)", 100 * g * f / (s * 1e9), s, '"$t"', "'"${SGL[$t]}"'"}')
    printf "%-7s %3s  %12.0f  %12.0f  %12.0f  %7s  %s\n" $model $t "$g" "$p" "$d" "$ratio" "$limit"
    eval "G_${model}_$t=$g"
  done
done
echo "* ratio: gradwire over the better of PyTorch's two settings (passv: OMP_WAIT_POLICY=PASSIVE, dflt: defaults)"
echo "  GEMM limit: the faster of OpenBLAS's and oneDNN's sgemm at 512^3 on this machine, per thread count"
echo
for model in $MODELS; do
  eval "a=\$G_${model}_2 b=\$G_${model}_1"
  printf "gradwire %s: 2 threads / 1 thread = %.2fx\n" "$model" "$(awk -v a="$a" -v b="$b" 'BEGIN {print a / b}')"
done
