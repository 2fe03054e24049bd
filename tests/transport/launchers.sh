#!/usr/bin/env bash
# The launchers users start jobs with, for real: srun on a one-host SLURM
# cluster (scripts/slurm_local.sh: munged, slurmctld and slurmd started and
# stopped here) and OpenMPI's mpirun. Under each, a 2- and a 4-rank sync
# ring trains the same model bit for bit as the same ring in one process,
# and `gradwire bench allreduce` checks its sums. Rank and size come from
# the launcher's own variables (SLURM_PROCID, OMPI_COMM_WORLD_RANK); under
# srun the rendezvous port is the job step's own.
# Exits 77 (ctest: "Skipped") when neither launcher can run here (srun
# needs root and slurm-wlm + munge; mpirun needs openmpi-bin).
# Usage: launchers.sh GRADWIRE SOURCE_DIR
set -uo pipefail
gw=$1
src=$2
have_slurm=0
have_mpi=0
[[ $(id -u) -eq 0 ]] && command -v srun >/dev/null && [[ -x /usr/sbin/slurmctld && -x /usr/sbin/munged ]] && have_slurm=1
command -v mpirun >/dev/null && have_mpi=1
((have_slurm + have_mpi > 0)) || { echo "SKIP: neither srun (root, slurm-wlm, munge) nor mpirun (openmpi-bin) is here"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

set -- --no-report --set train.max_steps=30 --set data.train_subset=12000 --set data.test_subset=1000
same_model() { /usr/bin/python3 "$src/tests/transport/same_model.py" "$@" > /dev/null; } # A B: bit for bit
processes() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['processes'])" "$1/summary.json"; }
for n in 2 4; do
  "$gw" run "$src/examples/ring.toml" -q --out "$tmp/one$n" --set topology.workers=$n "$@" > "$tmp/one$n.txt" 2>&1 ||
    fail "$n workers in one process: $(cat "$tmp/one$n.txt")"
done

# check LAUNCHER N OUTDIR LOG: the ring ran across N processes, bit for bit as in one.
check_ring() {
  [[ "$(processes "$3")" == "$2" ]] || fail "$1 -n $2: the run was not across $2 processes: $(tail -n 5 "$4")"
  same_model "$tmp/one$2" "$3" || fail "$1 -n $2: the model differs from the same ring in one process"
  echo "$1 -n $2: the ring across $2 processes trains the model of one process, bit for bit"
}
check_bench() { # LAUNCHER N LOG
  grep -q "^# gradwire allreduce: $2 processes" "$3" || fail "$1 -n $2 bench allreduce: $(head -n 3 "$3")"
  [[ "$(grep -c " ok$" "$3")" == 2 ]] || fail "$1 -n $2 bench allreduce: a sum is wrong: $(cat "$3")"
  echo "$1 -n $2: bench allreduce, every sum checked"
}

if ((have_slurm)); then
  cat > "$tmp/under_slurm.sh" <<EOF
set -u
for n in 2 4; do
  # more ranks than CPUs: --overcommit, as on any SLURM cluster
  srun -n \$n --overcommit "$gw" run "$src/examples/ring.toml" --out "$tmp/srun\$n" --set topology.workers=\$n $* \
    > "$tmp/srun\$n.txt" 2>&1 || { echo "srun -n \$n run failed:"; tail -n 20 "$tmp/srun\$n.txt"; exit 1; }
  srun -n \$n --overcommit "$gw" bench allreduce -b 64K -e 256K -f 4 -n 5 -w 1 > "$tmp/srunb\$n.txt" 2>&1 ||
    { echo "srun -n \$n bench failed:"; tail -n 20 "$tmp/srunb\$n.txt"; exit 1; }
done
EOF
  timeout 240 "$src/scripts/slurm_local.sh" -- bash "$tmp/under_slurm.sh" || fail "under srun (above)"
  for n in 2 4; do
    check_ring srun $n "$tmp/srun$n" "$tmp/srun$n.txt"
    check_bench srun $n "$tmp/srunb$n.txt"
  done
else
  echo "srun: skipped (needs root, slurm-wlm and munge)"
fi

if ((have_mpi)); then
  mpi=(mpirun --oversubscribe)
  [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
  # A free port (the default, 29500, may be taken by another job here).
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export GRADWIRE_RENDEZVOUS=127.0.0.1:$port
  for n in 2 4; do
    timeout 120 "${mpi[@]}" -n $n "$gw" run "$src/examples/ring.toml" --out "$tmp/mpi$n" --set topology.workers=$n "$@" \
      > "$tmp/mpi$n.txt" 2>&1 || fail "mpirun -n $n run: $(tail -n 20 "$tmp/mpi$n.txt")"
    check_ring mpirun $n "$tmp/mpi$n" "$tmp/mpi$n.txt"
    timeout 120 "${mpi[@]}" -n $n "$gw" bench allreduce -b 64K -e 256K -f 4 -n 5 -w 1 > "$tmp/mpib$n.txt" 2>&1 ||
      fail "mpirun -n $n bench: $(tail -n 20 "$tmp/mpib$n.txt")"
    check_bench mpirun $n "$tmp/mpib$n.txt"
  done
else
  echo "mpirun: skipped (needs openmpi-bin)"
fi
