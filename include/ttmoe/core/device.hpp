#pragma once
// Devices. A device is a small type with static allocate / deallocate / copy / synchronize; tensors
// take it as a template parameter, so code written against tensors is device-generic and the choice
// is made by type (never by a macro defined before an include).

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ttmoe/core/config.hpp"

namespace ttmoe {

/// The host CPU. Memory is 64-byte aligned so SIMD loads of any width never split a cache line at
/// the start of a buffer.
struct cpu {
  static constexpr const char* name = "cpu";
  static constexpr std::size_t alignment = 64;
  /// True when pointers into this device's memory can be dereferenced by host code.
  static constexpr bool host_accessible = true;

  /// Allocates uninitialised storage for n objects of T (n may be 0).
  template <class T>
  static T* allocate(index_t n) {
    const std::size_t bytes = ((n * sizeof(T) + alignment - 1) / alignment) * alignment;
    void* p = std::aligned_alloc(alignment, bytes == 0 ? alignment : bytes);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  /// Frees storage from allocate().
  template <class T>
  static void deallocate(T* p, index_t /*n*/) noexcept {
    std::free(p);
  }
  /// Copies n objects within this device's memory.
  template <class T>
  static void copy(T* dst, const T* src, index_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
  }
  /// Copies n objects from host memory to this device.
  template <class T>
  static void copy_from_host(T* dst, const T* src, index_t n) {
    copy(dst, src, n);
  }
  /// Copies n objects from this device to host memory.
  template <class T>
  static void copy_to_host(T* dst, const T* src, index_t n) {
    copy(dst, src, n);
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
