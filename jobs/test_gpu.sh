#!/usr/bin/env bash
# Every GPU test, on a machine with NVIDIA GPUs (CI has none: there these
# tests report themselves as skipped):
#   1. test_gpu: the op harness (every CUDA op against its CPU op over one
#      table of shapes, dtypes and bounds, with guard regions and device
#      flags), each op's GPU-only checks (determinism, fused against
#      unfused, graph replay), and the model on one GPU against HF
#      transformers' fixture and the CPU model;
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
#      and as tp = 2, and (4+ GPUs) on 4 as tp = 2 x dp = 2: all learn,
#      and their first step's accuracy is the 1-GPU run's within sampling
#      noise; 2 steps + restart + 2 steps on 2
#      GPUs give the 4-step run's metrics exactly.
#   7. SIGUSR1 (Slurm's warning before preemption) during the demo's
#      `dapo train` on one GPU and (2+ GPUs) at dp = 2 under mpirun: the run
#      saves a checkpoint at the step boundary and exits 4 (what
#      slurm/requeue.sh requeues on), the next run resumes from it and
#      finishes, and every step's metrics equal a straight run's exactly.
# Usage: bash jobs/test_gpu.sh [BIN]
#   BIN: where dapo, test_gpu and test_mpi are (default: build/, after
#   bash jobs/build.sh; or a gpu-bundle's bin/ after sourcing its env.sh).
# Op timings and tuning sweeps are benchmarks, not tests: bench_ops_gpu --list.
# DAPO_TEST_GPU_FROM=N starts at part N (re-running the later parts only;
# 6 re-runs 3-5 first, which make its model; 7 alone makes its own), and
# DAPO_TEST_GPU_TO=N stops after part N (parts 3-6 run as one: 3, 4 or 5
# stops after 6).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}
find_bin() {
  for p in "$bin/$1" "$bin/tests/$1"; do [ -x "$p" ] && { echo "$p"; return; }; done
  echo "test_gpu.sh: $1 not found in $bin (build it first: bash jobs/build.sh)" >&2
  exit 2
}
dapo=$(find_bin dapo)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "test_gpu.sh: no GPU visible (nvidia-smi -L)"; exit 2; }
echo "test_gpu.sh: $gpus GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0

from=${DAPO_TEST_GPU_FROM:-1}
to=${DAPO_TEST_GPU_TO:-7}
if [ "$from" -le 1 ] && [ "$to" -ge 1 ]; then
  echo "== 1. test_gpu"
  test_gpu=$(find_bin test_gpu)
  "$test_gpu"
fi

for np in 2 4; do
  [ "$from" -le 2 ] && [ "$to" -ge 2 ] || break
  if [ "$gpus" -ge "$np" ]; then
    echo "== 2. test_mpi Nccl* on $np GPUs"
    # A hung collective must fail the script, not stall it.
    test_mpi=$(find_bin test_mpi)
    timeout 900 mpirun --bind-to none -np "$np" "$test_mpi" --gtest_filter='Nccl*'
  else
    echo "== 2. test_mpi Nccl* on $np GPUs: skipped ($gpus visible)"
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$from" -le 6 ] && [ "$to" -ge 3 ]; then
if [ "$from" -gt 5 ]; then
  echo "test_gpu.sh: DAPO_TEST_GPU_FROM=$from: parts 3-5 make the model part 6 needs; starting at 3" >&2
fi
echo "== 3. dapo sft on the demo task: GPU against CPU"
steps=40
for backend in cpu cuda; do
  OMP_NUM_THREADS=4 "$dapo" sft --config inputs/demo_sft.ini --parallel.backend="$backend" \
    --train.total_steps="$steps" --log.dir="$tmp/short_$backend" --checkpoint.dir="$tmp/short_$backend" > "$tmp/$backend.log" 2>&1 ||
    { cat "$tmp/$backend.log"; echo "test_gpu.sh: dapo sft on $backend failed"; exit 1; }
done
python3 - "$tmp/short_cpu/metrics.jsonl" "$tmp/short_cuda/metrics.jsonl" <<'PY'
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
  DAPO_FAULT_STALL=1:update timeout 120 mpirun --bind-to none -np 2 -x DAPO_FAULT_STALL "$dapo" sft --config inputs/demo_sft.ini \
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
ckpt=$(ls -d "$tmp"/train/ckpt/step_*[0-9] | tail -1)
"$dapo" eval --config inputs/demo.ini --parallel.backend=cuda --checkpoint="$ckpt" --output="$tmp/eval.json" \
  > "$tmp/eval.log" 2>&1 || { tail -20 "$tmp/eval.log"; echo "test_gpu.sh: dapo eval on cuda failed"; exit 1; }
cat "$tmp/eval.json"
head -5 inputs/demo/val.jsonl > "$tmp/prompts.jsonl"
"$dapo" generate --config inputs/demo.ini --parallel.backend=cuda --checkpoint="$ckpt" --input="$tmp/prompts.jsonl" \
  --rollout.n=2 --output="$tmp/gen.jsonl" > "$tmp/gen.log" 2>&1 || { tail -20 "$tmp/gen.log"; echo "test_gpu.sh: dapo generate on cuda failed"; exit 1; }
[ "$(wc -l < "$tmp/gen.jsonl")" -eq 10 ] ||
  { echo "test_gpu.sh: dapo generate wrote $(wc -l < "$tmp/gen.jsonl") lines, not 10 (5 prompts x 2 samples)"; exit 1; }
if [ "$gpus" -ge 2 ]; then
  # Layouts: name, tp, ranks; with 4 GPUs also tp = 2 x dp = 2.
  layouts=("dp2 1 2" "tp2 2 2")
  [ "$gpus" -ge 4 ] && layouts+=("tp2dp2 2 4")
  echo "== 6. the demo's DAPO run on 2 GPUs (dp = 2, tp = 2)$([ "$gpus" -ge 4 ] && echo " and 4 GPUs (tp = 2 x dp = 2)"); restart on 2 GPUs"
  runs=()
  for layout in "${layouts[@]}"; do
    set -- $layout
    # shellcheck disable=SC2086
    mpirun --bind-to none -np "$3" "$dapo" train --config inputs/demo.ini --parallel.backend=cuda --parallel.tp="$2" $demo \
      --log.dir="$tmp/$1" --checkpoint.dir="$tmp/$1/ckpt" --dump.every=0 > "$tmp/$1.log" 2>&1 ||
      { tail -30 "$tmp/$1.log"; echo "test_gpu.sh: dapo train on $3 GPUs ($1) failed"; exit 1; }
    runs+=("$1=$tmp/$1/metrics.jsonl")
  done
  python3 - "$tmp/train/metrics.jsonl" "${runs[@]}" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p)]
    val = [v for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean" in k]
    first = next(r["gen/acc/mean"] for r in rows if r["step"] == 1)
    return val, first
v1, f1 = load(sys.argv[1])
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    v, f = load(path)
    print(f"{name}: validation accuracy {v[0]:.3f} -> {v[-1]:.3f}; step 1 sampled accuracy {f:.3f} (1 GPU: {f1:.3f})")
    assert v[-1] > v[0] + 0.1, f"DAPO on several GPUs ({name}) did not raise the validation accuracy"
    assert abs(f - f1) < 0.1, f"{name}: step 1 left the 1-GPU run's accuracy"
PY
  base="--config inputs/demo.ini --parallel.backend=cuda $demo --dump.every=0 --train.val_every=0 --train.val_before_train=false"
  # shellcheck disable=SC2086
  mpirun --bind-to none -np 2 "$dapo" train $base --log.dir="$tmp/r4" --checkpoint.dir="$tmp/r4/ckpt" --train.total_steps=4 \
    > "$tmp/r4.log" 2>&1 || { tail -20 "$tmp/r4.log"; echo "test_gpu.sh: 4-step run failed"; exit 1; }
  # shellcheck disable=SC2086
  mpirun --bind-to none -np 2 "$dapo" train $base --log.dir="$tmp/r22" --checkpoint.dir="$tmp/r22/ckpt" --train.total_steps=2 \
    > "$tmp/r2a.log" 2>&1 || { tail -20 "$tmp/r2a.log"; echo "test_gpu.sh: first 2 steps failed"; exit 1; }
  # shellcheck disable=SC2086
  mpirun --bind-to none -np 2 "$dapo" train $base --log.dir="$tmp/r22" --checkpoint.dir="$tmp/r22/ckpt" --train.total_steps=4 \
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
fi  # parts 3-6

if [ "$to" -lt 7 ]; then
  echo "test_gpu.sh: parts $from-$to passed (DAPO_TEST_GPU_TO=$to)"
  exit 0
fi
# ---- 7. SIGUSR1 on GPUs: checkpoint, exit 4, resume, the straight run's metrics ----
echo "== 7. SIGUSR1 during dapo train on GPUs: checkpoint, exit 4, resume; every step as in a straight run"
warm=$tmp/cuda/sft_final.h5
if [ ! -f "$warm" ]; then  # part 5's warm start, or a fresh one (a few seconds on a GPU)
  "$dapo" sft --config inputs/demo_sft.ini --parallel.backend=cuda --log.dir="$tmp/cuda" --checkpoint.dir="$tmp/cuda" \
    > "$tmp/sft7.log" 2>&1 || { tail -20 "$tmp/sft7.log"; echo "test_gpu.sh: the demo's sft on cuda failed"; exit 1; }
fi
# The demo's DAPO run from its warm start, validating every 4 steps (the
# resumed run validates too). A step takes ~0.1 s on an H100: 16 steps leave
# the stop (after step 3, 4 or 5) well before the end.
sig_steps=16
p7="--config inputs/demo.ini --parallel.backend=cuda --model.path=$warm --dump.every=0 --train.val_every=4 --train.val_before_train=false --train.total_steps=$sig_steps"
sig_np=1
[ "$gpus" -ge 2 ] && sig_np="1 2"
for np in $sig_np; do
  launch=()
  [ "$np" -gt 1 ] && launch=(mpirun --bind-to none -np "$np")
  d=$tmp/sigusr1_np$np
  mkdir -p "$d"
  # shellcheck disable=SC2086
  "${launch[@]}" "$dapo" train $p7 --log.dir="$d/straight" --checkpoint.dir="$d/straight/ckpt" > "$d/straight.log" 2>&1 ||
    { tail -20 "$d/straight.log"; echo "test_gpu.sh: the straight run ($np GPU(s)) failed"; exit 1; }
  # shellcheck disable=SC2086
  "${launch[@]}" "$dapo" train $p7 --log.dir="$d/p" --checkpoint.dir="$d/p/ckpt" > "$d/preempted.log" 2>&1 &
  pid=$!
  deadline=$((SECONDS + 120))
  until grep -q "step 3/$sig_steps " "$d/preempted.log" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 $pid 2>/dev/null; then
      kill -9 $pid 2>/dev/null
      tail -20 "$d/preempted.log"; echo "test_gpu.sh: the run to preempt ($np GPU(s)) never reached step 3"; exit 1
    fi
    sleep 0.1
  done
  # SIGUSR1 every 20 ms until the run ends (to dapo itself, or to mpirun,
  # which forwards it to every rank), as slurm/requeue.sh resends it: the
  # first stops the run after its step, the later ones land during the save
  # and must change nothing.
  # What dapo does with SIGUSR1 right now (for the failure message): the
  # signal masks and handlers as /proc shows them, and its threads that block it.
  sigstate=$(grep -E '^Sig(Blk|Ign|Cgt)' /proc/$pid/status 2>/dev/null | xargs)
  nblk=0 nthr=0
  for t in /proc/$pid/task/*/status; do
    blk=$(sed -n 's/^SigBlk:[[:space:]]*//p' "$t" 2>/dev/null) || continue
    [ -n "$blk" ] || continue
    nthr=$((nthr + 1))
    (( 0x$blk & 0x200 )) && nblk=$((nblk + 1))
  done
  # Under mpirun every rank is signalled, as srun does (mpirun's own
  # forwarding of SIGUSR1 was not seen on the 2-GPU machine).
  if [ "$np" -gt 1 ]; then
    while kill -0 $pid 2>/dev/null; do
      for r in $(pgrep -f -- "--checkpoint.dir=$d/p/ckpt"); do
        [ "$r" = "$pid" ] || kill -USR1 "$r" 2>/dev/null || true
      done
      sleep 0.02
    done
  else
    while kill -USR1 $pid 2>/dev/null; do sleep 0.02; done
  fi
  rc=0
  wait $pid || rc=$?
  stopped=$(sed -n "s/.*train: stopping after step \([0-9]*\) on SIGUSR1: checkpoint .*; exit code 4 .*/\1/p" "$d/preempted.log" | head -1)
  ckpt=$d/p/ckpt/step_$(printf %08d "${stopped:-0}").h5
  [ $rc -eq 4 ] && [ -n "$stopped" ] && [ "$stopped" -ge 3 ] && [ "$stopped" -lt $sig_steps ] && [ -f "$ckpt" ] ||
    { tail -20 "$d/preempted.log"; echo "test_gpu.sh: SIGUSR1 on $np GPU(s): exit $rc, stopped after step '${stopped}'," \
      "checkpoint $( [ -f "$ckpt" ] && echo there || echo missing); expected exit 4 and a checkpoint before step $sig_steps;" \
      "process $pid when signalled: $sigstate; $nblk of its $nthr threads blocked SIGUSR1"; exit 1; }
  # A library that took SIGUSR1 over is named here (dapo takes it back).
  grep -h "stop signals:" "$d"/*.log | sed 's/^\[[^]]*\] //' | sort -u || true
  # shellcheck disable=SC2086
  "${launch[@]}" "$dapo" train $p7 --log.dir="$d/p" --checkpoint.dir="$d/p/ckpt" > "$d/resumed.log" 2>&1 ||
    { tail -20 "$d/resumed.log"; echo "test_gpu.sh: the resumed run ($np GPU(s)) failed"; exit 1; }
  grep -q "train: resumed from $ckpt at step $stopped " "$d/resumed.log" ||
    { grep "train:" "$d/resumed.log" | head -5; echo "test_gpu.sh: the resumed run did not start from $ckpt"; exit 1; }
  python3 - "$d/straight/metrics.jsonl" "$d/p/metrics.jsonl" "$np" "$stopped" "$sig_steps" <<'PY'
import json, sys
def rows(p):
    # Timings and throughputs aside, every logged value, validation included.
    return {r["step"]: {k: v for k, v in r.items()
                        if not k.startswith("timing_s/") and k not in ("perf/throughput", "perf/gen_throughput")}
            for r in map(json.loads, open(p))}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
np_, stopped, total = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
assert sorted(a) == sorted(b) == list(range(1, total + 1)), (sorted(a), sorted(b))
for s in sorted(a):
    diff = {k: (a[s].get(k), b[s].get(k)) for k in set(a[s]) | set(b[s]) if a[s].get(k) != b[s].get(k)}
    assert not diff, f"step {s} differs from the straight run: {diff}"
val = sum(1 for r in b.values() for k in r if k.startswith("val-core/"))
print(f"SIGUSR1 on {np_} GPU(s): stopped after step {stopped} with a checkpoint, exit 4; resumed, and all {total} "
      f"steps ({val} validation values among them) equal the straight run's metrics exactly")
PY
done
echo "test_gpu.sh: all GPU tests passed"
