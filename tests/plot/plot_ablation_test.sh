#!/usr/bin/env bash
# jobs/plot_ablation.py on real runs (ctest `plot_ablation`): two 2-step
# `dapo train` runs of a tiny random model laid out as
# jobs/ablation_demo_gpu.sh lays them out (grpo-s1/, dapo-s1/), then the
# three SVGs must parse as XML and hold one line per run plus one mean per
# variant, with points at the steps the runs logged. Standard library only:
# never skipped.
#   plot_ablation_test.sh DAPO_BINARY SOURCE_DIR
set -euo pipefail
dapo=$1
src=$2
work=$(mktemp -d /tmp/dapo_plot_ablation_XXXXXX)
trap 'rm -rf "$work"' EXIT
for run in grpo-s1 dapo-s1; do
  "$dapo" train --config "$src/inputs/demo.ini" --model.path="$src/inputs/demo/model" \
    --model.tokenizer="$src/inputs/demo/tokenizer.json" --data.train_files="$src/inputs/demo/train.jsonl" \
    --data.val_files="$src/inputs/demo/val.jsonl" --rollout.val_n=1 --algorithm.dynamic_sampling=false \
    --rollout.gen_batch_size=16 --train.total_steps=2 --dump.every=0 --log.dir="$work/$run" \
    --checkpoint.dir="$work/$run/ck" >"$work/$run.log" 2>&1 || { tail -20 "$work/$run.log"; exit 1; }
done
python3 "$src/jobs/plot_ablation.py" "$work" --out "$work/svg" >/dev/null
python3 - "$work/svg" <<'PY'
import sys
import xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
for name, points in (("accuracy", 2), ("entropy", 2), ("response_length", 2)):
    root = ET.parse(f"{sys.argv[1]}/{name}.svg").getroot()
    lines = root.findall(f"{ns}polyline")
    # grpo-s1, dapo-s1, then each variant's mean
    assert len(lines) == 4, (name, len(lines))
    for l in lines:
        assert len(l.get("points").split()) == points, (name, l.get("points"))
    text = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
    assert "GRPO: mean of 1 seed " in text and "DAPO: mean of 1 seed " in text, text
print("plot_ablation.py: accuracy, entropy and response_length SVGs with 2 runs and 2 means each")
PY
