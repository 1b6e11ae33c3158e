#pragma once
// Backend<cpu>: the CPU kernels (xsimd elementwise, Eigen/CBLAS/AVX-512 GEMM, reductions, index copies,
// LayerNorm rows, head-by-head attention) bound to the device-generic op layer.

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cpu/attention.hpp"
#include "ttmoe/backend/cpu/elementwise.hpp"
#include "ttmoe/backend/cpu/embedding_bf16.hpp"
#include "ttmoe/backend/cpu/gemm.hpp"
#include "ttmoe/backend/cpu/indexing.hpp"
#include "ttmoe/backend/cpu/linear_bf16.hpp"
#include "ttmoe/backend/cpu/norm.hpp"
#include "ttmoe/backend/cpu/normalized_rows.hpp"
#include "ttmoe/backend/cpu/reduce.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

/// The CPU kernels.
template <>
struct Backend<cpu> : cpu_backend::ElementwiseKernels,
                      cpu_backend::GemmKernels,
                      cpu_backend::ReduceKernels,
                      cpu_backend::IndexKernels,
                      cpu_backend::NormKernels,
                      cpu_backend::NormalizedRowsKernels,
                      cpu_backend::AttentionKernels,
                      cpu_backend::TaskKernels {};

static_assert(BackendFor<cpu, float> && BackendFor<cpu, double>, "ttmoe: Backend<cpu> misses a required kernel");
// The CPU's fast paths: losing one would silently fall back to the composed ops.
static_assert(FusedAttentionBackend<cpu, float> && FusedPackedAttentionBackend<cpu, float> &&
                  FusedCausalAttentionBackend<cpu, float> &&
                  FusedCausalAttentionBackend<cpu, double> && FusedCachedAttentionBackend<cpu, float> &&
                  GemmEpilogueBackend<cpu, float> && TaskParallelBackend<cpu> && GatedRowsBackend<cpu, float> &&
                  NormalizedRowsBackend<cpu, float>,
              "ttmoe: Backend<cpu> lost a fused attention, its GEMM epilogue, its task runner or an MoE kernel");

}  // namespace ttmoe
