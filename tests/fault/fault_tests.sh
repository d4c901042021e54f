#!/usr/bin/env bash
# Faults during `dapo train` on the CPU backend under mpirun -np 2 (ctest
# `fault`): a preemption signal stops the run at a step boundary with a
# checkpoint and exit code 4 (signals repeated during the save change
# nothing), and the next run resumes from it; SIGINT and SIGHUP to the
# ranks stop them the same way; a rank killed
# with SIGKILL mid-step, and a rank that stops responding (DAPO_FAULT_STALL,
# caught by the watchdog), end the whole job non-zero within 60 s - no hang;
# a checkpoint onto a disk that filled during the run says so and leaves
# no .partial, and so does a write refused in the middle of a save (exit 2,
# no hang under mpirun); a checkpoint folder without room for one checkpoint, or on a
# read-only file system, is refused before step 1 (as read-only, not as
# full); a second run in a running run's folder is refused, naming it
# (tmpfs mounts when allowed).
#   fault_tests.sh DAPO_BINARY SOURCE_DIR
set -uo pipefail
dapo=$1
src=$2
work=$(mktemp -d /tmp/dapo_fault_XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A fresh random model with dynamic sampling off (it solves nothing): cheap,
# steady steps of the demo's shapes.
args=(train --config "$src/inputs/demo.ini" --model.path="$src/inputs/demo/model"
      --model.tokenizer="$src/inputs/demo/tokenizer.json" --data.train_files="$src/inputs/demo/train.jsonl"
      --data.val_files="$src/inputs/demo/val.jsonl" --rollout.val_n=1 --train.val_before_train=false
      --train.val_every=0 --algorithm.dynamic_sampling=false --rollout.gen_batch_size=16)

# Waits (up to $2 s) until file $1 matches pattern $3.
wait_for() {
  local deadline=$((SECONDS + $2))
  until grep -q "$3" "$1" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# ---- 1. SIGUSR1 (Slurm's warning signal): checkpoint, exit 4, resume. ----
log=$work/preempt.log
mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=40 --log.dir="$work/p" \
  --checkpoint.dir="$work/p/ck" >"$log" 2>&1 &
pid=$!
if wait_for "$log" 60 "step 2/40"; then
  # SIGUSR1 every 20 ms (mpirun forwards each to every rank) until the ranks
  # say they stopped, which they do after the checkpoint is saved: the first
  # stops the run, the later ones arrive during the save and must change
  # nothing. Not after: mpirun, tearing the job down, no longer handles
  # SIGUSR1, and one more would kill it (exit 138).
  while ! grep -q "stopping after step" "$log" 2>/dev/null && kill -USR1 $pid 2>/dev/null; do sleep 0.02; done
  wait $pid
  rc=$?
  [ $rc -eq 4 ] || fail "preempted run exited with $rc, expected 4 ($(tail -3 "$log"))"
  grep -q "stopping after step [0-9]* on SIGUSR1: checkpoint" "$log" || fail "no stop line in $log"
  stopped=$(sed -n 's/.*stopping after step \([0-9]*\) on SIGUSR1.*/\1/p' "$log" | head -1)
  [ -n "$stopped" ] && [ "$stopped" -lt 40 ] || fail "stopped at step '$stopped'"
  mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=$((stopped + 1)) --log.dir="$work/p" \
    --checkpoint.dir="$work/p/ck" >"$work/resume.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "resumed run exited with $rc ($(tail -3 "$work/resume.log"))"
  grep -q "resumed from $work/p/ck/step_$(printf %08d "$stopped") at step $stopped" "$work/resume.log" ||
    fail "the resumed run did not start from step $stopped"
  lines=$(wc -l <"$work/p/metrics.jsonl")
  [ "$lines" -eq $((stopped + 1)) ] || fail "metrics.jsonl has $lines lines, expected $((stopped + 1))"
else
  kill -9 $pid 2>/dev/null
  fail "the run never reached step 2 ($(tail -3 "$log"))"
fi

# ---- 1b. SIGINT and SIGHUP to the ranks (Ctrl-C, a closed terminal) stop as SIGTERM does. ----
for sig in INT HUP; do
  log=$work/sig$sig.log
  mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=40 --log.dir="$work/sig$sig" \
    --checkpoint.dir="$work/sig$sig/ck" >"$log" 2>&1 &
  pid=$!
  if wait_for "$log" 60 "step 1/40"; then
    ranks=$(pgrep -f -- "--log.dir=$work/sig$sig " | grep -v "^$pid\$" || true)
    [ -n "$ranks" ] && kill -$sig $ranks
    wait $pid
    rc=$?
    [ $rc -eq 4 ] || fail "SIG$sig to the ranks: exited with $rc, expected 4 ($(tail -3 "$log"))"
    grep -q "stopping after step [0-9]* on SIG$sig: checkpoint $work/sig$sig/ck/step_" "$log" ||
      fail "SIG$sig to the ranks: no stop line with a checkpoint in $log"
    echo "SIG$sig to the ranks: checkpoint, exit code $rc"
  else
    kill -9 $pid 2>/dev/null
    fail "the SIG$sig run never reached step 1 ($(tail -3 "$log"))"
  fi
done

# ---- 2. One rank killed with SIGKILL mid-step: the job ends, non-zero. ----
log=$work/kill.log
mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=400 --log.dir="$work/k" \
  --checkpoint.dir="$work/k/ck" >"$log" 2>&1 &
pid=$!
if wait_for "$log" 60 "step 1/400"; then
  ranks=$(pgrep -f -- "--log.dir=$work/k " | grep -v "^$pid\$" || true)
  victim=$(echo "$ranks" | tail -1)
  if [ -z "$victim" ]; then
    fail "no rank process found"
    kill -9 $pid
  else
    t0=$SECONDS
    kill -9 "$victim"
    # Poll rather than a background `sleep 60` guard: a leftover sleep would
    # hold ctest's output pipe open for its full minute.
    while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.2; done
    kill -9 $pid 2>/dev/null
    wait $pid
    rc=$?
    took=$((SECONDS - t0))
    [ $rc -ne 0 ] || fail "job with a killed rank exited 0"
    [ $took -lt 60 ] || fail "job with a killed rank took ${took}s to end"
    echo "kill: the job ended ${took}s after SIGKILL of one rank, exit code $rc"
  fi
else
  kill -9 $pid 2>/dev/null
  fail "the run never reached step 1 ($(tail -3 "$log"))"
fi

# ---- 3. One rank stuck (no exit, no progress): the watchdog ends the job. ----
log=$work/stall.log
t0=$SECONDS
DAPO_FAULT_STALL=1:update timeout 90 mpirun -np 2 --oversubscribe -x DAPO_FAULT_STALL "$dapo" "${args[@]}" \
  --train.total_steps=40 --train.phase_timeout_s=5 --log.dir="$work/s" --checkpoint.dir="$work/s/ck" >"$log" 2>&1
rc=$?
took=$((SECONDS - t0))
[ $rc -ne 0 ] || fail "stalled job exited 0"
[ $rc -ne 124 ] || fail "stalled job hung until timeout(1) killed it"
[ $took -lt 60 ] || fail "stalled job took ${took}s to end"
grep -q "dapo: watchdog: rank 1 on .*: phase 'update' of step 1 has run" "$log" || fail "no watchdog line for rank 1"
echo "stall: the job ended ${took}s after start, exit code $rc"

# ---- 4. A disk that fills during the run: the save says so, exit 2, no .partial. ----
# Needs a small tmpfs (root, and a container that allows mounts): skipped otherwise.
# 16 MiB holds the start's check (one training checkpoint of the demo model,
# about 9 MB); a file filling it after step 1 leaves no room for the save.
full=$work/full
mkdir -p "$full"
if mount -t tmpfs -o size=16m tmpfs "$full" 2>/dev/null; then
  log=$work/full.log
  mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=10 --log.dir="$work/f" \
    --checkpoint.dir="$full/ck" >"$log" 2>&1 &
  pid=$!
  wait_for "$log" 60 "step 1/10" || fail "the run on a 16 MiB tmpfs did not reach step 1 ($(tail -3 "$log"))"
  dd if=/dev/zero of="$full/filler" bs=64k 2>/dev/null
  wait $pid
  rc=$?
  [ $rc -eq 2 ] || fail "a save onto a full disk exited $rc, expected 2 ($(tail -3 "$log"))"
  grep -q "$full/ck/step_00000010: no space left on device for the training checkpoint" "$log" ||
    fail "no 'no space left on device' line naming the file ($(tail -3 "$log"))"
  ! ls "$full/ck"/*.partial >/dev/null 2>&1 || fail "a .partial file was left in $full/ck"
  umount "$full"
  echo "full disk: exit code $rc, the file and the cause named"
else
  echo "full disk: skipped (cannot mount a tmpfs here)"
fi

# ---- 4b. A write refused in the middle of a save, under mpirun: exit 2, no .partial, no hang. ----
# The file-size limit (no root needed) makes the rank files' allocation fail
# as a full disk does, after the start's free-space check has passed (each
# rank's file of the demo checkpoint is about 3.9 MB, above the 2 MiB
# limit); every rank then reports the failure together. Over TCP, and PMIx
# keeping its data in memory (gds=hash): Open MPI's shared-memory transport
# and PMIx's shared segments would need files above the limit.
log=$work/fsize.log
(trap '' XFSZ; ulimit -f 2048
 PMIX_MCA_gds=hash timeout 120 mpirun -np 2 --oversubscribe --mca btl self,tcp "$dapo" "${args[@]}" --train.total_steps=2 \
   --checkpoint.save_every=1 --log.dir="$work/z" --checkpoint.dir="$work/z/ck" >"$log" 2>&1)
rc=$?
[ $rc -eq 2 ] || fail "a save whose write is refused exited $rc, expected 2 ($(tail -3 "$log"))"
grep -q "$work/z/ck/step_00000001.partial/rank_0000[01].h5: .* failed: .* bytes free for this user" "$log" ||
  fail "no line naming the file, the dataset and the cause ($(grep -v '^\[20' "$log" | head -3))"
! ls "$work/z/ck"/*.partial >/dev/null 2>&1 || fail "a .partial file was left in $work/z/ck"
echo "refused write mid-save: exit code $rc, the file and the cause named"

# ---- 5. Too little room for one checkpoint: refused before step 1. ----
if mount -t tmpfs -o size=1m tmpfs "$full" 2>/dev/null; then
  log=$work/small.log
  mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=1 --log.dir="$work/s" \
    --checkpoint.dir="$full/ck" >"$log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "a run without room for a checkpoint exited $rc, expected 2 ($(tail -3 "$log"))"
  grep -q "command line: checkpoint.dir: $full/ck has [0-9]* bytes (.*) free, but a training checkpoint .* needs [0-9]* bytes" "$log" ||
    fail "no line naming key, folder, free and needed bytes ($(tail -3 "$log"))"
  ! grep -q "step 1/1" "$log" || fail "the run without room for a checkpoint ran a step"
  umount "$full"
  echo "no room: refused at the start, exit code $rc"
else
  echo "no room: skipped (cannot mount a tmpfs here)"
fi

# ---- 6. A read-only file system is reported as one, not as a full disk. ----
ro=$work/ro
mkdir -p "$ro"
if mount -t tmpfs -o size=1m tmpfs "$ro" 2>/dev/null; then
  mkdir -p "$ro/ck"
  mount -o remount,ro "$ro"
  for ck in "$ro/ck" "$ro/new"; do
    log=$work/ro.log
    mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=1 --log.dir="$work/r" \
      --checkpoint.dir="$ck" >"$log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "a run onto a read-only file system exited $rc, expected 2 ($(tail -3 "$log"))"
    grep -q "command line: checkpoint.dir: cannot \(write in\|create the folder\) $ck: Read-only file system; it is on a read-only file system" "$log" ||
      fail "no read-only line for $ck ($(tail -3 "$log"))"
    ! grep -qi "no space" "$log" || fail "a read-only file system reported as full"
  done
  umount "$ro"
  echo "read-only: refused at the start as read-only, exit code $rc"
else
  echo "read-only: skipped (cannot mount a tmpfs here)"
fi

# ---- 7. Two runs in one folder: the second is refused, naming the first. ----
log=$work/first.log
mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=40 --log.dir="$work/two" \
  --checkpoint.dir="$work/two" >"$log" 2>&1 &
pid=$!
if wait_for "$log" 60 "step 1/40"; then
  mpirun -np 2 --oversubscribe "$dapo" "${args[@]}" --train.total_steps=40 --log.dir="$work/two" \
    --checkpoint.dir="$work/two" >"$work/second.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "a second run in the same folder exited $rc, expected 2 ($(tail -3 "$work/second.log"))"
  grep -q "command line: checkpoint.dir: $work/two is in use by another dapo run (host $(hostname), pid [0-9]*, started 20[0-9-]*T[0-9:]*Z; lock file $work/two/.dapo.lock)" "$work/second.log" ||
    fail "no line naming the holder ($(tail -3 "$work/second.log"))"
  # The first run goes on untouched; one SIGUSR1 (mpirun forwards it) stops it.
  kill -USR1 $pid
  wait $pid
  rc=$?
  [ $rc -eq 4 ] || fail "the first run, stopped, exited $rc, expected 4 ($(tail -3 "$log"))"
  steps=$(grep -c '"step"' "$work/two/metrics.jsonl")
  [ "$(sed -n 's/^{"step":\([0-9]*\).*/\1/p' "$work/two/metrics.jsonl" | sort -n | uniq -d)" = "" ] ||
    fail "metrics.jsonl holds a step twice"
  echo "two runs: the second refused (exit 2) while the first ran $steps steps"
else
  fail "the first run did not reach step 1 ($(tail -3 "$log"))"
  kill -USR1 $pid 2>/dev/null; wait $pid
fi

if [ $failures -ne 0 ]; then
  echo "$failures fault test(s) failed"
  exit 1
fi
echo "fault tests passed"
