# Sourced by the allreduce-vs-MPI scripts, after `build` is set: checks
# that gradwire is built and OpenMPI is here, makes $tmp (removed on exit),
# and compiles the MPI side (mpi_allreduce.c) into $tmp/mpi_allreduce.
# Sets: here (bench/), gw, tmp.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
gw=$build/gradwire
command -v mpicc >/dev/null || { echo "needs OpenMPI: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 2; }
[ -x "$gw" ] || { echo "build gradwire first: $gw missing" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c"
