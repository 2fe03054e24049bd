#include "kernels/device.hpp"

#include "kernels/error.hpp"

#include <cctype>

namespace gradwire::kernels {

std::string to_string(const device& d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

device parse_device(const std::string& text) {
  if (text == "cpu")
    return device::cpu();
  if (text == "cuda")
    return device::cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    auto digits = text.substr(5);
    bool ok = digits.size() < 4;
    for (char c : digits)
      ok = ok && std::isdigit(static_cast<unsigned char>(c));
    if (ok)
      return device::cuda(std::stoi(digits));
  }
  throw error("unknown device '" + text + "': expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

} // namespace gradwire::kernels
