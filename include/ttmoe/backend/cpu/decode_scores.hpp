#pragma once
// Attention scores of one query against 8 cached keys at a time, for the decode loop of
// nn::kv_cache_attention (issue #14, helper decode19). That loop computed each score q . k_j by
// itself (nn::detail::dot: 8 partial sums, lane u adding the products of elements 8s + u in order of
// s by fused multiply-adds, then ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))): one chain of
// head_dim / 8 dependent FMAs and a horizontal tree per key, about 5% of a decode step at 512-672
// positions. Here 8 keys are 8 independent chains (each key's partial sums the 8 lanes of a ymm, the
// same FMAs in the same order), and the final tree of all 8 is three `vhaddps`-based steps: the same
// additions in the same order, so the same bits as the one-key loop.
// AVX with FMA (ymm) only; other builds never see it.

#if defined(__AVX__) && defined(__FMA__)
#define TTMOE_DECODE_SCORES8 1

#include <immintrin.h>

#include "ttmoe/core/config.hpp"

namespace ttmoe::cpu_backend {

/// out[j] = q . k[j * n .. j * n + n) for j < 8, for n a multiple of 8: keys back to back, n floats
/// apart. Bit for bit the 8-partial-sum dot of nn::detail::dot as the compiler builds it with FMA
/// (contraction is on: one `vfmadd231ps` per 8 elements, lane u holding partial sum u).
inline void scores8(const float* q, const float* k, index_t n, float* out) {
  __m256 acc[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (index_t e = 0; e < n; e += 8) {
    const __m256 qv = _mm256_loadu_ps(q + e);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + index_t(j) * n + e), acc[j]);
  }
  // _mm256_hadd_ps(a, b) = [a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7]: twice gives
  // [lo_0..lo_3, hi_0..hi_3] for 4 keys, lo = (a0+a1)+(a2+a3), hi = (a4+a5)+(a6+a7).
  const __m256 g0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 g1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  const __m256 lo = _mm256_permute2f128_ps(g0, g1, 0x20), hi = _mm256_permute2f128_ps(g0, g1, 0x31);
  _mm256_storeu_ps(out, _mm256_add_ps(lo, hi));
}

}  // namespace ttmoe::cpu_backend

#endif  // __AVX__ && __FMA__
