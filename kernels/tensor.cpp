#include "kernels/tensor.hpp"

#include "kernels/backend.hpp"
#include "kernels/error.hpp"

#include <cstring>

namespace gradwire::kernels {

std::int64_t numel(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s)
    n *= d;
  return n;
}

std::string to_string(const shape_t& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

tensor::tensor(std::shared_ptr<storage> st, std::size_t offset_elems, shape_t shape, dtype dt)
  : st_(std::move(st)), offset_(offset_elems), shape_(std::move(shape)), dtype_(dt) {
  numel_ = kernels::numel(shape_);
  GW_CHECK(st_ == nullptr || (offset_ + static_cast<std::size_t>(numel_)) * dtype_size(dt) <= st_->bytes(),
           "tensor view " + to_string(shape_) + " at offset " + std::to_string(offset_) +
             " exceeds its storage");
}

tensor tensor::empty(const shape_t& shape, device dev, dtype dt) {
  auto n = kernels::numel(shape);
  GW_CHECK(n >= 0, "negative tensor shape " + to_string(shape));
  auto st = backend_for(dev).allocate(static_cast<std::size_t>(n) * dtype_size(dt));
  return tensor(std::move(st), 0, shape, dt);
}

tensor tensor::zeros(const shape_t& shape, device dev, dtype dt) {
  auto t = empty(shape, dev, dt);
  if (t.bytes() == 0)
    return t; // (raw() is null: memset of null is undefined even for 0 bytes)
  if (dev.is_cpu())
    std::memset(t.raw(), 0, t.bytes());
  else
    backend_for(dev).fill(static_cast<float*>(t.raw()), static_cast<std::size_t>(t.numel()), 0.f);
  return t;
}

tensor tensor::from(const std::vector<float>& values, const shape_t& shape) {
  GW_CHECK(static_cast<std::int64_t>(values.size()) == kernels::numel(shape),
           "tensor::from: " + std::to_string(values.size()) + " values for shape " + to_string(shape));
  auto t = empty(shape);
  if (t.bytes() > 0)
    std::memcpy(t.raw(), values.data(), t.bytes());
  return t;
}

device tensor::dev() const { return st_ ? st_->dev() : device::cpu(); }

void* tensor::raw() const {
  return st_ ? static_cast<char*>(st_->data()) + offset_ * dtype_size(dtype_) : nullptr;
}

float* tensor::data() const {
  check(dtype_ == dtype::f32, "tensor::data(): tensor is not f32");
  return static_cast<float*>(raw());
}

std::int32_t* tensor::data_i32() const {
  check(dtype_ == dtype::i32, "tensor::data_i32(): tensor is not i32");
  return static_cast<std::int32_t*>(raw());
}

tensor tensor::view(std::size_t offset, const shape_t& shape) const {
  GW_CHECK(offset + static_cast<std::size_t>(kernels::numel(shape)) <= static_cast<std::size_t>(numel_),
           "view " + to_string(shape) + " at " + std::to_string(offset) + " outside tensor " +
             to_string(shape_));
  return tensor(st_, offset_ + offset, shape, dtype_);
}

tensor tensor::reshape(const shape_t& shape) const {
  GW_CHECK(kernels::numel(shape) == numel_,
           "cannot reshape " + to_string(shape_) + " to " + to_string(shape));
  return tensor(st_, offset_, shape, dtype_);
}

tensor tensor::rows(std::int64_t begin, std::int64_t count) const {
  GW_CHECK(!shape_.empty() && begin >= 0 && begin + count <= shape_[0],
           "rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
             ") outside tensor " + to_string(shape_));
  auto s = shape_;
  s[0] = count;
  auto row = numel_ / (shape_[0] == 0 ? 1 : shape_[0]);
  return tensor(st_, offset_ + static_cast<std::size_t>(begin * row), s, dtype_);
}

std::vector<float> tensor::to_vector() const {
  std::vector<float> out(static_cast<std::size_t>(numel_));
  if (numel_ > 0) {
    auto& be = backend_for(dev().is_cpu() ? device::cpu() : dev());
    be.copy_bytes(out.data(), device::cpu(), raw(), dev(), bytes());
  }
  return out;
}

void copy(const tensor& src, const tensor& dst) {
  check(src.numel() == dst.numel() && src.type() == dst.type(),
        "copy: " + to_string(src.shape()) + " into " + to_string(dst.shape()));
  if (src.numel() == 0)
    return;
  const device& d = src.dev().is_cpu() ? dst.dev() : src.dev();
  backend_for(d).copy_bytes(dst.raw(), dst.dev(), src.raw(), src.dev(), src.bytes());
}

} // namespace gradwire::kernels
