#pragma once
// The scalar the finite-difference gradient checks differentiate:
// L = sum(y * r) over a network's output y for a fixed random r, so that
// dL/dy = r is what backward is given.
#include "models/network.hpp"

#include <vector>

namespace gwtest {

inline double objective(gradwire::models::network& net, const gradwire::kernels::tensor& x,
                        const std::vector<float>& r) {
  const auto& y = net.forward(x, true);
  double s = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i)
    s += static_cast<double>(y.data()[i]) * r[static_cast<std::size_t>(i)];
  return s;
}

} // namespace gwtest
