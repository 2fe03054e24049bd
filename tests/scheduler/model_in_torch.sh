#!/usr/bin/env bash
# model.safetensors loads in PyTorch (Debian's python3-torch): an MLP and a
# LeNet-5 trained on Fashion-MNIST, read with a few lines of Python (the
# format needs no library), put into the same architecture in torch.nn,
# give gradwire's test accuracy to float rounding (at most 2 of the 10,000
# images on the other side of a decision). `gradwire eval` gives it too.
# A GPT's file loads into nanoGPT's GPT and gives its validation loss.
# Exits 77 (ctest: "Skipped") without python3-torch or the dataset.
# Usage: model_in_torch.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
py=/usr/bin/python3
# (Found, not imported: an import of torch is 2-3 s.)
$py -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' 2>/dev/null || { echo "SKIP: python3-torch not installed (scripts/setup.sh --test)"; exit 77; }
data=/usr/share/datasets/fashion-mnist
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "SKIP: $data has no Fashion-MNIST"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for model in mlp lenet5; do
  "$gw" run "$src/examples/default.toml" -q --no-report --out "$tmp/$model" --set model.kind="\"$model\"" \
    --set train.max_steps=300 > "$tmp/$model.txt" 2>&1 || fail "$model: run failed: $(cat "$tmp/$model.txt")"
  [ -f "$tmp/$model/model.safetensors" ] || fail "$model: no model.safetensors"
  "$gw" eval "$tmp/$model" > "$tmp/$model.eval" 2>&1 || fail "$model: gradwire eval failed: $(cat "$tmp/$model.eval")"
  $py - "$tmp/$model" "$data" "$model" <<'PY' || fail "$model: see above"
import gzip, json, struct, sys
import numpy as np
import torch
from torch import nn

run, data, kind = sys.argv[1], sys.argv[2], sys.argv[3]
raw = open(run + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
base = 8 + n
tensors = {name: torch.from_numpy(np.frombuffer(raw[base + t["data_offsets"][0]:base + t["data_offsets"][1]],
                                                dtype="<f4").copy().reshape(t["shape"]))
           for name, t in header.items()}
assert meta["gradwire_model"] == kind, meta["gradwire_model"]

# The same layers, at the same indices as gradwire's (its names: INDEX.LAYER.PARAM).
if kind == "mlp":
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                        nn.Linear(128, 10))
else:  # LeNet-5: pooling before ReLU (they commute), 28x28 padded by 2
    net = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(6, 16, 5),
                        nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                        nn.ReLU(), nn.Linear(84, 10))
state = {}
for name, t in tensors.items():
    index, _layer, param = name.split(".")
    state[index + "." + param] = t
missing = set(net.state_dict()) - set(state)
assert not missing, "not in the file: %s" % sorted(missing)
net.load_state_dict(state)
net.eval()

def idx(path):
    b = gzip.open(path).read()
    dims = b[3]
    shape = struct.unpack(">" + "I" * dims, b[4:4 + 4 * dims])
    return np.frombuffer(b[4 + 4 * dims:], dtype=np.uint8).reshape(shape)

x = idx(data + "/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255
y = idx(data + "/t10k-labels-idx1-ubyte.gz").astype(np.int64)
x = (x - float(meta["gradwire_input_mean"])) / float(meta["gradwire_input_std"])
with torch.no_grad():
    pred = net(torch.from_numpy(x.astype(np.float32)).unsqueeze(1)).argmax(1).numpy()
torch_acc = float((pred == y).mean())
gw_acc = json.load(open(run + "/summary.json"))["final_test_accuracy"]
print("%s: gradwire %.4f, PyTorch %.4f" % (kind, gw_acc, torch_acc))
assert abs(torch_acc - gw_acc) <= 2 / len(y), "accuracies differ"
PY
  grep -q "test accuracy $(/usr/bin/python3 -c "import json; print('%.2f' % (100 * json.load(open('$tmp/$model/summary.json'))['final_test_accuracy']))")%" "$tmp/$model.eval" ||
    fail "$model: gradwire eval disagrees with the run: $(cat "$tmp/$model.eval")"
done

# A GPT's model.safetensors, as a run writes it, loads into nanoGPT's GPT
# (bench/torch_gpt.py) and gives the run's validation loss on the same
# windows: the last 10% of the fortunes corpus as gradwire reads it.
if [ -d /usr/share/games/fortunes ]; then
  "$gw" run "$src/examples/lm.toml" -q --no-report --out "$tmp/gpt" --set model.layers=2 --set model.d_model=64 \
    --set model.context=48 --set train.max_steps=60 --set data.test_subset=64 > "$tmp/gpt.txt" 2>&1 ||
    fail "gpt: run failed: $(cat "$tmp/gpt.txt")"
  $py - "$tmp/gpt" "$src/bench" <<'PY' || fail "gpt: see above"
import json, struct, sys
import numpy as np
import torch
import torch.nn.functional as F
run, bench = sys.argv[1], sys.argv[2]
sys.path.insert(0, bench)
from torch_gpt import GPT, corpus
raw = open(run + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("__metadata__")
sd = {k: torch.from_numpy(np.frombuffer(raw[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]],
                                        dtype="<f4").copy().reshape(t["shape"])) for k, t in header.items()}
model = GPT(dict(layers=2, heads=4, d_model=64, context=48, vocab=256))
missing, unexpected = model.load_state_dict(sd, strict=False)
assert missing == ["lm_head.weight"] and not unexpected, (missing, unexpected)
data = corpus()
start = len(data) - int(len(data) * 0.1)  # data.val_fraction's split
x = torch.stack([data[start + i * 48:start + i * 48 + 48] for i in range(64)])
y = torch.stack([data[start + i * 48 + 1:start + i * 48 + 49] for i in range(64)])
with torch.no_grad():
    loss = F.cross_entropy(model(x).view(-1, 256), y.view(-1)).item()
want = json.load(open(run + "/summary.json"))["final_test_loss"]
print("gpt: validation loss gradwire %.6f, PyTorch %.6f" % (want, loss))
assert abs(loss - want) <= 1e-4 * want, "losses differ"
PY
fi

# Bad model files are refused, naming the file and what is wrong.
m=$tmp/mlp/model.safetensors
refused() { # NAME FILE EXPECTED [ARGS...]
  local name=$1 file=$2 want=$3
  shift 3
  "$gw" eval "$file" "$@" > "$tmp/bad.txt" 2>&1 && fail "$name: accepted"
  grep -q -- "$want" "$tmp/bad.txt" || fail "$name: said '$(cat "$tmp/bad.txt")', not '$want'"
}
head -c 5000 "$m" > "$tmp/truncated.safetensors"
refused truncated "$tmp/truncated.safetensors" "truncated.safetensors: 1.linear.weight.s bytes .* do not fit"
printf '\xff\xff\xff\xff\xff\xff\xff\x7f' > "$tmp/huge.safetensors"
refused "huge header" "$tmp/huge.safetensors" "huge.safetensors: header of"
cp "$m" "$tmp/corrupt.safetensors"
printf ']]]]' | dd of="$tmp/corrupt.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null
refused corrupt "$tmp/corrupt.safetensors" "corrupt.safetensors: the header is not a JSON object"
refused "another model" "$m" "holds a mlp, its config a lenet5" --set model.kind='"lenet5"'
refused "another shape" "$m" "has shape \[256,784\], the model's is \[300,784\]" --set 'model.hidden=[300, 128]'
echo "model in torch: MLP and LeNet-5 give gradwire's test accuracy in PyTorch, and in gradwire eval; a GPT its validation loss"
