#!/usr/bin/env bash
# ctest in the current build folder with the given arguments; when it fails,
# the last lines each failed test printed, and how long it ran, gathered at
# the end of the log (a CI log is often read from its tail, where ctest's
# inline --output-on-failure has long scrolled by), with the CPU, since
# kernel speed and some limits depend on it. Exits with ctest's status.
# Usage: ctest_tails.sh CTEST_ARGS...   (run from the build folder)
set -u
lines=25
rc=0
ctest "$@" || rc=$?
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
