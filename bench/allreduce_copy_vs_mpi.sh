#!/usr/bin/env bash
# gradwire's allreduce with MPI's semantics (the sum in each rank's own
# buffer, every byte copied: `gradwire bench allreduce --engine comm`, the
# communicator driven by the calling thread) against OpenMPI's
# MPI_Allreduce restricted to the same path, in the same run:
#   shm: gradwire over UCX's choice on one host (shared memory), OpenMPI
#        ob1 with btl self,vader;
#   tcp: gradwire with --tls tcp, OpenMPI ob1 with btl self,tcp (loopback).
# Each of OpenMPI's tuned algorithms (default choice, recursive doubling,
# ring, Rabenseifner) runs, and the best per size is the peer. Rounds are
# interleaved (the VM drifts) and the median of ROUNDS is kept. Below 64
# KiB the ratio is of times (MPI's / gradwire's: above 1, gradwire is
# faster); from 64 KiB of busbw (gradwire's / MPI's). The last columns
# set each side's fastest round against the other's (MPI: of every
# algorithm): this VM runs whole processes in a fast or a slow mode, 2-4x
# apart, for either side, and a median of few rounds can pair unlike
# modes (bench/RESULTS.md). Sizes below 64 KiB
# run 2,000 timed rounds after 200 (50 rounds of 1 KiB last under a
# millisecond, shorter than this VM's stalls), the others 50 after 10.
#
# Needs: openmpi-bin libopenmpi-dev (apt). Usage:
#   bench/allreduce_copy_vs_mpi.sh [build-dir] [ROUNDS] [PATHS] [PROCS]
#   e.g. bench/allreduce_copy_vs_mpi.sh build 3 "shm tcp" "2 4"
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
paths=${3:-shm tcp}
procs=${4:-2 4}
source "$(dirname "$0")/mpi_peer.sh"
# Two ranges, each side: (min max iterations warm-up).
RANGES=("1024 16384 2000 200" "65536 67108864 50 10")
FACTOR=4
mpi=(mpirun --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo --mca pml ob1)
algos="0:default 3:recursive-doubling 4:ring 6:rabenseifner"

for path in $paths; do
  case $path in
    shm) btl=self,vader; gwtls=() ;;
    tcp) btl=self,tcp; gwtls=(--tls tcp) ;;
    *) echo "unknown path '$path' (shm or tcp)" >&2; exit 2 ;;
  esac
  for np in $procs; do
    for r in $(seq "$rounds"); do
      : >"$tmp/gw_${path}_${np}_$r"
      for a in $algos; do : >"$tmp/mpi_${path}_${np}_${a%%:*}_$r"; done
      for range in "${RANGES[@]}"; do
        read -r min max iters warmup <<<"$range"
        "$gw" bench allreduce --engine comm "${gwtls[@]}" --procs "$np" -b $min -e $max -f $FACTOR -n $iters -w $warmup \
          | awk '/^ +[0-9]/ {print $1, $3, $5, $6}' >>"$tmp/gw_${path}_${np}_$r"
        for a in $algos; do
          "${mpi[@]}" --mca btl "$btl" --mca btl_tcp_if_include lo -n "$np" --mca coll_tuned_use_dynamic_rules 1 \
            --mca coll_tuned_allreduce_algorithm "${a%%:*}" "$tmp/mpi_allreduce" $min $max $FACTOR $iters $warmup 2>/dev/null \
            | awk '/^ +[0-9]/ {print $1, $3, $5, $6}' >>"$tmp/mpi_${path}_${np}_${a%%:*}_$r"
        done
      done
    done
    echo "## $path, $np processes (median of $rounds rounds; time in us, busbw in GB/s)"
    /usr/bin/python3 - "$tmp" "$path" "$np" "$rounds" "$algos" <<'PY'
import sys, statistics
tmp, path, np, rounds, algos = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
def load(p):
    rows = {}
    for line in open(p):
        size, t, bus, check = line.split()
        rows[int(size)] = (float(t), float(bus), check)
    return rows
def median(prefix):
    runs = [load(f"{tmp}/{prefix}_{r}") for r in range(1, rounds + 1)]
    return {s: (statistics.median(run[s][0] for run in runs), statistics.median(run[s][1] for run in runs),
                all(run[s][2] == "ok" for run in runs)) for s in runs[0]}
def fastest(prefix):
    runs = [load(f"{tmp}/{prefix}_{r}") for r in range(1, rounds + 1)]
    return {s: min(run[s][0] for run in runs) for s in runs[0]}
gw = median(f"gw_{path}_{np}")
mpi = {a.split(':')[1]: median(f"mpi_{path}_{np}_{a.split(':')[0]}") for a in algos}
gw_fast = fastest(f"gw_{path}_{np}")
mpi_fast = [fastest(f"mpi_{path}_{np}_{a.split(':')[0]}") for a in algos]
print(f"{'size':>10} {'gradwire us':>11} {'GB/s':>7} {'best MPI us':>11} {'GB/s':>7} {'(algorithm)':>20} {'ratio':>6}  check  {'fastest rounds: gw / MPI us (ratio)':>36}")
for s in sorted(gw):
    name, (t, bw, ok) = min(((k, v[s]) for k, v in mpi.items()), key=lambda kv: kv[1][0])
    gt, gbw, gok = gw[s]
    ratio = t / gt if s < 65536 else gbw / bw
    ft = min(m[s] for m in mpi_fast)
    print(f"{s:>10} {gt:11.1f} {gbw:7.3f} {t:11.1f} {bw:7.3f} {name:>20} {ratio:6.2f}  {'ok' if gok and ok else 'WRONG':5}"
          f"  {gw_fast[s]:12.1f} / {ft:10.1f} ({ft / gw_fast[s]:4.2f})")
PY
  done
done
