#!/usr/bin/env bash
# ctest in the current build folder with the given arguments; when it fails,
# the last lines each failed test printed, and how long it ran, gathered at
# the end of the log (a CI log is often read from its tail, where ctest's
# inline --output-on-failure has long scrolled by), with the CPU, since
# kernel speed and some limits depend on it. Every run ends with its ten
# slowest tests. Exits with ctest's status.
# Usage: ctest_tails.sh CTEST_ARGS...   (run from the build folder)
set -u
lines=25

# The ten slowest tests of this run, each against its time limit, so that
# creeping cost is seen before a slower machine turns it into a timeout.
# (ctest --show-only, which gives the limits, rewrites Testing/Temporary's
# logs: this run's are kept aside and put back.)
slowest() {
  local t=Testing/Temporary
  [[ -s $t/LastTest.log ]] || return 0
  local keep
  keep=$(mktemp -d)
  cp -p "$t"/LastTest.log "$t"/LastTestsFailed.log "$keep"/ 2>/dev/null
  ctest --show-only=json-v1 2>/dev/null | /usr/bin/python3 -c '
import json, re, sys
limits = {}
for t in json.load(sys.stdin).get("tests", []):
    for p in t.get("properties", []):
        if p["name"] == "TIMEOUT":
            limits[t["name"]] = float(p["value"])
times, name = [], None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\d+/\d+ Testing: (.*)$", line)
    if m:
        name = m.group(1).strip()
    m = re.match(r"Test time = +([\d.]+) sec", line)
    if m and name is not None:
        times.append((float(m.group(1)), name))
        name = None
print("\n==== the ten slowest tests (seconds, and the share of each one\x27s time limit) ====")
for t, n in sorted(times, reverse=True)[:10]:
    lim = limits.get(n)
    share = "%5.0f s limit, %3.0f%%" % (lim, 100 * t / lim) if lim else "no limit"
    print("%8.1f s  (%s)  %s" % (t, share, n))
' "$keep/LastTest.log" || true
  rm -f "$t"/LastTestsFailed.log
  cp -p "$keep"/* "$t"/ && rm -rf "$keep"
}
rc=0
ctest "$@" || rc=$?
slowest
[[ $rc -eq 0 ]] && exit 0
log=Testing/Temporary/LastTest.log
failed=Testing/Temporary/LastTestsFailed.log
[[ -s $failed && -s $log ]] || exit "$rc"
echo
echo "==== failed tests: the end of each one's output ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "$(grep -m1 -ow 'avx512f' /proc/cpuinfo || grep -m1 -ow 'avx2' /proc/cpuinfo || echo 'no AVX2'), $(nproc) cores) ===="
while IFS= read -r entry; do
  name=${entry#*:}
  echo "---- $name"
  # LastTest.log: "N/M Test: NAME" ... "Output:" dashes ... "<end of output>" "Test time = ..."
  awk -v want="$name" -v keep="$lines" '
    /^[0-9]+\/[0-9]+ Test: / { cur = $0; sub(/^[0-9]+\/[0-9]+ Test: /, "", cur); next }
    cur == want && !inside && /^Output:/ { inside = 1; n = 0; getline; next }
    cur == want && inside && /^<end of output>/ {
      inside = 0
      s = n > keep ? n - keep : 0
      if (s > 0) print "    [... " s " earlier lines]"
      for (i = s; i < n; i++) print "    " buf[i % keep]
      next
    }
    cur == want && inside { buf[n++ % keep] = $0; next }
    cur == want && /^Test time|^Test Failed/ { print "    " $0 }
  ' "$log"
done <"$failed"
exit "$rc"
