#!/usr/bin/env bash
# The README's demo command: installs what is missing, builds, and runs the
# demo on the CPU backend with 2 MPI ranks: a supervised warm start of a tiny
# model from scratch (inputs/demo_sft.ini), then DAPO (inputs/demo.ini). Ends
# with one line: `demo: accuracy X -> Y over N steps` (validation accuracy of
# sampled answers before and after DAPO).
set -euo pipefail
cd "$(dirname "$0")/.."
bash jobs/install_deps.sh
# Only the executable: the test suite is `bash jobs/test.sh`'s to build.
DAPO_BUILD_TARGETS=dapo bash jobs/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=${DAPO_DEMO_RANKS:-2}
run() { mpirun -np "$np" --oversubscribe "$@"; }
# A fresh demo each time: inputs/demo.ini resumes from runs/demo/checkpoints
# (checkpoint.resume = auto), which after a finished demo has nothing left to do.
rm -rf runs/demo
run build/dapo info --config inputs/demo.ini
run build/dapo sft --config inputs/demo_sft.ini
log=runs/demo/train.log
mkdir -p runs/demo
run build/dapo train --config inputs/demo.ini 2>&1 | tee "$log"
line=$(sed -n 's/^.* train: accuracy \([^ ]*\) -> \([^ ]*\) over \([0-9]*\) steps.*$/demo: accuracy \1 -> \2 over \3 steps/p' "$log")
if [ -z "$line" ]; then
  echo "demo: the training run did not report its accuracy (see $log)" >&2
  exit 1
fi
echo "$line"
