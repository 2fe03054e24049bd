# Sourced by the shell tests that run gradwire and check what it left:
# a scratch folder removed at exit, and failures counted, not fatal.
#   bad WHAT...    records a failure (the script exits 1 at its end)
#   has FILE TEXT  FILE holds TEXT, else a failure showing FILE
#   "${small[@]}"  the first 24,000 training and 1,000 test images, and each
#                  process reads only those (a 4-process ring under ASan, the
#                  whole set against 12,000: 11.3 -> 6.9 s). Still 125 steps of
#                  64 in an epoch for each of 3 workers: the scripts count
#                  steps (up to 120) in one-epoch examples (ps-async.toml).
fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad() { printf 'FAIL: %s\n' "$*"; fail=1; }
has() { grep -q -- "$2" "$1" || { bad "$1 lacks '$2'"; sed 's/^/    /' "$1"; }; }
small=(--set data.train_subset=24000 --set data.test_subset=1000)
