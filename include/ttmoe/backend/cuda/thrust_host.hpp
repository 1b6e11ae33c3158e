#pragma once
// thrust_host: a device whose memory lives on the host and whose Backend is ThrustBackend run under
// thrust's CPP system (explicit `thrust::cpp::par`, so it does not depend on THRUST_DEVICE_SYSTEM).
// It exercises every thrust code path of the CUDA backend with an ordinary host compiler; GEMM
// uses ThrustBackend's generic per-element loop (cuBLAS exists only in the real CUDA build).
// thrust_omp.hpp adds the same device over thrust's OpenMP system, where the kernels run in parallel.
//
// Needs -I for CCCL (<cuda>/include/cccl).

#include <cstdlib>

#include <thrust/system/cpp/execution_policy.h>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cuda/pool.hpp"
#include "ttmoe/backend/cuda/thrust_backend.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

namespace cuda_backend {
/// Raw host allocation for the host-system devices' pool.
struct HostRaw {
  static void* raw_alloc(std::size_t bytes) { return std::malloc(bytes); }
  static void raw_free(void* p, std::size_t) { std::free(p); }
};

/// thrust's sequential host system.
struct CppSystem {
  static constexpr const char* name = "thrust_host";
  template <class A>
  static auto policy(A& a) {
    return thrust::cpp::par(a);
  }
};
}  // namespace cuda_backend

/// Host memory driven through one of thrust's host systems (`System::policy`): the CUDA backend's
/// logic without a GPU.
template <class System>
struct basic_thrust_host : cuda_backend::PooledMemory<cuda_backend::HostRaw>,
                           HostMemoryTransfers<basic_thrust_host<System>> {
  static constexpr const char* name = System::name;
  // Its memory is host memory, but it declares itself not host-accessible like `cuda`, so code that
  // would only work on the host fails to compile in the thrust tests too.
  static constexpr bool host_accessible = false;

  /// thrust policy of the host system, scratch from the pool.
  static auto policy(temp_allocator& a) { return System::policy(a); }

  /// Copies n objects within this device's memory through the host system.
  template <class T>
  static void copy(T* dst, const T* src, index_t n) {
    temp_allocator a;
    if (n) thrust::copy(policy(a), src, src + n, dst);
  }
  /// Sets n objects to zero.
  template <class T>
  static void fill_zero(T* dst, index_t n) {
    temp_allocator a;
    if (n) thrust::fill_n(policy(a), dst, n, T(0));
  }
  static void synchronize() {}
};

/// The thrust kernels on a host system.
template <class System>
struct Backend<basic_thrust_host<System>> : cuda_backend::ThrustBackend<basic_thrust_host<System>> {};

/// The CUDA backend's thrust logic, run sequentially on the host.
using thrust_host = basic_thrust_host<cuda_backend::CppSystem>;
static_assert(Device<thrust_host>);
static_assert(BackendFor<thrust_host, float> && BackendFor<thrust_host, double>,
              "ttmoe: Backend<thrust_host> misses a required kernel");

}  // namespace ttmoe
