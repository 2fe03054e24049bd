# Sourced by the torch and Python-rule shell tests, with GRADWIRE and
# SOURCE_DIR as $1 and $2: sets gw, src, py and a scratch $tmp removed at
# exit (KEEP=1 keeps it), and gives
#   fail WHAT...          the test fails, saying WHAT
#   same A B TOLERANCE    run A's model.safetensors within TOLERANCE of run
#                         B's, tensor by tensor (0: the same bytes)
# Exits 77 (ctest: "Skipped") without the torch plug-in, or without
# Fashion-MNIST where NEEDS_MNIST=1.
gw=$1
src=$(cd "$2" && pwd)
py=/usr/bin/python3
if [ -n "${NEEDS_MNIST:-}" ] && [ ! -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: no Fashion-MNIST"
  exit 77
fi
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
same() {
  $py "$src/tests/scheduler/torch/same_tensors.py" "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" "$3" ||
    fail "$2 differs from $1"
}
