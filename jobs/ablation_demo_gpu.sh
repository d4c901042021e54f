#!/usr/bin/env bash
# The DAPO paper's Table 1 (the cumulative ablation) on the GPU demo
# (jobs/demo_gpu.sh's task and recipe): six rows, each adding one technique
# to the row before, 3 seeds each, all from the same warm start
# (runs/demo_gpu/sft/sft_final.h5, made by jobs/demo_gpu.sh; made here with
# DAPO_DEMO_GPU_WARM_START_ONLY=1 when missing). Only [algorithm] switches,
# the generation batch and the seeds differ from inputs/demo_gpu.ini, as
# --section.key overrides (every row sets all of them):
#   grpo             GRPO: symmetric clip (clip_ratio_high = 0.2), no dynamic
#                    sampling (every group of train_batch_size prompts is
#                    trained on, gen_batch_size = train_batch_size), the
#                    sample-level loss (seq-mean-token-mean), no overlong
#                    shaping (overlong_buffer_len = 0, no overlong filter)
#   overlong_filter  + overlong filtering (truncated responses out of the loss)
#   clip_higher      + clip-higher (clip_ratio_high = 0.28)
#   soft_overlong    + soft overlong punishment (inputs/demo_gpu.ini's buffer)
#   token_loss       + the token-level loss (token-mean)
#   dapo             + dynamic sampling (inputs/demo_gpu.ini's generation batch)
# The rows keep overlong filtering once it is added, as the paper's rows are
# cumulative. All use the GRPO group-normalised advantage. train.seed
# (sampling) and data.seed (prompt order) are the run's seed. Writes to
# runs/ablation_gpu/: table.md (per run: validation accuracy of the warm
# start and after the last step, the mean of the last three validations,
# entropy and response length over the last 10 steps, generation rounds;
# then mean +- sd per row), accuracy.svg, entropy.svg and
# response_length.svg (jobs/plot_ablation.py: standard library only), and
# each run's <row>-s<seed>/{train.log,metrics.jsonl} (plus
# jobs/plot_training.py's PNGs when matplotlib, pandas and h5py are there).
#
# Usage: bash jobs/ablation_demo_gpu.sh [BIN]   (BIN as in jobs/demo_gpu.sh)
#   DAPO_ABLATION_STEPS   default: inputs/demo_gpu.ini's total_steps (100)
#   DAPO_ABLATION_SEEDS   default "1 2 3"
#   DAPO_ABLATION_ROWS    default all six, e.g. "grpo dapo"
#   DAPO_ABLATION_GPUS    GPU indices the runs are dealt over, e.g. "0 1"
#                         (default: the first GPU only)
#   DAPO_ABLATION_REPORT_ONLY=1  runs nothing: the table and plots of the
#                         runs already in runs/ablation_gpu (e.g. rows run in
#                         separate calls)
#   DAPO_ABLATION_PARALLEL=N  runs N at once on each GPU
#                         (default 1). Same seed, same bits either way: the
#                         KV cache is sized from the run's own requests, not
#                         from the free memory, and no kernel choice depends
#                         on what else runs on the GPU (checked on an H100:
#                         DAPO seed 1 beside the five others and alone logged
#                         the same 101 metrics lines, timings aside).
#   DAPO_ABLATION_CHECK_ALONE=1  afterwards reruns the first DAPO seed alone
#                         and fails unless its metrics.jsonl equals its run
#                         beside the others (timings aside).
# Time on one H100 80GB (GRPO against DAPO, 3 seeds): the six 100-step runs
# side by side 265 s (26 GiB of GPU memory at most); one at a time ~300 s
# (GRPO 40 s, DAPO 60 s a run); the warm start ~17 s more.
set -euo pipefail
cd "$(dirname "$0")/.."
report_only=${DAPO_ABLATION_REPORT_ONLY:-0}
if [ "$report_only" != 1 ] && { ! gpus=$(nvidia-smi -L 2>/dev/null) || [ -z "$gpus" ]; }; then
  echo "ablation_demo_gpu.sh: no GPU visible (nvidia-smi -L lists none): it needs one NVIDIA GPU" >&2
  exit 2
fi
if [ "$report_only" = 1 ]; then
  dapo=/nonexistent/dapo
elif [ $# -ge 1 ]; then
  dapo=$1/dapo
  [ -x "$dapo" ] || { echo "ablation_demo_gpu.sh: $dapo is not an executable" >&2; exit 2; }
else
  if [ ! -x build/dapo ]; then
    bash jobs/install_deps.sh
    DAPO_BUILD_TARGETS=dapo bash jobs/build.sh
  fi
  dapo=build/dapo
fi
sft=runs/demo_gpu/sft/sft_final.h5
if [ "$report_only" != 1 ] && { [ ! -f "$sft" ] || [ ! -f runs/demo_gpu/data/val.jsonl ]; }; then
  echo "ablation_demo_gpu.sh: no warm start yet: making it with jobs/demo_gpu.sh"
  DAPO_DEMO_GPU_WARM_START_ONLY=1 bash jobs/demo_gpu.sh "$(dirname "$dapo")"
fi
steps_opt=()
[ -n "${DAPO_ABLATION_STEPS:-}" ] && steps_opt=(--train.total_steps="$DAPO_ABLATION_STEPS")
seeds=${DAPO_ABLATION_SEEDS:-1 2 3}
parallel=${DAPO_ABLATION_PARALLEL:-1}
[[ "$parallel" =~ ^[1-9][0-9]*$ ]] || { echo "ablation_demo_gpu.sh: DAPO_ABLATION_PARALLEL=$parallel is not a positive integer" >&2; exit 2; }
tbs=$(sed -n 's/^train_batch_size *= *\([0-9]*\).*/\1/p' inputs/demo_gpu.ini)
gbs=$(sed -n 's/^gen_batch_size *= *\([0-9]*\).*/\1/p' inputs/demo_gpu.ini)
buffer=$(sed -n 's/^overlong_buffer_len *= *\([0-9]*\).*/\1/p' inputs/demo_gpu.ini)
grpo="--algorithm.clip_ratio_high=0.2 --algorithm.loss_agg_mode=seq-mean-token-mean --algorithm.dynamic_sampling=false --algorithm.overlong_buffer_len=0 --algorithm.overlong_filter=false --rollout.gen_batch_size=$tbs"
# The cumulative rows: each row's overrides add to the previous row's.
all_rows="grpo overlong_filter clip_higher soft_overlong token_loss dapo"
declare -A row_opts
row_opts[grpo]=$grpo
row_opts[overlong_filter]="${row_opts[grpo]} --algorithm.overlong_filter=true"
row_opts[clip_higher]="${row_opts[overlong_filter]} --algorithm.clip_ratio_high=0.28"
row_opts[soft_overlong]="${row_opts[clip_higher]} --algorithm.overlong_buffer_len=$buffer"
row_opts[token_loss]="${row_opts[soft_overlong]} --algorithm.loss_agg_mode=token-mean"
row_opts[dapo]="${row_opts[token_loss]} --algorithm.dynamic_sampling=true --rollout.gen_batch_size=$gbs"
rows=${DAPO_ABLATION_ROWS:-$all_rows}
for row in $rows; do
  [ -n "${row_opts[$row]+x}" ] || { echo "ablation_demo_gpu.sh: unknown row '$row' (rows: $all_rows)" >&2; exit 2; }
done
read -r -a gpu_list <<<"${DAPO_ABLATION_GPUS:-0}"
out=runs/ablation_gpu
mkdir -p "$out"
summary=$out/runs.tsv
: >"$summary"
plots=0
python3 -c 'import matplotlib, pandas, h5py' 2>/dev/null && plots=1

# One run into directory $3 (removed first: no stale checkpoint to resume, no
# stale metrics to mix in); leaves "ok|failed SECONDS" in $3/status.
run_one() {
  local variant=$1 seed=$2 d=$3 gpu=$4 opts t0=$SECONDS status
  rm -rf "$d"
  mkdir -p "$d"
  opts=${row_opts[$variant]}
  echo "ablation_demo_gpu.sh: $variant, seed $seed: started on GPU $gpu (log $d/train.log)"
  # shellcheck disable=SC2086  # $opts is a list of words
  if CUDA_VISIBLE_DEVICES=$gpu "$dapo" train --config inputs/demo_gpu.ini --model.path="$sft" --train.seed="$seed" --data.seed="$seed" \
      --log.dir="$d" --checkpoint.dir="$d/checkpoints" --checkpoint.resume=never --dump.dir="$d/rollouts" \
      "${steps_opt[@]}" $opts >"$d/train.log" 2>&1; then
    status=ok
    echo "ablation_demo_gpu.sh: $variant, seed $seed: $(sed -n 's/^.*\(train: accuracy .*\)$/\1/p' "$d/train.log")"
  else
    status=failed
    echo "ablation_demo_gpu.sh: $variant, seed $seed: failed: $(grep -m1 -i 'error' "$d/train.log" || tail -n1 "$d/train.log")"
  fi
  echo "$status $((SECONDS - t0))" >"$d/status"
  if [ $plots = 1 ]; then
    python3 jobs/plot_training.py --run "$d" >/dev/null 2>"$d/plot.err" || echo "  (no plots for $d: $(tail -n1 "$d/plot.err"))"
  fi
}

# Up to $parallel runs at once on the one GPU: the demo's model leaves most of
# an H100 idle, and each run's KV cache is sized from its own requests
# (~1.3 GiB here), not from the free memory, so runs side by side get the
# same cache, schedule and kernels as alone.
echo "ablation_demo_gpu.sh: $(wc -w <<<"$seeds") seeds x $(wc -w <<<"$rows") rows, $parallel at a time on each of ${#gpu_list[@]} GPU(s)"
t_all=$SECONDS
i=0
for variant in $rows; do
  for seed in $seeds; do
    [ "$report_only" = 1 ] && continue
    while [ "$(jobs -rp | wc -l)" -ge "$((parallel * ${#gpu_list[@]}))" ]; do wait -n || true; done
    run_one "$variant" "$seed" "$out/$variant-s$seed" "${gpu_list[$((i % ${#gpu_list[@]}))]}" &
    i=$((i + 1))
  done
done
wait
echo "ablation_demo_gpu.sh: all runs done in $((SECONDS - t_all)) s"
failed=0
for variant in $rows; do
  for seed in $seeds; do
    read -r status secs <"$out/$variant-s$seed/status" || { status=failed secs=0; }
    [ "$status" = ok ] || failed=1
    printf '%s\t%s\t%s\t%s\n' "$variant" "$seed" "$status" "$secs" >>"$summary"
  done
done

# DAPO_ABLATION_CHECK_ALONE=1 (with DAPO_ABLATION_PARALLEL > 1): rerun the
# first DAPO seed alone on the GPU and require the same metrics, bit for bit
# (timings and throughputs aside), as its run beside the others.
if [ "${DAPO_ABLATION_CHECK_ALONE:-0}" = 1 ]; then
  first=${seeds%% *}
  run_one dapo "$first" "$out/alone-dapo-s$first" "${gpu_list[0]}"
  python3 - "$out/dapo-s$first/metrics.jsonl" "$out/alone-dapo-s$first/metrics.jsonl" <<'PY2'
import json, sys
def rows(p):
    return [{k: v for k, v in json.loads(l).items()
             if not k.startswith("timing_s/") and k not in ("perf/throughput", "perf/gen_throughput")}
            for l in open(p) if l.strip()]
a, b = (rows(p) for p in sys.argv[1:3])
bad = [(x["step"], k, x.get(k), y.get(k)) for x, y in zip(a, b) for k in set(x) | set(y) if x.get(k) != y.get(k)]
if len(a) != len(b) or bad:
    sys.exit(f"ablation_demo_gpu.sh: the run alone differs from the same run beside the others: "
             f"{len(a)} vs {len(b)} steps; first differences {bad[:5]}")
print(f"ablation_demo_gpu.sh: determinism: the run alone and the same run beside the others log the same "
      f"{len(a)} metrics lines bit for bit (timings aside)")
PY2
fi

python3 - "$summary" "$out" "$parallel" "$rows" >"$out/table.md" <<'PY'
# The table: one row per run, then mean +- std per variant. The last
# validation alone moves by a few points between seeds (200 problems x 4
# samples), so the tables also show the mean of the last three validations,
# and entropy and length as means over the last 10 steps.
import json, math, statistics, sys

summary, out, parallel, rows = sys.argv[1:]
rows = rows.split()
NAMES = {"grpo": "GRPO", "overlong_filter": "+ overlong filtering", "clip_higher": "+ clip-higher",
         "soft_overlong": "+ soft overlong punishment", "token_loss": "+ token-level loss",
         "dapo": "+ dynamic sampling (DAPO)"}
runs = []
for line in open(summary):
    variant, seed, status, secs = line.rstrip("\n").split("\t")
    recs = []
    try:
        recs = [json.loads(l) for l in open(f"{out}/{variant}-s{seed}/metrics.jsonl") if l.strip()]
    except OSError:
        pass
    val = {}
    for r in recs:
        for k, v in r.items():
            if k.startswith("val-core/") and "/acc/mean" in k:
                val[r["step"]] = v
    train = sorted((r for r in recs if "gen/acc/mean" in r), key=lambda r: r["step"])
    tail = train[-10:]
    mean_of = lambda k: statistics.mean(r[k] for r in tail) if tail and all(k in r for r in tail) else None
    vsteps = sorted(s for s in val if s > 0)
    runs.append(dict(variant=variant, seed=seed, status=status, secs=secs,
                     before=val.get(0), after=val[vsteps[-1]] if vsteps else None,
                     last3=statistics.mean(val[s] for s in vsteps[-3:]) if len(vsteps) >= 3 else None,
                     steps=train[-1]["step"] if train else 0,
                     entropy=mean_of("actor/entropy"), length=mean_of("gen/response_length/mean"),
                     rounds=sum(r.get("train/num_gen_batches", 0) for r in train)))

def f(x, d=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

print(f"The paper's Table 1 (cumulative rows) on the GPU demo (inputs/demo_gpu.ini; the same warm start; "
      f"{parallel} run(s) at a time on a GPU)\n")
print("| variant | seed | val acc: warm start -> last | mean of the last 3 val | steps | entropy (last 10 steps) "
      "| response length (last 10 steps) | generation rounds (all steps) | wall s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in runs:
    acc = f"{f(r['before'])} -> {f(r['after'])}" if r["status"] == "ok" else "failed"
    print(f"| {r['variant']} | {r['seed']} | {acc} | {f(r['last3'])} | {r['steps']} | {f(r['entropy'])} "
          f"| {f(r['length'], 1)} | {r['rounds']} | {r['secs']} |")
print()
print("| row | runs | val acc, last (mean +- sd) | gain over the warm start | mean of the last 3 val "
      "| entropy (last 10 steps) | response length (last 10 steps) | generation rounds |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0
ms = lambda xs, d=3: "-" if not xs else f"{statistics.mean(xs):.{d}f} +- {sd(xs):.{d}f}"
for variant in rows:
    ok = [r for r in runs if r["variant"] == variant and r["after"] is not None and r["before"] is not None]
    if not ok:
        print(f"| {NAMES.get(variant, variant)} | 0 | - | - | - | - | - | - |")
        continue
    gain = [r["after"] - r["before"] for r in ok]
    print(f"| {NAMES.get(variant, variant)} | {len(ok)} | {ms([r['after'] for r in ok])} | "
          f"{statistics.mean(gain):+.3f} +- {sd(gain):.3f} | {ms([r['last3'] for r in ok if r['last3'] is not None])} | "
          f"{ms([r['entropy'] for r in ok if r['entropy'] is not None])} | "
          f"{ms([r['length'] for r in ok if r['length'] is not None], 1)} | {ms([r['rounds'] for r in ok], 1)} |")
PY
cat "$out/table.md"
python3 jobs/plot_ablation.py "$out" --variants "${rows// /,}" >/dev/null && echo "ablation_demo_gpu.sh: plots $out/{accuracy,entropy,response_length}.svg"
if [ "$failed" -ne 0 ]; then
  echo "ablation_demo_gpu.sh: at least one run failed (see $out/<variant>-s<seed>/train.log)" >&2
  exit 1
fi
