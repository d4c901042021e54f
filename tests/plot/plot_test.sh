#!/usr/bin/env bash
# jobs/plot_training.py on a real run (ctest `plot`): two `dapo train` steps
# of a tiny random model with a rollout dump each, then both PNGs must be
# written. Skips (exit 77) when Debian's python3 lacks matplotlib, pandas or
# h5py (jobs/install_deps.sh installs them) - after checking that the script
# then says which packages to install.
#   plot_test.sh DAPO_BINARY SOURCE_DIR
set -euo pipefail
dapo=$1
src=$2
py=/usr/bin/python3
# A python3 without the packages (a cluster's module, conda): one message
# saying what to install and how, not a traceback. Run first, so that it is
# checked on machines that skip the rest.
fake=$(mktemp -d /tmp/dapo_plot_nomods_XXXXXX)
mkdir -p "$fake/matplotlib"
echo 'raise ModuleNotFoundError("No module named '"'"'matplotlib'"'"'", name="matplotlib")' >"$fake/matplotlib/__init__.py"
set +e
msg=$(PYTHONPATH=$fake "$py" "$src/jobs/plot_training.py" --run "$fake" 2>&1)
rc=$?
set -e
rm -rf "$fake"
if [ $rc -eq 0 ] || ! grep -q -- "-m pip install matplotlib pandas h5py" <<<"$msg" || grep -q Traceback <<<"$msg"; then
  echo "FAIL: without matplotlib, plot_training.py exited $rc with:"
  echo "$msg"
  exit 1
fi
if ! "$py" -c "import matplotlib, pandas, h5py" 2>/dev/null; then
  echo "skipped: $py lacks matplotlib, pandas or h5py"
  exit 77
fi
work=$(mktemp -d /tmp/dapo_plot_XXXXXX)
trap 'rm -rf "$work"' EXIT
mpirun -np 2 --oversubscribe "$dapo" train --config "$src/inputs/demo.ini" --model.path="$src/inputs/demo/model" \
  --model.tokenizer="$src/inputs/demo/tokenizer.json" --data.train_files="$src/inputs/demo/train.jsonl" \
  --data.val_files="$src/inputs/demo/val.jsonl" --rollout.val_n=1 --algorithm.dynamic_sampling=false \
  --rollout.gen_batch_size=16 --train.total_steps=2 --dump.every=1 --log.dir="$work" \
  --checkpoint.dir="$work/ck" --dump.dir="$work/rollouts" >"$work/train.log" 2>&1 || {
  tail -20 "$work/train.log"
  exit 1
}
"$py" "$src/jobs/plot_training.py" --run "$work"
for f in training_dynamics.png rollouts.png; do
  [ -s "$work/$f" ] || { echo "FAIL: $f not written"; exit 1; }
done
echo "plot test passed"
