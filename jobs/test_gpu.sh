#!/usr/bin/env bash
# Every GPU test, on a machine with NVIDIA GPUs (CI has none: there these
# tests report themselves as skipped):
#   1. test_gpu: every CUDA op against its CPU op (shapes, bf16 bounds, guard
#      regions, determinism, device flags) and the model on one GPU against
#      HF transformers' fixture and the CPU model;
#   2. test_mpi's Nccl* tests under mpirun on 2 and (with 4 GPUs) 4 ranks:
#      NCCL collectives, and the model + update step split tp x dp against
#      one GPU;
#   3. `dapo sft` of the demo task on one GPU against the CPU backend: the
#      loss curves agree within bf16 noise;
#   4. (2+ GPUs) a rank that stops answering during a dp=2 `dapo sft` on
#      GPUs: its peer blocks in an NCCL collective, and the watchdog ends the
#      job (exit 5) within seconds instead of letting it hang;
#   5. the CPU demo's pipeline on one GPU (`dapo sft`, then `dapo train` and
#      `dapo eval`, `dapo generate` of the trained model): DAPO learns on
#      the GPU as it does on the CPU;
#   6. (2+ GPUs) the demo's DAPO run on 2 GPUs as dp = 2 (sharded optimizer)
#      and as tp = 2: both learn, and their first step's accuracy is the
#      1-GPU run's within sampling noise; 2 steps + restart + 2 steps on 2
#      GPUs give the 4-step run's metrics exactly.
# Usage: bash jobs/test_gpu.sh [BIN]
#   BIN: where dapo, test_gpu and test_mpi are (default: build/, after
#   bash jobs/build.sh; or a gpu-bundle's bin/ after sourcing its env.sh).
# DAPO_GPU_PERF=1 also prints each op's perf lines (JSON) from test_gpu.
# DAPO_TEST_GPU_FROM=N starts at part N (re-running the later parts only).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}
find_bin() {
  for p in "$bin/$1" "$bin/tests/$1"; do [ -x "$p" ] && { echo "$p"; return; }; done
  echo "test_gpu.sh: $1 not found in $bin (build it first: bash jobs/build.sh)" >&2
  exit 2
}
dapo=$(find_bin dapo); test_gpu=$(find_bin test_gpu); test_mpi=$(find_bin test_mpi)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "test_gpu.sh: no GPU visible (nvidia-smi -L)"; exit 2; }
echo "test_gpu.sh: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0

from=${DAPO_TEST_GPU_FROM:-1}
if [ "$from" -le 1 ]; then
  echo "== 1. test_gpu"
  "$test_gpu"
fi

for np in 2 4; do
  [ "$from" -le 2 ] || break
  if [ "$gpus" -ge "$np" ]; then
    echo "== 2. test_mpi Nccl* on $np GPUs"
    # A hung collective must fail the script, not stall it.
    timeout 900 mpirun -np "$np" "$test_mpi" --gtest_filter='Nccl*'
  else
    echo "== 2. test_mpi Nccl* on $np GPUs: skipped ($gpus visible)"
  fi
done

if [ "$from" -gt 5 ]; then
  echo "test_gpu.sh: DAPO_TEST_GPU_FROM=$from: parts 3-5 make the model part 6 needs; starting at 3" >&2
fi
echo "== 3. dapo sft on the demo task: GPU against CPU"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steps=40
for backend in cpu cuda; do
  OMP_NUM_THREADS=4 "$dapo" sft --config inputs/demo_sft.ini --parallel.backend="$backend" \
    --train.total_steps="$steps" --log.dir="$tmp/$backend" --checkpoint.dir="$tmp/$backend" > "$tmp/$backend.log" 2>&1 ||
    { cat "$tmp/$backend.log"; echo "test_gpu.sh: dapo sft on $backend failed"; exit 1; }
done
python3 - "$tmp/cpu/metrics.jsonl" "$tmp/cuda/metrics.jsonl" <<'PY'
import json, sys
cpu, gpu = ([json.loads(l)["train/loss"] for l in open(p)] for p in sys.argv[1:3])
assert len(cpu) == len(gpu) > 0, (len(cpu), len(gpu))
worst = max(abs(g - c) / max(abs(c), 1e-3) for c, g in zip(cpu, gpu))
print(f"sft loss, cpu: {cpu[0]:.4f} -> {cpu[-1]:.4f}; gpu: {gpu[0]:.4f} -> {gpu[-1]:.4f}; "
      f"largest relative gap over {len(cpu)} steps: {worst:.4f}")
# bf16 weights and activations against fp32: a few percent at most, and
# both runs learn (the loss falls by at least a third).
assert worst < 0.05, "the GPU loss curve left the CPU's"
assert gpu[-1] < 0.67 * gpu[0] and cpu[-1] < 0.67 * cpu[0], "no learning"
PY
if [ "$gpus" -ge 2 ]; then
  echo "== 4. a stuck rank during dapo sft on 2 GPUs: the watchdog ends the job"
  t0=$SECONDS
  set +e
  DAPO_FAULT_STALL=1:update timeout 120 mpirun -np 2 -x DAPO_FAULT_STALL "$dapo" sft --config inputs/demo_sft.ini \
    --parallel.backend=cuda --train.total_steps=20 --train.phase_timeout_s=10 --log.dir="$tmp/stall" \
    --checkpoint.dir="$tmp/stall" > "$tmp/stall.log" 2>&1
  rc=$?
  set -e
  took=$((SECONDS - t0))
  grep -E "watchdog|DAPO_FAULT" "$tmp/stall.log" | head -4
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 90 ] && grep -q "dapo: watchdog: rank [01] on .*phase 'update'" "$tmp/stall.log" ||
    { tail -20 "$tmp/stall.log"; echo "test_gpu.sh: the stuck 2-GPU job was not ended by the watchdog (exit $rc after ${took}s)"; exit 1; }
  echo "stall: ended by the watchdog ${took}s after start, exit code $rc"
fi
echo "== 5. the demo pipeline on one GPU: sft, train, eval, generate"
demo="--model.path=$tmp/cuda/sft_final.h5"
"$dapo" sft --config inputs/demo_sft.ini --parallel.backend=cuda --log.dir="$tmp/cuda" --checkpoint.dir="$tmp/cuda" \
  > "$tmp/sft_full.log" 2>&1 || { tail -20 "$tmp/sft_full.log"; echo "test_gpu.sh: full demo sft on cuda failed"; exit 1; }
# shellcheck disable=SC2086
"$dapo" train --config inputs/demo.ini --parallel.backend=cuda $demo --log.dir="$tmp/train" \
  --checkpoint.dir="$tmp/train/ckpt" --dump.dir="$tmp/train/rollouts" > "$tmp/train.log" 2>&1 ||
  { tail -30 "$tmp/train.log"; echo "test_gpu.sh: dapo train on cuda failed"; exit 1; }
grep -E "train: accuracy|train: done" "$tmp/train.log"
python3 - "$tmp/train/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [v for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean" in k]
print(f"GPU demo: validation accuracy {val[0]:.3f} -> {val[-1]:.3f} over {rows[-1]['step']} steps")
assert val[-1] > val[0] + 0.1, "DAPO on the GPU did not raise the validation accuracy"
PY
ckpt=$(ls "$tmp"/train/ckpt/step_*.h5 | tail -1)
"$dapo" eval --config inputs/demo.ini --parallel.backend=cuda --checkpoint="$ckpt" --output="$tmp/eval.json" \
  > "$tmp/eval.log" 2>&1 || { tail -20 "$tmp/eval.log"; echo "test_gpu.sh: dapo eval on cuda failed"; exit 1; }
cat "$tmp/eval.json"
head -5 inputs/demo/val.jsonl > "$tmp/prompts.jsonl"
"$dapo" generate --config inputs/demo.ini --parallel.backend=cuda --checkpoint="$ckpt" --input="$tmp/prompts.jsonl" \
  --rollout.n=2 --output="$tmp/gen.jsonl" > "$tmp/gen.log" 2>&1 || { tail -20 "$tmp/gen.log"; echo "test_gpu.sh: dapo generate on cuda failed"; exit 1; }
[ "$(wc -l < "$tmp/gen.jsonl")" -eq 10 ] ||
  { echo "test_gpu.sh: dapo generate wrote $(wc -l < "$tmp/gen.jsonl") lines, not 10 (5 prompts x 2 samples)"; exit 1; }
if [ "$gpus" -ge 2 ]; then
  echo "== 6. the demo's DAPO run on 2 GPUs: dp = 2 and tp = 2; restart on 2 GPUs"
  for layout in "dp2 1" "tp2 2"; do
    set -- $layout
    # shellcheck disable=SC2086
    mpirun -np 2 "$dapo" train --config inputs/demo.ini --parallel.backend=cuda --parallel.tp="$2" $demo \
      --log.dir="$tmp/$1" --checkpoint.dir="$tmp/$1/ckpt" --dump.every=0 > "$tmp/$1.log" 2>&1 ||
      { tail -30 "$tmp/$1.log"; echo "test_gpu.sh: dapo train on 2 GPUs ($1) failed"; exit 1; }
  done
  python3 - "$tmp/train/metrics.jsonl" "$tmp/dp2/metrics.jsonl" "$tmp/tp2/metrics.jsonl" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    val = [v for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean" in k]
    first = next(r["gen/acc/mean"] for r in rows if r["step"] == 1)
    return val, first
(v1, f1), (vd, fd), (vt, ft) = (load(p) for p in sys.argv[1:4])
for name, (v, f) in (("dp=2", (vd, fd)), ("tp=2", (vt, ft))):
    print(f"{name}: validation accuracy {v[0]:.3f} -> {v[-1]:.3f}; step 1 sampled accuracy {f:.3f} (1 GPU: {f1:.3f})")
    assert v[-1] > v[0] + 0.1, f"DAPO on 2 GPUs ({name}) did not raise the validation accuracy"
    assert abs(f - f1) < 0.1, f"{name}: step 1 left the 1-GPU run's accuracy"
PY
  base="--config inputs/demo.ini --parallel.backend=cuda $demo --dump.every=0 --train.val_every=0 --train.val_before_train=false"
  # shellcheck disable=SC2086
  mpirun -np 2 "$dapo" train $base --log.dir="$tmp/r4" --checkpoint.dir="$tmp/r4/ckpt" --train.total_steps=4 \
    > "$tmp/r4.log" 2>&1 || { tail -20 "$tmp/r4.log"; echo "test_gpu.sh: 4-step run failed"; exit 1; }
  # shellcheck disable=SC2086
  mpirun -np 2 "$dapo" train $base --log.dir="$tmp/r22" --checkpoint.dir="$tmp/r22/ckpt" --train.total_steps=2 \
    > "$tmp/r2a.log" 2>&1 || { tail -20 "$tmp/r2a.log"; echo "test_gpu.sh: first 2 steps failed"; exit 1; }
  # shellcheck disable=SC2086
  mpirun -np 2 "$dapo" train $base --log.dir="$tmp/r22" --checkpoint.dir="$tmp/r22/ckpt" --train.total_steps=4 \
    > "$tmp/r2b.log" 2>&1 || { tail -20 "$tmp/r2b.log"; echo "test_gpu.sh: resumed 2 steps failed"; exit 1; }
  python3 - "$tmp/r4/metrics.jsonl" "$tmp/r22/metrics.jsonl" <<'PY'
import json, sys
def rows(p):
    return {r["step"]: {k: v for k, v in r.items() if not k.startswith("timing_s/") and not k.startswith("perf/")}
            for r in map(json.loads, open(p))}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert sorted(a) == sorted(b) == [1, 2, 3, 4], (sorted(a), sorted(b))
for s in (3, 4):
    diff = {k: (a[s].get(k), b[s].get(k)) for k in set(a[s]) | set(b[s]) if a[s].get(k) != b[s].get(k)}
    assert not diff, f"step {s} after the restart differs: {diff}"
print("restart on 2 GPUs: steps 3 and 4 after a restart equal the straight run's metrics exactly")
PY
fi
echo "test_gpu.sh: all GPU tests passed"
