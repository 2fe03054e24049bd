#!/usr/bin/env bash
# gradwire's zero-copy ring allreduce (actors, results read by reference;
# not MPI's semantics: bench/allreduce_copy_vs_mpi.sh has those) over UCX against OpenMPI's MPI_Allreduce, in the
# same run, at 2 and 4 local processes: each MPI algorithm of the tuned
# component (default choice, recursive doubling, ring, segmented ring,
# Rabenseifner over shared memory; default and ring over UCX) is run and
# the best busbw per size is the peer. Rounds are
# interleaved (the VM drifts) and the median of ROUNDS is kept. Also prints
# UCX's own point-to-point bandwidth (ucx_perftest, active messages, shared
# memory) at each size as the limit, with gradwire's 2-process busbw as a
# share of it.
#
# Needs: openmpi-bin libopenmpi-dev ucx-utils (apt). Usage:
#   bench/allreduce_vs_mpi.sh [build-dir] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
source "$(dirname "$0")/mpi_peer.sh"
MIN=262144 MAX=67108864 FACTOR=4 ITERS=50 WARMUP=20
mpi=(mpirun --allow-run-as-root --oversubscribe --mca oob_tcp_if_include lo)
# pml/btl choice (ob1 over shared memory "vader", or UCX) x tuned algorithm
ob1=(--mca pml ob1 --mca btl self,vader)
ucx=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
algos="ob1.0:default ob1.3:recursive-doubling ob1.4:ring ob1.5:segmented-ring ob1.6:rabenseifner ucx.0:ucx-default ucx.4:ucx-ring"

for np in 2 4; do
  for r in $(seq "$rounds"); do
    "$gw" bench allreduce --engine actors --procs "$np" -b $MIN -e $MAX -f $FACTOR -n $ITERS -w $WARMUP \
      | awk '/^ +[0-9]/ {print $1, $5, $6}' >"$tmp/gw_${np}_$r"
    for a in $algos; do
      id=${a%%:*}
      if [[ $id == ucx.* ]]; then pml=("${ucx[@]}"); else pml=("${ob1[@]}"); fi
      "${mpi[@]}" "${pml[@]}" -n "$np" --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "${id#*.}" \
        "$tmp/mpi_allreduce" $MIN $MAX $FACTOR $ITERS $WARMUP 2>/dev/null \
        | awk '/^ +[0-9]/ {print $1, $5, $6}' >"$tmp/mpi_${np}_${id}_$r"
    done
  done
  echo "## $np processes (median of $rounds rounds; busbw in GB/s)"
  /usr/bin/python3 - "$tmp" "$np" "$rounds" "$algos" <<'PY'
import sys, statistics, glob
tmp, np, rounds, algos = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
def load(path):
    rows = {}
    for line in open(path):
        size, bus, check = line.split()
        rows[int(size)] = (float(bus), check)
    return rows
def median(prefix):
    runs = [load(f"{tmp}/{prefix}_{r}") for r in range(1, rounds + 1)]
    return {s: (statistics.median(run[s][0] for run in runs), all(run[s][1] == "ok" for run in runs)) for s in runs[0]}
gw = median(f"gw_{np}")
mpi = {a.split(':')[1]: median(f"mpi_{np}_{a.split(':')[0]}") for a in algos}
print(f"{'size':>10} {'gradwire':>9} {'best MPI':>9} {'(algorithm)':>20} {'ratio':>6}  check")
for s in sorted(gw):
    name, (bw, ok) = max(((k, v[s]) for k, v in mpi.items()), key=lambda kv: kv[1][0])
    g, gok = gw[s]
    print(f"{s:>10} {g:9.3f} {bw:9.3f} {name:>20} {g / bw:6.2f}  {'ok' if gok and ok else 'WRONG'}")
PY
done

echo "## UCX point-to-point limit (ucx_perftest ucp_am_bw, shared memory) per size, and gradwire's 2-process busbw (as many rounds) against it"
for size in $(awk '{print $1}' "$tmp/gw_2_1"); do
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  n=$(( size >= 16777216 ? 100 : 500 ))
  UCX_TLS=posix,cma ucx_perftest -t ucp_am_bw -s "$size" -n "$n" -p "$port" >/dev/null 2>&1 &
  sleep 1
  bw=$(UCX_TLS=posix,cma ucx_perftest 127.0.0.1 -t ucp_am_bw -s "$size" -n "$n" -p "$port" 2>/dev/null |
    awk '/^Final/ {printf "%.3f", $6 * 1.048576 / 1000}')
  wait
  # gradwire's own run at this size with as many timed rounds as ucx_perftest
  # (50 rounds of 256 KiB last ~0.6 ms, where one 50-300 us stall of this VM
  # moves the mean by half).
  gwbw=$("$gw" bench allreduce --engine actors --procs 2 -b "$size" -e "$size" -n "$n" -w 50 | awk '/^ +[0-9]/ {print $5}')
  printf "%10s  ucx_perftest %7.3f GB/s  gradwire 2 procs %7.3f  (%3.0f%%)\n" "$size" "$bw" "$gwbw" "$(echo "$gwbw / $bw * 100" | bc -l)"
done
