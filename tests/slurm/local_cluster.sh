# A throwaway one-node Slurm cluster on localhost for tests/slurm (sourced,
# not run): munged, slurmctld and slurmd as root, with every key, socket,
# state, spool, pid and log file under one directory, so that a machine's own
# munge/Slurm (a CI image may start Debian's services on install) is neither
# used nor disturbed, and teardown is "kill the pids in our pid files".
#   source local_cluster.sh
#   cluster_start DIR     # exports SLURM_CONF; returns non-zero if the node never comes up
#   cluster_logs          # prints the daemons' logs (for a failure report)
#   cluster_stop          # kills the daemons by their pid files (safe to call twice)

# A free TCP port pair (slurmctld, slurmd) at or above $1: the default ports
# 6817/6818 may belong to a Slurm the machine already runs.
_cluster_free_port_pair() {
  local p=$1
  while [ "$p" -lt 65000 ]; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 1))") 2>/dev/null; then
      echo "$p"
      return 0
    fi
    p=$((p + 2))
  done
  return 1
}

cluster_start() {
  CLUSTER_DIR=$1
  local d=$CLUSTER_DIR host cpus port
  mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log" "$d/run" "$d/tmp"
  chmod 700 "$d/munge"
  host=$(hostname -s)
  # At least 2 CPUs, so that a 2-rank job fits a 1-core runner too
  # (config_overrides: slurmd believes the configuration, not the hardware).
  cpus=$(nproc)
  [ "$cpus" -ge 2 ] || cpus=2
  port=$(_cluster_free_port_pair $((20000 + RANDOM % 20000))) || { echo "cluster: no free port" >&2; return 1; }

  # munge: our own key and socket; --force because root runs it and /tmp
  # is world-writable (munged's directory checks would refuse otherwise).
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  munged --force --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/run/munged.pid" --log-file="$d/log/munged.log" --seed-file="$d/munge/munged.seed" \
    2>>"$d/log/munged.log" || { echo "cluster: munged did not start" >&2; return 1; }

  # The recipe of shared/NOTES.md ("A real Slurm on this machine"): no
  # cgroups (linuxproc, task/none) so that it runs in a container, root as
  # SlurmUser, requeue allowed, one node with this machine's cores.
  # KillWait: seconds between SIGTERM and SIGKILL when a job ends.
  cat >"$d/slurm.conf" <<EOF
ClusterName=dapotest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SwitchType=switch/none
JobRequeue=1
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=30
InactiveLimit=0
MinJobAge=600
SchedulerType=sched/backfill
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$d/tmp
PlugStackConfig=$d/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$d/plugstack.conf"
  export SLURM_CONF=$d/slurm.conf
  slurmctld -f "$SLURM_CONF" 2>>"$d/log/slurmctld.log" || { echo "cluster: slurmctld did not start" >&2; return 1; }
  slurmd -f "$SLURM_CONF" -N "$host" 2>>"$d/log/slurmd.log" || { echo "cluster: slurmd did not start" >&2; return 1; }

  # The node registers within seconds; "idle" means it takes jobs.
  local deadline=$((SECONDS + 60)) state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -1)
    [ "$state" = idle ] && return 0
    sleep 0.5
  done
  echo "cluster: node $host is '$state' after 60 s" >&2
  return 1
}

cluster_logs() {
  local f
  for f in "$CLUSTER_DIR"/log/slurmctld.log "$CLUSTER_DIR"/log/slurmd.log "$CLUSTER_DIR"/log/munged.log; do
    [ -f "$f" ] || continue
    echo "===== $f (last 80 lines)"
    tail -80 "$f"
  done
}

cluster_stop() {
  [ -n "${CLUSTER_DIR:-}" ] || return 0
  local name pid
  # Jobs first (SLURM_CONF names our cluster only): slurmstepd and the
  # tasks outlive slurmd, so a job still running would be orphaned.
  local -a jobs=()
  [ -f "$CLUSTER_DIR/run/slurmctld.pid" ] && mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
  if [ ${#jobs[@]} -gt 0 ]; then
    scancel "${jobs[@]}" 2>/dev/null
    for _ in $(seq 100); do [ -z "$(squeue -h -t R,CG -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for name in slurmd slurmctld munged; do
    pid=$(cat "$CLUSTER_DIR/run/$name.pid" 2>/dev/null) || continue
    [ -n "$pid" ] || continue
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  return 0
}
