#pragma once
// Backend<cpu>: the CPU kernels (xsimd elementwise, Eigen/CBLAS/AVX-512 GEMM, reductions, index copies,
// LayerNorm rows, head-by-head attention) bound to the device-generic op layer.

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cpu/attention.hpp"
#include "ttmoe/backend/cpu/elementwise.hpp"
#include "ttmoe/backend/cpu/gemm.hpp"
#include "ttmoe/backend/cpu/indexing.hpp"
#include "ttmoe/backend/cpu/norm.hpp"
#include "ttmoe/backend/cpu/reduce.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

/// The CPU kernels.
template <>
struct Backend<cpu> : cpu_backend::ElementwiseKernels,
                      cpu_backend::GemmKernels,
                      cpu_backend::ReduceKernels,
                      cpu_backend::IndexKernels,
                      cpu_backend::NormKernels,
                      cpu_backend::AttentionKernels {};

}  // namespace ttmoe
