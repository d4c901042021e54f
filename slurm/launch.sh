#!/usr/bin/env bash
# Per-rank launch wrapper: `srun ... slurm/launch.sh COMMAND...` runs it once
# per task. It gives each rank one GPU and the NCCL defaults, then execs
# COMMAND, so that the SIGUSR1 srun forwards reaches dapo itself and the
# task's exit code is dapo's.
# Environment (all optional):
#   DAPO_GPU_BIND=auto|none   auto (default): one GPU per rank by SLURM_LOCALID (below)
#   DAPO_LAUNCH_VERBOSE=1     one line per rank: rank, host, GPU, NCCL interface
# NCCL variables already set (by the site profile, or the user) win over the defaults here.

# First, before anything else can be interrupted: SIGUSR1 and SIGTERM
# ignored. dapo installs its own handlers when training starts and puts the
# inherited dispositions back when it ends, so (1) a signal arriving while a
# rank starts up is dropped instead of killing it (the batch script sends
# SIGUSR1 again until the step ends), and (2) after the last step, a rank
# still in MPI_Finalize survives the SIGTERM with which `srun -K1` ends the
# step once the first rank has exited 4; killed by it, srun would report
# 143 for the step and the job would not requeue.
trap '' USR1 TERM
set -euo pipefail

localid=${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}

# One rank per GPU. With --gpus-per-node, Slurm sets CUDA_VISIBLE_DEVICES to
# all of the node's GPUs for every task (the IDs it allocated, not
# necessarily 0..7); each rank keeps the entry at its local rank, so every
# process sees exactly one device, as device 0. With a single entry Slurm
# (or --gpu-bind=single:1) already bound the task. Without the variable but
# with NVIDIA devices present (a site that hands out whole nodes without
# GRES), the local rank is the device index.
if [ "${DAPO_GPU_BIND:-auto}" = auto ]; then
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "${CUDA_VISIBLE_DEVICES}" != NoDevFiles ]; then
    IFS=, read -r -a _gpus <<<"$CUDA_VISIBLE_DEVICES"
    if [ "${#_gpus[@]}" -gt 1 ]; then
      export CUDA_VISIBLE_DEVICES=${_gpus[$((localid % ${#_gpus[@]}))]}
    fi
  elif [ -e /dev/nvidia0 ] && [ -z "${CUDA_VISIBLE_DEVICES+set}" ]; then
    export CUDA_VISIBLE_DEVICES=$localid
  fi
fi

# NCCL: warnings only (INFO from 128 ranks buries the training log); the
# interface and HCA names are the site's (slurm/site.sh). NCCL's own
# defaults are kept for everything else.
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

if [ "${DAPO_LAUNCH_VERBOSE:-0}" = 1 ]; then
  echo "dapo-launch: rank ${SLURM_PROCID:-?}/${SLURM_NTASKS:-?} local $localid on $(hostname -s):" \
       "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-auto}" >&2
fi
exec "$@"
