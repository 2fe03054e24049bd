#!/usr/bin/env bash
# Virtual time on 1 thread against THREADS threads, side by side: the
# asynchronous parameter server at scale (the virtual-time scale run), MLP
# 784-256-128-10, batch 32, one shard, WORKERS workers (16 per host) of 98
# steps each, links unlimited, trace and record off. DIST is the compute
# model: lognormal (cv 0.3, as examples/study-staleness-scale.toml) or
# constant (every worker in lock step: the shard's pushes of a round arrive
# together and no gradient can start before its reply, the least there is
# to overlap). Prints each run's wall time and peak memory, where the
# event loop's time went, the ratio, and whether the two models are the
# same bit for bit (they must be: the run fails otherwise).
#
#   bench/virtual_threads.sh [WORKERS] [DIST] [THREADS]   (a build in build/; defaults 1024 lognormal 2)
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS=${1:-1024}
DIST=${2:-lognormal}
THREADS=${3:-2}
B=${BUILD_DIR:-build}
[[ -x $B/gradwire ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/scale.toml" <<TOML
[experiment]
name = "virtual-threads"
clock = "virtual"
trace = false
record = false
[model]
kind = "mlp"
hidden = [256, 128]
[topology]
kind = "parameter-server"
workers = $WORKERS

[topology.ps]
mode = "async"
shards = 1
[train]
epochs = 100
max_steps = 98
batch_size = 32
lr = 0.01
momentum = 0.0
log_every = 1000
eval = "after"
[virtual]
step_ms = 1.0
distribution = "$DIST"
cv = 0.3
workers_per_host = 16
TOML
echo "# virtual time, async PS, $WORKERS workers x 98 steps, $DIST steps, $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "| threads | process s | loop s | gradients s (of them on the loop) | actors' other work s | loop waiting s | peak RSS GB |"
echo "|---|---|---|---|---|---|---|"
for t in 1 "$THREADS"; do
  /usr/bin/time -f "%e %M" -o "$tmp/time-$t" "$B/gradwire" run "$tmp/scale.toml" -q --no-report \
    --out "$tmp/run-$t" --set virtual.threads="$t" >/dev/null
  /usr/bin/python3 - "$tmp/run-$t/summary.json" "$tmp/time-$t" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["clock"]
wall, kb = open(sys.argv[2]).read().split()
print("| %d | %.1f | %.1f | %.1f (%.1f) | %.1f | %.2f | %.2f |" % (
    c["threads"], float(wall), c["wall_seconds"], c["gradient_wall_seconds"], c["gradient_loop_wall_seconds"],
    c["actor_wall_seconds"], c["wait_wall_seconds"], int(kb) / 1048576))
PY
done
/usr/bin/python3 - "$tmp/run-1" "$tmp/run-$THREADS" "$tmp/time-1" "$tmp/time-$THREADS" "$THREADS" <<'PY'
import json, sys
one, many = (json.load(open(d + "/summary.json"))["clock"]["wall_seconds"] for d in sys.argv[1:3])
p1, pn = (float(open(f).read().split()[0]) for f in sys.argv[3:5])
print("%s threads against 1: %.2fx the event loop, %.2fx the whole process" % (sys.argv[5], one / many, p1 / pn))
PY
/usr/bin/python3 tests/transport/same_model.py "$tmp/run-1" "$tmp/run-$THREADS"
