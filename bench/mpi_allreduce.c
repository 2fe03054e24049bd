/* The peer for `gradwire bench allreduce`: MPI_Allreduce (float, sum) with
 * the same sizes, rounds and columns, run by bench/allreduce_vs_mpi.sh.
 * Usage: mpirun -n N mpi_allreduce MINBYTES MAXBYTES FACTOR ITERS WARMUP */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 6) {
    if (rank == 0)
      fprintf(stderr, "usage: %s MINBYTES MAXBYTES FACTOR ITERS WARMUP\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const size_t min_b = strtoull(argv[1], NULL, 10), max_b = strtoull(argv[2], NULL, 10);
  const double factor = atof(argv[3]);
  const int iters = atoi(argv[4]), warmup = atoi(argv[5]);
  float* in = malloc(max_b);
  float* out = malloc(max_b);
  int status = 0;
  if (rank == 0)
    printf("%12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
  for (double s = (double)min_b; s <= (double)max_b * 1.0001; s *= factor) {
    const size_t bytes = (size_t)s / 4 * 4, count = bytes / 4;
    for (size_t i = 0; i < count; ++i)
      in[i] = (float)(rank + 1) * (float)(i % 13 + 1);
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = 1;
    for (size_t i = 0; i < count; ++i)
      if (out[i] != (float)(n * (n + 1) / 2) * (float)(i % 13 + 1))
        ok = 0;
    if (!ok)
      status = 4;
    for (int k = 0; k < warmup; ++k)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int k = 0; k < iters; ++k)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double t = (MPI_Wtime() - t0) / iters;
    if (rank == 0) {
      const double algbw = (double)bytes / t / 1e9;
      printf("%12zu %12zu %12.1f %12.3f %12.3f %8s\n", bytes, count, t * 1e6, algbw, algbw * 2.0 * (n - 1) / n,
             ok ? "ok" : "WRONG");
      fflush(stdout);
    }
  }
  free(in);
  free(out);
  MPI_Finalize();
  return status;
}
