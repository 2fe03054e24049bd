// Linked into every test executable of the TSan build, ahead of the
// libraries. The linker keeps the first copy it meets of an inline
// function, and Debian's Catch2 (a static library built without
// sanitizers) carries its own copies of the standard library's. Its copy of
// shared_ptr's reference-count release, with plain `lock xadd` instead of
// TSan's atomics, used to serve every shared_ptr in the TSan build: TSan
// then saw no ordering between a reference dropped on one thread and the
// last one dropped on another, and reported the free of every tensor
// passed between actors as a race. Taking the addresses here makes this
// file, built with the sanitizers, emit the copies that win.
// scripts/sanitize.sh checks the linked binaries.
#include <memory>

using gw_counted_base = std::_Sp_counted_base<__gnu_cxx::_S_atomic>;

__attribute__((used)) void (gw_counted_base::*gw_keep_release)() noexcept = &gw_counted_base::_M_release;
__attribute__((used)) void (gw_counted_base::*gw_keep_weak_release)() noexcept = &gw_counted_base::_M_weak_release;
__attribute__((used)) void (gw_counted_base::*gw_keep_add_ref)() = &gw_counted_base::_M_add_ref_copy;
