#!/usr/bin/env bash
# model.kind = "torch": the user's nn.Module trained by gradwire.
#  - The built-in MLP and the same MLP as a torch module, started from the
#    same weights, end 40 steps apart by float rounding alone (1e-5
#    relative) on a sync ring and a sync parameter server of 3 workers;
#    across 3 processes the torch run's model is the in-process one bit
#    for bit.
#  - A CNN with BatchNorm trains under the async parameter server (its
#    staleness reported), SSP and gossip; model.safetensors holds the
#    module's state_dict names and loads back with load_state_dict.
#  - Checkpoints resume bit for bit; the async runs (in one process and
#    across 3) replay bit for bit; virtual time repeats itself.
#  - A module whose output turns NaN at a chosen step ends the run with
#    status "diverged" at that step.
#  - Bad modules get errors that name the file, and the user's traceback.
# Exits 77 (ctest: "Skipped") without the torch plug-in or Fashion-MNIST.
# Usage: torch_model.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
py=/usr/bin/python3
[ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mods=$(cd "$src" && pwd)/tests/scheduler/torch

cat > "$tmp/base.toml" <<TOML
[experiment]
name = "torch-test"
[model]
kind = "mlp"
hidden = [64]
[data]
train_subset = 4096
test_subset = 1000
[train]
max_steps = 40
batch_size = 32
momentum = 0.9
[topology]
kind = "ring"
workers = 3
TOML
{ sed "s|kind = \"mlp\"|kind = \"torch\"\nmodule = \"$mods/mlp.py\"|" "$tmp/base.toml"
  printf '[model.args]\ninit = "%s"\n' "$tmp/init/model.safetensors"; } > "$tmp/torch.toml"

run() { # OUT ARGS...: a run that must succeed
  local out=$1; shift
  "$gw" run "$@" -q --no-report --force --out "$tmp/$out" > "$tmp/$out.log" 2>&1 || fail "$out: $(tail -20 "$tmp/$out.log")"
}
# The initial weights: one step at the smallest learning rate.
run init "$tmp/base.toml" --set topology.kind='"single"' --set train.max_steps=1 --set train.lr=1e-12

compare() { # A B TOLERANCE: every tensor of A's model equals B's (the built-in's names mapped) within TOLERANCE relative
  $py "$src/tests/scheduler/torch/same_tensors.py" "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" "$3" \
    --strip .linear. || fail "$1 against $2: see above"
}

for t in ring ps; do
  set_t=(--set topology.kind='"ring"')
  [ $t = ps ] && set_t=(--set topology.kind='"parameter-server"' --set topology.ps.mode='"sync"' --set topology.ps.shards=2)
  run "builtin-$t" "$tmp/base.toml" "${set_t[@]}"
  run "torch-$t" "$tmp/torch.toml" "${set_t[@]}"
  compare "builtin-$t" "torch-$t" 1e-5
done
run torch-procs "$tmp/torch.toml" --procs 3
compare torch-ring torch-procs 0

# A CNN with BatchNorm under asynchronous wirings (momentum 0: stale
# momentum diverges at this learning rate, for the built-in models too).
cat > "$tmp/cnn.toml" <<TOML
[model]
kind = "torch"
module = "$mods/cnn.py"
[model.args]
width = 6
[data]
train_subset = 4096
test_subset = 1000
[train]
max_steps = 120
batch_size = 32
momentum = 0
[topology]
kind = "parameter-server"
workers = 3

[topology.ps]
mode = "async"
TOML
run cnn-async "$tmp/cnn.toml"
run cnn-ssp "$tmp/cnn.toml" --set topology.ps.mode='"ssp"' --set topology.ps.staleness_bound=2
run cnn-gossip "$tmp/cnn.toml" --set topology.kind='"gossip"'
$py - "$tmp" "$mods" <<'PY' || fail "CNN runs: see above"
import json, struct, sys
import torch
tmp, mods = sys.argv[1], sys.argv[2]
sys.path.insert(0, mods)
import cnn
for run in ["cnn-async", "cnn-ssp", "cnn-gossip"]:
    s = json.load(open("%s/%s/summary.json" % (tmp, run)))
    print("%s: %s, test accuracy %.3f" % (run, s["status"], s["final_test_accuracy"]))
    assert s["status"] == "completed" and s["final_test_accuracy"] > 0.5, s
async_ = json.load(open(tmp + "/cnn-async/summary.json"))
assert async_["staleness"]["count"] > 0 and async_["staleness"]["max"] >= 1, async_["staleness"]
# model.safetensors holds the module's own names, running statistics included.
raw = open(tmp + "/cnn-async/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__")
state = {k: torch.frombuffer(bytearray(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]),
         dtype=torch.float32).view(t["shape"]) for k, t in h.items()}
net = cnn.model({"model": {"args": {"width": 6}}})
net.load_state_dict(state)  # strict: every name the module has (BatchNorm fills num_batches_tracked in itself)
assert float(state["4.running_var"].min()) > 0 and float(state["4.running_mean"].abs().max()) > 0, "BatchNorm statistics never updated"
PY

# Checkpoints: the torch ring resumed from step 20 ends where the
# uninterrupted run ends, byte for byte.
run resume-full "$tmp/torch.toml" --set train.checkpoint_every=10 --set train.keep_checkpoints=100
cp -r "$tmp/resume-full" "$tmp/resumed"
rm "$tmp/resumed/model.safetensors" "$tmp/resumed/summary.json"
"$gw" run --resume "$tmp/resumed" --from-step 20 -q --no-report > "$tmp/resumed.log" 2>&1 || fail "resume: $(tail -5 "$tmp/resumed.log")"
cmp -s "$tmp/resume-full/model.safetensors" "$tmp/resumed/model.safetensors" || fail "the resumed torch model differs"
# Record and replay: the async runs (in one process, and one interpreter
# per rank across 3 processes) replay bit for bit, BatchNorm's statistics
# included; virtual time repeats itself.
run cnn-procs "$tmp/cnn.toml" --procs 3
for r in cnn-async cnn-procs; do
  "$gw" replay "$tmp/$r" -q --no-report > "$tmp/$r.replay.log" 2>&1 || fail "$r: replay: $(tail -5 "$tmp/$r.replay.log")"
  grep -q "holds the run's parameters, bit for bit" "$tmp/$r.replay.log" || fail "$r: $(tail -2 "$tmp/$r.replay.log")"
done
run cnn-virtual "$tmp/cnn.toml" --set experiment.clock='"virtual"'
run cnn-virtual2 "$tmp/cnn.toml" --set experiment.clock='"virtual"'
cmp -s "$tmp/cnn-virtual/model.safetensors" "$tmp/cnn-virtual2/model.safetensors" || fail "virtual time did not repeat itself"
echo "ok: resume, replay (1 and 3 processes) and virtual time, bit for bit"

# Bad modules: each error names the file and says what is wrong.
refused() { # NAME EXPECTED MODULE_TEXT: a run of that module fails with exit 2 and says EXPECTED
  local name=$1 expected=$2
  printf '%s\n' "$3" > "$tmp/$name.py"
  sed "s|module = \".*\"|module = \"$name.py\"|" "$tmp/cnn.toml" > "$tmp/$name.toml"
  local rc=0
  timeout 120 "$gw" run "$tmp/$name.toml" -q --no-report --force --out "$tmp/$name" > "$tmp/$name.log" 2>&1 || rc=$?
  [ $rc -ne 0 ] || fail "$name: the run succeeded"
  [ $rc -ne 124 ] || fail "$name: the run hung"
  grep -qF -- "$expected" "$tmp/$name.log" || fail "$name: no '$expected' in: $(cat "$tmp/$name.log")"
}
refused syntax "$tmp/syntax.py\", line 2" $'import torch\ndef model(cfg) return 1'
refused nomodel "defines no function model(cfg)" 'import torch'
refused notmodule "returned int, not a torch.nn.Module" $'def model(cfg):\n    return 3'
refused raises "ZeroDivisionError" $'def model(cfg):\n    return 1 / 0'
refused shape "[batch, classes]" $'from torch import nn\ndef model(cfg):\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 10), nn.Flatten(0))'
refused classes "the dataset has 10 classes" $'from torch import nn\ndef model(cfg):\n    return nn.Sequential(nn.Flatten(), nn.Linear(784, 7))'
refused forward "the module's forward raised" $'import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = torch.nn.Parameter(torch.zeros(3))\n    def forward(self, x):\n        raise ValueError("bad input")\ndef model(cfg):\n    return M()'
rm -f "$tmp/missing.py"
sed "s|module = \".*\"|module = \"missing.py\"|" "$tmp/cnn.toml" > "$tmp/missing.toml"
"$gw" run "$tmp/missing.toml" -q --no-report --out "$tmp/m" > "$tmp/missing.log" 2>&1 && fail "a missing module ran"
grep -q "model.module: $tmp/missing.py does not exist" "$tmp/missing.log" || fail "missing module: $(cat "$tmp/missing.log")"
# From the Python module (its interpreter is the plug-in's): the same run.
pymod=$(dirname "$gw")/python
if [ -d "$pymod/gradwire" ]; then
  PYTHONPATH=$pymod timeout 120 $py -c "import gradwire, sys
r = gradwire.run(sys.argv[1], out=sys.argv[2], set={'train.max_steps': 20}, quiet=True, report=False)
assert r.summary['status'] == 'completed', r.summary" "$tmp/cnn.toml" "$tmp/from-python" > "$tmp/py.log" 2>&1 ||
    fail "the Python module's torch run: $(tail -5 "$tmp/py.log")"
  echo "ok: a torch model from the Python module"
fi

# A torch model whose output turns NaN at its step 7: the run diverges there.
printf '[model]\nkind = "torch"\nmodule = "%s/nan_at.py"\n[model.args]\nnan_at = 7\n[data]\ntrain_subset = 2048\ntest_subset = 200\n[train]\nmax_steps = 20\n' \
  "$mods" > "$tmp/nan.toml"
rc=0
"$gw" run "$tmp/nan.toml" -q --no-report --out "$tmp/nan" > "$tmp/nan.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "worker 0: diverged at step 7: the loss is nan" "$tmp/nan.log" || fail "NaN: exit $rc: $(cat "$tmp/nan.log")"
$py -c "import json, sys; s = json.load(open(sys.argv[1])); assert s['status'] == 'diverged' and s['diverged'] == {'worker': 0, 'step': 7}, s" \
  "$tmp/nan/summary.json" || fail "NaN: summary.json"
echo "ok: torch models"
