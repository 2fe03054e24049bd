# Sourced by the shell tests that run gradwire and check what it left:
# a scratch folder removed at exit, and failures counted, not fatal.
#   bad WHAT...    records a failure (the script exits 1 at its end)
#   has FILE TEXT  FILE holds TEXT, else a failure showing FILE
fail=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bad() { printf 'FAIL: %s\n' "$*"; fail=1; }
has() { grep -q -- "$2" "$1" || { bad "$1 lacks '$2'"; sed 's/^/    /' "$1"; }; }
