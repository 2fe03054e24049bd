#!/usr/bin/env bash
# A torch module's own loss(output, target) (docs/your-model.md):
#  - torch's cross-entropy as the loss trains the model of gradwire's own
#    cross-entropy within float rounding (1e-5 relative, 40 steps of a
#    3-worker ring);
#  - twice the cross-entropy at lr 0.05 gives the model of the
#    cross-entropy at lr 0.1 bit for bit, and reports twice its loss (the
#    loss's gradient is what trains, scaled as the default's);
#  - across 3 processes the ring's model is the in-process one bit for bit;
#  - a label-smoothed loss trains under the async parameter server;
#  - on text, a loss over [batch, context, vocab] logits and [batch,
#    context] targets trains examples/torch_gpt.py;
#  - a loss that raises, returns no scalar, does not depend on the output,
#    or is no function is refused, naming the file.
# Exits 77 (ctest: "Skipped") without the torch plug-in or Fashion-MNIST.
# Usage: torch_loss.sh GRADWIRE SOURCE_DIR
set -uo pipefail
NEEDS_MNIST=1 . "$2/tests/scheduler/torch/support.sh"
mods=$src/tests/scheduler/torch

# with_loss NAME BODY: $tmp/NAME.py, mlp.py's model with loss(output, target) returning BODY.
with_loss() {
  printf 'import sys\nsys.path.insert(0, "%s")\nimport torch\nimport torch.nn.functional as F\nfrom mlp import model\n\n\n' \
    "$mods" > "$tmp/$1.py"
  [ -n "$2" ] && printf 'def loss(output, target):\n    return %s\n' "$2" >> "$tmp/$1.py"
}
cat > "$tmp/base.toml" <<TOML
[model]
kind = "torch"
module = "plain.py"
[data]
train_subset = 4096
test_subset = 1000
[train]
max_steps = 40
log_every = 10
batch_size = 32
momentum = 0.9
[topology]
kind = "ring"
workers = 3
TOML
run() { # NAME MODULE ARGS...: a run that must succeed
  local name=$1 module=$2
  shift 2
  timeout 120 "$gw" run "$tmp/base.toml" -q --no-report --out "$tmp/$name" --set model.module="\"$tmp/$module.py\"" "$@" \
    > "$tmp/$name.log" 2>&1 || fail "$name: $(tail -20 "$tmp/$name.log")"
}
losses() { # RUN: the step records' training losses, "WORKER.STEP LOSS" per line
  $py -c "import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('type') == 'step': print('%d.%d' % (r['worker'], r['step']), r['loss'])" "$tmp/$1/metrics.jsonl" | sort
}

with_loss plain ""
with_loss xent "F.cross_entropy(output, target)"
with_loss twice "2 * F.cross_entropy(output, target)"
with_loss smooth "F.cross_entropy(output, target, label_smoothing=0.1)"
run plain plain
run xent xent
same plain xent 1e-5
run xent-lr xent --set train.lr=0.1 --set train.momentum=0
run twice twice --set train.lr=0.05 --set train.momentum=0
same xent-lr twice 0
$py - "$(losses xent-lr)" "$(losses twice)" <<'PY' || fail "the reported loss is not the module's"
import sys
a, b = ([(l.split()[0], float(l.split()[1])) for l in s.splitlines()] for s in sys.argv[1:])
assert a and len(a) == len(b), (a, b)
for (s, x), (t, y) in zip(a, b):
    assert s == t and abs(y - 2 * x) <= 1e-5 * abs(y), (s, x, y)
print("the reported loss is twice the cross-entropy in each of %d step records" % len(a))
PY
run procs xent --procs 3
same xent procs 0
run smooth smooth --set topology.kind='"parameter-server"' --set topology.ps.mode='"async"' --set train.momentum=0 \
  --set train.max_steps=150
$py -c "import json, sys; s = json.load(open(sys.argv[1])); print('label smoothing, async:', s['final_test_accuracy'])
assert s['status'] == 'completed' and s['final_test_accuracy'] > 0.5, s" "$tmp/smooth/summary.json" ||
  fail "the label-smoothed loss did not train"
echo "ok: a module's loss trains, as its gradient says"

# Text: the logits [batch, context, vocab] and the targets [batch, context] as the module gives them.
printf 'import sys\nsys.path.insert(0, "%s")\nimport torch.nn.functional as F\nfrom torch_gpt import model\n\n\n%s\n' \
  "$src/examples" 'def loss(output, target):
    assert output.dim() == 3 and target.shape == output.shape[:2], (output.shape, target.shape)
    return F.cross_entropy(output.flatten(0, 1), target.flatten())' > "$tmp/gpt.py"
timeout 120 "$gw" run "$src/examples/torch-gpt.toml" -q --no-report --out "$tmp/gpt" --set model.module="\"$tmp/gpt.py\"" \
  --set train.max_steps=30 --set train.log_every=10 --set data.test_subset=64 > "$tmp/gpt.log" 2>&1 ||
  fail "text: $(tail -20 "$tmp/gpt.log")"
$py - "$(losses gpt)" <<'PY' || fail "text: the loss did not fall"
import sys, math
l = [float(x.split()[1]) for x in sys.argv[1].splitlines() if x.startswith("0.")]
l = [x for _, x in sorted(zip([int(x.split()[0][2:]) for x in sys.argv[1].splitlines() if x.startswith("0.")], l))]
assert len(l) >= 2 and l[-1] < l[0] and l[0] < 1.2 * math.log(256), l
print("text: loss %.3f -> %.3f" % (l[0], l[-1]))
PY

refused() { # NAME WANT BODY: a run of that loss ends with exit 2 saying WANT
  local name=$1 want=$2 rc=0
  with_loss "$name" "$3"
  timeout 60 "$gw" run "$tmp/base.toml" -q --no-report --out "$tmp/$name" --set model.module="\"$tmp/$name.py\"" \
    > "$tmp/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/$name.log" || fail "$name: exit $rc, want 2 and '$want': $(tail -5 "$tmp/$name.log")"
}
refused raises "$tmp/raises.py: loss(output, target) raised" "output[1000]"
grep -qF "raises.py\", line" "$tmp/raises.log" || fail "no traceback with file and line: $(cat "$tmp/raises.log")"
refused vector "loss(output, target) returned a tensor of shape [32]; it must return the batch's mean loss" \
  "F.cross_entropy(output, target, reduction='none')"
refused number "loss(output, target) returned float" "1.0"
refused detached "a loss that does not depend on the output" "F.cross_entropy(output.detach(), target)"
with_loss notfn ""
echo "loss = 3" >> "$tmp/notfn.py"
rc=0
"$gw" run "$tmp/base.toml" -q --no-report --out "$tmp/notfn" --set model.module="\"$tmp/notfn.py\"" > "$tmp/notfn.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -qF "notfn.py: loss is int; it must be a function" "$tmp/notfn.log" || fail "notfn: $(tail -3 "$tmp/notfn.log")"
echo "ok: a module's own loss"
