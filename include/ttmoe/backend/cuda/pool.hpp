#pragma once
// The CUDA devices' memory: ttmoe's caching pool (core/caching_pool.hpp) under their raw allocators,
// and a thrust temporary-storage allocator drawing from it.
// Host-only code (no Eigen, no fmt): fine in a CUDA translation unit.

#include <cstddef>

#include "ttmoe/core/caching_pool.hpp"

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

}  // namespace ttmoe::cuda_backend
