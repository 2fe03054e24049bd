#pragma once
/// @file fused_optim.hpp
/// Host-only fused kernels for a sharded optimizer in a ring allreduce: the
/// peer that adds the last contribution to a chunk applies SGD to it in the
/// same pass, instead of writing the sum, reading it back for the update
/// and copying the updated weights out (10 streams over the chunk -> 6).

#include <cstddef>

namespace gradwire::kernels::cpu {

/// backend::sgd_update (same arithmetic, element for element) with the
/// gradient (g0 + g1) * s, or g0 * s when g1 is null; the updated weights
/// are also written to w_out when it is not null (w_out may be g0).
/// From stream_min_floats on (and w_out null) the weights are written with
/// non-temporal stores: they bypass this core's cache, since the workers
/// that read them next are others (see optim.cpp).
void sgd_update_sum(std::size_t n, float lr, float momentum, float weight_decay, bool nesterov,
                    float* w, const float* g0, const float* g1, float s, float* v, float* w_out);

/// Chunks shorter than this (16 KiB) are updated through the cache.
inline constexpr std::size_t stream_min_floats = 4096;

} // namespace gradwire::kernels::cpu
