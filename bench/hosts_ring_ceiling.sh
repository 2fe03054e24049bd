#!/usr/bin/env bash
# How far the MLP ring across 2 emulated hosts can scale on this machine:
# the emulated hosts share its CPUs, and TCP's copies and protocol work
# run on the same cores as training. Each round measures, back to back:
#   - one process of examples/ring.toml (the compute time of a step);
#   - iperf3 --bidir between the two hosts (GB/s each way, and how many
#     cores the machine kept busy doing it, from /proc/stat);
#   - the ring across the 2 hosts (scripts/emulated_hosts.sh).
# The ceiling is the scaling efficiency a ring would reach if its
# exchange overlapped compute perfectly and cost only the CPU iperf3's
# traffic costs: compute / (compute + CPU per step for the MLP's 0.94 MB
# each way, per host). The ring's measured efficiency is printed beside it.
#
#   sudo bench/hosts_ring_ceiling.sh [ROUNDS]   (root; iperf3; a build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
source bench/hosts_peer.sh
command -v iperf3 >/dev/null || { echo "iperf3 missing: scripts/setup.sh --bench" >&2; exit 1; }
STEPS=600
gw_args=(run examples/ring.toml -q --no-report --set train.max_steps=$STEPS --set train.eval_every=1000)
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
rate() { $PY -c "import json; print(json.load(open('$1/summary.json'))['samples_per_sec'])"; }
for r in $(seq "$ROUNDS"); do
  "$GW" "${gw_args[@]}" --set topology.workers=1 --out "$tmp/one" --force >/dev/null
  read -r b0 i0 < <(busy)
  mkdir -p "$tmp/ip$r"
  GW_HOSTS_LOG=$tmp/ip$r scripts/emulated_hosts.sh 2 -- sh -c 'if [ "$GRADWIRE_RANK" = 0 ]; then exec timeout 30 iperf3 -s -1 >/dev/null;
    else sleep 0.5; exec iperf3 -c 198.18.0.1 --bidir -t 4 -J >"'"$tmp/bidir.json"'"; fi' || { cat "$tmp/ip$r"/*; exit 1; }
  read -r b1 i1 < <(busy)
  mkdir -p "$tmp/logs$r"
  GW_HOSTS_LOG=$tmp/logs$r scripts/emulated_hosts.sh 2 -- "$GW" "${gw_args[@]}" --set topology.workers=2 \
    --out "$tmp/two" || { cat "$tmp/logs$r"/*; exit 1; }
  $PY - "$(rate "$tmp/one")" "$(rate "$tmp/two")" "$b0" "$i0" "$b1" "$i1" "$tmp/bidir.json" <<'PY'
import json, sys
one, two, b0, i0, b1, i1 = map(float, sys.argv[1:7])
e = json.load(open(sys.argv[7]))['end']
each = (e['sum_received']['bits_per_second'] + e['sum_received_bidir_reverse']['bits_per_second']) / 2 / 8e9
cores = 2 * (b1 - b0) / ((b1 - b0) + (i1 - i0))  # busy cores while iperf3 ran (its 0.5 s start included)
grad = 235146 * 4                                 # the MLP's gradient, bytes each way per step
comp = 64 / one                                   # seconds of compute per step (batch 64)
cpu = grad * cores / (2 * each * 1e9)             # one host's share of the CPU that traffic costs
print(f"1 process {one:,.0f} samples/s ({comp * 1e3:.2f} ms a step) | iperf3 --bidir {each:.2f} GB/s each way, "
      f"{cores:.2f} cores busy -> {cpu * 1e3:.2f} ms of CPU a step | ceiling {comp / (comp + cpu) * 100:.0f}% | "
      f"ring across 2 hosts {two:,.0f} samples/s = {two / 2 / one * 100:.0f}%")
PY
done
