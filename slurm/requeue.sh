# The requeue/resubmit chain of the batch scripts in jobs/ (bash, sourced):
# dapo_run starts the job step in the background, forwards the preemption
# signal to it, and when dapo stops with exit code 4 ("checkpoint saved,
# requeue to continue") puts the job back in the queue; the next start
# resumes from checkpoint.dir/latest (checkpoint.resume = auto).
#   source "$DAPO_ROOT/slurm/requeue.sh"
#   dapo_run srun -K1 --mpi=pmix "$DAPO_ROOT/slurm/launch.sh" "$DAPO_BIN" train --config ...
#   exit $?
# Environment (all optional):
#   DAPO_REQUEUE=requeue|resubmit|none  requeue (default): `scontrol requeue` (needs --requeue and
#                        JobRequeue or a requeue-able partition); resubmit: sbatch the same script
#                        again with the same arguments, depending on this job; none: just exit 4
#   DAPO_REQUEUE_ON="4"  the step exit codes that continue the job (add 5 to also restart after the
#                        watchdog ended a stuck step: it resumes from the last periodic checkpoint)
#   DAPO_MAX_RESTARTS=50 give up after this many restarts (SLURM_RESTART_COUNT, or the resubmit count)
#   DAPO_RESUBMIT_ARGS   extra sbatch options for resubmit (the script's #SBATCH lines are re-read,
#                        options given on the first sbatch command line are not)
#   DAPO_RESEND_S=30     after a stop signal, SIGUSR1 goes to the step again this often until it ends
#
# Signals. `#SBATCH --signal=B:USR1@N` sends SIGUSR1 to this batch shell
# N seconds before the time limit. A shell runs a trap only between commands, so
# the step runs in the background and the shell sits in `wait`, which a
# trapped signal interrupts; the trap forwards SIGUSR1 to srun, which passes
# it to every task; dapo finishes its step, saves, exits 4; the loop waits
# again for srun's real exit status. SIGTERM is forwarded as SIGUSR1 too:
# dapo treats both alike, but srun answers SIGTERM by killing its tasks with
# SIGKILL (no checkpoint). For the same reason a SIGTERM that Slurm sends to
# the whole job (scancel, a time limit without --signal, preemption without
# PreemptParameters=send_user_signal) reaches srun as well and loses the
# step in progress; the job then restarts from the last periodic checkpoint
# (checkpoint.save_every).

_dapo_log() { echo "dapo-job: $(date '+%Y-%m-%d %H:%M:%S') $*"; }

# The trap: remember the signal, pass SIGUSR1 to the step, and pass it again
# every DAPO_RESEND_S seconds until the step ends: ranks still starting up
# ignore it (slurm/launch.sh), and dapo keeps only the first one it sees.
_dapo_forward() {
  _dapo_stop_signal=$1
  _dapo_interrupted=1
  if [ -n "${_dapo_step_pid:-}" ] && kill -0 "$_dapo_step_pid" 2>/dev/null; then
    _dapo_log "received SIG$1; forwarding SIGUSR1 to the job step (pid $_dapo_step_pid): dapo stops after its current step with a checkpoint"
    kill -USR1 "$_dapo_step_pid" 2>/dev/null || true
    if [ -z "${_dapo_resend_pid:-}" ]; then
      (
        trap - USR1
        trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
        while :; do
          sleep "${DAPO_RESEND_S:-30}" &
          sleeper=$!
          wait "$sleeper"
          kill -USR1 "$_dapo_step_pid" 2>/dev/null || exit 0
        done
      ) &
      _dapo_resend_pid=$!
    fi
  else
    _dapo_log "received SIG$1 with no job step running"
  fi
}

# Puts this job back in the queue; returns non-zero if it could not.
_dapo_requeue() {
  local mode=${DAPO_REQUEUE:-requeue} restarts=${SLURM_RESTART_COUNT:-0} max=${DAPO_MAX_RESTARTS:-50}
  if [ "$mode" = resubmit ]; then restarts=${DAPO_RESUBMIT_COUNT:-0}; fi
  if [ "$restarts" -ge "$max" ]; then
    _dapo_log "not continuing: $restarts restarts reached DAPO_MAX_RESTARTS = $max"
    return 1
  fi
  case $mode in
    requeue)
      # Slurm kills this script once the job is requeued: log first.
      _dapo_log "requeueing job $SLURM_JOB_ID (restart $((restarts + 1))); it resumes from the latest checkpoint when it starts again"
      if ! scontrol requeue "$SLURM_JOB_ID"; then
        _dapo_log "scontrol requeue $SLURM_JOB_ID failed (submit with --requeue; the cluster may forbid requeueing:" \
                  "DAPO_REQUEUE=resubmit chains new jobs instead); resubmit this script to continue"
        return 1
      fi
      return 0
      ;;
    resubmit)
      # The spool copy of this script is what Slurm ran; it exists until
      # the job ends, long enough for sbatch to read it.
      # This job's SLURM_* variables would otherwise travel into the next
      # job's environment (sbatch exports ALL by default); SLURM_CONF stays.
      local script=${DAPO_JOB_SCRIPT:-$0} out v
      local -a unset_slurm=()
      for v in $(compgen -e); do
        case $v in SLURM_CONF) ;; SLURM_*) unset_slurm+=(-u "$v") ;; esac
      done
      # shellcheck disable=SC2086
      if out=$(env "${unset_slurm[@]}" DAPO_RESUBMIT_COUNT=$((restarts + 1)) sbatch \
               --dependency="afterany:$SLURM_JOB_ID" ${DAPO_RESUBMIT_ARGS:-} "$script" "${_dapo_job_args[@]}"); then
        _dapo_log "resubmitted as: $out (starts after job $SLURM_JOB_ID ends; resumes from the latest checkpoint)"
        return 0
      fi
      _dapo_log "sbatch failed; resubmit this script to continue"
      return 1
      ;;
    none)
      _dapo_log "DAPO_REQUEUE=none: resubmit this script to continue from the latest checkpoint"
      return 1
      ;;
    *)
      _dapo_log "DAPO_REQUEUE=$mode: expected requeue, resubmit or none"
      return 1
      ;;
  esac
}

# dapo_run CMD...: runs the job step, forwards signals, continues the chain.
# Returns 0 when training is done or the job was put back in the queue, else
# the step's exit code. DAPO_JOB_ARGS (an array, optional) holds the batch
# script's own arguments, which a resubmission passes again.
dapo_run() {
  local rc w last="" code
  _dapo_job_args=("${DAPO_JOB_ARGS[@]+"${DAPO_JOB_ARGS[@]}"}")
  _dapo_stop_signal=""
  _dapo_resend_pid=""
  _dapo_log "job ${SLURM_JOB_ID:-none} (${SLURM_JOB_NAME:-}) restart ${SLURM_RESTART_COUNT:-0}${DAPO_RESUBMIT_COUNT:+, resubmission $DAPO_RESUBMIT_COUNT}:" \
            "${SLURM_JOB_NUM_NODES:-1} node(s) ${SLURM_JOB_NODELIST:-$(hostname -s)}, ${SLURM_NTASKS:-1} task(s), in $PWD"
  _dapo_log "step: $*"
  trap '_dapo_forward USR1' USR1
  trap '_dapo_forward TERM' TERM
  "$@" &
  _dapo_step_pid=$!
  # `wait` returns > 128 when a trapped signal interrupts it; the step is
  # still running then, so wait again. A second wait on a step that has
  # already been reaped returns 127: keep the status seen before.
  while :; do
    _dapo_interrupted=0
    w=0
    wait "$_dapo_step_pid" || w=$?
    if [ "$_dapo_interrupted" = 1 ] && [ "$w" -gt 128 ]; then
      last=$w
      continue
    fi
    if [ "$w" -eq 127 ] && [ -n "$last" ]; then w=$last; fi
    break
  done
  rc=$w
  _dapo_step_pid=""
  trap - USR1 TERM
  if [ -n "${_dapo_resend_pid:-}" ]; then
    kill "$_dapo_resend_pid" 2>/dev/null || true
    wait "$_dapo_resend_pid" 2>/dev/null || true
    _dapo_resend_pid=""
  fi

  if [ "$rc" -eq 0 ]; then
    _dapo_log "step finished (exit code 0): training is done"
    return 0
  fi
  for code in ${DAPO_REQUEUE_ON:-4}; do
    if [ "$rc" -eq "$code" ]; then
      _dapo_log "step stopped with exit code $rc${_dapo_stop_signal:+ after SIG$_dapo_stop_signal}: continuing the chain"
      if _dapo_requeue; then return 0; fi
      return "$rc"
    fi
  done
  _dapo_log "step failed with exit code $rc${_dapo_stop_signal:+ (after SIG$_dapo_stop_signal)}; not requeued" \
            "(2: bad input, 5: watchdog, 1: fatal error; see the lines above)"
  return "$rc"
}
