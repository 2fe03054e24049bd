#!/usr/bin/env bash
# Configures (once) and builds gradwire into build/ with Ninja: every
# target, or only the TARGETs given (scripts/build.sh gradwire).
# GRADWIRE_CUDA=OFF|ON|AUTO (default AUTO: CUDA kernels when the toolkit and
# cuDNN are found) and GRADWIRE_BENCH=ON|OFF (default ON: bench/'s programs).
# Set explicitly, either one reconfigures an existing build folder too;
# nothing already built is rebuilt. A TARGET that the folder was configured
# without (a benchmark, the CUDA module) turns both on.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
chosen=()
[[ -n ${GRADWIRE_CUDA:-} ]] && chosen+=(-DGRADWIRE_CUDA="$GRADWIRE_CUDA")
[[ -n ${GRADWIRE_BENCH:-} ]] && chosen+=(-DGRADWIRE_BENCH="$GRADWIRE_BENCH")
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" "${chosen[@]}"
elif [[ ${#chosen[@]} -gt 0 ]]; then
  cmake -S . -B "$BUILD_DIR" "${chosen[@]}" >/dev/null
fi
targets=()
for t in "$@"; do
  if ! ninja -C "$BUILD_DIR" -t query "$t" >/dev/null 2>&1; then
    echo "build.sh: $t is not configured in $BUILD_DIR: configuring the benchmarks and the CUDA module (AUTO)" >&2
    cmake -S . -B "$BUILD_DIR" -DGRADWIRE_BENCH=ON -DGRADWIRE_CUDA=AUTO >/dev/null
    ninja -C "$BUILD_DIR" -t query "$t" >/dev/null 2>&1 || { echo "build.sh: no target $t" >&2; exit 2; }
  fi
  targets+=(--target "$t")
done
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" "${targets[@]}"
