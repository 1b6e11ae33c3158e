#pragma once
// thrust_omp: the thrust_host device over thrust's OpenMP system, so the CUDA backend's kernels run
// in parallel on the host: a kernel whose threads race (two writing one element, a read of another
// thread's output) can give wrong results here, which thrust_host's sequential run never shows.
// Compile with -fopenmp; needs -I for CCCL like thrust_host.hpp.

#include <thrust/system/omp/execution_policy.h>

#include "ttmoe/backend/cuda/thrust_host.hpp"

namespace ttmoe {

namespace cuda_backend {
/// thrust's OpenMP host system.
struct OmpSystem {
  static constexpr const char* name = "thrust_omp";
  template <class A>
  static auto policy(A& a) {
    return thrust::omp::par(a);
  }
};
}  // namespace cuda_backend

/// The CUDA backend's thrust logic, run in parallel on the host by OpenMP.
using thrust_omp = basic_thrust_host<cuda_backend::OmpSystem>;
static_assert(Device<thrust_omp>);
static_assert(BackendFor<thrust_omp, float> && BackendFor<thrust_omp, double>,
              "ttmoe: Backend<thrust_omp> misses a required kernel");

}  // namespace ttmoe
