#!/usr/bin/env bash
# Configures and builds dapo into build/ (the CUDA backend too when nvcc is
# on PATH or at /usr/local/cuda). Extra arguments go to CMake's configure step,
# e.g. -DDAPO_CUDA=OFF or -DCMAKE_CUDA_ARCHITECTURES=80.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
jobs=${DAPO_BUILD_JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$jobs"
