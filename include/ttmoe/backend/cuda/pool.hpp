#pragma once
// The CUDA devices' memory: ttmoe's caching pool (core/caching_pool.hpp) under their raw allocators,
// and a thrust temporary-storage allocator drawing from it.
// Host-only code (no Eigen, no fmt): fine in a CUDA translation unit.

#include <cstddef>

#include "ttmoe/core/caching_pool.hpp"
#include "ttmoe/core/config.hpp"

namespace ttmoe::cuda_backend {

using memory::CachingPool;
using memory::pool;
using memory::PoolStats;

/// A thrust temporary-storage allocator drawing from the pool (so reduce_by_key / sort scratch is
/// reused across calls as well).
template <class Raw>
struct PoolTempAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t n) { return static_cast<char*>(pool<Raw>().allocate(static_cast<std::size_t>(n))); }
  void deallocate(char* p, std::size_t) { pool<Raw>().deallocate(p); }
};

/// The memory half of a device whose buffers come from the caching pool over `Raw` (cuda, and the
/// thrust host devices): one pool per raw allocator, thrust scratch drawn from the same pool.
template <class Raw>
struct PooledMemory {
  using temp_allocator = PoolTempAllocator<Raw>;

  static auto& memory_pool() { return pool<Raw>(); }
  /// Gives the pool's cached, unused blocks back to the allocator (as torch.cuda.empty_cache).
  static void empty_cache() { memory_pool().release_cached(); }
  /// Uninitialised storage for n objects of T (n may be 0).
  template <class T>
  static T* allocate(index_t n) {
    return static_cast<T*>(memory_pool().allocate(n * sizeof(T)));
  }
  /// Returns storage from allocate() to the pool.
  template <class T>
  static void deallocate(T* p, index_t) noexcept {
    memory_pool().deallocate(p);
  }
};

}  // namespace ttmoe::cuda_backend
