# Sourced by the emulated-hosts benches (bench/hosts_*.sh), from the
# source root: checks for root (ip netns), the build and PyTorch; sets GW
# (absolute: some sides run from bench/) and PY; makes $tmp, removed on
# exit; defines `median` (of the numbers on stdin, one per line).
PY=/usr/bin/python3
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns)" >&2; exit 77; }
[[ -x ${BUILD_DIR:-build}/gradwire ]] || { echo "build first: scripts/build.sh" >&2; exit 1; }
GW=$(realpath "${BUILD_DIR:-build}/gradwire")
$PY -c "import torch" 2>/dev/null || { echo "PyTorch missing: scripts/setup.sh --bench" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
