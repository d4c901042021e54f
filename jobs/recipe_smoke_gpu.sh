#!/usr/bin/env bash
# The paper recipe's job configs, inputs/dapo_base.ini + inputs/dapo_<SIZE>.ini
# (what jobs/dapo_<SIZE>.slurm runs), for a few steps on this machine's GPUs:
# random weights of the real Qwen2.5 shape (a model directory holding only
# inputs/shapes/qwen2.5-<SIZE>/config.json, which dapo initialises at random),
# prompts of the demo task with its tokenizer (whose ids are a subset of the
# real vocabulary), and dynamic sampling off, since a random model answers
# every prompt wrong and dynamic sampling would drop every group. Everything
# else is the recipe's: clip-higher, token-level loss, overlong shaping, AdamW
# with the sharded optimizer, activation recompute, the memory check before
# loading, the final checkpoint. The batch and the response length are cut
# so that a few steps take minutes, not hours, and only the newest
# checkpoint is kept (the 7B one is ~91 GB).
# It runs the steps, then resumes from the final checkpoint for one more step
# (checkpoint.resume = auto, as a requeued Slurm job does), and prints each
# step's phase times.
#
# Usage: bash jobs/recipe_smoke_gpu.sh SIZE [BIN]
#   SIZE: 1.5b, 7b or 32b; BIN: where dapo is (default build/; or a
#   gpu-bundle's bin/ after sourcing its env.sh).
# Environment (defaults in brackets):
#   DAPO_RECIPE_RANKS [visible GPUs]  MPI ranks, one per GPU
#   DAPO_RECIPE_TP    [the ini's tp, capped at the ranks]
#   DAPO_RECIPE_STEPS [2]             steps before the resume
#   DAPO_RECIPE_PROMPTS [16]          prompts per step (x rollout.n = 16 answers)
#   DAPO_RECIPE_RESPONSE [1024]       rollout.max_response_length
#   DAPO_RECIPE_DIR   [a fresh temporary directory, removed at the end]
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:?usage: bash jobs/recipe_smoke_gpu.sh SIZE [BIN] (SIZE: 1.5b, 7b, 32b)}
[ -f "inputs/dapo_$size.ini" ] && [ -f "inputs/shapes/qwen2.5-$size/config.json" ] ||
  { echo "recipe_smoke_gpu.sh: no inputs/dapo_$size.ini or inputs/shapes/qwen2.5-$size/config.json" >&2; exit 2; }
dapo=${2:-build}/dapo
[ -x "$dapo" ] || { echo "recipe_smoke_gpu.sh: $dapo is not an executable" >&2; exit 2; }
if ! gpus=$(nvidia-smi -L 2>/dev/null | wc -l) || [ "$gpus" -eq 0 ]; then
  echo "recipe_smoke_gpu.sh: no GPU visible (nvidia-smi -L lists none)" >&2
  exit 2
fi
ranks=${DAPO_RECIPE_RANKS:-$gpus}
ini_tp=$(sed -n 's/^tp *= *\([0-9]*\).*/\1/p' "inputs/dapo_$size.ini")
tp=${DAPO_RECIPE_TP:-$((ini_tp < ranks ? ini_tp : ranks))}
steps=${DAPO_RECIPE_STEPS:-2}
prompts=${DAPO_RECIPE_PROMPTS:-16}
response=${DAPO_RECIPE_RESPONSE:-1024}
if [ -n "${DAPO_RECIPE_DIR:-}" ]; then
  dir=$DAPO_RECIPE_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi
mkdir -p "$dir/model"
cp "inputs/shapes/qwen2.5-$size/config.json" "$dir/model/"
# The final step validates (as the recipe's last step does); 16 problems x 4
# answers keep that to one engine pass. The recipe's 32 answers for each of
# the demo's 200 problems would be 6,400 responses of up to $response tokens:
# minutes of generation that test nothing more.
head -16 inputs/demo/val.jsonl > "$dir/val.jsonl"

args=(train --config "inputs/dapo_base.ini,inputs/dapo_$size.ini"
  --model.path="$dir/model" --model.tokenizer=inputs/demo/tokenizer.json
  --data.train_files=inputs/demo/train.jsonl --data.val_files="$dir/val.jsonl" --rollout.val_n=4 --train.val_before_train=false
  --train.val_every=0 --data.max_prompt_length=64
  --parallel.tp="$tp" --algorithm.dynamic_sampling=false
  --rollout.gen_batch_size="$prompts" --train.train_batch_size="$prompts"
  --train.ppo_mini_batch_size="$(((prompts + 1) / 2))"
  --rollout.max_response_length="$response" --algorithm.overlong_buffer_len="$((response / 4))"
  --model.chat_template=chatml --checkpoint.dir="$dir/ckpt" --checkpoint.save_every=0 --checkpoint.keep_last=1 --dump.dir="$dir/rollouts" --log.dir="$dir/log")
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun --bind-to none -np "$ranks")
echo "recipe_smoke_gpu.sh: $size on $ranks GPU(s) as tp $tp x dp $((ranks / tp)): $steps steps of $prompts prompts x 16 answers of up to $response tokens, then a resume"
t0=$SECONDS
# The log goes to a file; its step, checkpoint and resume lines also to the
# console, so that a run cut short by a time limit shows how far it got.
run_logged() {
  local log=$1
  shift
  "$@" 2>&1 | tee "$log" | { grep --line-buffered -E "step [0-9]+/[0-9]+ |train: (starting|resumed|done)|checkpoint: " || true; }
  return "${PIPESTATUS[0]}"
}
run_logged "$dir/run.log" "${launch[@]}" "$dapo" "${args[@]}" --train.total_steps="$steps" --checkpoint.resume=never ||
  { tail -30 "$dir/run.log"; echo "recipe_smoke_gpu.sh: the first $steps steps failed (log $dir/run.log)" >&2; exit 1; }
t1=$SECONDS
run_logged "$dir/resume.log" "${launch[@]}" "$dapo" "${args[@]}" --train.total_steps="$((steps + 1))" \
  --checkpoint.resume=auto ||
  { tail -30 "$dir/resume.log"; echo "recipe_smoke_gpu.sh: the resumed step failed (log $dir/resume.log)" >&2; exit 1; }
grep -q "resum" "$dir/resume.log" ||
  { tail -30 "$dir/resume.log"; echo "recipe_smoke_gpu.sh: the second run did not resume from the checkpoint" >&2; exit 1; }
python3 - "$dir/log/metrics.jsonl" "$size" "$ranks" "$tp" "$((t1 - t0))" "$((SECONDS - t1))" <<'PY'
import json, sys
path, size, ranks, tp, first_s, resume_s = sys.argv[1:]
recs = [json.loads(l) for l in open(path) if l.strip()]
steps = sorted({r["step"] for r in recs if "timing_s/step" in r})
assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 2, f"steps logged: {steps}"
for r in (r for r in recs if "timing_s/step" in r):
    keys = ("gen", "old_log_prob", "update_actor", "step")
    print(json.dumps({"recipe": size, "ranks": int(ranks), "tp": int(tp), "step": r["step"],
                      **{k + "_s": round(r.get("timing_s/" + k, float("nan")), 2) for k in keys},
                      "response_length_mean": round(r.get("response_length/mean", float("nan")), 1),
                      "loss": r.get("actor/pg_loss"), "grad_norm": r.get("actor/grad_norm")}))
print(json.dumps({"recipe": size, "first_run_wall_s": int(first_s), "resume_run_wall_s": int(resume_s)}))
PY
echo "recipe_smoke_gpu.sh: $size: all steps ran, and the job resumed from its checkpoint"
