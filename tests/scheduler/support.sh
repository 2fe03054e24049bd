# Sourced by the CLI's shell tests, with GRADWIRE and SOURCE_DIR as $1 and
# $2: sets gw, src, py and a scratch $tmp removed at exit (KEEP=1 keeps
# it), and gives
#   fail WHAT...              the test fails, saying WHAT
#   same A B TOLERANCE        run A's model.safetensors within TOLERANCE of
#                             run B's, tensor by tensor (0: the same bytes)
#   run NAME ARGS...          a run of the config $cfg into $tmp/NAME that
#                             must succeed (its output in $tmp/NAME.log)
#   refused NAME WANT ARGS... a run of $cfg that must end with exit 2 saying WANT
# Exits 77 (ctest: "Skipped") without Fashion-MNIST where NEEDS_MNIST=1.
gw=$1
src=$(cd "$2" && pwd)
py=/usr/bin/python3
if [ -n "${NEEDS_MNIST:-}" ] && [ ! -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "SKIP: no Fashion-MNIST"
  exit 77
fi
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
same() {
  $py "$src/tests/scheduler/torch/same_tensors.py" "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors" "$3" ||
    fail "$2 differs from $1"
}
run() {
  local name=$1
  shift
  timeout 120 "$gw" run "$cfg" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 ||
    fail "$name: $(tail -20 "$tmp/$name.log")"
}
refused() {
  local name=$1 want=$2 rc=0
  shift 2
  timeout 60 "$gw" run "$cfg" -q --no-report --out "$tmp/$name" "$@" > "$tmp/$name.log" 2>&1 || rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/$name.log" || fail "$name: exit $rc, want 2 and '$want': $(tail -5 "$tmp/$name.log")"
}
