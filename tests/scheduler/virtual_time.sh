#!/usr/bin/env bash
# Virtual time from the CLI: the same config and seed give the same model
# bit for bit and the same staleness; summary.json says what was simulated
# and what it cost; a real run's step times replay; bad input is refused
# naming the key, file or line. Usage: virtual_time.sh GRADWIRE SOURCE_DIR
set -euo pipefail
gw=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XDG_CACHE_HOME=$tmp/cache # the measured step time's cache, this test's own

cat >"$tmp/v.toml" <<'TOML'
[experiment]
name = "virtual"
clock = "virtual"
[topology]
kind = "parameter-server"
workers = 8

[topology.ps]
mode = "async"
shards = 2
shard_placement = "spread"
[train]
epochs = 1
max_steps = 20
batch_size = 32
lr = 0.02
momentum = 0.0
log_every = 5
[data]
train_subset = 8000   # 20 steps of 32 for each of 8 workers use 5,120; only these are read
test_subset = 500
[virtual]
distribution = "lognormal"
cv = 0.4
workers_per_host = 4
[transport]
latency_us = 10
bandwidth_gbps = 10
TOML
cp "$tmp/v.toml" "$tmp/plain.toml"
run() { "$gw" run "$tmp/v.toml" -q --no-report "$@"; }

# Twice with a measured step time (the second reads the cache), on 1 and on
# 3 threads: the same bits and staleness, every time in virtual seconds.
run --out "$tmp/a" --set virtual.threads=1 >/dev/null
run --out "$tmp/b" --set virtual.threads=3 >/dev/null
python3 "$src/tests/transport/same_model.py" "$tmp/a" "$tmp/b" || fail "two runs of one config differ"
python3 - "$tmp/a/summary.json" "$tmp/b/summary.json" <<'PY' || fail "summary.json's virtual facts"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["staleness"] == b["staleness"], (a["staleness"], b["staleness"])
assert a["train_seconds"] == b["train_seconds"], (a["train_seconds"], b["train_seconds"])
c = a["clock"]
assert c["mode"] == "virtual" and c["hosts"] == 2 and c["workers_per_host"] == 4, c
assert c["compute"][0]["from"].startswith("measured on this machine at batch 32"), c["compute"]
assert b["clock"]["compute"][0]["from"].startswith("measured on this machine (cached)"), b["clock"]["compute"]
assert "lognormal cv 0.40" in c["compute"][0]["model"], c["compute"]
assert c["events"] > 0 and c["messages"] > 0 and c["wall_seconds"] > 0 and c["gradient_wall_seconds"] > 0, c
assert abs(c["virtual_seconds"] - a["train_seconds"]) < 1e-9, (c, a["train_seconds"])
assert a["staleness"]["count"] == 8 * 20 * 2, a["staleness"]
assert c["threads"] == 1 and b["clock"]["threads"] == 3, (c["threads"], b["clock"]["threads"])
PY

# Hosts of different sizes (2 workers and 6): a shard per host, and a
# hierarchical ring grouped by host.
run --out "$tmp/uneven" --set virtual.workers_per_host=0 --set 'virtual.host_workers=[2, 6]' \
  --set topology.ps.shard_placement=per-host >/dev/null || fail "hosts of different sizes"
run --out "$tmp/uneven-hier" --set virtual.workers_per_host=0 --set 'virtual.host_workers=[2, 6]' \
  --set topology.kind=hierarchical --set topology.group_size=0 --set 'virtual.host_bandwidth_gbps=[100, 2.5]' \
  >/dev/null || fail "hierarchical on hosts of different sizes and NICs"
python3 - "$tmp/uneven/summary.json" "$tmp/uneven-hier/summary.json" <<'PY' || fail "hosts of different sizes in virtual time"
import json, sys
ps, hier = (json.load(open(p)) for p in sys.argv[1:])
assert ps["shards"] == 2 and ps["clock"]["hosts"] == 2 and ps["clock"]["host_workers"] == [2, 6], (ps["shards"], ps["clock"])
assert ps["status"] == "completed" and hier["status"] == "completed", (ps["status"], hier["status"])
assert hier["clock"]["host_workers"] == [2, 6] and "groups by host" in hier["description"], hier["description"]
assert "each host's NIC (Gb/s): 100, 2.5" in hier["clock"]["link"], hier["clock"]["link"]
PY

# A shard per host: virtual.hosts of them (2 here), shard i on host i.
run --out "$tmp/per-host" --set topology.ps.shard_placement=per-host >/dev/null
python3 - "$tmp/per-host/summary.json" <<'PY' || fail "a shard per host in virtual time"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["shards"] == 2 and "a shard per host" in s["description"], (s["shards"], s["description"])
assert s["staleness"]["count"] == 8 * 20 * 2, s["staleness"]
PY

# Given step times and groups: [[nodes]] step_ms and slowdown.
cat >>"$tmp/v.toml" <<'TOML'
[[nodes]]
count = 6
step_ms = 1.0
[[nodes]]
count = 2
step_ms = 1.0
slowdown = 3.0
TOML
run --out "$tmp/g" --set virtual.distribution=constant >/dev/null
python3 - "$tmp/g/summary.json" <<'PY' || fail "[[nodes]] step_ms and slowdown in virtual time"
import json, sys
s = json.load(open(sys.argv[1]))
c = s["clock"]["compute"]
assert [g["ranks"] for g in c] == [[0, 5], [6, 7]], c
assert c[1]["slowdown"] == 3.0 and "1.000 ms constant" in c[1]["model"], c
slow = [w for w in s["per_worker"] if w["worker"] >= 6]
fast = [w for w in s["per_worker"] if w["worker"] < 6]
# The slow workers computed 3 ms a step, the others 1 ms (virtual).
assert all(abs(w["compute_seconds"] - 20 * 3e-3) < 1e-6 for w in slow), slow
assert all(abs(w["compute_seconds"] - 20 * 1e-3) < 1e-6 for w in fast), fast
PY

# A real run's step times, replayed.
"$gw" run "$tmp/v.toml" -q --no-report --out "$tmp/real" --set experiment.clock=real --set train.log_every=1 >/dev/null
run --out "$tmp/replay" --set virtual.replay="$tmp/real/metrics.jsonl" >/dev/null
python3 - "$tmp/replay/summary.json" <<'PY' || fail "replay"
import json, sys
c = json.load(open(sys.argv[1]))["clock"]["compute"]
assert c[0]["from"].startswith("replayed from"), c
PY

# Bad input: an error that names what and where, exit 2.
refused() { # WHAT PATTERN ARGS...
  local what=$1 pattern=$2 rc=0
  shift 2
  "$gw" run "$tmp/plain.toml" -q --no-report --out "$tmp/bad" "$@" >"$tmp/err.txt" 2>&1 || rc=$?
  [[ $rc == 2 ]] || fail "$what: exit $rc, expected 2: $(cat "$tmp/err.txt")"
  grep -q -- "$pattern" "$tmp/err.txt" || fail "$what: the error does not say '$pattern': $(cat "$tmp/err.txt")"
}
printf '{"type":"step","worker":0,"steps":1,"compute_ms":1.0}\nnot json\n' >"$tmp/broken.jsonl"
refused "a broken replay file" "broken.jsonl:2" --set virtual.replay="$tmp/broken.jsonl"
refused "a missing replay file" "virtual.replay" --set virtual.replay="$tmp/none.jsonl"
refused "one worker" 'experiment.clock = "virtual" simulates workers that exchange' --set topology.kind=single
refused "hosts that do not add up" "virtual.hosts" --set virtual.hosts=3
refused "each host's workers beside workers_per_host" "leave virtual.hosts and virtual.workers_per_host unset" \
  --set 'virtual.host_workers=[6, 2]'
refused "hosts' workers that do not add up" "the hosts hold 4 workers, but topology.workers = 8" \
  --set virtual.workers_per_host=0 --set 'virtual.host_workers=[3, 1]'
refused "a host of no workers" "each host holds 1 to 1024 workers, got 0" \
  --set virtual.workers_per_host=0 --set 'virtual.host_workers=[8, 0]'
refused "NIC rates that do not match the hosts" "3 entries for 2 host(s)" --set 'virtual.host_bandwidth_gbps=[10, 10, 100]'
refused "a NIC of no bandwidth" "each NIC's Gb/s must be in (0, 1e6], got 0" --set 'virtual.host_bandwidth_gbps=[10, 0]'
refused "NIC rates that are not numbers" "must be a list of numbers" --set 'virtual.host_bandwidth_gbps=["fast", 10]'
refused "more hosts than workers" "9 hosts for topology.workers = 8" \
  --set virtual.workers_per_host=0 --set 'virtual.host_workers=[1, 1, 1, 1, 1, 1, 1, 1, 1]'
refused "across processes" "simulates every worker in one process" --procs 2
refused "a bad distribution" "virtual.distribution" --set virtual.distribution=gamma
# [[faults]]: a stall costs its virtual seconds; a kill ends its worker and the survivors go on.
{ cat "$tmp/plain.toml"; printf '[[faults]]\nkind = "stall"\nrank = 1\nat_step = 5\nseconds = 2.0\n'; } >"$tmp/stall.toml"
"$gw" run "$tmp/stall.toml" -q --no-report --out "$tmp/stall" >/dev/null 2>&1 || fail "a stall in virtual time"
python3 - "$tmp/a" "$tmp/stall" <<'PY' || fail "the stall's virtual seconds"
import json, sys
# Up to the stall both runs are the same events: rank 1's fifth step ends
# exactly 2 s later, the stall's seconds.
def fifth(run):
    for line in open(run + "/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") == "step" and r.get("worker") == 1 and r.get("step") == 5:
            return r["time"]
a, b = fifth(sys.argv[1]), fifth(sys.argv[2])
assert abs((b - a) - 2.0) < 1e-6, (a, b)
PY
{ cat "$tmp/plain.toml"; printf '[[faults]]\nkind = "kill"\nrank = 1\nat_step = 5\n'; } >"$tmp/kill.toml"
# A kill: the async parameter server goes on without rank 1, the same bits on 1 and 2 threads.
"$gw" run "$tmp/kill.toml" -q --no-report --out "$tmp/kill-1" --set virtual.threads=1 >/dev/null 2>&1 &&
  "$gw" run "$tmp/kill.toml" -q --no-report --out "$tmp/kill-2" --set virtual.threads=2 >/dev/null 2>&1 ||
  fail "a kill in virtual time: the run failed"
python3 "$src/tests/transport/same_model.py" "$tmp/kill-1" "$tmp/kill-2" || fail "a kill in virtual time: 1 and 2 threads differ"
python3 - "$tmp/kill-1/summary.json" <<'PY' || fail "a kill in virtual time: summary.json"
import json, sys
s = json.load(open(sys.argv[1]))
f = s["faults"]
assert s["status"] == "completed" and s["lost_workers"] == [1], s["lost_workers"]
assert len(f) == 1 and f[0]["rank"] == 1 and f[0]["at_step"] == 5 and f[0]["workers_after"] == 7, f
assert "killed by [[faults]] #1 after step 5 (virtual time)" in f[0]["what"], f
assert 0 < f[0]["detected_at"] < s["clock"]["virtual_seconds"], (f, s["clock"])
PY
# A link down for 50 ms of virtual time: the run waits it out, the same bits on 1 and 2 threads.
{ cat "$tmp/plain.toml"; printf '[[faults]]\nkind = "drop"\nrank = 2\nat_step = 4\nseconds = 0.05\n'; } >"$tmp/drop.toml"
"$gw" run "$tmp/drop.toml" -q --no-report --out "$tmp/drop-1" --set virtual.threads=1 >/dev/null 2>&1 &&
  "$gw" run "$tmp/drop.toml" -q --no-report --out "$tmp/drop-2" --set virtual.threads=2 >/dev/null 2>&1 ||
  fail "a link down in virtual time: the run failed"
python3 "$src/tests/transport/same_model.py" "$tmp/drop-1" "$tmp/drop-2" || fail "a link down in virtual time: 1 and 2 threads differ"
# A key of [[faults]] from --set, or as a sweep axis, reaches every entry.
"$gw" run "$tmp/kill.toml" -q --no-report --out "$tmp/kill-r2" --set faults.rank=2 >/dev/null 2>&1 ||
  fail "--set faults.rank: the run failed"
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['lost_workers'] == [2]" "$tmp/kill-r2/summary.json" ||
  fail "--set faults.rank=2 did not move the kill"
{ cat "$tmp/kill.toml"; printf '[sweep]\n"faults.at_step" = [3, 6]\n'; } >"$tmp/kill-sweep.toml"
"$gw" run "$tmp/kill-sweep.toml" -q --no-report --out "$tmp/kill-sweep" >/dev/null 2>&1 || fail "a sweep over faults.at_step"
python3 - "$tmp/kill-sweep" <<'PY' || fail "a sweep over faults.at_step: the points' kills"
import json, sys, glob
steps = sorted(json.load(open(p))["faults"][0]["at_step"] for p in glob.glob(sys.argv[1] + "/point-*/summary.json"))
assert steps == [3, 6], steps
PY
# A ring re-forms without rank 1 inside the simulation and lets its
# replacement back in at step 12, the same bits on 1 and 2 threads.
ring=(--set topology.kind=\"ring\" --set topology.ring.sharded_update=false --set train.restarts=1)
{ cat "$tmp/kill.toml"; printf 'back_at_step = 12\n'; } >"$tmp/back.toml"
"$gw" run "$tmp/back.toml" -q --no-report --out "$tmp/back-1" "${ring[@]}" --set virtual.threads=1 >/dev/null 2>&1 &&
  "$gw" run "$tmp/back.toml" -q --no-report --out "$tmp/back-2" "${ring[@]}" --set virtual.threads=2 >/dev/null 2>&1 ||
  fail "a ring's kill and rejoin in virtual time: the run failed"
python3 "$src/tests/transport/same_model.py" "$tmp/back-1" "$tmp/back-2" || fail "a ring's rejoin: 1 and 2 threads differ"
python3 - "$tmp/back-1/summary.json" <<'PY' || fail "a ring's kill and rejoin in virtual time: summary.json"
import json, sys
s = json.load(open(sys.argv[1]))
f = s["faults"]
assert s["status"] == "completed" and s["lost_workers"] == [], s["lost_workers"]
assert len(f) == 1 and f[0]["rank"] == 1 and f[0]["at_step"] == 5 and f[0]["workers_after"] == 7, f
assert f[0]["rejoined_step"] == 12 and f[0]["detected_at"] < f[0]["recovered_at"] < f[0]["rejoined_at"], f
PY
# back_at_step brings a new process: without train.restarts it is refused, naming the entry.
rc=0
"$gw" run "$tmp/back.toml" -q --no-report --out "$tmp/back-0" "${ring[@]}" --set train.restarts=0 >"$tmp/err.txt" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q '\[\[faults\]\] #1: kind = "kill" in virtual time: back_at_step brings the worker back as a new process: set train.restarts' "$tmp/err.txt" ||
  fail "back_at_step without train.restarts in virtual time: exit $rc: $(cat "$tmp/err.txt")"
# A hierarchical ring does not re-form: refused a kill, naming the entry.
rc=0
"$gw" run "$tmp/kill.toml" -q --no-report --out "$tmp/kill-ring" --set topology.kind=\"hierarchical\" >"$tmp/err.txt" 2>&1 || rc=$?
[[ $rc == 2 ]] && grep -q '\[\[faults\]\] #1: kind = "kill" in virtual time: hierarchical does not re-form' "$tmp/err.txt" ||
  fail "a kill in a hierarchical ring in virtual time: exit $rc: $(cat "$tmp/err.txt")"
# A GPT with AdamW on the async parameter server in virtual time: twice,
# the same bits and the same staleness.
gpt=(--set model.kind=\"gpt\" --set data.dataset=\"text\" --set model.layers=1 --set model.d_model=32
     --set model.context=32 --set train.optimizer=\"adamw\" --set train.lr=0.002 --set train.clip_norm=1.0
     --set data.train_subset=2000 --set data.test_subset=50 --set train.max_steps=10)
run --out "$tmp/gpt-a" "${gpt[@]}" >/dev/null || fail "a GPT in virtual time"
run --out "$tmp/gpt-b" "${gpt[@]}" >/dev/null || fail "a GPT in virtual time, again"
cmp -s "$tmp/gpt-a/model.safetensors" "$tmp/gpt-b/model.safetensors" || fail "two virtual-time GPT runs differ"
python3 -c "import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); assert a['staleness']==b['staleness'] and a['tokens']>0" \
  "$tmp/gpt-a/summary.json" "$tmp/gpt-b/summary.json" || fail "virtual-time GPT runs: staleness or tokens"
echo "virtual time: ok"
