#!/usr/bin/env bash
# jobs/convert_verl_data.py on the parquet fixtures of
# tests/fixtures/data/verl_parquet (written by pandas + pyarrow, with the
# JSONL the converter made of them there): with every parquet reader this
# machine has (pyarrow in python3; hyparquet through node, fetched with
# jobs/fetch_hyparquet.sh when missing and npm is there), the output must
# equal expected*.jsonl byte for byte and the printout give the copy counts.
# Then the error paths: not a parquet file, a truncated one, OUTPUT that is
# INPUT (same path, a hard link, a symlink), a missing column, values of the
# wrong type, no reader: exit 2, a message naming the file, the input and an
# existing OUTPUT untouched, no temporary file left.
# No reader at all fails the test, unless DAPO_CONVERT_TEST_ALLOW_NO_READER=1
# (then it is skipped: exit 77).
#   convert_verl_data_test.sh SOURCE_DIR [BINARY_DIR]
set -euo pipefail
src=$1
bin=${2:-$src/build}
conv="$src/jobs/convert_verl_data.py"
fx="$src/tests/fixtures/data/verl_parquet"
work=$(mktemp -d /tmp/dapo_convert_verl_XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

readers=()
if python3 -c "import pyarrow.parquet" 2>/dev/null; then readers+=(pyarrow); fi
if command -v node >/dev/null; then
  if [ -z "${DAPO_HYPARQUET:-}" ] || [ ! -f "$DAPO_HYPARQUET/src/node.js" ]; then
    if [ -f "$src/build/hyparquet/src/node.js" ]; then
      DAPO_HYPARQUET="$src/build/hyparquet"
    elif command -v npm >/dev/null; then
      DAPO_HYPARQUET=$(bash "$src/jobs/fetch_hyparquet.sh" "$bin/hyparquet") || DAPO_HYPARQUET=""
    fi
  fi
  export DAPO_HYPARQUET
  if [ -n "${DAPO_HYPARQUET:-}" ] && [ -f "$DAPO_HYPARQUET/src/node.js" ]; then readers+=(hyparquet); fi
fi
if [ ${#readers[@]} -eq 0 ]; then
  echo "no parquet reader: python3 has no pyarrow, and node + hyparquet are missing (bash jobs/fetch_hyparquet.sh)"
  if [ "${DAPO_CONVERT_TEST_ALLOW_NO_READER:-0}" = 1 ]; then exit 77; fi
  exit 1
fi
echo "readers: ${readers[*]}"

# expect_error EXPECTED_TEXT ARGS...: exit 2, EXPECTED_TEXT in stderr.
expect_error() {
  local want=$1; shift
  local rc=0
  python3 "$conv" "$@" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
  if [ "$rc" -ne 2 ]; then fail "$* exited $rc, expected 2: $(cat "$work/err.txt")"; return; fi
  if ! grep -qF -- "$want" "$work/err.txt"; then fail "$*: stderr lacks \"$want\": $(cat "$work/err.txt")"; fi
}

for reader in "${readers[@]}"; do
  for case in "tiny_dapo_math expected 20 6 2 3 3.33 5 3" "tiny_aime_2024 aime_expected 12 4 3 3 3 3 3"; do
    read -r name expected rows distinct min median mean max epochs <<<"$case"
    out="$work/$reader-$name.jsonl"
    python3 "$conv" "$fx/$name.parquet" "$out" --reader "$reader" >"$work/print.txt" 2>&1 \
      || { fail "$reader $name: $(cat "$work/print.txt")"; continue; }
    cmp "$out" "$fx/$expected.jsonl" || fail "$reader $name: output differs from $expected.jsonl"
    grep -qF "$rows rows (read with $reader" "$work/print.txt" || fail "$reader $name: row count: $(cat "$work/print.txt")"
    grep -qF "$distinct distinct prompts" "$work/print.txt" || fail "$reader $name: distinct prompts"
    grep -qF "copies per prompt: min $min, median $median, mean $mean, max $max" "$work/print.txt" \
      || fail "$reader $name: copy counts: $(cat "$work/print.txt")"
    grep -qF "set train.total_epochs = $epochs" "$work/print.txt" || fail "$reader $name: total_epochs advice"
    python3 "$conv" "$fx/$name.parquet" "$out" --reader "$reader" --keep-duplicates >"$work/print.txt" 2>&1 \
      || { fail "$reader $name --keep-duplicates: $(cat "$work/print.txt")"; continue; }
    cmp "$out" "$fx/${expected}_keep_duplicates.jsonl" || fail "$reader $name: output differs from ${expected}_keep_duplicates.jsonl"
    grep -qF "wrote all $rows rows" "$work/print.txt" || fail "$reader $name --keep-duplicates: printout"
  done

  # Bad parquet files: each reader's own message, exit 2.
  head -c 1000 "$fx/tiny_dapo_math.parquet" >"$work/truncated.parquet"
  printf 'PAR1' >>"$work/truncated.parquet"
  expect_error "$work/truncated.parquet: not a readable parquet file" "$work/truncated.parquet" "$work/t.jsonl" --reader "$reader"
  expect_error "$fx/missing_reward_model.parquet: missing column reward_model" \
    "$fx/missing_reward_model.parquet" "$work/t.jsonl" --reader "$reader"
  expect_error "$fx/wrong_role.parquet: row 1 (counting from 0): field prompt[0].role: expected a string, got null" \
    "$fx/wrong_role.parquet" "$work/t.jsonl" --reader "$reader"
  expect_error "$fx/float_index.parquet: row 1 (counting from 0): field extra_info.index: expected a string or an integer, got the float 1.5" \
    "$fx/float_index.parquet" "$work/t.jsonl" --reader "$reader"
  [ ! -e "$work/t.jsonl" ] || fail "$reader: a failed conversion left $work/t.jsonl"
done

# Not a parquet file; an existing OUTPUT survives a failed run.
printf '{"prompt": "x"}\n' >"$work/not.parquet"
echo "old output" >"$work/old.jsonl"
expect_error "$work/not.parquet: not a parquet file" "$work/not.parquet" "$work/old.jsonl"
expect_error "$fx/wrong_role.parquet: row 1" "$fx/wrong_role.parquet" "$work/old.jsonl"
[ "$(cat "$work/old.jsonl")" = "old output" ] || fail "a failed conversion changed an existing OUTPUT"
expect_error "no-such.parquet: no such file" "$work/no-such.parquet" "$work/x.jsonl"

# OUTPUT that is INPUT: the same path, a hard link, a symlink.
cp "$fx/tiny_dapo_math.parquet" "$work/in.parquet"
ln "$work/in.parquet" "$work/hard.jsonl"
ln -s "$work/in.parquet" "$work/soft.jsonl"
for out in "$work/in.parquet" "$work/hard.jsonl" "$work/soft.jsonl"; do
  expect_error "refusing to overwrite the input" "$work/in.parquet" "$out"
done
cmp "$work/in.parquet" "$fx/tiny_dapo_math.parquet" || fail "the input was changed"
[ -z "$(find "$work" -name '*.partial')" ] || fail "temporary files left: $(ls -A "$work")"

# No reader: without site-packages (python3 -S: no pyarrow) and no hyparquet.
rc=0
DAPO_HYPARQUET=/nonexistent python3 -S "$conv" "$fx/tiny_dapo_math.parquet" "$work/x.jsonl" >/dev/null 2>"$work/err.txt" || rc=$?
if python3 -S -c "import pyarrow" 2>/dev/null; then
  : # pyarrow outside site-packages: a reader remains
elif [ "$rc" -ne 2 ] || ! grep -qF "pip install pyarrow" "$work/err.txt" || ! grep -qF "fetch_hyparquet.sh" "$work/err.txt"; then
  fail "no reader: exit $rc, $(cat "$work/err.txt")"
fi
DAPO_HYPARQUET=/nonexistent python3 "$conv" "$fx/tiny_dapo_math.parquet" "$work/x.jsonl" --reader hyparquet \
  >/dev/null 2>"$work/err.txt" && rc=0 || rc=$?
{ [ "$rc" -eq 2 ] && grep -qE "node is not on PATH|no hyparquet in /nonexistent" "$work/err.txt"; } \
  || fail "--reader hyparquet without hyparquet: exit $rc, $(cat "$work/err.txt")"

# Numbers as dapo's std::to_chars writes them (dapo_line.cpp's float_text).
python3 -B - "$src/jobs" <<'PY' || fail "float_text"
import sys
sys.path.insert(0, sys.argv[1])
from convert_verl_data import float_text, plain
cases = {0.5: "0.5", 2.5: "2.5", 1e-05: "1e-05", 0.0001: "1e-04", 0.001: "0.001", 1e22: "1e+22",
         2.0 ** 60: "1152921504606846976", 1e16: "1e+16", 123456789012345680.0: "123456789012345680",
         -2.5: "-2.5", 0.1: "0.1", 1 / 3: "0.3333333333333333", 5e-324: "5e-324"}
bad = {v: (float_text(v), want) for v, want in cases.items() if float_text(v) != want}
assert not bad, bad
assert plain(34.0, "x") == 34 and isinstance(plain(34.0, "x"), int) and plain(2.0 ** 53, "x") == 2.0 ** 53
assert plain(float("nan"), "x") is None and plain({"\0bytes": "w6k="}, "x") == "\u00e9"
PY

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "convert_verl_data: readers ${readers[*]}: fixtures converted byte for byte, error paths checked"
