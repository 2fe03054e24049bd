#!/usr/bin/env bash
# The gradwire CLI as a user meets it. Usage: cli_smoke.sh GRADWIRE SOURCE_DIR
set -euo pipefail
gw=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Output captured first: grep -q closing the pipe early would fail pipefail.
has() { local out; out=$("$gw" "${@:2}") && grep -q -- "$1" <<<"$out"; }
has "run" --help || fail "--help does not list run"
has "--set" run --help || fail "run --help does not explain --set"
has "batch_size" keys || fail "keys does not list train.batch_size"
has "ring" keys || fail "keys does not list the ring topology"
has "CUDA kernels" info || fail "info does not report CUDA"

# A short real run on Fashion-MNIST: exit 0 and a complete results folder.
"$gw" run "$src/examples/default.toml" --out "$tmp/run" -q \
  --set train.max_steps=200 --set data.train_subset=13000 --set data.test_subset=2000 > "$tmp/out.txt"
grep -q "completed" "$tmp/out.txt" || fail "run did not report completion: $(cat "$tmp/out.txt")"
for f in summary.json metrics.jsonl config.toml; do
  [[ -s "$tmp/run/$f" ]] || fail "results folder lacks $f"
done
python3 - "$tmp/run/summary.json" <<'PY' || fail "summary.json is incomplete"
import json, sys
s = json.load(open(sys.argv[1]))
for k in ["wall_seconds", "samples_per_sec", "final_test_accuracy", "final_loss", "staleness", "per_worker"]:
    assert k in s, k
assert s["steps"] == 200, s["steps"]
assert s["final_test_accuracy"] > 0.6, s["final_test_accuracy"]
PY

# Config errors: exit code 2 and a message with file, line and suggestion.
printf '[train]\nepochs = 1\nlearning_rate = 0.1\n' > "$tmp/bad.toml"
set +e
"$gw" run "$tmp/bad.toml" 2> "$tmp/err.txt"
rc=$?
set -e
[[ $rc -eq 2 ]] || fail "bad config exited $rc, expected 2"
grep -q "bad.toml:3" "$tmp/err.txt" || fail "error lacks file:line: $(cat "$tmp/err.txt")"
grep -q "did you mean" "$tmp/err.txt" || fail "error lacks a suggestion: $(cat "$tmp/err.txt")"

set +e
"$gw" run "$tmp/nope.toml" 2> "$tmp/err2.txt"; rc=$?
"$gw" run "$tmp/nope.toml" --log-level off 2> "$tmp/err2q.txt"; rcq=$?
set -e
[[ $rc -eq 2 ]] && grep -q "^gradwire: error: .*nope.toml" "$tmp/err2.txt" || fail "missing config: rc=$rc $(cat "$tmp/err2.txt")"
# --log-level off: the same exit status, and not a line on stderr.
[[ $rcq -eq 2 && ! -s "$tmp/err2q.txt" ]] || fail "--log-level off: rc=$rcq $(cat "$tmp/err2q.txt")"
# A sweep: every point runs, the table has one row per worker count with
# speedup and efficiency, seeds are averaged as repeats.
"$gw" run "$src/examples/ring.toml" -q --out "$tmp/sweep" --set train.max_steps=30 --set data.train_subset=6000 --set data.test_subset=500 \
  --sweep topology.workers=1,2 --sweep experiment.seed=1,2 > "$tmp/sweep.txt" 2>&1 || fail "sweep failed: $(cat "$tmp/sweep.txt")"
for f in sweep.md sweep.csv sweep.json point-000/summary.json point-003/summary.json; do
  [[ -s "$tmp/sweep/$f" ]] || fail "sweep folder lacks $f"
done
python3 - "$tmp/sweep/sweep.json" <<'PY' || fail "sweep.json rows are wrong"
import json, sys
s = json.load(open(sys.argv[1]))
rows = s["rows"]
assert [r["topology.workers"] for r in rows] == ["1", "2"], rows
assert all(r["runs"] == 2 for r in rows), rows
assert rows[0]["speedup"] == 1.0 and abs(rows[0]["efficiency"] - 1.0) < 1e-9, rows[0]
assert abs(rows[1]["efficiency"] - rows[1]["speedup"] / 2) < 1e-9, rows[1]
assert len(s["points"]) == 4
assert all("slowest_workers_staleness_p99" in r for r in rows), rows
# A ring is lockstep: each point's step time splits into parts that add up
# to 1, and the rows carry the mean waiting and exchange shares.
for p in s["points"]:
    st = p["step_time"]
    assert abs(st["compute"] + st["imbalance"] + st["exchange"] - 1) < 1e-9, st
assert rows[0]["imbalance"] == 0 and rows[1]["imbalance"] > 0, rows
assert all(0 < r["exchange"] < 1 for r in rows), rows
PY
grep -q "efficiency" "$tmp/sweep.txt" || fail "the sweep table was not printed"
set +e
"$gw" run "$src/examples/ring.toml" --sweep topology.workers 2> "$tmp/err3.txt"; rc=$?
"$gw" run "$src/examples/ring.toml" --sweep topology.wrkers=1,2 2> "$tmp/err4.txt"; rc4=$?
"$gw" run "$src/examples/ring.toml" --frobnicate 2> "$tmp/err5.txt"; rc5=$?
"$gw" run --help > /dev/null 2>&1; rc6=$?
set -e
[[ $rc5 -eq 2 ]] && grep -q -- "--frobnicate" "$tmp/err5.txt" || fail "unknown option: rc=$rc5 $(cat "$tmp/err5.txt")"
[[ $rc6 -eq 0 ]] || fail "run --help exited $rc6"
[[ $rc -eq 2 ]] && grep -q "KEY=V1,V2" "$tmp/err3.txt" || fail "bad --sweep: rc=$rc $(cat "$tmp/err3.txt")"
[[ $rc4 -eq 2 ]] && grep -q "did you mean" "$tmp/err4.txt" || fail "misspelt sweep key: rc=$rc4 $(cat "$tmp/err4.txt")"
# The grid may also sit in the config, as a [sweep] section.
printf '[topology]\nkind = "parameter-server"\nworkers = 2\n[train]\nmax_steps = 20\n[data]\ntrain_subset = 6000\ntest_subset = 500\n[sweep]\n"topology.ps.mode" = ["sync", "async"]\n' > "$tmp/sw.toml"
"$gw" run "$tmp/sw.toml" -q --out "$tmp/sw" > "$tmp/sw.txt" 2>&1 || fail "[sweep] config failed: $(cat "$tmp/sw.txt")"
grep -q "| async |" "$tmp/sw/sweep.md" || fail "[sweep] table lacks the async row: $(cat "$tmp/sw/sweep.md")"
# A GPU group on a machine without a GPU: an error naming the group, before any run.
if "$gw" info | grep -q "visible CUDA devices: 0"; then
  printf '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\nname = "gpus"\ndevice = "cuda:0"\n[[nodes]]\nname = "cpus"\n' > "$tmp/gpu.toml"
  rc=0; "$gw" run "$tmp/gpu.toml" -q --out "$tmp/gpu" > "$tmp/gpu.txt" 2>&1 || rc=$?
  # file:line of the group, its name, and why: no GPU visible, or a build without CUDA.
  [[ $rc -eq 2 ]] && grep -q "gpu.toml:4: \[\[nodes\]\] #1 (group 'gpus') device = \"cuda:0\"" "$tmp/gpu.txt" &&
    grep -qE "0 CUDA device\(s\) are visible|built without CUDA" "$tmp/gpu.txt" ||
    fail "a GPU group without a GPU: rc=$rc $(cat "$tmp/gpu.txt")"
fi
# A CUDA build loads its kernels on first use (kernels/cuda_module.hpp): the
# program links none of the CUDA libraries, whose start-up cost every
# process half a second, and says why when its module will not load.
if "$gw" info | grep -q "^CUDA kernels: built"; then
  ldd "$gw" | grep -qE "libcublas|libcudnn|libcudart" && fail "gradwire links the CUDA libraries: $(ldd "$gw" | grep -E 'cublas|cudnn|cudart')"
  GRADWIRE_CUDA_MODULE=$tmp/none.so "$gw" info | grep -q "built, but the CUDA kernels (libgradwire_cuda.so) were not found; looked for $tmp/none.so" ||
    fail "a missing CUDA module: $(GRADWIRE_CUDA_MODULE=$tmp/none.so "$gw" info 2>&1 | head -3)"
  printf 'not a library' > "$tmp/bad.so"
  GRADWIRE_CUDA_MODULE=$tmp/bad.so "$gw" info | grep -q "built, but the CUDA kernels ($tmp/bad.so) could not be loaded" ||
    fail "a CUDA module that is no library: $(GRADWIRE_CUDA_MODULE=$tmp/bad.so "$gw" info 2>&1 | head -3)"
  libz=$(ldd "$gw" | awk '/libz\.so/ { print $3 }')
  GRADWIRE_CUDA_MODULE=$libz "$gw" info | grep -q "built, but $libz is not a gradwire CUDA module" ||
    fail "a library that is no CUDA module: $(GRADWIRE_CUDA_MODULE=$libz "$gw" info 2>&1 | head -3)"
  printf '[topology]\nkind = "ring"\nworkers = 2\n[[nodes]]\nname = "gpus"\ndevice = "cuda:0"\n[[nodes]]\nname = "cpus"\n' > "$tmp/gpu2.toml"
  GRADWIRE_CUDA_MODULE=$libz "$gw" run "$tmp/gpu2.toml" -q --out "$tmp/gpu2" > "$tmp/gpu2.txt" 2>&1 &&
    fail "a GPU group with no CUDA module ran"
  grep -q "is not a gradwire CUDA module" "$tmp/gpu2.txt" || fail "a GPU group with no CUDA module: $(cat "$tmp/gpu2.txt")"
fi
# A language model through the CLI: token figures in summary.json, curves
# against tokens and validation loss in the report, eval and sample.
"$gw" run "$src/examples/lm.toml" -q --out "$tmp/lm" --set model.layers=1 --set model.d_model=32 \
  --set model.context=32 --set train.max_steps=20 --set data.test_subset=50 --set train.eval_steps=10 \
  > "$tmp/lm.txt" 2>&1 || fail "lm.toml: $(cat "$tmp/lm.txt")"
/usr/bin/python3 - "$tmp/lm/summary.json" <<'PY' || fail "lm summary: $(cat "$tmp/lm/summary.json")"
import json, math, sys
s = json.load(open(sys.argv[1]))
assert s["tokens"] == s["samples"] * 32, (s["tokens"], s["samples"])
assert abs(s["tokens_per_sec"] - s["samples_per_sec"] * 32) < 1e-6 * s["tokens_per_sec"]
assert abs(s["final_test_perplexity"] - math.exp(s["final_test_loss"])) < 1e-9 * s["final_test_perplexity"]
assert 0 < s["final_test_loss"] < 5.55, s["final_test_loss"]  # under a uniform guess over bytes
PY
for plot in loss_tokens test_loss_time; do
  [[ -s $tmp/lm/plots/$plot.svg ]] || fail "lm report: no $plot plot ($(ls "$tmp/lm/plots" | tr '\n' ' '))"
done
loss=$(/usr/bin/python3 -c "import json,sys; print('%.4f' % json.load(open(sys.argv[1]))['final_test_loss'])" "$tmp/lm/summary.json")
"$gw" eval "$tmp/lm" --set data.test_subset=50 2>/dev/null | grep -q "test loss $loss nats per byte (50 test windows of text)" ||
  fail "eval of the GPT does not give its run's loss $loss: $("$gw" eval "$tmp/lm" --set data.test_subset=50 2>&1)"
"$gw" sample "$tmp/lm" --prompt "Hello" --tokens 40 > "$tmp/sample.txt" || fail "sample: $(cat "$tmp/sample.txt")"
# the prompt, 40 bytes (whatever they are, newlines too) and the line's end
[[ $(wc -c < "$tmp/sample.txt") -eq 46 && $(head -c 5 "$tmp/sample.txt") == Hello ]] ||
  fail "sample: 5 prompt bytes and 40 generated expected: $(od -c "$tmp/sample.txt" | head -5)"
# A prompt longer than the context (32 here) is cropped to its last 32 bytes, as nanoGPT does.
long=$(printf 'a long prompt, %.0s' {1..10})
"$gw" sample "$tmp/lm" --prompt "$long" --tokens 10 > "$tmp/sample2.txt" || fail "sample, long prompt: $(cat "$tmp/sample2.txt")"
[[ $(wc -c < "$tmp/sample2.txt") -eq $((${#long} + 11)) ]] || fail "sample, long prompt: $(wc -c < "$tmp/sample2.txt") bytes"
"$gw" sample "$tmp/lm" --prompt "${long: -32}" --tokens 10 > "$tmp/sample3.txt" || fail "sample: $(cat "$tmp/sample3.txt")"
cmp -s <(tail -c 11 "$tmp/sample2.txt") <(tail -c 11 "$tmp/sample3.txt") ||
  fail "a long prompt is not read as its last 32 bytes: $(tail -c 11 "$tmp/sample2.txt" | od -c | head -2) against $(tail -c 11 "$tmp/sample3.txt" | od -c | head -2)"
# Sampling as nanoGPT's defaults (temperature 0.8, top-k 200) draws from the
# seed; temperature 0 is greedy, the same bytes whatever the seed.
for seed in 1 2; do
  "$gw" sample "$tmp/lm" --prompt "Hello" --tokens 40 --seed $seed > "$tmp/drawn$seed.txt" || fail "sample --seed $seed"
  "$gw" sample "$tmp/lm" --prompt "Hello" --tokens 40 --seed $seed -t 0 > "$tmp/greedy$seed.txt" || fail "sample -t 0"
done
! cmp -s "$tmp/drawn1.txt" "$tmp/drawn2.txt" || fail "sample: seeds 1 and 2 drew the same 40 bytes (is it greedy by default?)"
cmp -s "$tmp/greedy1.txt" "$tmp/greedy2.txt" || fail "sample --temperature 0 is not greedy: the seed changed its bytes"
"$gw" sample "$tmp/lm" --prompt "Hello" --tokens 40 -k 1 > "$tmp/top1.txt" || fail "sample --top-k 1"
cmp -s "$tmp/top1.txt" "$tmp/greedy1.txt" || fail "sample --top-k 1 differs from greedy decoding"
rc=0; "$gw" sample "$tmp/lm" --prompt x --temperature nan > "$tmp/s.txt" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "temperature must be a finite number" "$tmp/s.txt" || fail "sample -t nan: rc=$rc $(cat "$tmp/s.txt")"
# A model file holding a NaN (sample refuses it, naming the tensor) or a tensor
# of no model's (every reader refuses it).
/usr/bin/python3 - "$tmp/lm/model.safetensors" "$tmp" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = bytearray(data[8 + n:])
name = next(k for k in header if k != "__metadata__")
at = header[name]["data_offsets"][0]
nan = bytearray(body)
nan[at:at + 4] = struct.pack("<f", float("nan"))
def write(path, h, b):
    text = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(b))
write(sys.argv[2] + "/nan.safetensors", header, nan)
header["extra"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(body), len(body) + 4]}
write(sys.argv[2] + "/extra.safetensors", header, body + b"\0\0\0\0")
open(sys.argv[2] + "/first_tensor", "w").write(name)
PY
rc=0; "$gw" sample "$tmp/nan.safetensors" --prompt x > "$tmp/s.txt" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "the model holds a value that is not a finite number in $(cat "$tmp/first_tensor") (element 0 is nan)" "$tmp/s.txt" ||
  fail "sample of a model holding NaN: rc=$rc $(cat "$tmp/s.txt" | head -c 300)"
rc=0; "$gw" eval "$tmp/extra.safetensors" > "$tmp/s.txt" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "holds a tensor extra that this model" "$tmp/s.txt" || fail "a model file with an extra tensor: rc=$rc $(cat "$tmp/s.txt")"
# sample streams: interrupted long before the end, it has printed what it made so far.
rc=0; timeout -s INT 4 "$gw" sample "$tmp/lm" --prompt "Hello" --tokens 100000000 > "$tmp/stream.txt" 2>/dev/null || rc=$?
[[ $rc -ne 0 && $(wc -c < "$tmp/stream.txt") -gt 50 ]] ||
  fail "sample --tokens 100000000 stopped after 4 s printed $(wc -c < "$tmp/stream.txt") bytes (rc $rc): it does not stream"
# A GPT of context 1 (one byte in, one out): its windows are token ids, never standardised as pixels.
"$gw" run "$src/examples/lm.toml" -q --no-report --out "$tmp/lm1" --set model.layers=1 --set model.d_model=16 \
  --set model.context=1 --set train.max_steps=2 --set data.test_subset=20 > "$tmp/lm1.txt" 2>&1 ||
  fail "a GPT of context 1: $(tail -3 "$tmp/lm1.txt")"
rc=0; "$gw" sample "$tmp/sw/point-000" --prompt x > "$tmp/s.txt" 2>&1 || rc=$?
[[ $rc -eq 2 ]] && grep -q "holds a mlp, not a language model" "$tmp/s.txt" || fail "sample of an MLP: rc=$rc $(cat "$tmp/s.txt")"
# A Dirichlet label skew is drawn alike by every process: a ring of 3 in one
# process and across 3 processes gives the same model, bit for bit.
noniid=(-q --no-report --set topology.workers=3 --set data.partition=\"dirichlet\" --set data.dirichlet_alpha=0.3
        --set train.max_steps=20 --set data.train_subset=3000 --set data.test_subset=200)
"$gw" run "$src/examples/ring.toml" "${noniid[@]}" --out "$tmp/noniid1" > "$tmp/noniid1.txt" 2>&1 || fail "dirichlet ring: $(cat "$tmp/noniid1.txt")"
"$gw" run "$src/examples/ring.toml" "${noniid[@]}" --procs 3 --out "$tmp/noniid3" > "$tmp/noniid3.txt" 2>&1 ||
  fail "dirichlet ring on 3 processes: $(cat "$tmp/noniid3.txt")"
cmp -s "$tmp/noniid1/model.safetensors" "$tmp/noniid3/model.safetensors" ||
  fail "a Dirichlet-split ring of 3 differs between one process and three"
grep -q '"kind": "dirichlet"' "$tmp/noniid1/summary.json" || fail "summary.json does not record the dirichlet partition"
# Each worker's label histogram: one count per class, the shards covering
# the training subset once, and the same in one process as in three.
/usr/bin/python3 - "$tmp/noniid1/summary.json" "$tmp/noniid3/summary.json" <<'PY' || fail "per-worker label histograms are wrong"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
hist = [w["labels"] for w in a["per_worker"]]
assert all(len(h) == 10 for h in hist), hist
assert sum(map(sum, hist)) == 3000, sum(map(sum, hist))
assert hist == [w["labels"] for w in b["per_worker"]], "the processes disagree"
assert len({tuple(h) for h in hist}) == 3, "the workers' histograms should differ under skew"
PY
# The batch order a run takes, printed without training: 3 workers x 5
# steps of 64 distinct samples, the workers' shards disjoint.
"$gw" batches "$src/examples/ring.toml" "${noniid[@]:2}" --steps 5 > "$tmp/batches.jsonl" 2> "$tmp/batches.txt" ||
  fail "gradwire batches: $(cat "$tmp/batches.txt")"
/usr/bin/python3 - "$tmp/batches.jsonl" <<'PY' || fail "gradwire batches printed another order than a ring's"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [(r["worker"], r["step"]) for r in recs] == [(w, s) for w in range(3) for s in range(1, 6)], recs
shard = [set(), set(), set()]
for r in recs:
    assert len(set(r["samples"])) == 64 and all(0 <= i < 3000 for i in r["samples"]), r
    shard[r["worker"]] |= set(r["samples"])
assert not (shard[0] & shard[1] or shard[0] & shard[2] or shard[1] & shard[2]), "shards overlap"
PY
echo "cli smoke: all checks passed"
