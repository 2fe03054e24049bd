#!/usr/bin/env bash
# examples/analysis.py runs its small sweep through the Python module and
# writes a PNG (checked by its signature and size). Exits 77 (skipped)
# without pandas or matplotlib.
# Usage: PYTHONPATH=<build>/python analysis.sh SOURCE_DIR
set -uo pipefail
src=$1
/usr/bin/python3 -c "import pandas, matplotlib" 2>/dev/null ||
  { echo "SKIP: pandas or matplotlib not installed (Debian: python3-pandas python3-matplotlib)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
/usr/bin/python3 "$src/examples/analysis.py" --run "$tmp/sweep" --out "$tmp/analysis.png" || { echo "FAIL: analysis.py" >&2; exit 1; }
[ "$(head -c 8 "$tmp/analysis.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "FAIL: not a PNG" >&2; exit 1; }
size=$(stat -c %s "$tmp/analysis.png")
[ "$size" -gt 20000 ] || { echo "FAIL: the PNG is only $size bytes" >&2; exit 1; }
echo "analysis.py: $size-byte PNG of a 3-point sweep"
