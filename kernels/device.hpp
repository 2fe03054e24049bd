#pragma once
/// @file device.hpp
/// Where a tensor lives and where kernels run: the host CPU or a CUDA device.

#include <string>

namespace gradwire::kernels {

enum class device_kind { cpu, cuda };

struct device {
  device_kind kind = device_kind::cpu;
  int index = 0;

  static device cpu() { return {}; }
  static device cuda(int i) { return {device_kind::cuda, i}; }
  bool is_cpu() const { return kind == device_kind::cpu; }
  bool operator==(const device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const device& o) const { return !(*this == o); }
};

/// "cpu" or "cuda:N" (also "cuda" for cuda:0).
std::string to_string(const device& d);

/// Parses "cpu", "cuda" or "cuda:N"; throws gradwire::error naming the text otherwise.
device parse_device(const std::string& text);

} // namespace gradwire::kernels
