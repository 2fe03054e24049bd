#pragma once
/// @file huge_pages.hpp
/// An allocator for large host arrays that are read at random (a dataset
/// that mini-batches gather rows from): allocations of 2 MiB or more are
/// 2 MiB-aligned and advised as transparent huge pages before first touch,
/// so a gather of 64 random images costs ~64 TLB misses fewer (Debian's
/// kernels default THP to "madvise"). Falls back silently to ordinary pages
/// where the kernel refuses; smaller allocations use operator new.

#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace gradwire::kernels {

template <typename T>
struct huge_page_allocator {
  using value_type = T;
  static constexpr std::size_t huge = std::size_t{2} << 20;

  huge_page_allocator() = default;
  template <typename U>
  huge_page_allocator(const huge_page_allocator<U>&) noexcept {}

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T))
      throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
    if (bytes < huge)
      return static_cast<T*>(::operator new(bytes));
    const std::size_t rounded = (bytes + huge - 1) / huge * huge;
    void* p = std::aligned_alloc(huge, rounded);
    if (p == nullptr)
      throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE); // advice only: ignored where THP is off
    return static_cast<T*>(p);
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < huge)
      ::operator delete(p);
    else
      std::free(p);
  }

  template <typename U>
  bool operator==(const huge_page_allocator<U>&) const noexcept {
    return true;
  }
  template <typename U>
  bool operator!=(const huge_page_allocator<U>&) const noexcept {
    return false;
  }
};

} // namespace gradwire::kernels
