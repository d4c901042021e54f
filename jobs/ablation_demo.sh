#!/usr/bin/env bash
# The DAPO paper's ablation (arXiv:2503.14476, Table 1, cumulative rows) on
# the demo task: six `dapo train` runs of K steps (DAPO_ABLATION_STEPS,
# default 30) from the same warm start (runs/demo/sft/sft_final.h5) with the
# same seed, each adding one technique to the previous row, from plain GRPO
# to full DAPO. Only the [algorithm] switches (and the generation batch, see
# row 1) differ from inputs/demo.ini, given as --section.key overrides so the
# demo's config stays the single source of the recipe. Validation runs only
# before the first and after the last step. Prints a table of accuracy,
# entropy, clip fraction, generation rounds and wall time per row and writes
# it to runs/ablation/table.md; per-row logs, metrics and checkpoints are in
# runs/ablation/<row>/.
#
# Time: 267 s in all (rows 33-48 s) measured on 2 cores with the default
# K = 30, while other work on the machine pushed the load average to 8, so
# the wall-seconds column is a rough guide, not a comparison between rows.
#
# On this tiny task responses are ~14 tokens of the 32 allowed, so overlong
# filtering (row 2) and soft overlong punishment (row 4) rarely see a
# response they act on: those rows mostly test that the switches run, not
# what they do for long chain-of-thought answers. Each row is one seed of
# 30 steps: the table alone cannot tell a few points of accuracy between rows
# from seed-to-seed variation (not measured here).
#
# Builds (jobs/install_deps.sh, jobs/build.sh) only when build/dapo is
# missing, and runs the warm start (inputs/demo_sft.ini, ~20 s) only when its
# model is missing, so a second run costs only the six training runs.
# A row that fails (e.g. dynamic sampling runs out of generation rounds) is
# reported as failed with its first error line; the others still run, and the
# script exits non-zero at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/dapo ]; then
  bash jobs/install_deps.sh
  DAPO_BUILD_TARGETS=dapo bash jobs/build.sh
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
np=${DAPO_DEMO_RANKS:-2}
steps=${DAPO_ABLATION_STEPS:-30}
run() { mpirun -np "$np" --oversubscribe "$@"; }
sft=runs/demo/sft/sft_final.h5
if [ ! -f "$sft" ]; then run build/dapo sft --config inputs/demo_sft.ini; fi

out=runs/ablation
mkdir -p "$out"

# Cumulative rows as "dir|name|overrides". Every row sets all six switches so
# that none silently inherits a value from inputs/demo.ini. Without dynamic
# sampling every generated group is trained on, so rows 1-5 generate exactly
# train_batch_size (16) prompts per step, as GRPO does; row 6 generates 24 per
# round, as inputs/demo.ini does, and drops all-correct/all-wrong groups.
grpo="--algorithm.clip_ratio_high=0.2 --algorithm.loss_agg_mode=seq-mean-token-mean --algorithm.dynamic_sampling=false --algorithm.overlong_buffer_len=0 --algorithm.overlong_filter=false --rollout.gen_batch_size=16"
rows=(
  "1-grpo|GRPO|$grpo"
  "2-overlong-filter|+ overlong filtering|$grpo --algorithm.overlong_filter=true"
  "3-clip-higher|+ clip-higher|$grpo --algorithm.overlong_filter=true --algorithm.clip_ratio_high=0.28"
  "4-soft-overlong|+ soft overlong punishment|$grpo --algorithm.overlong_filter=true --algorithm.clip_ratio_high=0.28 --algorithm.overlong_buffer_len=8"
  "5-token-loss|+ token-level loss|$grpo --algorithm.overlong_filter=true --algorithm.clip_ratio_high=0.28 --algorithm.overlong_buffer_len=8 --algorithm.loss_agg_mode=token-mean"
  "6-dapo|+ dynamic sampling (DAPO)|$grpo --algorithm.overlong_filter=true --algorithm.clip_ratio_high=0.28 --algorithm.overlong_buffer_len=8 --algorithm.loss_agg_mode=token-mean --algorithm.dynamic_sampling=true --rollout.gen_batch_size=24"
)

# One line per row for the table: dir, name, status (ok|failed), seconds, error.
summary=$out/rows.tsv
: >"$summary"
failed=0
for row in "${rows[@]}"; do
  IFS='|' read -r dir name overrides <<<"$row"
  d=$out/$dir
  # A stale checkpoint would be resumed (checkpoint.resume=auto) and a stale
  # metrics.jsonl would mix two runs: every row starts from an empty directory.
  rm -rf "$d"
  mkdir -p "$d"
  echo "ablation: $name ($steps steps, log $d/train.log)"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086  # $overrides is a list of words
  if run build/dapo train --config inputs/demo.ini --model.path="$sft" \
      --train.total_steps="$steps" --train.val_every=0 --train.val_before_train=true \
      --log.dir="$d" --checkpoint.dir="$d/checkpoints" --checkpoint.resume=never \
      --dump.dir="$d/rollouts" $overrides >"$d/train.log" 2>&1; then
    status=ok err=""
    sed -n 's/^.*\(train: accuracy .*\)$/  \1/p' "$d/train.log"
  else
    status=failed failed=1
    err=$(grep -m1 -i 'error' "$d/train.log" || true)
    [ -n "$err" ] || err=$(grep -v '^[[:space:]]*$' "$d/train.log" | tail -n1 || true)
    echo "  failed: $err"
  fi
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\n' "$dir" "$name" "$status" "$secs" "${err//$'\t'/ }" >>"$summary"
done

python3 - "$summary" "$out" "$steps" "$np" "$sft" >"$out/table.md" <<'EOF'
# Reads each row's metrics.jsonl and prints the ablation table (markdown).
import json, math, sys

summary, out, steps, np_, sft = sys.argv[1:]
ACC = "val-core/arith/acc/mean@4"


def fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


header = ["row", "val acc@4 before -> after", "train acc (last)", "entropy (last)",
          "pg_clipfrac (mean)", "gen rounds (last)", "wall s"]
table = []
for line in open(summary):
    d, name, status, secs, err = line.rstrip("\n").split("\t")
    recs = []
    try:
        with open(f"{out}/{d}/metrics.jsonl") as f:
            recs = [json.loads(l) for l in f if l.strip()]
    except OSError:
        pass
    if status != "ok":
        table.append([name, f"failed: {err}", "", "", "", "", secs])
        continue
    val = {r["step"]: r[ACC] for r in recs if ACC in r}
    train = [r for r in recs if "gen/acc/mean" in r]
    last = max(train, key=lambda r: r["step"]) if train else {}
    clip = [r["actor/pg_clipfrac"] for r in train if "actor/pg_clipfrac" in r]
    before = val.get(0)
    after = val[max(val)] if val and max(val) > 0 else None
    rounds = last.get("train/num_gen_batches")
    table.append([
        name,
        f"{fmt(before)} -> {fmt(after)}",
        fmt(last.get("gen/acc/mean")),
        fmt(last.get("actor/entropy")),
        fmt(sum(clip) / len(clip) if clip else None, 4),
        "-" if rounds is None else str(int(rounds)),
        secs,
    ])

widths = [max(len(r[i]) for r in [header] + table) for i in range(len(header))]
def show(r):
    return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
print(f"DAPO ablation on the demo task: {steps} steps per row, {np_} ranks, from {sft}, "
      "inputs/demo.ini otherwise (cumulative rows, arXiv:2503.14476 Table 1)")
print()
print(show(header))
print("| " + " | ".join("-" * w for w in widths) + " |")
for r in table:
    print(show(r))
EOF
cat "$out/table.md"
if [ "$failed" -ne 0 ]; then
  echo "ablation: at least one row failed (see $out/<row>/train.log)" >&2
  exit 1
fi
