#!/usr/bin/env bash
# Configures (once) and builds gradwire into build/ with Ninja: every
# target, or only the TARGETs given (scripts/build.sh gradwire).
# GRADWIRE_CUDA=OFF|ON|AUTO (default AUTO: CUDA kernels when the toolkit and cuDNN are found).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
    -DGRADWIRE_CUDA=${GRADWIRE_CUDA:-AUTO}
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"
