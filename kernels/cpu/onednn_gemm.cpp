#include "kernels/cpu/onednn_gemm.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace gradwire::kernels {
namespace {

using sgemm_fn = int (*)(char, char, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t,
                         const float*, std::int64_t, float, float*, std::int64_t);
using threads_fn = void (*)(int);

struct library {
  sgemm_fn sgemm = nullptr;
  threads_fn set_threads = nullptr; ///< the OpenMP runtime oneDNN loaded (per-thread team size)
  std::string status = "not looked for";
};

const library& lib() {
  static const library l = [] {
    library out;
    void* h = nullptr;
    for (const char* name : {"libdnnl.so.3", "libdnnl.so.2"})
      if ((h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        out.status = std::string("oneDNN (") + name + ")";
        break;
      }
    if (h == nullptr) {
      out.status = "oneDNN not found (libdnnl.so.2 or .3): every GEMM in OpenBLAS";
      return out;
    }
    out.sgemm = reinterpret_cast<sgemm_fn>(::dlsym(h, "dnnl_sgemm"));
    for (const char* omp : {"libgomp.so.1", "libomp.so.5", "libiomp5.so"})
      if (void* o = ::dlopen(omp, RTLD_NOW | RTLD_NOLOAD)) {
        out.set_threads = reinterpret_cast<threads_fn>(::dlsym(o, "omp_set_num_threads"));
        break;
      }
    if (out.sgemm == nullptr)
      out.status += ": no dnnl_sgemm in it, every GEMM in OpenBLAS";
    return out;
  }();
  return l;
}

gemm_library forced() {
  static const gemm_library f = [] {
    const char* v = std::getenv("GRADWIRE_GEMM");
    if (v != nullptr && std::strcmp(v, "onednn") == 0)
      return gemm_library::onednn;
    return gemm_library::openblas; // "openblas", "auto" and unset: see gemm_choice
  }();
  return f;
}

bool automatic() {
  static const bool a = [] {
    const char* v = std::getenv("GRADWIRE_GEMM");
    return v == nullptr || *v == 0 || std::strcmp(v, "auto") == 0;
  }();
  return a;
}

} // namespace

gemm_library gemm_choice(bool trans_a, bool trans_b, int m, int n, int k) {
  if (!automatic())
    return forced() == gemm_library::onednn && lib().sgemm ? gemm_library::onednn : gemm_library::openblas;
  if (!onednn_in_auto || lib().sgemm == nullptr)
    return gemm_library::openblas;
  // Measured (bench/gemm_libs.cpp, bench/RESULTS.md): oneDNN 7-22% faster wherever every
  // dimension is 64 or more, up to 2.4x slower where one is small (an output layer of 10).
  (void)trans_a;
  (void)trans_b;
  return m >= 64 && n >= 64 && k >= 64 ? gemm_library::onednn : gemm_library::openblas;
}

bool onednn_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  const auto& l = lib();
  if (l.sgemm == nullptr)
    return false;
  static thread_local bool one_thread = false;
  if (!one_thread && l.set_threads != nullptr) { // this thread's calls run on it alone
    l.set_threads(1);
    one_thread = true;
  }
  return l.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0;
}

std::string onednn_status() { return lib().status; }

} // namespace gradwire::kernels
