#!/usr/bin/env bash
# torchvision's resnet18, unchanged (tests/scheduler/torch/resnet18.py), on
# CIFAR-shaped data (synthetic-cifar, 3x32x32), 2 workers:
#  - it trains under the sync ring, the async parameter server and SSP
#    (staleness reported) and D-PSGD gossip in one process; the ring across
#    2 processes gives the in-process model bit for bit;
#  - model.safetensors loads back into resnet18 by its names, its 20
#    BatchNorm layers' running statistics updated.
# Exits 77 (ctest: "Skipped") without the torch plug-in or python3-torchvision.
# Usage: torch_resnet.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$(cd "$2" && pwd)
py=/usr/bin/python3
# (Found, not imported: an import of torchvision is 3 s.)
$py -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchvision') is None)" 2> /dev/null || { echo "SKIP: no python3-torchvision"; exit 77; }
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cat > "$tmp/resnet18.toml" <<TOML
[experiment]
name = "resnet18"
[model]
kind = "torch"
module = "$src/tests/scheduler/torch/resnet18.py"
[data]
dataset = "synthetic-cifar"
synthetic_train = 512
synthetic_test = 64
[train]
max_steps = 6
batch_size = 8
lr = 0.02
momentum = 0
eval = "after"
log_every = 2
[topology]
kind = "ring"
workers = 2
TOML
run() { # NAME ARGS...
  local name=$1
  shift
  timeout 300 "$gw" run "$tmp/resnet18.toml" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    fail "$name: $(tail -20 "$tmp/$name.log")"
  $py - "$tmp/$name/summary.json" "$name" <<'PY' || fail "$name: see above"
import json, math, sys
s = json.load(open(sys.argv[1]))
print("%s: %s, final loss %.3f" % (sys.argv[2], s["status"], s["final_loss"]))
assert s["status"] == "completed" and math.isfinite(s["final_loss"]), s["status"]
if sys.argv[2] in ("async", "ssp"):
    assert s["staleness"]["count"] > 0 and s["staleness"]["max"] >= 1, s["staleness"]
PY
}
run ring
run procs --procs 2
cmp -s "$tmp/ring/model.safetensors" "$tmp/procs/model.safetensors" || fail "the ring across 2 processes differs from in-process"
run async --set topology.kind='"parameter-server"' --set topology.ps.mode='"async"'
run ssp --set topology.kind='"parameter-server"' --set topology.ps.mode='"ssp"' --set topology.ps.staleness_bound=1
run gossip --set topology.kind='"gossip"'
$py - "$tmp/async/model.safetensors" <<'PY' || fail "model.safetensors does not load back into resnet18"
import json, struct, sys
import torch
from torchvision.models import resnet18
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__")
state = {k: torch.frombuffer(bytearray(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]),
         dtype=torch.float32).view(t["shape"]) for k, t in h.items()}
net = resnet18(num_classes=10)
missing, unexpected = net.load_state_dict(state, strict=False)
assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
means = [k for k in state if k.endswith("running_mean")]
assert len(means) == 20 and all(float(state[k].abs().max()) > 0 for k in means), "running statistics never updated"
PY
echo "ok: torchvision's resnet18 in every wiring"
