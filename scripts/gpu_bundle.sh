#!/usr/bin/env bash
# Packs a CUDA build's GPU binaries (and libgradwire_cuda.so, the CUDA
# kernels they load beside them) for a GPU machine that has the NVIDIA
# driver, CUDA and PyTorch but none of Debian's packages (CAF, Cap'n Proto,
# OpenBLAS): the binaries, the shared libraries they need from this machine
# (not glibc's, not CUDA's; xz-packed: OpenBLAS alone is 36 MB), Fashion-MNIST
# (the CUDA tests train on it), the fortunes corpus (the GPT benchmark reads
# it), and env.sh, which unpacks the libraries,
# points the loader at them and at the GPU machine's own cuBLAS and cuDNN
# (PyTorch's wheels first, so that both sides of a comparison use the same
# cuDNN), and, where the machine has no Fashion-MNIST or fortunes and we are
# root, links the bundle's copies where the programs look
# (/usr/share/datasets/fashion-mnist, /usr/share/games/fortunes).
# About 50 MB in all. scripts/gpu_check.sh runs everything there at once.
#
#   scripts/gpu_bundle.sh [DIR] [BUILD]      (default .gpu and build)
# then, on the GPU machine, from the repository root:
#   source .gpu/env.sh && .gpu/test_cuda && BUILD_DIR=.gpu bench/gpu_train_vs_torch.sh 3
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu}
build=${2:-build}
bins=("$build/gradwire-bench-train" "$build/tests/test_cuda")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle.sh: $b missing: build with CUDA first (scripts/build.sh)" >&2; exit 1; }
done
# The CUDA kernels are a module beside the programs, loaded on first use.
module=$build/libgradwire_cuda.so
[[ -f $module ]] || { echo "gpu_bundle.sh: $build was built without CUDA (no $module; see 'gradwire info')" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/fashion-mnist" "$dir/fortunes"
cp "${bins[@]}" "$module" "$dir/"
cp /usr/share/datasets/fashion-mnist/*.gz "$dir/fashion-mnist/" 2>/dev/null ||
  echo "gpu_bundle.sh: no Fashion-MNIST here (dataset-fashion-mnist): the CUDA tests that train will fail there" >&2
cp -a /usr/share/games/fortunes/. "$dir/fortunes/" 2>/dev/null || # links kept: readers skip them
  echo "gpu_bundle.sh: no fortunes here: the GPT benchmark will fail there" >&2
# Everything the binaries load from Debian's folders, but glibc, libstdc++
# and libgcc (newer on the GPU machine) and CUDA's own (the GPU machine's).
ldd "${bins[@]}" "$module" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
  grep -v '/usr/local/cuda' | while read -r lib; do cp -L "$lib" "$dir/lib/"; done
tar -C "$dir" -cf - lib | xz -T0 -6 >"$dir/lib.tar.xz"
rm -rf "$dir/lib"
cat >"$dir/env.sh" <<'EOF'
# Sourced on the GPU machine: the bundle's libraries, then the NVIDIA
# libraries of its PyTorch wheels (cuBLAS, cuDNN, the CUDA runtime), then CUDA's.
_gw_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -d $_gw_dir/lib ]] || tar -C "$_gw_dir" -xJf "$_gw_dir/lib.tar.xz"
if [[ ! -e /usr/share/datasets/fashion-mnist && $(id -u) -eq 0 ]] && ls "$_gw_dir"/fashion-mnist/*.gz >/dev/null 2>&1; then
  mkdir -p /usr/share/datasets && ln -s "$_gw_dir/fashion-mnist" /usr/share/datasets/fashion-mnist
fi
if [[ ! -e /usr/share/games/fortunes && $(id -u) -eq 0 ]] && [[ -n $(ls -A "$_gw_dir/fortunes" 2>/dev/null) ]]; then
  mkdir -p /usr/share/games && ln -s "$_gw_dir/fortunes" /usr/share/games/fortunes
fi
_gw_nv=$(python3 -c 'import os, sys
import nvidia
dirs = set()
for root in nvidia.__path__:
    for d, _, files in os.walk(root):
        if any(f.startswith(("libcudnn.so", "libcublas.so", "libcudart.so", "libcublasLt.so")) for f in files):
            dirs.add(d)
print(":".join(sorted(dirs)))' 2>/dev/null || true)
export LD_LIBRARY_PATH=$_gw_dir/lib${_gw_nv:+:$_gw_nv}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset _gw_dir _gw_nv
EOF
du -sh "$dir"
