# Sourced by the torch and Python-rule shell tests, with GRADWIRE and
# SOURCE_DIR as $1 and $2: tests/scheduler/support.sh's scratch folder
# and helpers, and it exits 77 (ctest: "Skipped") without the torch
# plug-in, or without Fashion-MNIST where NEEDS_MNIST=1.
. "$2/tests/scheduler/support.sh"
if "$gw" info | grep -q "torch models: unavailable"; then
  echo "SKIP: this build has no torch plug-in (Python, pybind11 and python3-torch: scripts/setup.sh --test)"
  exit 77
fi
