#pragma once
// The `cuda` device: GPU memory from a caching pool over cudaMalloc, all work (copies, thrust
// kernels, cuBLAS) queued on one ttmoe stream, so pool reuse is stream-ordered and safe.
// Needs the CUDA runtime (nvcc, or a host compiler with the CUDA include/lib paths for the memory
// side); the Backend itself needs nvcc (device code). No Eigen / fmt.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include <thrust/system/cuda/execution_policy.h>

#include "ttmoe/backend/cuda/pool.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

namespace cuda_backend {
/// Throws std::runtime_error on a CUDA error.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("ttmoe cuda: ") + what + ": " + cudaGetErrorString(e));
}
/// The stream every ttmoe CUDA operation is queued on (created on first use, never destroyed).
inline cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t st{};
    check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    return st;
  }();
  return s;
}
/// Raw device allocation for the pool: nullptr when the GPU is out of memory (so the pool can free
/// its cache and retry), and a std::runtime_error naming the CUDA error for anything else (no device,
/// a driver too old for the runtime), which a retry cannot fix and std::bad_alloc would hide.
struct DeviceRaw {
  static void* raw_alloc(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess) return p;
    (void)cudaGetLastError();  // clear the error state so later calls are not blamed for it
    if (e == cudaErrorMemoryAllocation) return nullptr;
    throw std::runtime_error("ttmoe cuda: cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  static void raw_free(void* p, std::size_t) { (void)cudaFree(p); }
};
}  // namespace cuda_backend

/// An NVIDIA GPU (the current CUDA device).
struct cuda : cuda_backend::PooledMemory<cuda_backend::DeviceRaw> {
  static constexpr const char* name = "cuda";
  static constexpr bool host_accessible = false;

  /// thrust policy: ttmoe's stream, scratch from the pool, no synchronisation after each algorithm.
  static auto policy(temp_allocator& a) { return thrust::cuda::par_nosync(a).on(cuda_backend::stream()); }
  static cudaStream_t stream() { return cuda_backend::stream(); }

  /// Queues a copy within GPU memory.
  template <class T>
  static void copy(T* dst, const T* src, index_t n) {
    if (n)
      cuda_backend::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream()),
                          "cudaMemcpyAsync D2D");
  }
  /// Synchronous with respect to the host buffer (it may be freed right after).
  template <class T>
  static void copy_from_host(T* dst, const T* src, index_t n) {
    blocking_copy(dst, src, n, cudaMemcpyHostToDevice, "cudaMemcpyAsync H2D");
  }
  /// Waits for queued work, then copies.
  template <class T>
  static void copy_to_host(T* dst, const T* src, index_t n) {
    blocking_copy(dst, src, n, cudaMemcpyDeviceToHost, "cudaMemcpyAsync D2H");
  }
  template <class T>
  static void fill_zero(T* dst, index_t n) {
    if (n) cuda_backend::check(cudaMemsetAsync(dst, 0, n * sizeof(T), stream()), "cudaMemsetAsync");
  }
  static void synchronize() { cuda_backend::check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize"); }

 private:
  // A host transfer queued in stream order, then waited for: the host buffer is free on return.
  template <class T>
  static void blocking_copy(T* dst, const T* src, index_t n, cudaMemcpyKind kind, const char* what) {
    if (!n) return;
    cuda_backend::check(cudaMemcpyAsync(dst, src, n * sizeof(T), kind, stream()), what);
    synchronize();
  }
};
static_assert(Device<cuda>);

}  // namespace ttmoe
