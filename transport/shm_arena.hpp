#pragma once
/// @file shm_arena.hpp
/// Tensors that processes on one node read from each other's memory
/// (ucx_options::shm_refs). Each process allocates its large host tensors
/// from an arena of POSIX shared memory that its node-local peers map
/// read-only; a frame whose data lies in an arena then carries only its
/// place there (owner rank, offset, length) and the receiver reads the
/// floats where they lie (the ring's add reads the neighbour's chunk
/// straight from its buffer: one pass over memory instead of a copy and
/// then an add). The sender keeps its tensor until the receiver's last
/// reference to it is gone and a release frame says so: the same lifetime
/// a copied frame gives, so nothing above the link changes (MPI's
/// single-copy XPMEM path and NCCL's P2P/SHM transport do the same).
///
/// The arena's file is unlinked once every peer has mapped it (or when
/// the arena goes), so a crashed job leaves nothing in /dev/shm after
/// connecting.

#include "kernels/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace gradwire::transport {

class shm_arena : public std::enable_shared_from_this<shm_arena> {
public:
  /// Creates `bytes` of shared memory named `name` ("/gradwire-..."),
  /// sparse: only pages written take memory. With `reserve`, every page
  /// is allocated now: a full /dev/shm is then an error here, never a
  /// SIGBUS at the first write.
  shm_arena(std::string name, std::size_t bytes, bool reserve = false);
  ~shm_arena();
  shm_arena(const shm_arena&) = delete;
  shm_arena& operator=(const shm_arena&) = delete;

  /// A tensor of `bytes` inside the arena (64-byte aligned, from size
  /// classes of powers of two; freed blocks are reused), or null storage
  /// when the arena is full.
  /// The data starts `color` bytes into the block (kernels::set_host_allocator).
  std::shared_ptr<kernels::storage> allocate(std::size_t bytes, std::size_t color = 0);
  /// The offset of [p, p + bytes) in the arena, or -1 when it lies outside.
  std::int64_t offset_of(const void* p, std::size_t bytes) const;
  const std::string& name() const { return name_; }
  const char* base() const { return base_; }
  char* base() { return base_; }
  std::size_t size() const { return bytes_; }
  /// Removes the name (peers that mapped it keep their mapping).
  void unlink();

private:
  void release(void* p, int cls);
  std::string name_;
  std::size_t bytes_;
  char* base_ = nullptr;
  bool linked_ = true;
  mutable std::mutex mu_;
  std::size_t top_ = 0;
  std::map<int, std::vector<char*>> free_; ///< by size class (log2 of the block size)
};

/// A fresh name for an arena of this process and `rank`:
/// "/gradwire-<pid>-<rank>-<random>" (tests find a process's arenas by pid).
std::string arena_name(int rank);
/// Whether `name` is one arena_name makes: a peer may not have this
/// process open whatever else lies in /dev/shm.
bool is_arena_name(const std::string& name);

/// Removes from /dev/shm every arena of this process still named there:
/// for a process that is about to leave without running destructors
/// (std::_Exit), so that nothing it made is left behind.
void unlink_arenas();

/// A peer's arena, mapped read-only.
class shm_mapping {
public:
  shm_mapping(const std::string& name, std::size_t bytes);
  ~shm_mapping();
  shm_mapping(const shm_mapping&) = delete;
  shm_mapping& operator=(const shm_mapping&) = delete;
  const char* base() const { return base_; }
  std::size_t size() const { return bytes_; }

private:
  const char* base_ = nullptr;
  std::size_t bytes_;
};

} // namespace gradwire::transport
