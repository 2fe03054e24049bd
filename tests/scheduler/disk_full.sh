#!/usr/bin/env bash
# Out of space: a run whose results folder fills up stops with a clear
# error (exit 2) naming the file and the cause, metrics.jsonl keeps every
# record written before, up to its last whole line, summary.json says
# "failed" where it still fits, and no temporary file is left behind.
# A file-size limit (prlimit --fsize, any user) stands in for the disk;
# as root, a real full disk too (a 96 KiB tmpfs).
#   disk_full.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=${1:?usage: disk_full.sh GRADWIRE SOURCE_DIR}
src=${2:?usage: disk_full.sh GRADWIRE SOURCE_DIR}
work=$(mktemp -d)
mounted=""
trap '[ -n "$mounted" ] && umount "$mounted"; rm -rf "$work"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# check NAME DIR RC ERRFILE CAUSE: what a run that ran out of space must leave.
check() {
  local name=$1 dir=$2 rc=$3 err=$4 cause=$5
  [ "$rc" = 2 ] || bad "$name: exit $rc, not 2: $(cat "$err")"
  grep -q "metrics.jsonl: $cause" "$err" || bad "$name: the error does not name metrics.jsonl and '$cause': $(cat "$err")"
  [ -s "$dir/metrics.jsonl" ] || bad "$name: metrics.jsonl is empty or missing"
  [ "$(tail -c 1 "$dir/metrics.jsonl" | od -An -c | tr -d ' ')" = '\n' ] || bad "$name: metrics.jsonl ends mid-line"
  /usr/bin/python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$dir/metrics.jsonl" ||
    bad "$name: a line of metrics.jsonl is not JSON"
  ls "$dir" | grep -q '\.tmp$' && bad "$name: temporary files left: $(ls "$dir")"
  if [ -f "$dir/summary.json" ]; then
    /usr/bin/python3 -c "import json,sys; sys.exit(json.load(open(sys.argv[1]))['status'] != 'failed')" \
      "$dir/summary.json" || bad "$name: summary.json does not say failed"
  fi
}

common=(--set train.log_every=1 --set train.epochs=1 --set data.test_subset=500 -q)
# One worker in this process (the single-run path), then a parameter server (the topology path).
rc=0; prlimit --fsize=6000 "$gw" run "$src/examples/default.toml" "${common[@]}" --set train.max_steps=400 \
  --out "$work/single" 2>"$work/single.err" || rc=$?
check "single run over a file-size limit" "$work/single" $rc "$work/single.err" "File too large"
[ -f "$work/single/summary.json" ] || bad "single run: no summary.json (it fits under the limit)"
rc=0; prlimit --fsize=20000 "$gw" run "$src/examples/ps-async.toml" "${common[@]}" --out "$work/ps" 2>"$work/ps.err" || rc=$?
check "parameter server over a file-size limit" "$work/ps" $rc "$work/ps.err" "File too large"
[ -f "$work/ps/summary.json" ] || bad "parameter server: no summary.json (it fits under the limit)"

if [ "$(id -u)" = 0 ] && mkdir -p "$work/disk" && mount -t tmpfs -o size=96k tmpfs "$work/disk" 2>/dev/null; then
  mounted="$work/disk"
  rc=0; "$gw" run "$src/examples/ps-async.toml" "${common[@]}" --out "$work/disk/ps" 2>"$work/disk.err" || rc=$?
  check "parameter server on a full disk" "$work/disk/ps" $rc "$work/disk.err" "No space left on device"
  [ -f "$work/disk/ps/summary.json" ] || bad "full disk: no summary.json ($(df -k "$work/disk" | tail -1 | awk '{print $4}') KiB free)"
else
  echo "(not root, or no tmpfs: the real full disk is skipped)"
fi
[ $fail = 0 ] && echo "disk full: clear errors, whole lines kept, nothing temporary left"
exit $fail
