#include "transport/shm_arena.hpp"

#include "kernels/error.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>

namespace gradwire::transport {

namespace {

constexpr int min_class = 12; // 4 KiB blocks at least (and page alignment)

int class_of(std::size_t bytes) {
  int c = min_class;
  while ((std::size_t{1} << c) < bytes)
    ++c;
  return c;
}

/// Names of this process's arenas still in /dev/shm, for unlink_arenas().
std::mutex linked_mu;
std::set<std::string>& linked_names() {
  static auto* names = new std::set<std::string>; // never destroyed: usable until _Exit
  return *names;
}

} // namespace

std::string arena_name(int rank) {
  std::random_device rd;
  return "/gradwire-" + std::to_string(::getpid()) + "-" + std::to_string(rank) + "-" + std::to_string(rd() & 0xffffff);
}

bool is_arena_name(const std::string& name) {
  return name.size() > 10 && name.size() < 64 && name.rfind("/gradwire-", 0) == 0 &&
         name.find_first_not_of("0123456789-", 10) == std::string::npos;
}

void unlink_arenas() {
  std::lock_guard<std::mutex> lk(linked_mu);
  for (const auto& n : linked_names())
    ::shm_unlink(n.c_str());
  linked_names().clear();
}

shm_arena::shm_arena(std::string name, std::size_t bytes, bool reserve) : name_(std::move(name)), bytes_(bytes) {
  const int fd = ::shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  check(fd >= 0, "shared memory " + name_ + ": " + std::strerror(errno));
  int failed = 0;
  if (::ftruncate(fd, static_cast<off_t>(bytes_)) != 0)
    failed = errno;
  else if (reserve)
    failed = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_));
  if (failed != 0) {
    const int e = failed;
    ::close(fd);
    ::shm_unlink(name_.c_str());
    throw error("shared memory " + name_ + ": sizing it to " + std::to_string(bytes_) + " bytes: " + std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::shm_unlink(name_.c_str());
    throw error("shared memory " + name_ + ": mapping it: " + std::strerror(e));
  }
  base_ = static_cast<char*>(p);
  std::lock_guard<std::mutex> lk(linked_mu);
  linked_names().insert(name_);
}

shm_arena::~shm_arena() {
  unlink();
  if (base_ != nullptr)
    ::munmap(base_, bytes_);
}

void shm_arena::unlink() {
  std::lock_guard<std::mutex> lk(mu_);
  if (linked_) {
    ::shm_unlink(name_.c_str());
    std::lock_guard<std::mutex> lk2(linked_mu);
    linked_names().erase(name_);
  }
  linked_ = false;
}

std::shared_ptr<kernels::storage> shm_arena::allocate(std::size_t bytes, std::size_t color) {
  if (bytes == 0)
    return nullptr;
  const int c = class_of(bytes + color);
  const std::size_t block = std::size_t{1} << c;
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto& fl = free_[c];
    if (!fl.empty()) {
      p = fl.back();
      fl.pop_back();
    } else if (top_ + block <= bytes_) {
      p = base_ + top_;
      top_ += block;
    } else {
      return nullptr;
    }
  }
  // Each tensor keeps the arena (and its mapping) alive.
  auto self = shared_from_this();
  return std::make_shared<kernels::storage>(p + color, bytes, kernels::device::cpu(), [self, c, p](void*) {
    self->release(p, c);
  });
}

void shm_arena::release(void* p, int cls) {
  std::lock_guard<std::mutex> lk(mu_);
  free_[cls].push_back(static_cast<char*>(p));
}

std::int64_t shm_arena::offset_of(const void* p, std::size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  if (c < base_ || c + bytes > base_ + bytes_)
    return -1;
  return c - base_;
}


shm_mapping::shm_mapping(const std::string& name, std::size_t bytes) : bytes_(bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  check(fd >= 0, "mapping a peer's shared memory " + name + ": " + std::strerror(errno));
  // The size comes from the peer's announcement: it must not pass the
  // file's real size, or a read past the end would be a SIGBUS here.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < bytes_ || bytes_ == 0) {
    const auto real = static_cast<long long>(st.st_size);
    ::close(fd);
    throw error("mapping a peer's shared memory " + name + ": announced as " + std::to_string(bytes_) +
                " bytes, the file holds " + std::to_string(real));
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_SHARED | MAP_NORESERVE, fd, 0);
  ::close(fd);
  check(p != MAP_FAILED, "mapping a peer's shared memory " + name + ": " + std::strerror(errno));
  base_ = static_cast<const char*>(p);
}

shm_mapping::~shm_mapping() {
  if (base_ != nullptr)
    ::munmap(const_cast<char*>(base_), bytes_);
}

} // namespace gradwire::transport
