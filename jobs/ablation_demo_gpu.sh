#!/usr/bin/env bash
# GRPO against full DAPO on the GPU demo (jobs/demo_gpu.sh's task and
# recipe), 3 seeds each, on one GPU: six `dapo train` runs from the same warm
# start (runs/demo_gpu/sft/sft_final.h5, made by jobs/demo_gpu.sh; rerun here
# when missing). Only [algorithm] switches, the generation batch and the
# seeds differ from inputs/demo_gpu.ini, as --section.key overrides:
#   GRPO: clip_ratio_high = 0.2 (symmetric clip), no dynamic sampling (every
#         group of the train_batch_size prompts is trained on, as GRPO does,
#         so gen_batch_size = train_batch_size), sample-level loss
#         (seq-mean-token-mean), no overlong shaping (overlong_buffer_len = 0,
#         no overlong filter);
#   DAPO: inputs/demo_gpu.ini as is (clip-higher 0.28, dynamic sampling,
#         token-mean loss, soft overlong punishment).
# Both use the GRPO group-normalised advantage (algorithm.adv_estimator =
# grpo, the only estimator, as in the paper). train.seed (sampling) and
# data.seed (prompt order) are the run's seed. Prints a markdown table of
# validation accuracy before -> after per run plus mean +- std per variant,
# writes it to runs/ablation_gpu/table.md, and plots each run with
# jobs/plot_training.py (runs/ablation_gpu/<variant>-s<seed>/*.png; skipped
# with a note when matplotlib/pandas/h5py are missing).
#
# Usage: bash jobs/ablation_demo_gpu.sh [BIN]   (BIN as in jobs/demo_gpu.sh)
# DAPO_ABLATION_STEPS (default: inputs/demo_gpu.ini's total_steps) and
# DAPO_ABLATION_SEEDS (default "1 2 3") shorten or widen it. Time: about six
# times jobs/demo_gpu.sh's DAPO phase.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! gpus=$(nvidia-smi -L 2>/dev/null) || [ -z "$gpus" ]; then
  echo "ablation_demo_gpu.sh: no GPU visible (nvidia-smi -L lists none): it needs one NVIDIA GPU" >&2
  exit 2
fi
if [ $# -ge 1 ]; then
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
if [ ! -f "$sft" ] || [ ! -f runs/demo_gpu/data/val.jsonl ]; then
  echo "ablation_demo_gpu.sh: no warm start yet: running jobs/demo_gpu.sh first"
  bash jobs/demo_gpu.sh "$(dirname "$dapo")"
fi
steps_opt=()
[ -n "${DAPO_ABLATION_STEPS:-}" ] && steps_opt=(--train.total_steps="$DAPO_ABLATION_STEPS")
seeds=${DAPO_ABLATION_SEEDS:-1 2 3}
tbs=$(sed -n 's/^train_batch_size *= *\([0-9]*\).*/\1/p' inputs/demo_gpu.ini)
grpo="--algorithm.clip_ratio_high=0.2 --algorithm.loss_agg_mode=seq-mean-token-mean --algorithm.dynamic_sampling=false --algorithm.overlong_buffer_len=0 --algorithm.overlong_filter=false --rollout.gen_batch_size=$tbs"
dapo_opts=""
out=runs/ablation_gpu
mkdir -p "$out"
summary=$out/runs.tsv
: >"$summary"
failed=0
for variant in grpo dapo; do
  for seed in $seeds; do
    d=$out/$variant-s$seed
    rm -rf "$d"   # no stale checkpoint to resume, no stale metrics to mix in
    mkdir -p "$d"
    opts=$grpo; [ "$variant" = dapo ] && opts=$dapo_opts
    echo "ablation_demo_gpu.sh: $variant, seed $seed (log $d/train.log)"
    t0=$SECONDS
    # shellcheck disable=SC2086  # $opts is a list of words
    if "$dapo" train --config inputs/demo_gpu.ini --model.path="$sft" --train.seed="$seed" --data.seed="$seed" \
        --log.dir="$d" --checkpoint.dir="$d/checkpoints" --checkpoint.resume=never --dump.dir="$d/rollouts" \
        "${steps_opt[@]}" $opts >"$d/train.log" 2>&1; then
      status=ok
      sed -n 's/^.*\(train: accuracy .*\)$/  \1/p' "$d/train.log"
    else
      status=failed failed=1
      echo "  failed: $(grep -m1 -i 'error' "$d/train.log" || tail -n1 "$d/train.log")"
    fi
    printf '%s\t%s\t%s\t%s\n' "$variant" "$seed" "$status" "$((SECONDS - t0))" >>"$summary"
    python3 jobs/plot_training.py --run "$d" >/dev/null 2>"$d/plot.err" ||
      echo "  (no plots: $(tail -n1 "$d/plot.err"))"
  done
done

python3 - "$summary" "$out" >"$out/table.md" <<'PY'
# The table: one row per run, then mean +- std per variant.
import json, math, statistics, sys

summary, out = sys.argv[1:]
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
    train = [r for r in recs if "gen/acc/mean" in r]
    last = max(train, key=lambda r: r["step"]) if train else {}
    ent = [r["actor/entropy"] for r in train if "actor/entropy" in r]
    length = [r["response_length/mean"] for r in train if "response_length/mean" in r]
    runs.append(dict(variant=variant, seed=seed, status=status, secs=secs,
                     before=val.get(0), after=val[max(val)] if val and max(val) > 0 else None,
                     steps=max(val) if val else 0, entropy=ent[-1] if ent else None,
                     length=length[-1] if length else None,
                     rounds=last.get("train/num_gen_batches")))

def f(x, d=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

print("GRPO vs DAPO on the GPU demo (inputs/demo_gpu.ini; same warm start)\n")
print("| variant | seed | val acc before -> after | steps | entropy (last) | response length (last) | gen rounds (last) | wall s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in runs:
    acc = f"{f(r['before'])} -> {f(r['after'])}" if r["status"] == "ok" else "failed"
    rounds = "-" if r["rounds"] is None else str(int(r["rounds"]))
    print(f"| {r['variant']} | {r['seed']} | {acc} | {r['steps']} | {f(r['entropy'])} | {f(r['length'], 1)} | {rounds} | {r['secs']} |")
print()
print("| variant | runs | val acc after (mean +- std) | gain over the warm start (mean +- std) |")
print("| --- | --- | --- | --- |")
for variant in ("grpo", "dapo"):
    ok = [r for r in runs if r["variant"] == variant and r["after"] is not None and r["before"] is not None]
    if not ok:
        print(f"| {variant} | 0 | - | - |")
        continue
    after = [r["after"] for r in ok]
    gain = [r["after"] - r["before"] for r in ok]
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0
    print(f"| {variant} | {len(ok)} | {statistics.mean(after):.3f} +- {sd(after):.3f} | "
          f"{statistics.mean(gain):+.3f} +- {sd(gain):.3f} |")
PY
cat "$out/table.md"
if [ "$failed" -ne 0 ]; then
  echo "ablation_demo_gpu.sh: at least one run failed (see $out/<variant>-s<seed>/train.log)" >&2
  exit 1
fi
