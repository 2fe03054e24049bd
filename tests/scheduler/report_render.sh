#!/usr/bin/env bash
# report.html renders in a real browser: headless Chromium (Debian's
# chromium) loads a run's, a sweep's and `gradwire compare`'s page and
# every embedded plot decodes. Exits 77 (ctest: "Skipped") without chromium or gnuplot.
# Usage: report_render.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "SKIP: chromium not installed (sudo apt-get install chromium)"; exit 77; }
command -v gnuplot >/dev/null || { echo "SKIP: gnuplot not installed (sudo apt-get install gnuplot-nox)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$gw" run "$src/examples/ps-heterogeneous.toml" -q --out "$tmp/run" --set train.max_steps=60 \
  --set train.eval_steps=20 --set data.test_subset=500 > "$tmp/run.txt" 2>&1 || fail "run failed: $(cat "$tmp/run.txt")"
grep -q "report: $tmp/run/report.html (11 plot(s))" "$tmp/run.txt" || fail "run did not write its report: $(cat "$tmp/run.txt")"
"$gw" run "$src/examples/ring.toml" -q --out "$tmp/sweep" --set train.max_steps=20 --set data.test_subset=500 \
  --sweep topology.workers=1,2 > "$tmp/sweep.txt" 2>&1 || fail "sweep failed: $(cat "$tmp/sweep.txt")"

"$gw" compare "$tmp/run" "$tmp/sweep/point-001" --out "$tmp/compare" > "$tmp/compare.txt" 2>&1 ||
  fail "compare failed: $(cat "$tmp/compare.txt")"
grep -q "compare: $tmp/compare/report.html" "$tmp/compare.txt" || fail "compare did not write its page: $(cat "$tmp/compare.txt")"
grep -q "topology.kind" "$tmp/compare/report.html" || fail "compare: no differing config keys (topology.kind differs)"

for page in run sweep compare; do
  # --dump-dom prints the DOM after the load event: the page's script has
  # counted the images the browser decoded into data-plots-rendered.
  timeout 90 "$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$tmp/profile" \
    --virtual-time-budget=5000 --dump-dom "file://$tmp/$page/report.html" > "$tmp/$page.dom" 2>"$tmp/$page.err" ||
    fail "chromium could not load the $page report: $(tail -5 "$tmp/$page.err")"
  rendered=$(grep -o 'data-plots-rendered="[0-9]*/[0-9]*"' "$tmp/$page.dom" | head -1 | cut -d'"' -f2)
  [ -n "$rendered" ] || fail "$page report: the page's load script did not run"
  ok=${rendered%/*}; all=${rendered#*/}
  [ "$all" -ge 4 ] || fail "$page report: only $all plots on the page"
  [ "$ok" = "$all" ] || fail "$page report: chromium decoded $ok of $all plots"
  grep -q "<table>" "$tmp/$page.dom" || fail "$page report: no table rendered"
done
echo "report render: run, sweep and compare pages load in chromium with every plot decoded"
