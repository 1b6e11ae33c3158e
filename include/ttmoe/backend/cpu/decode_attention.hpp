#pragma once
// The two inner loops of nn::kv_cache_attention's decode loop (issue #14, helper decode19), with
// the scalar loops' arithmetic exactly:
//  * scores8: the scores of one query against 8 cached keys. The loop computed each q . k_j by itself
//    (nn::detail::dot: 8 partial sums, lane u adding the products of elements 8s + u in order of s
//    by fused multiply-adds, then ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))): one chain of
//    head_dim / 8 dependent FMAs and a horizontal tree per key. Here 8 keys are 8 independent chains
//    (each key's partial sums the 8 lanes of a ymm) and one `vhaddps`-based tree serves all 8.
//  * weighted_rows: P.V with the sums in registers, where the loop stored and reloaded them per key.
// At 600 positions the two took the attention from 4.8 to 3.5 ms per token (docs/design.md).
// AVX with FMA (ymm) only; other builds never see it.

#if defined(__AVX__) && defined(__FMA__)
#define TTMOE_DECODE_ATTENTION_AVX 1

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

namespace detail {
/// weighted_rows for 8 * NV columns starting at column c of rows n floats apart: 8 * NV sums in
/// registers (NV ymm), one FMA chain per ymm over the keys.
template <int NV>
inline void weighted_rows_block(const float* w, const float* v, index_t keys, index_t n, index_t c, float* acc) {
  __m256 a[NV];
#pragma GCC unroll 8
  for (int r = 0; r < NV; ++r) a[r] = _mm256_loadu_ps(acc + c + 8 * r);
  for (index_t j = 0; j < keys; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* vj = v + j * n + c;
#pragma GCC unroll 8
    for (int r = 0; r < NV; ++r) a[r] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vj + 8 * r), a[r]);
  }
#pragma GCC unroll 8
  for (int r = 0; r < NV; ++r) _mm256_storeu_ps(acc + c + 8 * r, a[r]);
}
}  // namespace detail

/// acc[e] = fma(w[j], v[j * n + e], acc[e]) for j = 0, 1, ..., keys - 1 in that order, every e < n,
/// n a multiple of 8: the decode loop's P.V (probabilities times the cached values) with the sums
/// in registers, 64 columns at a time, where the scalar loop stored and reloaded acc for every key
/// (a store-to-load chain per key: about 60% of the attention's time at 600 positions). The same
/// fused multiply-adds in the same order, so the same bits.
inline void weighted_rows(const float* w, const float* v, index_t keys, index_t n, float* acc) {
  index_t c = 0;
  for (; c + 64 <= n; c += 64) detail::weighted_rows_block<8>(w, v, keys, n, c, acc);
  switch ((n - c) / 8) {
    case 1: detail::weighted_rows_block<1>(w, v, keys, n, c, acc); break;
    case 2: detail::weighted_rows_block<2>(w, v, keys, n, c, acc); break;
    case 3: detail::weighted_rows_block<3>(w, v, keys, n, c, acc); break;
    case 4: detail::weighted_rows_block<4>(w, v, keys, n, c, acc); break;
    case 5: detail::weighted_rows_block<5>(w, v, keys, n, c, acc); break;
    case 6: detail::weighted_rows_block<6>(w, v, keys, n, c, acc); break;
    case 7: detail::weighted_rows_block<7>(w, v, keys, n, c, acc); break;
    default: break;
  }
}

}  // namespace ttmoe::cpu_backend

#endif  // __AVX__ && __FMA__
