#!/usr/bin/env bash
# A one-host SLURM cluster for trying srun launches: munged (as the munge
# user, its own key and socket), slurmctld and slurmd (Debian's
# slurm-wlm 22.05), all started here under a private folder with their own
# ports and stopped when this script exits, however it exits. Nothing of
# the machine's own SLURM or munge setup is read or changed. Needs root.
#
#   scripts/slurm_local.sh -- COMMAND...
#       runs COMMAND (e.g. srun -n 2 build/gradwire run examples/ring.toml)
#       with SLURM_CONF pointing at the cluster, once the node is idle;
#       exits with COMMAND's status. Daemon logs: $GW_SLURM_LOG (a folder)
#       when set, else they are printed only when something fails.
#   The node has as many CPUs as this machine and oversubscribes: srun -n
#   more than that needs --overcommit (as on any SLURM cluster).
# Packages: slurm-wlm munge (scripts/setup.sh --test installs them).
set -uo pipefail
[[ $(id -u) -eq 0 ]] || { echo "slurm_local.sh: needs root (slurmd, munged)" >&2; exit 77; }
for t in munged slurmctld slurmd srun sinfo; do
  command -v "$t" >/dev/null || [[ -x /usr/sbin/$t ]] ||
    { echo "slurm_local.sh: $t not found (apt-get install slurm-wlm munge)" >&2; exit 77; }
done
[[ "${1:-}" == "--" && $# -ge 2 ]] || { sed -n '2,15p' "$0" >&2; exit 2; }
shift
PATH=$PATH:/usr/sbin

dir=$(mktemp -d /tmp/gw-slurm.XXXXXX)
chmod 755 "$dir"
pids=()
cleanup() {
  # A command stopped or hung with a job running: its srun (in the
  # command's process group) and the steps' slurmstepd (reparented, this
  # cluster's by the SLURM_CONF in their environment) outlive the daemons
  # unless they are ended here.
  [[ -n "${cmd_pid:-}" ]] && kill -KILL -- "-$cmd_pid" 2>/dev/null
  # Every process started with this cluster's SLURM_CONF: the steps, their
  # tasks, the daemons (not this script: its environment is its own).
  local e
  for e in /proc/[0-9]*/environ; do
    grep -qs "SLURM_CONF=$dir/slurm.conf" "$e" 2>/dev/null || continue
    e=${e#/proc/}
    [[ ${e%/environ} != "$$" ]] && kill -KILL "${e%/environ}" 2>/dev/null
  done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  if [[ -n "${GW_SLURM_LOG:-}" ]]; then mkdir -p "$GW_SLURM_LOG" && cp "$dir"/*.log "$GW_SLURM_LOG"/ 2>/dev/null; fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() {
  echo "slurm_local.sh: $*" >&2
  for f in "$dir"/*.log; do [[ -f "$f" ]] && { echo "== $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# munge: its own key and socket, in a folder only the munge user reads.
mkdir -p "$dir/munge" && chown munge: "$dir/munge" && chmod 700 "$dir/munge"
head -c 1024 /dev/urandom > "$dir/munge/munge.key"
chown munge: "$dir/munge/munge.key" && chmod 400 "$dir/munge/munge.key"
sock=$dir/munge/munge.socket
runuser -u munge -- munged --foreground --force --key-file="$dir/munge/munge.key" --socket="$sock" \
  --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/seed" --log-file="$dir/munge/munged.log" \
  > "$dir/munged.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
[[ -S "$sock" ]] || die "munged did not start"

host=$(hostname)
mkdir -p "$dir/state" "$dir/spool"
cat > "$dir/slurm.conf" <<EOF
ClusterName=gradwire
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=gradwire Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" > "$dir/slurmd.out.log" 2>&1 &
pids+=($!)
for _ in $(seq 300); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null)
  [[ "$state" == idle* || "$state" == mix* ]] && break
  sleep 0.1
done
[[ "$state" == idle* || "$state" == mix* ]] || die "the node did not come up (sinfo: '${state:-no answer}')"
if [[ -t 0 ]]; then # a shell for a person: in the foreground, on the terminal
  "$@"
else
  # In the background, in a process group of its own, and waited for: a
  # TERM (timeout's) runs the cleanup at once, where a foreground command
  # would hold it until the command ended.
  setsid "$@" &
  cmd_pid=$!
  wait "$cmd_pid"
fi
