#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a passed test suite:
# installs packages, builds (CUDA kernels too when the toolkit is present),
# and runs every test with ctest. CUDA tests skip when no GPU is found.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test   # adds chromium (the report test) and python3-torch (the model-file test)
scripts/build.sh
src=$PWD
cd "${BUILD_DIR:-build}"
"$src/scripts/ctest_tails.sh" --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
