#!/usr/bin/env bash
# Allreduce across 2 emulated hosts (scripts/emulated_hosts.sh), gradwire
# vs gloo (PyTorch's all_reduce), side by side in one run, both with MPI's
# semantics: float32 sums into each rank's own buffer, every byte copied
# over TCP between the hosts. gradwire: `gradwire bench allreduce --engine
# comm` (the communicator driven by the calling thread); gloo:
# bench/torch_allreduce.py. Medians over ROUNDS interleaved rounds; the
# ratio is gloo's time over gradwire's (above 1: gradwire is ahead).
# Each round also measures the link itself with iperf3 between the same
# two namespaces: one way, then both ways at once (`--bidir`, the slower
# direction: an allreduce loads both), and from 1 MiB the table gives
# gradwire's busbw (for 2 ranks, the bytes each way per second) as a
# share of each. OpenMPI runs across the same hosts too (mpirun started
# by scripts/emulated_hosts.sh --mpi, btl tcp on the hosts' eth0), each of
# its tuned algorithms; the best per size is the peer, as in
# allreduce_copy_vs_mpi.sh, and a column sets each side's fastest round
# against the other's (this VM runs whole processes in a fast or a slow
# mode, for either side). HOSTS=4 runs every side across 4 hosts
# (iperf3 still measures one link, between hosts 0 and 1). PER=2 puts 2
# ranks on each host (ranks i*2, i*2+1 on host i, for every side:
# OpenMPI fills each host's slots in turn, and adds vader, its shared
# memory, between the ranks of a host), where gradwire's communicator sums
# hierarchically and OpenMPI's tuned algorithms run flat. PER=3,1 gives
# each host its own count (unequal nodes, one count per host).
# GW_ARGS adds options to gradwire's runs, e.g. GW_ARGS="--comm-algo ring".
#
#   sudo [HOSTS=4] [PER=2|PER=3,1] bench/hosts_allreduce_vs_gloo.sh [ROUNDS]
#       (root; python3-torch, iperf3, openmpi-bin libopenmpi-dev; a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
HOSTS=${HOSTS:-2}
GW_ARGS=${GW_ARGS:-}
PER=${PER:-1}
export GW_RANKS_PER_HOST=$PER
IFS=, read -r -a per_host <<<"$PER"
[[ ${#per_host[@]} -eq 1 ]] && for ((i = 1; i < HOSTS; i++)); do per_host[i]=${per_host[0]}; done
[[ ${#per_host[@]} -eq $HOSTS ]] || { echo "PER=$PER: one count, or one per host ($HOSTS)" >&2; exit 2; }
NP=0
for k in "${per_host[@]}"; do NP=$((NP + k)); done
MAP=node BTL=self,tcp # one rank per host; with several, OpenMPI fills each host's slots and adds vader
[[ $NP -gt $HOSTS ]] && MAP=slot BTL=self,vader,tcp
source bench/hosts_peer.sh
command -v iperf3 >/dev/null || { echo "iperf3 missing: scripts/setup.sh --bench" >&2; exit 1; }
command -v mpicc >/dev/null || { echo "OpenMPI missing: scripts/setup.sh --bench" >&2; exit 1; }
mpicc -O2 -o "$tmp/mpi_allreduce" bench/mpi_allreduce.c
algos="0 3 4 6" # OpenMPI's tuned allreduce: default, recursive doubling, ring, Rabenseifner
# gradwire and OpenMPI: two ranges (smallest, largest, timed rounds,
# warm-up). 50 rounds of 1 KiB last a few milliseconds, shorter than this
# VM's stalls, so the small sizes run 2,000 (as allreduce_copy_vs_mpi.sh);
# gloo, 1-9 ms an allreduce here, runs 50 at every size.
RANGES=("1024 16384 2000 200" "65536 16777216 50 10")
# More hosts than CPUs: OpenMPI's ranks yield between polls, as gradwire's
# do when ranks share CPUs (each host's mpirun slot count cannot tell it).
yield=0
((NP > $(nproc))) && yield=1
for r in $(seq "$ROUNDS"); do
  mkdir -p "$tmp/g$r" "$tmp/t$r"
  : >"$tmp/g$r.txt"
  for range in "${RANGES[@]}"; do
    read -r lo hi iters warm <<<"$range"
    GW_HOSTS_LOG=$tmp/g$r scripts/emulated_hosts.sh "$HOSTS" -- "$GW" bench allreduce -b "$lo" -e "$hi" -f 4 \
      -n "$iters" -w "$warm" --engine comm $GW_ARGS || { cat "$tmp/g$r"/*; exit 1; }
    awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3, $6}' "$tmp/g$r/rank-0.txt" >>"$tmp/g$r.txt"
  done
  GW_HOSTS_LOG=$tmp/t$r scripts/emulated_hosts.sh "$HOSTS" -- $PY bench/torch_allreduce.py -b 1024 -e 16777216 -f 4 -n 50 -w 10 ||
    { cat "$tmp/t$r"/*; exit 1; }
  awk '{print $1, $2, $4}' "$tmp/t$r/rank-0.txt" >"$tmp/t$r.txt"
  for a in $algos; do
    : >"$tmp/m${a}_$r.txt"
    for range in "${RANGES[@]}"; do
      # OpenMPI 4.1 over btl tcp now and then ends with a segfault after
      # its last row (status 139): the rows count, and a run short of rows
      # is tried once more.
      read -r lo hi _ <<<"$range"
      want=$($PY -c "import math; print(round(math.log($hi / $lo, 4)) + 1)")
      for try in 1 2; do
        RANGE=$range YIELD=$yield ALGO=$a NP=$NP MAP=$MAP BTL=$BTL BIN=$tmp/mpi_allreduce scripts/emulated_hosts.sh "$HOSTS" --mpi -- sh -c '
          set -- $RANGE # smallest, largest, rounds, warm-up
          PMIX_MCA_gds=hash mpirun --allow-run-as-root --hostfile "$GW_MPI_HOSTFILE" --mca plm_rsh_agent "$GW_MPI_AGENT" \
            --mca oob_tcp_if_include 198.18.0.0/24 --mca btl "$BTL" --mca btl_tcp_if_include 198.18.0.0/24 --mca pml ob1 \
            --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$ALGO" -n "$NP" --map-by "$MAP" \
            --mca mpi_yield_when_idle "$YIELD" --bind-to none "$BIN" "$1" "$2" 4 "$3" "$4" 2>/dev/null' |
          awk '/^ +[0-9]/ {print $1, $3, $6}' >"$tmp/mrun.txt" || echo "OpenMPI (algorithm $a) exited $? in round $r" >&2
        [ "$(wc -l <"$tmp/mrun.txt")" = "$want" ] && break
        [ $try = 2 ] && { echo "OpenMPI (algorithm $a) gave $(wc -l <"$tmp/mrun.txt") of $want sizes twice" >&2; exit 1; }
      done
      cat "$tmp/mrun.txt" >>"$tmp/m${a}_$r.txt"
    done
  done
  grep -qv " ok$" "$tmp/g$r.txt" "$tmp/t$r.txt" "$tmp"/m*_$r.txt && { echo "a sum is wrong" >&2; exit 1; }
  echo "round $r/$ROUNDS done" >&2
  # The link (2 hosts): host 0 serves twice, host 1 measures one way,
  # then both ways at once (each client retries until its server listens).
  ((HOSTS == 2)) || continue
  mkdir -p "$tmp/i$r"
  linked=0
  for try in 1 2; do # (once in a while a round's iperf3 client never reaches its server: one more try)
  IPERF_OUT=$tmp/i$r/json GW_RANKS_PER_HOST=1 GW_HOSTS_LOG=$tmp/i$r scripts/emulated_hosts.sh 2 -- sh -c '
    if [ "$GRADWIRE_RANK" = 0 ]; then timeout 60 iperf3 -s -1 >/dev/null; exec timeout 60 iperf3 -s -1 >/dev/null; fi
    for how in one bidir; do
      flag=; [ $how = bidir ] && flag=--bidir
      for i in $(seq 400); do
        iperf3 -c 198.18.0.1 $flag -t 3 -J >"$IPERF_OUT.$how" 2>/dev/null && continue 2
        sleep 0.05
      done
      exit 1
    done' >/dev/null && { linked=1; break; }
  done
  ((linked)) || { echo "iperf3 failed twice in round $r: its share columns leave it out" >&2; continue; }
  $PY -c "
import json
one = json.load(open('$tmp/i$r/json.one'))['end']
both = json.load(open('$tmp/i$r/json.bidir'))['end']
print(one['sum_received']['bits_per_second'] / 8e9,
      min(both['sum_received']['bits_per_second'], both['sum_received_bidir_reverse']['bits_per_second']) / 8e9)" >"$tmp/i$r.txt"
done
$PY - "$tmp" "$ROUNDS" "$algos" "$HOSTS" "$PER" "$NP" <<'PY'
import statistics, sys
tmp, rounds, algos, hosts, per, np = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
names = {"0": "default", "3": "recursive doubling", "4": "ring", "6": "Rabenseifner"}
def table(side, pick=statistics.median):
    t = {}
    for r in range(1, rounds + 1):
        for line in open(f"{tmp}/{side}{r}.txt"):
            size, us, _ = line.split()
            t.setdefault(int(size), []).append(float(us))
    return {s: pick(v) for s, v in t.items()}
g, t = table("g"), table("t")
m = {a: table(f"m{a}_") for a in algos}
g_fast = table("g", min)
m_fast = {a: table(f"m{a}_", min) for a in algos}
import os
links = [[float(x) for x in open(f"{tmp}/i{r}.txt").read().split()] for r in range(1, rounds + 1)
         if os.path.exists(f"{tmp}/i{r}.txt")]
one = statistics.median(l[0] for l in links) if links else None
both = statistics.median(l[1] for l in links) if links else None
link = (f"iperf3 between hosts 0 and 1 (medians of {len(links)}): {one:.2f} GB/s one way, {both:.2f} GB/s each way "
        "with --bidir" if links else "no iperf3 figure")
print(f"{hosts} hosts, {'one rank' if per == '1' else f'{per} ranks'} each; {link}. Ratios: the peer's time / gradwire's (above 1: gradwire ahead).")
print("| size | gradwire | best OpenMPI (algorithm) | ratio | fastest rounds: ratio | gloo | ratio | gradwire / iperf3 one way | / iperf3 --bidir |")
print("|---|---|---|---|---|---|---|---|---|")
for s in sorted(g):
    bus = 2 * (np - 1) / np
    fmt = lambda us: f"{us:.1f} us" if s < 65536 else f"{bus * s / us / 1e3:.2f} GB/s"
    a = min(algos, key=lambda a: m[a][s])
    bw = bus * s / g[s] / 1e3
    shares = f"{bw / one:.0%} | {bw / both:.0%}" if s >= 1 << 20 and links else " | "
    fast = min(m_fast[b][s] for b in algos) / g_fast[s]
    print(f"| {s // 1024} KiB | {fmt(g[s])} | {fmt(m[a][s])} ({names[a]}) | {m[a][s] / g[s]:.2f}x | {fast:.2f}x | {fmt(t[s])} | "
          f"{t[s] / g[s]:.2f}x | {shares} |")
PY
