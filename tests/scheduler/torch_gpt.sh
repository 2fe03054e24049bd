#!/usr/bin/env bash
# A transformer of the user's (examples/torch_gpt.py, nanoGPT-shaped) on
# text: model.kind = "torch" with data.dataset = "text".
#  - it learns under the sync ring, the async parameter server (staleness
#    reported), SSP and D-PSGD gossip in one process, and the ring across
#    2 processes gives the in-process model bit for bit;
#  - model.safetensors loads back into the module (its tied output head
#    aside, which shares the embedding's tensor);
#  - a module that returns [batch, vocab] for text is refused, saying that
#    [batch, context, vocab] is expected.
# Exits 77 (ctest: "Skipped") without the torch plug-in or the fortunes.
# Usage: torch_gpt.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$(cd "$2" && pwd)
py=/usr/bin/python3
[ -d /usr/share/games/fortunes ] || { echo "SKIP: no fortunes (the Debian package fortunes)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi
common=(-q --no-report --set train.max_steps=40 --set train.warmup_steps=5 --set train.eval='"after"'
        --set data.test_subset=256 --set train.log_every=10 --set topology.workers=3)
run() { # NAME ARGS...
  local name=$1
  shift
  timeout 300 "$gw" run "$src/examples/torch-gpt.toml" "${common[@]}" --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    fail "$name: $(tail -20 "$tmp/$name.log")"
  $py - "$tmp/$name/summary.json" "$name" <<'PY' || fail "$name did not learn: see above"
import json, sys
s = json.load(open(sys.argv[1]))
print("%s: test loss %.3f nats per byte" % (sys.argv[2], s["final_test_loss"]))
assert s["status"] == "completed", s["status"]
assert s["final_test_loss"] < 3.9, "uniform is 5.55 nats per byte, bytes' unigram about 3.0"
if sys.argv[2] in ("async", "ssp"):
    assert s["staleness"]["count"] > 0 and s["staleness"]["mean"] > 0, s["staleness"]
PY
}
run ring
run procs --procs 3
cmp -s "$tmp/ring/model.safetensors" "$tmp/procs/model.safetensors" || fail "the ring across 3 processes differs from in-process"
run async --set topology.kind='"parameter-server"' --set topology.ps.mode='"async"'
run ssp --set topology.kind='"parameter-server"' --set topology.ps.mode='"ssp"' --set topology.ps.staleness_bound=2
run gossip --set topology.kind='"gossip"'

$py - "$tmp/async/model.safetensors" "$src/examples" <<'PY' || fail "model.safetensors does not load back into the module"
import json, struct, sys
import torch
sys.path.insert(0, sys.argv[2])
import torch_gpt
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__")
state = {k: torch.frombuffer(bytearray(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]),
         dtype=torch.float32).view(t["shape"]) for k, t in h.items()}
net = torch_gpt.model({"model": {"vocab": 256, "context": 64, "args": {"layers": 2, "heads": 4, "d_model": 64}}})
missing, unexpected = net.load_state_dict(state, strict=False)
assert missing == ["head.weight"] and not unexpected, (missing, unexpected)
assert torch.equal(net.head.weight, state["wte.weight"])
PY

cat > "$tmp/flat.py" <<'PY'
from torch import nn
def model(cfg):
    return nn.Sequential(nn.Embedding(256, 8), nn.Flatten(), nn.Linear(8 * cfg["model"]["context"], 256))
PY
rc=0
"$gw" run "$src/examples/torch-gpt.toml" "${common[@]}" --out "$tmp/flat" --set model.module="\"$tmp/flat.py\"" \
  > "$tmp/flat.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "expects logits \[batch, context, vocab\] = \[16, 64, vocab\]" "$tmp/flat.log" ||
  fail "a module of [batch, vocab] logits for text: exit $rc: $(tail -5 "$tmp/flat.log")"
echo "ok: a torch transformer on text, in every wiring"
