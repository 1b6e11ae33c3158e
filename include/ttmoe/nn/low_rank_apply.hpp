#pragma once
// The fused few-row low-rank update y += (x A^T) B^T used by nn::Linear's unmerged adapters at
// decode (TTMM's unmaterialised path, issue #15). At one token (or a handful) the two thin GEMMs of
// the general path are bandwidth-bound yet each pays the GEMM's packing and threading set-up, and the
// [M, R] intermediate makes a round trip through a tensor; here A [R, K] and B [N, R] are each
// streamed once: phase 1 forms h = x A^T threaded over R (every A row is read once for all M rows),
// phase 2 adds h B^T threaded over the output N. Forward only: callers use it when nothing records.

#include <algorithm>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/core/tensor.hpp"

namespace ttmoe::nn {

/// Up to this many rows of x the fused update replaces the two GEMMs: beyond it, the GEMM's
/// register blocking reuses each loaded A/B value over enough rows to win.
inline constexpr index_t kFusedLowRankMaxRows = 4;

namespace detail {
/// sum_j a[j] b[j] over n values with eight independent partial sums, so the compiler can keep
/// them in one vector register without reassociating a single running sum (no -ffast-math needed).
inline float dot8(const float* a, const float* b, index_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}
}  // namespace detail

/// y[m, :] += B (A x[m, :]) for the M rows of x [M, K] (row-major, contiguous), with A [R, K],
/// B [N, R] and y [M, N]. Results match the two-GEMM path to float rounding (the sums are taken in
/// another order), not bit for bit.
inline void fused_low_rank_apply(const float* x, index_t M, index_t K, const float* A, index_t R,
                                 const float* B, index_t N, float* y) {
  if (M == 0 || N == 0 || R == 0) return;
  std::vector<float> h(static_cast<std::size_t>(M * R));
  // Grains keep each thread's share at tens of KiB of weights, so the pool's wake-up is amortised.
  const index_t grain_r = std::max<index_t>(1, 16384 / std::max<index_t>(K, 1));
  cpu_backend::parallel_for(R, grain_r, [&](index_t rb, index_t re) {
    for (index_t r = rb; r < re; ++r)
      for (index_t m = 0; m < M; ++m) h[m * R + r] = detail::dot8(A + r * K, x + m * K, K);
  });
  const index_t grain_n = std::max<index_t>(1, 16384 / std::max<index_t>(R, 1));
  cpu_backend::parallel_for(N, grain_n, [&](index_t nb, index_t ne) {
    for (index_t n = nb; n < ne; ++n)
      for (index_t m = 0; m < M; ++m) y[m * N + n] += detail::dot8(B + n * R, h.data() + m * R, R);
  });
}

}  // namespace ttmoe::nn
