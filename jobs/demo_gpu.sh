#!/usr/bin/env bash
# The GPU demo (issue 13): on one GPU, a 22.8M-parameter Qwen2 learns from
# scratch to solve multi-step arithmetic word problems column by column
# (worked solutions of 160-400 tokens; inputs/demo_gpu/README.md): the data
# are written with `dapo demo-data --difficulty 6 --solution columns`, then a
# supervised warm start (inputs/demo_gpu_sft.ini), then DAPO
# (inputs/demo_gpu.ini). Ends with one line:
#   demo: accuracy X -> Y over N steps
# (validation accuracy of sampled answers before and after DAPO).
#
# Usage: bash jobs/demo_gpu.sh [BIN]
#   BIN: a directory holding a dapo built with CUDA (e.g. a gpu-bundle's bin/
#   after sourcing its env.sh). Without it the script installs what is
#   missing and builds build/dapo (jobs/install_deps.sh, jobs/build.sh).
# Runs with one rank on the first visible GPU; exits 2 with a message when no
# GPU is visible. Everything goes to runs/demo_gpu/ (removed first).
# DAPO_DEMO_GPU_WARM_START_ONLY=1 stops after the warm start (the data and
# runs/demo_gpu/sft/sft_final.h5: what jobs/ablation_demo_gpu.sh starts from).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! gpus=$(nvidia-smi -L 2>/dev/null) || [ -z "$gpus" ]; then
  echo "demo_gpu.sh: no GPU visible (nvidia-smi -L lists none): this demo needs one NVIDIA GPU;" \
    "the CPU demo is bash jobs/demo.sh" >&2
  exit 2
fi
echo "demo_gpu.sh: $(echo "$gpus" | head -1)"
if [ $# -ge 1 ]; then
  dapo=$1/dapo
  [ -x "$dapo" ] || { echo "demo_gpu.sh: $dapo is not an executable" >&2; exit 2; }
else
  bash jobs/install_deps.sh
  DAPO_BUILD_TARGETS=dapo bash jobs/build.sh
  dapo=build/dapo
fi
out=runs/demo_gpu
# A fresh demo each time: inputs/demo_gpu.ini resumes from its checkpoints
# (checkpoint.resume = auto), which after a finished demo has nothing left to do.
rm -rf "$out"
mkdir -p "$out"
t0=$SECONDS
phase() { echo "demo_gpu.sh: $1 done at $((SECONDS - t0)) s"; }
# 40000 pairs for the warm start (~25 MB, too big to ship; written in a second).
"$dapo" demo-data --out "$out/data" --seed 2026 --train 4000 --val 200 --sft 40000 --difficulty 6 --solution columns
"$dapo" info --config inputs/demo_gpu.ini
"$dapo" sft --config inputs/demo_gpu_sft.ini 2>&1 | tee "$out/sft.log" | grep -E "sft step [0-9]*00/|sft:|error" || true
[ -f "$out/sft/sft_final.h5" ] || { echo "demo_gpu.sh: the warm start failed (see $out/sft.log)" >&2; exit 1; }
phase "warm start"
[ "${DAPO_DEMO_GPU_WARM_START_ONLY:-0}" = 1 ] && exit 0
log=$out/train.log
set +e
"$dapo" train --config inputs/demo_gpu.ini 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
phase "DAPO"
[ "$rc" -eq 0 ] || { echo "demo_gpu.sh: dapo train failed with exit code $rc (see $log)" >&2; exit 1; }
line=$(sed -n 's/^.* train: accuracy \([^ ]*\) -> \([^ ]*\) over \([0-9]*\) steps.*$/demo: accuracy \1 -> \2 over \3 steps/p' "$log")
if [ -z "$line" ]; then
  echo "demo_gpu.sh: the training run did not report its accuracy (see $log)" >&2
  exit 1
fi
echo "$line"
