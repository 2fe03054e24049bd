#!/usr/bin/env bash
# catch_discover_tests cuts a case name at ';' and ctest's filter reads '['
# as a tag: such a case turns into entries that run nothing and pass. Fails,
# naming file and line, on any TEST_CASE name that holds either.
#   check_case_names.sh TESTS_DIR
set -euo pipefail
dir=${1:?usage: check_case_names.sh TESTS_DIR}
bad=$(grep -rnE 'TEST_CASE\("[^"]*[;[]' "$dir" --include='*.cpp' || true)
if [ -n "$bad" ]; then
  echo "test case names with ';' or '[' (ctest would run none of them):" >&2
  echo "$bad" >&2
  exit 1
fi
n=$(grep -rh 'TEST_CASE("' "$dir" --include='*.cpp' | wc -l)
echo "$n test case names, all runnable under ctest"
