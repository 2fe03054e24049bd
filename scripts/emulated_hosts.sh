#!/usr/bin/env bash
# Emulated hosts on one machine: each "host" is its own network, UTS, IPC
# and mount namespace with its own hostname, address (198.18.0.0/15, the
# benchmarking range) and private /dev/shm, joined to the others by a
# bridge. Ranks started inside them see each other only over the network,
# as on a cluster. Needs root (ip netns, unshare); everything it makes is
# removed when it exits, however it exits.
#
#   scripts/emulated_hosts.sh N -- COMMAND...
#       runs COMMAND once per host, as rank i of N (GRADWIRE_RANK, _SIZE,
#       _RENDEZVOUS on host 0, _TOKEN set), and waits for every rank; its
#       output goes to $GW_HOSTS_LOG/rank-i.txt when that is set, else to
#       stderr prefixed by the rank. Exits with the first non-zero status.
#   In COMMAND, GW_HOST_ADDR is this host's address.
#   GW_RANKS_PER_HOST=K (default 1): K ranks on each host, ranks
#   i*K .. i*K+K-1 on host i, sharing its network, hostname, IPC and
#   /dev/shm (one host identity), as a node of K GPUs or sockets would.
#   GW_RANKS_PER_HOST=K0,K1,... : K_i ranks on host i (one count per
#   host), numbered host by host: unequal nodes.
#
#   scripts/emulated_hosts.sh N --mpi -- COMMAND...
#       makes the hosts, then runs COMMAND once, here, for mpirun to
#       start its ranks on them: GW_MPI_HOSTFILE names the hosts'
#       addresses, GW_MPI_AGENT is the launch agent (mpirun --mca
#       plm_rsh_agent) that runs a command in the namespace of a host's
#       address; this side reaches the hosts at 198.18.0.254. Give mpirun
#       --bind-to none (each host would bind its rank to the same core).
set -uo pipefail
[[ $(id -u) -eq 0 ]] || { echo "emulated_hosts.sh: needs root (ip netns)" >&2; exit 77; }
command -v ip >/dev/null && command -v unshare >/dev/null || { echo "emulated_hosts.sh: needs ip and unshare" >&2; exit 77; }
n=${1:-}
mpi=
[[ "${2:-}" == "--mpi" ]] && { mpi=1; set -- "$1" "${@:3}"; }
[[ "$n" =~ ^[1-9]$ && "${2:-}" == "--" ]] || { sed -n '2,26p' "$0" >&2; exit 2; }
shift 2
# Ranks per host: one count for all, or one per host.
IFS=, read -r -a ks <<<"${GW_RANKS_PER_HOST:-1}"
[[ ${#ks[@]} -eq 1 ]] && for ((i = 1; i < n; i++)); do ks[i]=${ks[0]}; done
[[ ${#ks[@]} -eq $n ]] || { echo "emulated_hosts.sh: GW_RANKS_PER_HOST=$GW_RANKS_PER_HOST: expected one count, or one per host ($n)" >&2; exit 2; }
total=0
for k in "${ks[@]}"; do
  [[ "$k" =~ ^[1-9]$ ]] || { echo "emulated_hosts.sh: GW_RANKS_PER_HOST=$GW_RANKS_PER_HOST: each count 1 to 9" >&2; exit 2; }
  total=$((total + k))
done
tag=gw$$
bridge=${tag}br
cleanup() {
  for ((i = 0; i < n; i++)); do ip netns del "${tag}h$i" 2>/dev/null; done
  ip link del "$bridge" 2>/dev/null
  [[ -n "${mpidir:-}" ]] && rm -rf "$mpidir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip link add "$bridge" type bridge && ip link set "$bridge" up || { echo "emulated_hosts.sh: cannot make a bridge" >&2; exit 77; }
for ((i = 0; i < n; i++)); do
  ns=${tag}h$i
  ip netns add "$ns" || exit 77
  ip link add "${tag}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${tag}v$i" master "$bridge" up
  ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
if [[ -n $mpi ]]; then
  ip addr add 198.18.0.254/24 dev "$bridge" || exit 77
  mpidir=$(mktemp -d)
  for ((i = 0; i < n; i++)); do echo "198.18.0.$((i + 1)) slots=${ks[i]}"; done >"$mpidir/hostfile"
  {
    echo '#!/bin/sh'
    echo '# mpirun'"'"'s launch agent: "agent HOST COMMAND..." runs COMMAND (its daemon, which'
    echo '# starts the host'"'"'s ranks) in HOST'"'"'s namespaces: network, hostname, IPC, /dev/shm.'
    echo 'host=$1; shift'
    echo 'i=$(( ${host##*.} - 1 ))'
    echo "exec ip netns exec \"${tag}h\$i\" unshare --uts --ipc --mount --propagation private \\"
    echo '  sh -c '"'"'hostname "host$1" && mount -t tmpfs -o size=2g tmpfs /dev/shm && shift && exec sh -c "$*"'"'"' sh "$i" "$@"'
  } >"$mpidir/agent"
  chmod +x "$mpidir/agent"
  GW_MPI_HOSTFILE=$mpidir/hostfile GW_MPI_AGENT=$mpidir/agent "$@"
  exit $?
fi
port=$((29000 + $$ % 1000))
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
pids=()
base=0
for ((i = 0; i < n; i++)); do
  # Its own hostname (UTS), IPC objects and /dev/shm (mount), in its
  # network: one namespace set per host, shared by the host's K ranks.
  GRADWIRE_SIZE=$total GRADWIRE_RENDEZVOUS=198.18.0.1:$port GRADWIRE_TOKEN=$token \
    GW_HOST_ADDR=198.18.0.$((i + 1)) \
    ip netns exec "${tag}h$i" unshare --uts --ipc --mount --propagation private \
    sh -c '
      h=$1 base=$2 k=$3
      shift 3
      hostname "host$h" && mount -t tmpfs -o size=2g tmpfs /dev/shm || exit 1
      pids=""
      j=0
      while [ $j -lt $k ]; do
        r=$((base + j))
        out=/dev/stderr
        [ -n "${GW_HOSTS_LOG:-}" ] && out=$GW_HOSTS_LOG/rank-$r.txt
        GRADWIRE_RANK=$r "$@" > "$out" 2>&1 &
        pids="$pids $!"
        j=$((j + 1))
      done
      rc=0
      for p in $pids; do wait $p || { s=$?; [ $rc -eq 0 ] && rc=$s; }; done
      exit $rc' sh "$i" "$base" "${ks[i]}" "$@" &
  pids+=($!)
  base=$((base + ks[i]))
done
rc=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; [[ $rc -eq 0 ]] && rc=$s; }
done
exit $rc
