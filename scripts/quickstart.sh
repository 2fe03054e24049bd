#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a finished experiment:
# installs packages, builds, and trains the default experiment in-process
# (MLP on Fashion-MNIST) into results/default, replacing that folder's
# earlier run if there is one (--force). Extra arguments go to `gradwire run`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh gradwire   # the program only: tests, fuzzers, benchmarks and the CUDA module are scripts/build.sh's
exec build/gradwire run examples/default.toml --force "$@"
