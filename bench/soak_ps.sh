#!/usr/bin/env bash
# Soak: an asynchronous parameter server across 3 processes (--procs 3,
# one worker per process, the shards on rank 0) trains for SECONDS, and
# every rank's resident memory (RSS) is sampled every 5 s. After warm-up
# (the first fifth of the run) each rank's RSS must stay within 5% of its
# level at the end of warm-up. Prints the samples, the growth per rank
# (MiB and KB/s) and PASS or FAIL (exit 1).
#
#   bench/soak_ps.sh [SECONDS]     (default 600; needs a build in build/)
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
GW=${BUILD_DIR:-build}/gradwire
[[ -x $GW ]] || { echo "build first: scripts/build.sh" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'kill $launcher 2>/dev/null; rm -rf "$tmp"' EXIT
# Epochs enough to outlast the soak; stopped by SIGTERM (an interrupted run) at the end.
"$GW" run examples/ps-async.toml --procs 3 -q --set topology.workers=3 --set train.epochs=100000 \
  --set train.eval_every=1000000 --set experiment.trace=false --out "$tmp/run" >"$tmp/out.txt" 2>&1 &
launcher=$!
ranks=()
for _ in $(seq 100); do # the launcher's children: the ranks
  mapfile -t ranks < <(pgrep -P $launcher | sort -n)
  [[ ${#ranks[@]} -ge 3 ]] && break
  sleep 0.2
done
[[ ${#ranks[@]} -ge 3 ]] || { echo "the 3 ranks did not start:"; cat "$tmp/out.txt"; exit 2; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
printf "%6s %12s %12s %12s   (RSS, KiB)\n" "t (s)" "rank 0" "rank 1" "rank 2"
declare -A warm last
warm_t=$((secs / 5))
for ((t = 0; t <= secs; t += 5)); do
  line=$(printf "%6d" $t)
  for i in 0 1 2; do
    v=$(rss "${ranks[$i]}")
    line+=$(printf " %12d" "$v")
    last[$i]=$v
    ((t == warm_t - warm_t % 5)) && warm[$i]=$v
  done
  echo "$line"
  kill -0 $launcher 2>/dev/null || { echo "the job ended early:"; cat "$tmp/out.txt"; exit 2; }
  ((t < secs)) && sleep 5
done
kill -TERM $launcher; wait $launcher
fail=0
for i in 0 1 2; do
  awk -v r=$i -v a="${warm[$i]}" -v b="${last[$i]}" -v s=$((secs - warm_t + warm_t % 5)) 'BEGIN {
    g = (b - a) / a * 100
    printf "rank %d: %.1f MiB after warm-up, %.1f MiB at the end: %+.2f%% (%+.1f KB/s)\n", r, a / 1024, b / 1024, g, (b - a) * 1.024 / s
    exit (g > 5) }' || fail=1
done
steps=$(/usr/bin/python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print(s['status'] + ',', sum(w['steps'] for w in s['per_worker']), 'steps,', round(s['samples_per_sec']), 'samples/s')" "$tmp/run/summary.json" 2>/dev/null)
echo "the run: ${steps:-no summary}"
[[ $fail = 0 ]] && echo "PASS: every rank's RSS within 5% after warm-up" || echo "FAIL: a rank's RSS grew more than 5% after warm-up"
exit $fail
