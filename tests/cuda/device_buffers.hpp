#pragma once
// The backends and device copies of host values for the CUDA tests.
#include "kernels/backend.hpp"
#include "kernels/tensor.hpp"
#include "reference.hpp" // gwtest::cpu()

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gwtest {

namespace gk = gradwire::kernels;

inline gk::backend& gpu() { return gk::backend_for(gk::device::cuda(0)); }

/// cuda:0's GEMMs and attention in bf16 while this lives, fp32 after.
struct bf16_on_gpu {
  bf16_on_gpu() { gpu().set_gemm_math(gk::gemm_math::bf16); }
  ~bf16_on_gpu() { gpu().set_gemm_math(gk::gemm_math::fp32); }
  bf16_on_gpu(const bf16_on_gpu&) = delete;
  bf16_on_gpu& operator=(const bf16_on_gpu&) = delete;
};

/// A copy of host floats on cuda:0; `host()` reads it back.
struct dbuf {
  gk::tensor t;
  explicit dbuf(const std::vector<float>& v)
    : t(gk::tensor::empty({static_cast<std::int64_t>(v.size())}, gk::device::cuda(0))) {
    gk::copy(gk::tensor::from(v, {static_cast<std::int64_t>(v.size())}), t);
  }
  explicit dbuf(std::size_t n) : dbuf(std::vector<float>(n, 0.f)) {}
  float* p() const { return t.data(); }
  std::vector<float> host() const { return t.to_vector(); }
};

/// A copy of host int32 values on cuda:0.
struct ibuf {
  gk::tensor t;
  explicit ibuf(const std::vector<std::int32_t>& v)
    : t(gk::tensor::empty({static_cast<std::int64_t>(v.size())}, gk::device::cuda(0), gk::dtype::i32)) {
    auto h = gk::tensor::empty({static_cast<std::int64_t>(v.size())}, gk::device::cpu(), gk::dtype::i32);
    std::copy(v.begin(), v.end(), h.data_i32());
    gk::copy(h, t);
  }
  std::int32_t* p() const { return t.data_i32(); }
};

} // namespace gwtest
