#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a passed test suite:
# installs packages, builds what the tests run, and runs every test with
# ctest. A new build folder gets the CUDA module only where a GPU is there
# to run its tests (CUDA tests skip without one), and no benchmarks (no
# test runs them); CI compiles both (.ci/run's compile stage), and
# scripts/build.sh adds them to this folder.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test   # adds chromium (the report test), python3-torch and python3-torchvision (the model-file and torch-model tests)
if [[ ! -f ${BUILD_DIR:-build}/build.ninja ]]; then
  if [[ -z ${GRADWIRE_CUDA:-} ]] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then export GRADWIRE_CUDA=OFF; fi
  export GRADWIRE_BENCH=${GRADWIRE_BENCH:-OFF}
fi
scripts/build.sh
src=$PWD
cd "${BUILD_DIR:-build}"
"$src/scripts/ctest_tails.sh" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
