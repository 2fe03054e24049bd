#!/usr/bin/env bash
# The Debian package, end to end: builds it (cpack -G DEB in the build
# folder), installs it with apt-get (its declared dependencies come with
# it), runs an example from the installed paths with the program and with
# the Python module, then removes it and checks nothing is left.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
(cd "$BUILD_DIR" && cpack -G DEB > cpack.log) || { cat "$BUILD_DIR/cpack.log" >&2; exit 1; }
deb=$(ls -t "$PWD/$BUILD_DIR"/gradwire_*.deb | head -1)
echo "package: $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb -f "$deb" Depends
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" > /dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
/usr/bin/gradwire --version
/usr/bin/gradwire run /usr/share/gradwire/examples/ring.toml -q --no-report --out "$tmp/cli" \
  --set train.max_steps=40 --set data.test_subset=500
env -u PYTHONPATH /usr/bin/python3 - "$tmp/py" <<'PY'
import sys, gradwire
assert gradwire.__file__.startswith("/usr/lib/python3/dist-packages/"), gradwire.__file__
r = gradwire.run("/usr/share/gradwire/examples/ring.toml", out=sys.argv[1], procs=2,
                 set={"train.max_steps": 40, "data.test_subset": 500})
assert r.summary["status"] == "completed" and r.summary["processes"] == 2, r.summary
print("package: the installed Python module ran ring.toml across 2 processes")
PY
[[ -f /usr/share/doc/gradwire/README.md ]] || { echo "FAIL: no README in /usr/share/doc/gradwire" >&2; exit 1; }
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq gradwire > /dev/null
if [[ -e /usr/bin/gradwire || -e /usr/lib/python3/dist-packages/gradwire ]]; then
  echo "FAIL: files left after apt-get remove" >&2
  exit 1
fi
echo "package: installed, ran from the installed paths, removed"
