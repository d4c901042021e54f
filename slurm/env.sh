# The environment profile every job in jobs/*.slurm sources (bash): finds the
# repository and the dapo binary, loads the site's modules, and sets the
# variables that do not depend on the experiment. Sourcing it twice is harmless.
#   source "${DAPO_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}/slurm/env.sh"
# Inputs (environment, all optional):
#   DAPO_ROOT       repository root (default: the folder above this file); INI paths are relative to it
#   DAPO_BIN        the dapo executable (default: $DAPO_ROOT/build/dapo)
#   DAPO_SITE_ENV   a site file sourced here (default: $DAPO_ROOT/slurm/site.sh if it exists):
#                   module loads, NCCL_IB_HCA / NCCL_SOCKET_IFNAME, scratch paths. Keep it
#                   untracked: it belongs to the cluster, not to the experiment.

# This file's own location is reliable; the batch script's is not (Slurm runs
# a copy from its spool directory).
_dapo_env_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DAPO_ROOT=${DAPO_ROOT:-$(cd "$_dapo_env_dir/.." && pwd)}
export DAPO_ROOT
unset _dapo_env_dir

_dapo_site=${DAPO_SITE_ENV:-$DAPO_ROOT/slurm/site.sh}
if [ -f "$_dapo_site" ]; then
  # shellcheck disable=SC1090
  source "$_dapo_site"
elif [ -n "${DAPO_SITE_ENV:-}" ]; then
  echo "dapo-env: DAPO_SITE_ENV=$DAPO_SITE_ENV does not exist" >&2
  return 2 2>/dev/null || exit 2
fi
unset _dapo_site

export DAPO_BIN=${DAPO_BIN:-$DAPO_ROOT/build/dapo}
if [ ! -x "$DAPO_BIN" ]; then
  echo "dapo-env: no dapo executable at $DAPO_BIN (build it, see README, or set DAPO_BIN)" >&2
  return 2 2>/dev/null || exit 2
fi

# One OpenMP/BLAS thread per core Slurm gave the task; oversubscribed
# threads slow every rank down to the slowest.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$OMP_NUM_THREADS}
# Checkpoints are HDF5 files on a shared file system; Lustre and GPFS mounts
# without flock support make HDF5's default file locking fail at open.
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
# Open MPI's mpirun refuses root (containers, CI) unless told; srun does not ask.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Where a job's checkpoints, rollout dumps and logs go: a scratch file
# system, never the checkout (a 32B run's checkpoints alone are ~390 GB
# each, keep_last = 3 of them). DAPO_RUN_ROOT, else $SCRATCH (set by many
# sites), else the job stops with exit 2 before it starts its ranks.
#   run_dir=$(dapo_run_dir dapo_32b) || exit 2   ->  $DAPO_RUN_ROOT/dapo_32b
# The folder does not depend on the job id: a requeued or resubmitted job
# finds the same checkpoint.dir/latest and resumes.
dapo_run_dir() {
  local root=${DAPO_RUN_ROOT:-${SCRATCH:-}}
  if [ -z "$root" ]; then
    echo "dapo-env: set DAPO_RUN_ROOT (or SCRATCH) to a scratch folder for checkpoints, dumps and logs" \
         "(e.g. DAPO_RUN_ROOT=/scratch/\$USER/dapo sbatch $0)" >&2
    return 2
  fi
  mkdir -p "$root/$1" || { echo "dapo-env: cannot create $root/$1" >&2; return 2; }
  echo "$root/$1"
}
