#pragma once
// Devices. A device is a small type with static allocate / deallocate / copy / synchronize; tensors
// take it as a template parameter, so code written against tensors is device-generic and the choice
// is made by type (never by a macro defined before an include).

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ttmoe/core/caching_pool.hpp"
#include "ttmoe/core/config.hpp"
#include "ttmoe/core/host_pages.hpp"

namespace ttmoe {

/// For a device whose memory is host memory: a transfer from or to the host is the device's own
/// `copy`, so it is written once here and the device derives from `HostMemoryTransfers<itself>`.
template <class Self>
struct HostMemoryTransfers {
  /// Copies n objects from host memory to this device.
  template <class T>
  static void copy_from_host(T* dst, const T* src, index_t n) {
    Self::copy(dst, src, n);
  }
  /// Copies n objects from this device to host memory.
  template <class T>
  static void copy_to_host(T* dst, const T* src, index_t n) {
    Self::copy(dst, src, n);
  }
};

/// The host CPU. Memory is 64-byte aligned so SIMD loads of any width never split a cache line at
/// the start of a buffer. Buffers of `pooled_bytes` and more come from a caching pool of mapped pages
/// (see core/caching_pool.hpp): a loop that allocates the same activations every step reuses them
/// instead of faulting fresh zeroed pages in each time, which costs as much as the arithmetic on
/// them. Smaller buffers use the C allocator, which already recycles them cheaply.
struct cpu : HostMemoryTransfers<cpu> {
  static constexpr const char* name = "cpu";
  static constexpr std::size_t alignment = 64;
  /// Allocations of at least this many bytes go through the caching pool.
  static constexpr std::size_t pooled_bytes = std::size_t(256) << 10;
  /// Floor of the pool's cap on cached unused bytes: by default the cap follows the working set,
  /// this + (high-water in-use bytes - in-use bytes now) (core/caching_pool.hpp), so a training step
  /// of more than 2 GiB is reused whole by the next one; set_cache_limit fixes it instead.
  static constexpr std::size_t default_cache_limit = std::size_t(2) << 30;
  /// True when pointers into this device's memory can be dereferenced by host code.
  static constexpr bool host_accessible = true;

  /// The pool of large host buffers (created on first use, its cap following the working set with
  /// `default_cache_limit` as the floor).
  static memory::CachingPool<memory::HostPages>& memory_pool() {
    static memory::CachingPool<memory::HostPages>& p = [] () -> memory::CachingPool<memory::HostPages>& {
      auto& q = memory::pool<memory::HostPages>();
      q.follow_working_set(default_cache_limit);
      return q;
    }();
    return p;
  }
  /// Fixes the cap on the unused bytes kept for reuse (the override of the working-set cap); 0 turns
  /// caching off (every large buffer is unmapped when freed). Lowering the cap releases the cache first.
  static void set_cache_limit(std::size_t bytes) { memory_pool().set_cache_limit(bytes); }
  /// Back to the default cap: `floor` + (high-water in-use bytes - in-use bytes now).
  static void follow_working_set(std::size_t floor = default_cache_limit) { memory_pool().follow_working_set(floor); }
  /// Returns every cached, unused block to the operating system (and restarts the working set the
  /// cap follows from the bytes in use now).
  static void empty_cache() { memory_pool().release_cached(); }

  /// Allocates uninitialised storage for n objects of T (n may be 0).
  template <class T>
  static T* allocate(index_t n) {
    const std::size_t bytes = ((n * sizeof(T) + alignment - 1) / alignment) * alignment;
    if (bytes >= pooled_bytes) {
      auto* p = static_cast<char*>(memory_pool().allocate(bytes));
      const std::size_t used = (n * sizeof(T) + 7) / 8 * 8;  // ASan poisons at 8-byte granularity
      TTMOE_ASAN_UNPOISON(p, used);
      TTMOE_ASAN_POISON(p + used, memory::CachingPool<memory::HostPages>::size_class(bytes) - used);
      return reinterpret_cast<T*>(p);
    }
    void* p = std::aligned_alloc(alignment, bytes == 0 ? alignment : bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  /// Frees storage from allocate(n) (the same n).
  template <class T>
  static void deallocate(T* p, index_t n) noexcept {
    const std::size_t bytes = ((n * sizeof(T) + alignment - 1) / alignment) * alignment;
    if (bytes >= pooled_bytes) {
      TTMOE_ASAN_POISON(p, memory::CachingPool<memory::HostPages>::size_class(bytes));  // cached: off limits
      memory_pool().deallocate(p);
    }
    else
      std::free(p);
  }
  /// Copies n objects within this device's memory.
  template <class T>
  static void copy(T* dst, const T* src, index_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
  }
  /// Sets n objects to zero.
  template <class T>
  static void fill_zero(T* dst, index_t n) {
    if (n) std::memset(static_cast<void*>(dst), 0, n * sizeof(T));
  }
  /// Waits for queued work; the CPU backend runs synchronously.
  static void synchronize() {}
};

/// What a device type must provide.
template <class D>
concept Device = requires(float* p, const float* q, index_t n) {
  { D::name };
  { D::template allocate<float>(n) };
  D::template deallocate<float>(p, n);
  D::template copy<float>(p, q, n);
  D::template copy_from_host<float>(p, q, n);
  D::template copy_to_host<float>(p, q, n);
  D::template fill_zero<float>(p, n);
  D::synchronize();
};
static_assert(Device<cpu>);

}  // namespace ttmoe
