#!/usr/bin/env bash
# topology.kind = "halos" (HALoS, actors/halos_rule.hpp) from the CLI:
#  - in virtual time, 6 workers in 3 regions (a local server each, one
#    region 2x slow, a slow link between regions) train the MLP (test
#    accuracy above 70%), summary.json says "halos", and a second run is
#    the same model byte for byte;
#  - one group whose local server exchanges every push with a global
#    server at lr 1 without momentum is async DiLoCo at the local server's
#    lr, within float rounding (the global server only mirrors it);
#  - in real time, in one process and across 4 processes, 4 workers in
#    groups of 2 train;
#  - what it does not run with is refused with exit 2, naming the key:
#    checkpoints, compression, the lr's range.
# Usage: halos.sh GRADWIRE SOURCE_DIR
set -uo pipefail
NEEDS_MNIST=1 . "$2/tests/scheduler/support.sh"
cat > "$tmp/base.toml" <<TOML
[experiment]
clock = "virtual"
[data]
train_subset = 8192
test_subset = 1000
[topology]
kind = "halos"
workers = 6
local_steps = 4
group_size = 0
[virtual]
step_ms = 5.0
workers_per_host = 2
hosts = 3
[transport]
latency_us = 20000.0
bandwidth_gbps = 1.0
[train]
batch_size = 32
lr = 0.05
momentum = 0.9
max_steps = 120
budget = "shared"
TOML
cfg=$tmp/regions.toml # one region of the three 2x slow
{ cat "$tmp/base.toml"; printf '[[nodes]]\ncount = 4\n[[nodes]]\ncount = 2\nslowdown = 2.0\n'; } > "$cfg"
trained() { # NAME MIN_ACCURACY
  $py -c "import json, sys; s = json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-2], s['mode'], s['final_test_accuracy'])
assert s['status'] == 'completed' and s['mode'] == 'halos' and s['final_test_accuracy'] > float(sys.argv[2]), s" \
    "$tmp/$1/summary.json" "$2" || fail "$1 did not train"
}
run virtual
trained virtual 0.7
run virtual-again
same virtual virtual-again 0

# One group, an exchange every push, a global server that takes the progress as it is: async DiLoCo.
cfg=$tmp/base.toml
mirror=(--set topology.workers=3 --set topology.group_size=3
        --set topology.halos.exchange_every=1 --set topology.halos.global_lr=1.0 --set topology.halos.global_momentum=0.0)
run mirror "${mirror[@]}" --set virtual.hosts=1 --set virtual.workers_per_host=3
run diloco "${mirror[@]}" --set virtual.hosts=1 --set virtual.workers_per_host=3 --set topology.kind='"diloco"' \
  --set topology.ps.mode='"async"' --set topology.diloco.outer_lr=0.25 --set topology.diloco.outer_momentum=0.0
same diloco mirror 1e-5

run real --set experiment.clock='"real"' --set topology.workers=4 --set topology.group_size=2 --set virtual.hosts=2
trained real 0.6
# Across 4 processes: groups of 2 ranks, the global server on rank 0, group 1's local server on rank 2.
run procs --procs 4 --set experiment.clock='"real"' --set topology.workers=4 --set topology.group_size=2 --set virtual.hosts=2
trained procs 0.6
grep -qF "2 group(s) with a local server each" "$tmp/procs/summary.json" || fail "procs: summary.json names no 2 groups"
echo "ok: HALoS trains in virtual and real time and across processes, repeats byte for byte, and mirrors async DiLoCo with one group"

refused checkpoints "--set train.checkpoint_every: HALoS does not checkpoint" --set train.checkpoint_every=8 --set experiment.clock='"real"'
refused compress "HALoS's pushes are dense pseudo-gradients" --set compression.kind='"topk"'
refused lr "topology.halos.local_lr" --set topology.halos.local_lr=0.0
echo "ok: what HALoS does not run with is refused, naming it"
