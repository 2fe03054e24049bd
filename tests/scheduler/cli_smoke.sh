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
  --set train.max_steps=200 --set data.test_subset=2000 > "$tmp/out.txt"
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
set -e
[[ $rc -eq 2 ]] && grep -q "nope.toml" "$tmp/err2.txt" || fail "missing config: rc=$rc $(cat "$tmp/err2.txt")"
echo "cli smoke: all checks passed"
