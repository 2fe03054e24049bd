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
# share of each.
#
#   sudo bench/hosts_allreduce_vs_gloo.sh [ROUNDS]   (root; python3-torch, iperf3; a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
GW=${BUILD_DIR:-build}/gradwire
PY=/usr/bin/python3
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns)" >&2; exit 77; }
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "iperf3 missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$ROUNDS"); do
  mkdir -p "$tmp/g$r" "$tmp/t$r"
  GW_HOSTS_LOG=$tmp/g$r scripts/emulated_hosts.sh 2 -- "$GW" bench allreduce -b 1K -e 16M -f 4 -n 50 -w 10 \
    --engine comm || { cat "$tmp/g$r"/*; exit 1; }
  awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3, $6}' "$tmp/g$r/rank-0.txt" >"$tmp/g$r.txt"
  GW_HOSTS_LOG=$tmp/t$r scripts/emulated_hosts.sh 2 -- $PY bench/torch_allreduce.py -b 1024 -e 16777216 -f 4 -n 50 -w 10 ||
    { cat "$tmp/t$r"/*; exit 1; }
  awk '{print $1, $2, $4}' "$tmp/t$r/rank-0.txt" >"$tmp/t$r.txt"
  grep -qv " ok$" "$tmp/g$r.txt" "$tmp/t$r.txt" && { echo "a sum is wrong" >&2; exit 1; }
  # The link: host 0 serves twice, host 1 measures one way, then both
  # ways at once (each client retries until its server listens).
  mkdir -p "$tmp/i$r"
  IPERF_OUT=$tmp/i$r/json GW_HOSTS_LOG=$tmp/i$r scripts/emulated_hosts.sh 2 -- sh -c '
    if [ "$GRADWIRE_RANK" = 0 ]; then iperf3 -s -1 >/dev/null; exec iperf3 -s -1 >/dev/null; fi
    for how in one bidir; do
      flag=; [ $how = bidir ] && flag=--bidir
      for i in $(seq 100); do
        iperf3 -c 198.18.0.1 $flag -t 3 -J >"$IPERF_OUT.$how" 2>/dev/null && continue 2
        sleep 0.05
      done
      exit 1
    done' >/dev/null || { cat "$tmp/i$r"/*; exit 1; }
  $PY -c "
import json
one = json.load(open('$tmp/i$r/json.one'))['end']
both = json.load(open('$tmp/i$r/json.bidir'))['end']
print(one['sum_received']['bits_per_second'] / 8e9,
      min(both['sum_received']['bits_per_second'], both['sum_received_bidir_reverse']['bits_per_second']) / 8e9)" >"$tmp/i$r.txt"
  echo "round $r/$ROUNDS done" >&2
done
$PY - "$tmp" "$ROUNDS" <<'PY'
import statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def table(side):
    t = {}
    for r in range(1, rounds + 1):
        for line in open(f"{tmp}/{side}{r}.txt"):
            size, us, _ = line.split()
            t.setdefault(int(size), []).append(float(us))
    return {s: statistics.median(v) for s, v in t.items()}
g, t = table("g"), table("t")
links = [[float(x) for x in open(f"{tmp}/i{r}.txt").read().split()] for r in range(1, rounds + 1)]
one = statistics.median(l[0] for l in links)
both = statistics.median(l[1] for l in links)
print(f"iperf3 between the two hosts (medians of {rounds}): {one:.2f} GB/s one way, {both:.2f} GB/s each way with --bidir")
print("| size | gradwire | gloo | gloo time / gradwire's | gradwire / iperf3 one way | / iperf3 --bidir |")
print("|---|---|---|---|---|---|")
for s in sorted(g):
    fmt = lambda us: f"{us:.1f} us" if s < 65536 else f"{s / us / 1e3:.2f} GB/s"
    bw = s / g[s] / 1e3
    shares = f"{bw / one:.0%} | {bw / both:.0%}" if s >= 1 << 20 else " | "
    print(f"| {s // 1024} KiB | {fmt(g[s])} | {fmt(t[s])} | {t[s] / g[s]:.2f}x | {shares} |")
PY
