#pragma once
// moe::normalized_rows_matmul (the cosine router's similarity, out = (h c) / r with r the rows'
// clamped norms) and its VJP, each in ONE pass over h: the forward's norms and dot products, the
// VJP's dh and each row's share of dc, from the same read.
// Why: composed of ops it was a GEMM for dc reading h, a GEMM writing dh, the radial term written as
// a tensor of h's size and added into dh: four passes over an [N, K] array (GMoE-S/16: 6.4 MB per
// MoE layer) where the arithmetic is 2 E multiply-adds per element (E = 6 experts).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "ttmoe/backend/cpu/indexing.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"

namespace ttmoe::cpu_backend {

/// Backend<cpu>'s NormalizedRowsBackend (backend/backend.hpp).
struct NormalizedRowsKernels {
  /// out [N, E] = (h c) / r and r [N] = max(||h_n||, eps) for h [N, K] and c [K, E], one pass over h
  /// (each row's squared norm and its E dot products from the same read; a GEMM with E = 6 columns
  /// runs the packed kernel's 48-wide tile at 1/8 of its width, after a separate pass for the norms).
  template <class T>
  static void normalized_rows_matmul(const T* h, const T* c, T* out, T* r, index_t N, index_t K, index_t E, T eps) {
    std::vector<T> ct(std::size_t(E * K));
    for (index_t k = 0; k < K; ++k)
      for (index_t e = 0; e < E; ++e) ct[std::size_t(e * K + k)] = c[k * E + e];
    parallel_for(N, std::max<index_t>(1, 16384 / std::max<index_t>(1, K * (E + 1))), [&](index_t b, index_t end) {
      for (index_t n = b; n < end; ++n) {
        const T* hn = h + n * K;
        const T rn = std::max(std::sqrt(detail::row_dot(hn, hn, K)), eps);
        r[n] = rn;
        for (index_t e = 0; e < E; ++e) out[n * E + e] = detail::row_dot(hn, ct.data() + e * K, K) / rn;
      }
    });
  }

  /// For g = d out [N, E], h [N, K], c [K, E], out [N, E] and r [N] (the clamped row norms): dh [N, K]
  /// = (g / r) c^T - h coef with coef[n] = (g[n] . out[n]) / r[n]^2 where r[n] > eps, else 0; dc [K, E]
  /// = h^T (g / r). Null targets are skipped; add_*: add instead of storing. Rows are split over the
  /// pool's threads in fixed blocks and dc sums the blocks' partial products in block order, so a
  /// thread count gives the same bits every run.
  template <class T>
  static void normalized_rows_matmul_vjp(const T* g, const T* h, const T* c, const T* out, const T* r, index_t N,
                                         index_t K, index_t E, T eps, T* dh, bool add_h, T* dc, bool add_c) {
    std::vector<T> ct(std::size_t(E * K));  // c^T: each expert's column contiguous, so rows vectorise over K
    for (index_t k = 0; k < K; ++k)
      for (index_t e = 0; e < E; ++e) ct[std::size_t(e * K + k)] = c[k * E + e];
    auto& pool = ThreadPool::instance();
    const index_t blocks = ThreadPool::in_parallel() ? 1 : std::min<index_t>(index_t(pool.num_threads()), std::max<index_t>(1, N / 64));
    std::vector<T> partial(dc ? std::size_t(blocks * E * K) : 0, T(0));
    auto rows = [&](index_t b) {
      const index_t n0 = N * b / blocks, n1 = N * (b + 1) / blocks;
      T* dct = dc ? partial.data() + b * E * K : nullptr;
      std::vector<T> gr(static_cast<std::size_t>(E));
      for (index_t n = n0; n < n1; ++n) {
        const T rn = r[n];
        T dot = T(0);
        for (index_t e = 0; e < E; ++e) {
          gr[std::size_t(e)] = g[n * E + e] / rn;
          dot += g[n * E + e] * out[n * E + e];
        }
        const T coef = rn > eps ? dot / (rn * rn) : T(0);
        const T* __restrict hn = h + n * K;
        if (dh) {  // one row at a time, in L1: -coef h (+ the old value), then each expert's term
          T* __restrict d = dh + n * K;
          if (add_h)
            for (index_t k = 0; k < K; ++k) d[k] -= coef * hn[k];
          else
            for (index_t k = 0; k < K; ++k) d[k] = -coef * hn[k];
          for (index_t e = 0; e < E; ++e) {
            const T w = gr[std::size_t(e)];
            const T* __restrict ce = ct.data() + e * K;
            for (index_t k = 0; k < K; ++k) d[k] += w * ce[k];
          }
        }
        if (dct)
          for (index_t e = 0; e < E; ++e) {
            const T w = gr[std::size_t(e)];
            T* __restrict p = dct + e * K;
            for (index_t k = 0; k < K; ++k) p[k] += hn[k] * w;
          }
      }
    };
    if (blocks == 1) {
      rows(0);
    } else {
      std::atomic<index_t> next{0};
      pool.run_on_available([&](std::size_t, std::size_t) {
        for (index_t b = next.fetch_add(1); b < blocks; b = next.fetch_add(1)) rows(b);
      });
    }
    if (dc)
      for (index_t k = 0; k < K; ++k)
        for (index_t e = 0; e < E; ++e) {
          T s = T(0);
          for (index_t b = 0; b < blocks; ++b) s += partial[std::size_t(b * E * K + e * K + k)];
          dc[k * E + e] = add_c ? dc[k * E + e] + s : s;
        }
  }
};

}  // namespace ttmoe::cpu_backend
