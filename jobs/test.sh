#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test (unit tests, and MPI tests under mpirun -np 2 and -np 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh
bash jobs/build.sh
# The real Qwen tokenizer for the tokenizer tests (fetched, not committed).
DAPO_QWEN_TOKENIZER=$(bash jobs/fetch_qwen_tokenizer.sh build/qwen3)
export DAPO_QWEN_TOKENIZER
DAPO_QWEN25_TOKENIZER=$(bash jobs/fetch_qwen_tokenizer.sh build/qwen2_5 qwen2_5)
export DAPO_QWEN25_TOKENIZER
# hyparquet, the parquet reader of jobs/convert_verl_data.py without pyarrow (ctest convert_verl_data).
DAPO_HYPARQUET=$(bash jobs/fetch_hyparquet.sh build/hyparquet); export DAPO_HYPARQUET
# Root may run mpirun only when it says so (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build --output-on-failure -j"${DAPO_TEST_JOBS:-1}"
# The numerical suites again under a second OpenBLAS kernel family: kernels
# round differently (AVX-512 against AVX2, FMA against none), and a
# tolerance tuned to one family failed on the other. This machine's family
# is OpenBLAS's choice; the second is one it can also run.
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then alt=Haswell
elif grep -qw avx /proc/cpuinfo 2>/dev/null; then alt=Sandybridge
else alt=""; fi
if [ -n "$alt" ]; then
  echo "test.sh: the numerical suites again with OPENBLAS_CORETYPE=$alt"
  OPENBLAS_CORETYPE=$alt ctest --test-dir build --output-on-failure -j"${DAPO_TEST_JOBS:-1}" \
    -R '^(ops|optim|model|rl|rollout|trainer|apps|mpi_np2)$'
fi
