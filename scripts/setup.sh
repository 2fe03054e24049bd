#!/usr/bin/env bash
# Installs the Debian 12 packages gradwire needs. Idempotent: when everything
# is already installed it only checks (well under a second) and exits.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libcaf-dev libucx-dev ucx-utils capnproto libcapnp-dev
  catch2 libtomlplusplus-dev libopenblas-dev libcli11-dev libspdlog-dev
  libfmt-dev nlohmann-json3-dev zlib1g-dev libhwloc-dev
  dataset-fashion-mnist
  fortunes     # the default text corpus of language models (data.dataset = "text")
  python3   # the CLI smoke test checks summary.json with it
  protobuf-compiler libprotobuf-dev  # TensorBoard's event records (experiment.tensorboard)
  pybind11-dev python3-dev python3-pandas  # the Python module (python/): built where pybind11 is found
  gnuplot-nox  # the plots of report.html (a run without it still writes the tables)
  libdnnl2     # oneDNN's sgemm for the larger GEMMs, opened at run time (without it: OpenBLAS for all)
  libdnnl-dev  # oneDNN's convolutions for layers of 16+ channels (without it: gradwire's kernels for all)
)
# Only for the test suite: report.html is opened in headless Chromium,
# model.safetensors is loaded in PyTorch,
# srun and mpirun run real jobs in the launcher test (a one-host SLURM
# cluster: scripts/slurm_local.sh).
# the TensorBoard files are read back with Python's protobuf and crc32c,
# examples/analysis.py plots with matplotlib.
TEST_PACKAGES=(chromium python3-torch python3-torchvision slurm-wlm munge openmpi-bin python3-protobuf python3-crc32c python3-matplotlib)
# Only for bench/ (the PyTorch and MPI sides of the side-by-side benchmarks).
# BLIS, libxsmm: bench/gemm_libs.cpp
BENCH_PACKAGES=(python3-torch openmpi-bin libopenmpi-dev libblis4-serial libxsmm-dev iperf3)

want=("${PACKAGES[@]}")
for arg in "$@"; do
  case "$arg" in
    --bench) want+=("${BENCH_PACKAGES[@]}") ;;
    --test) want+=("${TEST_PACKAGES[@]}") ;;
    *) echo "setup.sh: unknown option '$arg' (expected --bench or --test)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
