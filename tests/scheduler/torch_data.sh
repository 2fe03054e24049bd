#!/usr/bin/env bash
# data.dataset = "module": a torch module's own dataset(split, cfg)
# (tests/scheduler/torch/own_data.py: numpy inputs of 16 features, numpy
# int targets, 4 classes):
#  - it trains under the async parameter server and the sync ring, the
#    ring across 3 processes gives the in-process model bit for bit, and
#    `gradwire eval` reads the test split from the module again;
#  - items of the wrong shape, a target that is no class index, an item
#    that is no (input, target) pair, an item that raises, a file without
#    dataset(), and "module" for a built-in model are refused, naming the
#    file and item (the user's traceback where their code raised).
# Exits 77 (ctest: "Skipped") without the torch plug-in.
# Usage: torch_data.sh GRADWIRE SOURCE_DIR
set -uo pipefail
. "$2/tests/scheduler/torch/support.sh"
cat > "$tmp/own.toml" <<TOML
[model]
kind = "torch"
module = "$src/tests/scheduler/torch/own_data.py"
[data]
dataset = "module"
[train]
max_steps = 60
batch_size = 32
momentum = 0
log_every = 20
[topology]
kind = "parameter-server"
workers = 3

[topology.ps]
mode = "async"
TOML
cfg=$tmp/own.toml
learns() { # NAME ARGS...: a run above 90% test accuracy
  local name=$1
  run "$@"
  $py -c "import json, sys; s = json.load(open(sys.argv[1])); print(sys.argv[2], s['final_test_accuracy'])
assert s['status'] == 'completed' and s['final_test_accuracy'] > 0.9, s" "$tmp/$name/summary.json" "$name" ||
    fail "$name did not learn"
}
learns async
learns ring --set topology.kind='"ring"'
learns procs --set topology.kind='"ring"' --procs 3
cmp -s "$tmp/ring/model.safetensors" "$tmp/procs/model.safetensors" || fail "the ring across 3 processes differs from in-process"
"$gw" eval "$tmp/async" > "$tmp/eval.log" 2>&1 || fail "eval: $(cat "$tmp/eval.log")"
grep -q "(400 test images of module)" "$tmp/eval.log" || fail "eval: $(cat "$tmp/eval.log")"

mod=$src/tests/scheduler/torch/own_data.py
refused shape "$mod: dataset('train', cfg): item 5's input has shape [8], item 0's [16]" --set model.args.bad='"shape"'
refused target "item 3's target is 1.5; a target must be a class index" --set model.args.bad='"target"'
refused item "item 2 is ndarray; an item must be (input, target)" --set model.args.bad='"item"'
refused raises "KeyError: 'sample 4 is missing'" --set model.args.bad='"raise"'
grep -qF "own_data.py\", line" "$tmp/raises.log" || fail "no traceback with file and line: $(cat "$tmp/raises.log")"
refused nodataset "mlp.py: data.dataset = \"module\", but the file defines no dataset(split, cfg)" \
  --set model.module="\"$src/tests/scheduler/torch/mlp.py\""
refused builtin "data.dataset = \"module\" is a torch module's own dataset(split, cfg)" --set model.kind='"mlp"' \
  --set model.module='""'
# From the Python module, as in a notebook: model= and dataset= given as
# functions (defined in __main__) train the ring's model bit for bit,
# loss= is what each worker's step calls;
# across processes (procs=) they are refused, and a command-line run of a
# "python:" name says where such names come from.
pymod=$(dirname "$gw")/python
if [ -d "$pymod/gradwire" ]; then
  PYTHONPATH=$pymod timeout 120 $py - "$tmp/own.toml" "$tmp/fns" "$src/tests/scheduler/torch" > "$tmp/fns.log" 2>&1 <<'PY' ||
import sys
import gradwire
sys.path.insert(0, sys.argv[3])
import own_data


def model(cfg):
    return own_data.model(cfg)


def dataset(split, cfg):
    return own_data.dataset(split, cfg)


r = gradwire.run(sys.argv[1], out=sys.argv[2], set={"topology.kind": "ring", "model.module": "ignored.py"},
                 model=model, dataset=dataset)
assert r.summary["status"] == "completed", r.summary
# loss= is called in this interpreter, at every step of every worker, and by the evaluation.
calls = []


def loss(output, target):
    calls.append((output.shape[0], output.requires_grad))
    return torch.nn.functional.cross_entropy(output, target)


import torch
r = gradwire.run(sys.argv[1], out=sys.argv[2] + "-loss", set={"train.max_steps": 10},
                 model=model, dataset=dataset, loss=loss)
assert r.summary["status"] == "completed", r.summary
train = [n for n, grad in calls if grad]
assert len(train) == 3 * 10 and set(train) == {32} and len(calls) > len(train), calls  # and the evaluation's
try:
    gradwire.run(sys.argv[1], out=sys.argv[2] + "-procs", procs=3, model=model, dataset=dataset)
    raise SystemExit("procs= with model= ran")
except gradwire.Error as e:
    assert "put them in a .py file" in str(e), e
PY
    fail "functions given to gradwire.run: $(tail -20 "$tmp/fns.log")"
  same ring fns 0 # (the tensors: the header's config names model.module)
  echo "ok: model= and dataset= as functions from Python"
fi
refused pyname "names functions given to gradwire.run(model=...) in a Python process, and none are here" \
  --set model.module='"python:__main__.model"'
echo "ok: a torch module's own data"
