/// @file gemm_libs.cpp
/// The GEMMs gradwire's models run, timed in the CPU kernel libraries this
/// machine has, one thread each, side by side in one process: OpenBLAS
/// (what kernels/cpu/gemm.cpp calls today), BLIS, oneDNN and libxsmm.
/// Libraries are opened at run time (dlopen, each with its own symbols) or,
/// for libxsmm, which Debian ships static only, linked when CMake finds it;
/// a library that is missing is a column of "-". Every result is checked
/// against OpenBLAS's before it is timed.
///
///   build/gradwire-bench-gemm [--reps N]   (OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 set here)
///
/// Shapes: the MLP 784-256-128-10 at batch 64, row-major as
/// models/layers/linear.cpp calls them: forward y = x W^T (NT), weight
/// gradient dW = dy^T x (TN), input gradient dx = dy W (NN).

#include <cblas.h>
#include <dlfcn.h>

#ifdef GRADWIRE_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

struct shape {
  const char* name;
  int m, n, k;
  bool ta, tb;
  bool alternative = false; ///< another way to lay out a GEMM of the step (not in the step's total)
};

/// C[m,n] = op(A) op(B), row-major, alpha 1, beta 0; false: this library cannot.
using gemm_fn = std::function<bool(const shape&, const float* a, const float* b, float* c)>;

int lda_of(const shape& s) { return s.ta ? s.m : s.k; }
int ldb_of(const shape& s) { return s.tb ? s.k : s.n; }

bool openblas(const shape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, a,
              lda_of(s), b, ldb_of(s), 0.f, c, s.n);
  return true;
}

/// A library opened on its own (RTLD_LOCAL | RTLD_DEEPBIND: its calls
/// resolve inside it, not to OpenBLAS's symbols of the same name).
void* open_lib(const std::vector<const char*>& paths) {
  for (const char* p : paths)
    if (void* h = ::dlopen(p, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND))
      return h;
  return nullptr;
}

gemm_fn blis() {
  void* h = open_lib({"/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4", "libblis.so.4"});
  if (!h)
    return {};
  using fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  auto f = reinterpret_cast<fn>(::dlsym(h, "cblas_sgemm"));
  if (!f)
    return {};
  return [f](const shape& s, const float* a, const float* b, float* c) {
    f(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, a,
      lda_of(s), b, ldb_of(s), 0.f, c, s.n);
    return true;
  };
}

gemm_fn onednn() {
  void* h = open_lib({"libdnnl.so.2", "libdnnl.so.3"});
  if (!h)
    return {};
  using fn = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                     const float*, std::int64_t, float, float*, std::int64_t);
  auto f = reinterpret_cast<fn>(::dlsym(h, "dnnl_sgemm"));
  if (!f)
    return {};
  return [f](const shape& s, const float* a, const float* b, float* c) {
    return f(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a, lda_of(s), b, ldb_of(s), 0.f, c, s.n) == 0;
  };
}

#ifdef GRADWIRE_HAVE_LIBXSMM
/// libxsmm is column-major: C^T = op(B)^T op(A)^T, its JIT kernel made once
/// per shape. Null where it makes none (beyond its size, or a transpose
/// its generator does not do): "n/a".
gemm_fn xsmm() {
  libxsmm_init();
  return [](const shape& s, const float* a, const float* b, float* c) {
    const int flags = (s.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (s.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
    const libxsmm_blasint lda = ldb_of(s), ldb = lda_of(s), ldc = s.n;
    const float alpha = 1.f, beta = 0.f;
    auto k = libxsmm_smmdispatch(s.n, s.m, s.k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
    if (!k)
      return false;
    k(b, a, c);
    return true;
  };
}
#endif

double seconds_per_call(const gemm_fn& f, const shape& s, const float* a, const float* b, float* c, int reps) {
  f(s, a, b, c); // warm: JIT, packing buffers, pages
  double best = 1e30;
  for (int round = 0; round < 5; ++round) { // the best of 5 rounds of `reps` calls
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      f(s, a, b, c);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
  }
  return best;
}

using library_list = std::vector<std::pair<std::string, gemm_fn>>;

library_list libraries() {
  library_list libs = {{"OpenBLAS", openblas}, {"BLIS", blis()}, {"oneDNN", onednn()}};
#ifdef GRADWIRE_HAVE_LIBXSMM
  libs.emplace_back("libxsmm", xsmm());
#else
  libs.emplace_back("libxsmm", gemm_fn{});
#endif
  return libs;
}

void print_header(const library_list& libs, int reps) {
  std::printf("# GFLOP/s, one thread, best of 5 rounds of %d calls (MLP 784-256-128-10, batch 64; \"-\": library "
              "missing, \"n/a\": it makes no kernel for this shape)\n",
              reps);
  std::printf("| GEMM | m x n x k | op |");
  for (const auto& [name, f] : libs)
    std::printf(" %s |", name.c_str());
  std::printf(" best / OpenBLAS |\n|---|---|---|");
  for (std::size_t i = 0; i <= libs.size(); ++i)
    std::printf("---|");
  std::printf("\n");
}

/// One shape's row: each library checked against OpenBLAS, then timed
/// (a wrong result is never timed). Returns OpenBLAS's and the best GFLOP/s.
std::pair<double, double> time_shape(const shape& s, const library_list& libs, std::mt19937& rng, int reps, int& bad) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(static_cast<std::size_t>(s.m) * s.k), b(static_cast<std::size_t>(s.k) * s.n),
    ref(static_cast<std::size_t>(s.m) * s.n), c(ref.size());
  for (auto& x : a)
    x = u(rng);
  for (auto& x : b)
    x = u(rng);
  openblas(s, a.data(), b.data(), ref.data());
  const double flop = 2.0 * s.m * s.n * s.k;
  std::printf("| %s | %dx%dx%d | %s%s |", s.name, s.m, s.n, s.k, s.ta ? "T" : "N", s.tb ? "T" : "N");
  double base = 0, best = 0;
  for (const auto& [name, f] : libs) {
    if (!f) {
      std::printf(" - |");
      continue;
    }
    std::fill(c.begin(), c.end(), std::nanf(""));
    if (!f(s, a.data(), b.data(), c.data())) {
      std::printf(" n/a |");
      continue;
    }
    double err = 0;
    for (std::size_t i = 0; i < c.size(); ++i)
      err = std::max(err, static_cast<double>(std::fabs(c[i] - ref[i])) / (1.0 + std::fabs(ref[i])));
    if (!(err < 1e-4)) { // NaN included
      std::printf(" WRONG (%.1e) |", err);
      ++bad;
      continue;
    }
    const double gf = flop / seconds_per_call(f, s, a.data(), b.data(), c.data(), reps) / 1e9;
    std::printf(" %.1f |", gf);
    if (name == "OpenBLAS")
      base = gf;
    best = std::max(best, gf);
  }
  std::printf(" %.2fx |\n", base > 0 ? best / base : 0.0);
  return {base, best};
}

} // namespace

int main(int argc, char** argv) {
  ::setenv("OMP_NUM_THREADS", "1", 1); // oneDNN's sgemm threads by OpenMP
  openblas_set_num_threads(1);
  int reps = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps")
      reps = std::max(1, std::atoi(argv[i + 1]));
  const std::vector<shape> shapes = {
    {"fc1 forward", 64, 256, 784, false, true},  {"fc1 forward, W stored transposed", 64, 256, 784, false, false, true},
    {"fc1 dW", 256, 784, 64, true, false},
    {"fc2 forward", 64, 128, 256, false, true},  {"fc2 dW", 128, 256, 64, true, false},
    {"fc2 dx", 64, 256, 128, false, false},      {"fc3 forward", 64, 10, 128, false, true},
    {"fc3 dW", 10, 128, 64, true, false},        {"fc3 dx", 64, 128, 10, false, false},
  };
  const auto libs = libraries();
  std::mt19937 rng(7);
  print_header(libs, reps);
  double total_flop = 0, total_openblas = 0, total_best = 0;
  int bad = 0;
  for (const auto& s : shapes) {
    const auto [base, best] = time_shape(s, libs, rng, reps, bad);
    if (s.alternative)
      continue;
    const double flop = 2.0 * s.m * s.n * s.k;
    total_flop += flop;
    total_openblas += base > 0 ? flop / base : 0;
    total_best += best > 0 ? flop / best : 0;
  }
  std::printf("\nthe eight GEMMs of a step (W as stored today: the first fc1 forward row): OpenBLAS %.1f GFLOP/s, the best library per GEMM %.1f GFLOP/s (%.2fx)\n",
              total_flop / total_openblas, total_flop / total_best, total_openblas / total_best);
  return bad ? 1 : 0;
}
