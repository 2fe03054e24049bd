// Causal attention's launches: in fp32 (attention_kernels.cuh), or on the
// Tensor Cores in bf16 when the GEMMs compute in bf16 (train.precision;
// attention_tc_kernels.cuh).
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/attention_tc_kernels.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.hpp"

#include <string>

namespace gradwire::kernels {
namespace {

using namespace cuda_kernels;

geometry geometry_of(int batch, int time, int heads, int d, const attention_dropout& drop) {
  check_dropout(drop.p, "attention");
  if (heads <= 0 || d % heads != 0)
    throw error("attention: " + std::to_string(heads) + " heads do not divide d_model " + std::to_string(d));
  const int hd = d / heads;
  if (hd > 128)
    throw error("attention on CUDA: a head of " + std::to_string(hd) +
                " values is over the 128 these kernels hold (model.heads: more heads)");
  return {batch,
          time,
          heads,
          d,
          hd,
          1.f / sqrtf(static_cast<float>(hd)),
          make_dropout_mask(drop.p, drop.key),
          static_cast<std::uint64_t>(drop.first_sample) * static_cast<std::uint64_t>(heads)};
}

/// Calls f with the head-size bound as a compile-time constant.
template <typename F>
void with_head_bound(int hd, F&& f) {
  if (hd <= 16)
    f(std::integral_constant<int, 16>{});
  else if (hd <= 32)
    f(std::integral_constant<int, 32>{});
  else if (hd <= 64)
    f(std::integral_constant<int, 64>{});
  else
    f(std::integral_constant<int, 128>{});
}

template <int HD>
dim3 grid_of(const geometry& g) {
  constexpr int R = tile_of<HD>::rows;
  return dim3(static_cast<unsigned>((g.time + R - 1) / R), static_cast<unsigned>(g.batch * g.heads));
}

template <int HD>
dim3 grid_tc(const geometry& g) {
  constexpr int R = tc_tile<HD>::rows;
  return dim3(static_cast<unsigned>((g.time + R - 1) / R), static_cast<unsigned>(g.batch * g.heads));
}

} // namespace

void cuda_backend::attention_forward(const float* qkv, float* y, float* lse, int batch, int time, int heads, int d,
                                     const attention_dropout& drop) {
  const geometry g = geometry_of(batch, time, heads, d, drop);
  const auto gw_timed = timer_.time(stream_, "attention fwd");
  const bool tc = math_.load() == gemm_math::bf16;
  with_head_bound(g.hd, [&](auto bound) {
    constexpr int HD = decltype(bound)::value;
    if (tc)
      attention_fwd_tc<HD><<<grid_tc<HD>(g), tc_tile<HD>::threads, 0, stream_>>>(qkv, y, lse, g);
    else
      attention_fwd<HD><<<grid_of<HD>(g), tile_of<HD>::rows, 0, stream_>>>(qkv, y, lse, g);
  });
  GW_CUDA_LAUNCHED();
}

void cuda_backend::attention_backward(const float* qkv, const float* y, const float* dy, const float* lse,
                                      float* dqkv, int batch, int time, int heads, int d,
                                      const attention_dropout& drop) {
  const geometry g = geometry_of(batch, time, heads, d, drop);
  const auto rows = static_cast<std::size_t>(batch) * time;
  std::lock_guard<std::mutex> lock(host_mu_);
  const auto gw_timed = timer_.time(stream_, "attention bwd");
  auto* di = static_cast<float*>(scratch(sizeof(float) * rows * heads));
  attention_di<<<cuda_detail::blocks_for(rows * heads), cuda_detail::threads_per_block, 0, stream_>>>(
    y, dy, di, static_cast<int>(rows), heads, d, time);
  GW_CUDA_LAUNCHED();
  const bool tc = math_.load() == gemm_math::bf16;
  with_head_bound(g.hd, [&](auto bound) {
    constexpr int HD = decltype(bound)::value;
    if (tc) {
      attention_bwd_dq_tc<HD><<<grid_tc<HD>(g), tc_tile<HD>::threads, 0, stream_>>>(qkv, dy, lse, di, dqkv, g);
      GW_CUDA_LAUNCHED();
      attention_bwd_dkv_tc<HD><<<grid_tc<HD>(g), tc_tile<HD>::threads, 0, stream_>>>(qkv, dy, lse, di, dqkv, g);
      return;
    }
    attention_bwd_dq<HD><<<grid_of<HD>(g), tile_of<HD>::rows, 0, stream_>>>(qkv, dy, lse, di, dqkv, g);
    GW_CUDA_LAUNCHED();
    attention_bwd_dkv<HD><<<grid_of<HD>(g), tile_of<HD>::rows, 0, stream_>>>(qkv, dy, lse, di, dqkv, g);
  });
  GW_CUDA_LAUNCHED();
  // di stays in the scratch buffer: the next use of it is queued on the
  // same stream, after these kernels, and growing it synchronises first.
}

} // namespace gradwire::kernels
