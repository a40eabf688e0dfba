#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing clipflow's array jobs:
# munged, slurmctld and slurmd (Debian 12's slurm-wlm 22.05 and munge), run as root, listening on
# 127.0.0.1 only, with every file under one directory.
#
#   deploy/slurm/local-cluster.sh start    writes the configuration, starts the daemons, waits until
#                                          the node is idle, then prints `export SLURM_CONF=...` on
#                                          stdout (so `eval "$(... start)"` points sbatch/squeue at it)
#   deploy/slurm/local-cluster.sh stop     cancels the cluster's jobs, stops the daemons and every job
#                                          process; nothing of the cluster is left running
#   deploy/slurm/local-cluster.sh status   exit 0 and `sinfo` when all three daemons run, exit 1 if not
#   deploy/slurm/local-cluster.sh env      prints the `export SLURM_CONF=...` line
#
# Environment:
#   CLIPFLOW_SLURM_DIR         where everything lives (default /tmp/clipflow-slurm): slurm.conf,
#                              cgroup.conf, the munge key and socket, state, spool, logs
#                              (log/slurmctld.log, log/slurmd.log, log/munged.log, and
#                              log/jobcomp.log: one line per finished job or array task, with its
#                              JobState and ExitCode, since there is no accounting database)
#   CLIPFLOW_SLURM_CTLD_PORT   slurmctld's port, CLIPFLOW_SLURM_SLURMD_PORT slurmd's port
#                              (default: free ports chosen at the first start, kept in slurm.conf)
#   CLIPFLOW_SLURM_CRED_EXPIRE seconds a requeued job waits before it may start again
#                              (default 20 here; Slurm's own default is 120)
#
# What a container without systemd and without cgroup delegation does not give, and how this
# configuration does without it:
#   - No systemd as PID 1: the packaged units (slurmctld.service, slurmd.service, munge.service)
#     cannot run; the daemons are started directly with their pid files in CLIPFLOW_SLURM_DIR.
#   - cgroups: proctrack/cgroup and task/cgroup need slurmd to create cgroups, and on cgroup v2 a
#     subtree delegated by systemd, which a container usually lacks. (This machine mounts cgroup v1
#     read-write, and a job did run here with proctrack/cgroup and task/cgroup; other containers
#     refuse it.) So the configuration relies on no cgroup: processes are tracked by parent process
#     id (proctrack/linuxproc: a process that daemonizes escapes it), tasks are not confined
#     (task/none), usage is not sampled (jobacct_gather/none), and memory is not a consumable
#     resource (SelectTypeParameters=CR_Core): a job's memory is not limited. cgroup.conf is
#     written for completeness (no plugin here loads it).
#   - No slurmdbd/MySQL: no accounting, so no `sacct`; jobcomp/filetxt records each finished job
#     and `scontrol show job` shows a job for MinJobAge seconds after it ends.
#   - Hostname: the node is named localhost (slurmd -N localhost), whatever the container is called.
set -euo pipefail

dir=${CLIPFLOW_SLURM_DIR:-/tmp/clipflow-slurm}

# The daemons must not inherit the caller's descriptors beyond 0-2: munged keeps whatever it
# inherits open for its lifetime, and a caller waiting for EOF on one of them (a test harness
# reading this script's output, Foundation's Process waiting for its child) would wait forever.
# (255 is bash's own copy of this script, close-on-exec already.)
for fd in "/proc/$$/fd/"*; do
  fd=${fd##*/}
  if [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ]; then eval "exec $fd>&-"; fi
done
conf=$dir/slurm.conf

die() { echo "local-cluster: $*" >&2; exit 1; }
note() { echo "local-cluster: $*" >&2; }

for tool in munged slurmctld slurmd sinfo scontrol; do
  command -v "$tool" >/dev/null || die "$tool not found: install Debian's slurm-wlm and munge (scripts/install-test-deps.sh)"
done
[ "$(id -u)" -eq 0 ] || die "run as root: slurmd starts jobs as their users and munged's key belongs to the user running it"

# pid_alive FILE: the process named in a pid file runs.
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The port already written in slurm.conf, if any (a restart keeps its ports).
conf_port() { if [ -f "$conf" ]; then sed -n "s/^$1=//p" "$conf"; fi; }

write_config() {
  local ctld_port slurmd_port hardware cred_expire
  ctld_port=${CLIPFLOW_SLURM_CTLD_PORT:-$(conf_port SlurmctldPort)}
  slurmd_port=${CLIPFLOW_SLURM_SLURMD_PORT:-$(conf_port SlurmdPort)}
  ctld_port=${ctld_port:-$(free_port)}
  slurmd_port=${slurmd_port:-$(free_port)}
  cred_expire=${CLIPFLOW_SLURM_CRED_EXPIRE:-20}
  # What slurmd itself detects (CPUs, sockets, cores, threads, RealMemory): a configured value
  # above the detected one would drain the node.
  hardware=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')
  cat >"$conf" <<EOF
# Written by deploy/slurm/local-cluster.sh: one node (this machine), everything under $dir.
ClusterName=clipflow
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
# Bind to 127.0.0.1 (what localhost resolves to), never to every address.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again.
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=$cred_expire
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups (a container may have none to write): track processes by parent id, confine nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# No slurmdbd: no accounting; one line per finished job in jobcomp.log instead.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.log
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Jobs may be requeued (scontrol requeue, node failure); finished jobs stay visible to
# scontrol/squeue for an hour.
JobRequeue=1
MinJobAge=3600
# scancel: SIGTERM, then SIGKILL after KillWait seconds (time for clipflow to abort its uploads).
KillWait=15
NodeName=localhost NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=batch Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$dir/cgroup.conf" <<EOF
# Written by deploy/slurm/local-cluster.sh. Not loaded: slurm.conf uses proctrack/linuxproc and
# task/none, which need no cgroup hierarchy slurmd may write (see the script).
CgroupPlugin=autodetect
EOF
}

start_munged() {
  pid_alive "$dir/run/munged.pid" && return 0
  # munged wants its key private to the user running it, and the socket's folder open to all.
  if [ ! -s "$dir/munge-key/munge.key" ]; then
    (umask 077 && dd if=/dev/urandom of="$dir/munge-key/munge.key" bs=1024 count=1 status=none)
    chmod 400 "$dir/munge-key/munge.key"
    note "created a munge key: $dir/munge-key/munge.key"
  fi
  munged --socket="$dir/munge/munge.socket" --key-file="$dir/munge-key/munge.key" \
    --log-file="$dir/log/munged.log" --pid-file="$dir/run/munged.pid" --seed-file="$dir/munge-key/munged.seed" ||
    die "munged did not start: $(tail -n 3 "$dir/log/munged.log" 2>/dev/null)"
}

node_state() { SLURM_CONF=$conf sinfo -h -n localhost -o %T 2>/dev/null || true; }

start() {
  local socket_path=$dir/munge/munge.socket
  [ ${#socket_path} -lt 100 ] || die "CLIPFLOW_SLURM_DIR is too long for a unix socket path: $dir"
  mkdir -p "$dir"/{munge,munge-key,state,spool,log,run}
  chmod 755 "$dir" "$dir/munge"
  chmod 700 "$dir/munge-key" "$dir/state"
  if pid_alive "$dir/run/slurmctld.pid" && pid_alive "$dir/run/slurmd.pid"; then
    note "already running ($conf)"
  else
    write_config
    start_munged
    pid_alive "$dir/run/slurmctld.pid" || slurmctld -f "$conf" ||
      die "slurmctld did not start: $(tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null)"
    pid_alive "$dir/run/slurmd.pid" || slurmd -f "$conf" -N localhost ||
      die "slurmd did not start: $(tail -n 5 "$dir/log/slurmd.log" 2>/dev/null)"
  fi
  local state=""
  for _ in $(seq 1 60); do
    state=$(node_state)
    case $state in idle | mixed | allocated) break ;; esac
    sleep 0.5
  done
  case $state in
    idle | mixed | allocated) ;;
    *) die "node localhost is '${state:-unknown}' after 30 s, not idle. slurmctld.log: $(tail -n 5 "$dir/log/slurmctld.log" 2>/dev/null) slurmd.log: $(tail -n 5 "$dir/log/slurmd.log" 2>/dev/null)" ;;
  esac
  note "node localhost is $state ($conf)"
  echo "export SLURM_CONF=$conf"
}

# Processes that hold the cluster's slurmd log open: slurmd and its slurmstepd processes (one per
# running job step), which outlive slurmd when it stops.
step_daemons() {
  local log=$dir/log/slurmd.log pid
  for fd in /proc/[0-9]*/fd/*; do
    [ "$(readlink "$fd" 2>/dev/null)" = "$log" ] || continue
    pid=${fd#/proc/}; echo "${pid%%/*}"
  done | sort -u
}

# descendants PID...: the given processes and all their descendants.
descendants() {
  local p
  for p in "$@"; do
    echo "$p"
    # shellcheck disable=SC2046
    descendants $(pgrep -P "$p" || true)
  done
}

# stop_pids SECONDS PID...: SIGTERM, then SIGKILL for whatever still runs after SECONDS.
stop_pids() {
  local wait=$1; shift
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null || true
  for _ in $(seq 1 $((wait * 10))); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive -eq 1 ] || return 0
    sleep 0.1
  done
  kill -KILL "$@" 2>/dev/null || true
}

stop() {
  [ -d "$dir" ] || { note "nothing at $dir"; return 0; }
  if pid_alive "$dir/run/slurmctld.pid"; then
    # Cancel every job first, so each job's processes get SIGTERM and KillWait as with scancel.
    local jobs
    jobs=$(SLURM_CONF=$conf squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$conf scancel $jobs 2>/dev/null || true
      for _ in $(seq 1 40); do
        [ -z "$(SLURM_CONF=$conf squeue -h -t running,completing -o %A 2>/dev/null)" ] && break
        sleep 0.5
      done
    fi
  fi
  local pids=()
  for f in slurmd slurmctld; do
    pid_alive "$dir/run/$f.pid" && pids+=("$(cat "$dir/run/$f.pid")")
  done
  stop_pids 10 "${pids[@]}"
  # Job steps whose jobs did not end by now (slurmd is gone): stop them and their processes.
  local steps
  # shellcheck disable=SC2046
  mapfile -t steps < <(descendants $(step_daemons))
  stop_pids 5 "${steps[@]}"
  pid_alive "$dir/run/munged.pid" && stop_pids 5 "$(cat "$dir/run/munged.pid")"
  rm -f "$dir"/run/*.pid
  note "stopped ($dir)"
}

status() {
  local down=()
  for f in munged slurmctld slurmd; do pid_alive "$dir/run/$f.pid" || down+=("$f"); done
  if [ ${#down[@]} -gt 0 ]; then
    echo "local-cluster: not running: ${down[*]} ($dir)"
    return 1
  fi
  SLURM_CONF=$conf sinfo
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 start|stop|status|env (CLIPFLOW_SLURM_DIR=$dir)" ;;
esac
