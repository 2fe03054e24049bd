#pragma once
/// @file tensor.hpp
/// Reference-counted storage and the tensors that view it. A tensor is a
/// (storage, offset, shape, dtype) view: slicing a parameter buffer into
/// per-layer views, or handing a gradient to another actor, shares the
/// storage and copies nothing.

#include "kernels/device.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace gradwire::kernels {

enum class dtype { f32, i32 };

inline std::size_t dtype_size(dtype) { return 4; }

/// Owns one allocation on one device. Freed by the deleter of the backend
/// that allocated it when the last tensor referring to it goes away.
class storage {
public:
  using deleter = std::function<void(void*)>;
  storage(void* ptr, std::size_t bytes, device dev, deleter del)
    : ptr_(ptr), bytes_(bytes), dev_(dev), del_(std::move(del)) {}
  ~storage() {
    if (ptr_ != nullptr && del_)
      del_(ptr_);
  }
  storage(const storage&) = delete;
  storage& operator=(const storage&) = delete;

  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  const device& dev() const { return dev_; }

private:
  void* ptr_;
  std::size_t bytes_;
  device dev_;
  deleter del_;
};

using shape_t = std::vector<std::int64_t>;

/// Number of elements of a shape (1 for a scalar shape {}).
std::int64_t numel(const shape_t& s);
/// "[64, 1, 28, 28]"
std::string to_string(const shape_t& s);

class tensor {
public:
  tensor() = default;
  tensor(std::shared_ptr<storage> st, std::size_t offset_elems, shape_t shape, dtype dt);

  /// Uninitialised tensor on `dev` (64-byte aligned on the CPU).
  static tensor empty(const shape_t& shape, device dev = device::cpu(), dtype dt = dtype::f32);
  /// Tensor filled with zeros.
  static tensor zeros(const shape_t& shape, device dev = device::cpu(), dtype dt = dtype::f32);
  /// Host tensor holding a copy of `values`.
  static tensor from(const std::vector<float>& values, const shape_t& shape);

  bool defined() const { return st_ != nullptr; }
  const shape_t& shape() const { return shape_; }
  std::int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t rank() const { return shape_.size(); }
  std::int64_t numel() const { return numel_; }
  dtype type() const { return dtype_; }
  device dev() const;
  std::size_t bytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  float* data() const;
  std::int32_t* data_i32() const;
  void* raw() const;
  const std::shared_ptr<storage>& shared_storage() const { return st_; }
  std::size_t offset() const { return offset_; }

  /// A view of `shape` starting `offset` elements into this tensor.
  tensor view(std::size_t offset, const shape_t& shape) const;
  /// The same elements with another shape (element counts must agree).
  tensor reshape(const shape_t& shape) const;
  /// Rows [begin, begin + count) of the leading dimension.
  tensor rows(std::int64_t begin, std::int64_t count) const;

  /// Host copy of the elements (copies from the device when needed).
  std::vector<float> to_vector() const;

private:
  std::shared_ptr<storage> st_;
  std::size_t offset_ = 0;
  shape_t shape_;
  std::int64_t numel_ = 0;
  dtype dtype_ = dtype::f32;
};

/// Where host tensors of at least `min_bytes` come from instead of the
/// heap (transport::shm_arena: memory that processes on one node share).
/// `alloc(bytes, color)` returns storage whose data starts `color` bytes
/// into its block, or null to fall back to the heap. Empty: the heap.
using host_allocator = std::function<std::shared_ptr<storage>(std::size_t bytes, std::size_t color)>;
void set_host_allocator(host_allocator alloc, std::size_t min_bytes);

/// Copies `src` into `dst` (same element count), across devices if needed.
void copy(const tensor& src, const tensor& dst);

} // namespace gradwire::kernels
