#!/usr/bin/env bash
# Configures and builds dapo into build/ (the CUDA backend too when nvcc is
# on PATH or at /usr/local/cuda). Extra arguments go to CMake's configure step,
# e.g. -DDAPO_CUDA=OFF or -DCMAKE_CUDA_ARCHITECTURES=90 (sm_90 without wgmma; 90a is the default).
# DAPO_BUILD_TARGETS (space-separated) builds only those targets, e.g.
# DAPO_BUILD_TARGETS=dapo for the demo, which needs no test executables;
# unset, everything is built (tests and benchmarks too).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
jobs=${DAPO_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for t in ${DAPO_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j"$jobs" ${targets[@]+"${targets[@]}"}
