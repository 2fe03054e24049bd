#!/usr/bin/env bash
# A torch CNN with BatchNorm (tests/scheduler/torch/cnn.py) under the
# wirings and modes the other torch tests leave out, each a real run that
# must learn (test accuracy above chance by far) and say what it did:
#  - local SGD, sync DiLoCo and async DiLoCo (outer steps), streaming
#    DiLoCo (2 fragments), the hierarchical ring (2 groups of 2);
#  - compressed exchanges: top-k pushes to an async parameter server
#    (error feedback), a top-k ring and a PowerSGD ring;
#  - heterogeneous [[nodes]]: a group of batch 16 beside one of batch 48,
#    3x slower, under the async parameter server (each worker's batch in
#    summary.json, the slow group's pushes staler);
#  - [[faults]]: a worker killed at its step 30 across 4 processes, the
#    async parameter server going on without it (summary.json: lost_workers).
# Exits 77 (ctest: "Skipped") without the torch plug-in or Fashion-MNIST.
# Usage: torch_wirings.sh GRADWIRE SOURCE_DIR
set -uo pipefail
NEEDS_MNIST=1 . "$2/tests/scheduler/torch/support.sh"
cat > "$tmp/cnn.toml" <<TOML
[model]
kind = "torch"
module = "$src/tests/scheduler/torch/cnn.py"
[model.args]
width = 6
[data]
train_subset = 8192
test_subset = 500
[train]
max_steps = 80
batch_size = 32
momentum = 0
[topology]
kind = "parameter-server"
workers = 4
local_steps = 4

[topology.ps]
mode = "async"
TOML
# learns NAME MIN_ACCURACY CHECK ARGS...: a run that completes above MIN_ACCURACY
# and whose summary.json s passes the Python expression CHECK.
learns() {
  local name=$1 min=$2 check=$3
  shift 3
  timeout 180 "$gw" run "$tmp/cnn.toml" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    fail "$name: $(tail -20 "$tmp/$name.log")"
  $py -c "import json, sys
s = json.load(open(sys.argv[1]))
print('%-16s test accuracy %.3f' % (sys.argv[2], s['final_test_accuracy']))
assert s['status'] == 'completed' and s['final_test_accuracy'] > float(sys.argv[3]), s['final_test_accuracy']
assert $check, 'summary.json fails the check'" "$tmp/$name/summary.json" "$name" "$min" || fail "$name: see above ($check)"
}
learns local-sgd 0.5 "s['local_steps'] == 4" --set topology.kind='"local-sgd"' --set train.momentum=0.9
learns diloco 0.5 "s['local_steps'] == 4" --set topology.kind='"diloco"' --set topology.ps.mode='"sync"' \
  --set train.optimizer='"adamw"' --set train.lr=0.002
# (Async DiLoCo's outer step at lr 1/N without momentum, as test_async_diloco.cpp learns with.)
learns async-diloco 0.5 "s['staleness']['count'] > 0" --set topology.kind='"diloco"' --set train.optimizer='"adamw"' \
  --set train.lr=0.002 --set topology.diloco.outer_lr=0.25 --set topology.diloco.outer_momentum=0
learns streaming 0.5 "True" --set topology.kind='"diloco"' --set topology.ps.mode='"sync"' --set topology.streaming.fragments=2 \
  --set topology.ps.shards=1 --set train.optimizer='"adamw"' --set train.lr=0.002
learns hierarchical 0.6 "True" --set topology.kind='"hierarchical"' --set topology.group_size=2 --set train.momentum=0.9
learns topk-pushes 0.5 "s['compress']['mode'] == 'topk' and s['per_worker'][0]['compress_error'] > 0" --set compression.kind='"topk"' \
  --set compression.ratio=0.1
learns topk-ring 0.5 "s['compress']['mode'] == 'topk' and s['per_worker'][0]['compress_error'] > 0" --set topology.kind='"ring"' \
  --set compression.kind='"topk"' --set compression.ratio=0.1 --set train.momentum=0.9
learns powersgd-ring 0.5 "s['compress']['mode'] == 'powersgd'" --set topology.kind='"ring"' --set compression.kind='"powersgd"' --set train.momentum=0.9
{ cat "$tmp/cnn.toml"
  printf '[[nodes]]\nname = "small"\ncount = 2\nbatch_size = 16\n[[nodes]]\nname = "big"\ncount = 2\nbatch_size = 48\nslowdown = 3.0\n'
} > "$tmp/nodes.toml"
cp "$tmp/nodes.toml" "$tmp/cnn.toml"
learns nodes 0.5 "sorted(w['batch_size'] for w in s['per_worker']) == [16, 16, 48, 48] and \
  min(w['staleness']['mean'] for w in s['per_worker'] if w['batch_size'] == 48) > \
  max(w['staleness']['mean'] for w in s['per_worker'] if w['batch_size'] == 16)"
sed -i '/^\[\[nodes\]\]/,$d' "$tmp/cnn.toml"
printf '[[faults]]\nkind = "kill"\nrank = 3\nat_step = 30\n' >> "$tmp/cnn.toml"
learns killed 0.5 "s['lost_workers'] == [3]" --procs 4
echo "ok: a torch model under every other wiring, compressed, heterogeneous and with a worker lost"
