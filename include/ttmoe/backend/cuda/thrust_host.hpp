#pragma once
// thrust_host: a device whose memory lives on the host and whose Backend is ThrustBackend run under
// thrust's CPP system (explicit `thrust::cpp::par`, so it does not depend on THRUST_DEVICE_SYSTEM).
// It exercises every thrust code path of the CUDA backend with an ordinary host compiler; GEMM
// uses ThrustBackend's generic per-element loop (cuBLAS exists only in the real CUDA build).
//
// Include after (or instead of) <ttmoe/ttmoe.hpp>; needs -I for CCCL (<cuda>/include/cccl).

#include <cstdlib>

#include <thrust/system/cpp/execution_policy.h>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cuda/pool.hpp"
#include "ttmoe/backend/cuda/thrust_backend.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

namespace cuda_backend {
/// Raw host allocation for the thrust_host pool.
struct HostRaw {
  static void* raw_alloc(std::size_t bytes) { return std::malloc(bytes); }
  static void raw_free(void* p, std::size_t) { std::free(p); }
};
}  // namespace cuda_backend

/// Host memory driven through thrust's CPP system: the CUDA backend's logic without a GPU.
struct thrust_host {
  static constexpr const char* name = "thrust_host";
  static constexpr bool host_accessible = true;
  using temp_allocator = cuda_backend::PoolTempAllocator<cuda_backend::HostRaw>;

  static auto& memory_pool() { return cuda_backend::pool<cuda_backend::HostRaw>(); }
  static auto policy(temp_allocator& a) { return thrust::cpp::par(a); }

  template <class T>
  static T* allocate(index_t n) {
    return static_cast<T*>(memory_pool().allocate(n * sizeof(T)));
  }
  template <class T>
  static void deallocate(T* p, index_t) noexcept {
    memory_pool().deallocate(p);
  }
  template <class T>
  static void copy(T* dst, const T* src, index_t n) {
    temp_allocator a;
    if (n) thrust::copy(policy(a), src, src + n, dst);
  }
  template <class T>
  static void copy_from_host(T* dst, const T* src, index_t n) {
    copy(dst, src, n);
  }
  template <class T>
  static void copy_to_host(T* dst, const T* src, index_t n) {
    copy(dst, src, n);
  }
  template <class T>
  static void fill_zero(T* dst, index_t n) {
    temp_allocator a;
    if (n) thrust::fill_n(policy(a), dst, n, T(0));
  }
  static void synchronize() {}
};
static_assert(Device<thrust_host>);

/// The thrust kernels on the host system.
template <>
struct Backend<thrust_host> : cuda_backend::ThrustBackend<thrust_host> {};

}  // namespace ttmoe
