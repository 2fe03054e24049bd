#!/usr/bin/env bash
# Streaming DiLoCo as a user runs it (examples/local-sgd.toml as DiLoCo,
# 3 workers, 4 fragments of whole tensors, each exchange overlapping one
# inner step):
#  - 3 processes give the model of one process, bit for bit;
#  - virtual time on 2 threads gives it too;
#  - top-k compressed fragments (pseudo-gradients) repeat across 3 processes;
#  - summary.json describes the run as streaming.
# Usage: streaming.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
tool=$src/tests/scheduler/record_tool.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
common=(-q --no-report --set topology.kind=\"diloco\" --set topology.workers=3 --set topology.streaming.fragments=4
        --set topology.streaming.sync_delay=1 --set data.train_subset=3000 --set data.test_subset=300 --set train.eval=\"after\")

run() { # NAME [ARGS...]
  local name=$1
  shift
  "$gw" run "$src/examples/local-sgd.toml" "${common[@]}" "$@" --out "$tmp/$name" >"$tmp/$name.txt" 2>&1 ||
    { bad "$name failed: $(tail -3 "$tmp/$name.txt")"; return 1; }
}
same() { # A B WHAT
  if /usr/bin/python3 "$tool" same-tensors "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then
    echo "ok: $3"
  else
    bad "$3: the models differ"
  fi
}

if run one; then
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d['mode'] != 'diloco-streaming')" \
    "$tmp/one/summary.json" || bad "summary.json's mode is not diloco-streaming"
  run procs --procs 3 && same one procs "3 processes give the bits of one"
  run virtual --set experiment.clock=\"virtual\" --set virtual.threads=2 && same one virtual "virtual time on 2 threads gives the bits of the real run"
fi
z=(--set compression.kind=\"topk\" --set compression.ratio=0.05)
run topk "${z[@]}" && run topk.procs "${z[@]}" --procs 3 && same topk topk.procs "top-k fragments: 3 processes give the bits of one"
exit $fail
