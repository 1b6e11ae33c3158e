#pragma once
// The dense merge's GEMM with BF16 products (#15): W [out, in] += round_bf16(B_cat) round_bf16(A_cat),
// every product exact in F32 and every sum F32. On AVX512-BF16 CPUs it runs `vdpbf16ps`
// (backend/cpu/gemm_bf16dot.hpp), twice the multiply-adds per instruction of the F32 FMA: the merge
// is bound by its FLOPs, and its GEMM ran ~1.8x, the whole merge + restore 1.4-1.6x the F32 one
// (docs/design.md, "TTMM overhead"). Elsewhere the rounded factors go through the F32 GEMM, so
// results agree across CPUs up to summation order.
//
// Why rounding the factors is acceptable where the base weights are BF16 (Llama-3.2-1B ships so):
// each rounding moves a factor by at most 2^-9 of itself, so delta moves by about 2^-8 of its size,
// and a LoRA delta is a few percent of W: the merged weight moves by ~1e-4 of W. Storing the merged
// weight back in the checkpoint's own precision (what a BF16 PEFT merge_and_unload does) moves it by
// up to 2^-9 of W, an order more (tests/ttmm checks this bound). Weights stored in F32 keep the F32
// merge: there the factors' rounding would be the largest error in the model.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/io/safetensors_float16.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include "ttmoe/backend/cpu/gemm_bf16dot.hpp"
#endif

namespace ttmoe::ttmm {

/// How a dense merge multiplies its stacked factors.
enum class MergeArithmetic {
  f32,           ///< F32 factors and sums everywhere (the default: PEFT's F32 merge)
  bf16_products  ///< for weights whose mapped checkpoint stores BF16: factors rounded to BF16, F32 sums
};

namespace detail {

/// t [in, R] = A [R, in]^T rounded to BF16: 32 x 32 blocks, so the strided side stays within a
/// few cache lines (any R; the vector path below needs R even).
inline void transpose_bf16(const float* a, index_t r, index_t in, std::uint16_t* t) {
  constexpr index_t tile = 32;
  cpu_backend::parallel_for((in + tile - 1) / tile, 1, [&](index_t b0, index_t b1) {
    for (index_t nb = b0 * tile; nb < std::min(in, b1 * tile); nb += tile)
      for (index_t kb = 0; kb < r; kb += tile)
        for (index_t n = nb; n < std::min(in, nb + tile); ++n)
          for (index_t k = kb; k < std::min(r, kb + tile); ++k)
            t[std::size_t(n) * std::size_t(r) + std::size_t(k)] = io::float_to_bf16(a[std::size_t(k) * std::size_t(in) + std::size_t(n)]);
  });
}

#if defined(TTMOE_BF16DOT_GEMM)
/// The same for even R, as words (A[2p][n], A[2p+1][n]) at t[n R/2 + p]: two rows of 16 columns
/// are rounded together (`vcvtne2ps2bf16`, nearest even; like vdpbf16ps it reads denormals as 0),
/// interleaved into 16 words and scattered down 16 rows of t. Against the scalar blocks above, a
/// 1B layer's BF16 merge of 10 rank-64 experts went from 0.72 to 0.67 of the F32 merge's time
/// (loaded A/B at load 5.3-5.9, medians of 9 calls each, AMD EPYC Zen 5).
inline void transpose_pairs_bf16(const float* a, index_t r, index_t in, std::uint32_t* t) {
  const index_t pairs = r / 2;
  alignas(64) std::int16_t order[32];
  alignas(64) std::int32_t rows[16];
  for (int j = 0; j < 16; ++j) order[2 * j] = std::int16_t(j), order[2 * j + 1] = std::int16_t(16 + j), rows[j] = std::int32_t(j * pairs);
  const __m512i interleave = _mm512_load_si512(order), row_offsets = _mm512_load_si512(rows);
  cpu_backend::parallel_for((in + 15) / 16, 4, [&](index_t c0, index_t c1) {
    for (index_t c = c0; c < c1; ++c) {
      const index_t n = c * 16, left = std::min<index_t>(16, in - n);
      const __mmask16 m = left == 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
      for (index_t p = 0; p < pairs; ++p) {
        const __m512 lo = _mm512_maskz_loadu_ps(m, a + 2 * p * in + n), hi = _mm512_maskz_loadu_ps(m, a + (2 * p + 1) * in + n);
        const __m512i h = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // lo in halves 0-15, hi in 16-31
        _mm512_mask_i32scatter_epi32(t + n * pairs + p, m, row_offsets, _mm512_permutexvar_epi16(interleave, h), 4);
      }
    }
  });
}
#endif

}  // namespace detail

/// W [out, in] += round_bf16(s.B_cat) round_bf16(s.A_cat) in place, F32 sums (see the header comment).
/// CPU only; a template so that only a translation unit that calls it needs the CPU backend.
template <class D>
void add_merged_delta_bf16(Tensor<float, DynShape<2>, D>& W, const moe::StackedLoRA<float, D>& s) {
  static_assert(std::is_same_v<D, cpu>, "ttmoe: add_merged_delta_bf16 runs on the CPU");
  if (W.extent(0) != s.B_cat.extent(0) || W.extent(1) != s.A_cat.extent(1) || s.B_cat.extent(1) != s.A_cat.extent(0))
    throw ShapeError("add_merged_delta_bf16: W [out, in] += B_cat [out, R] A_cat [R, in] shapes differ");
  const index_t out = W.extent(0), in = W.extent(1), r = s.A_cat.extent(0);
  if (out == 0 || in == 0 || r == 0) return;
#if defined(TTMOE_BF16DOT_GEMM)
  // bf16dot computes y = round(x) w^T + residual for a BF16 w [N, K] with K's pairs in one word:
  // x = B_cat [out, R] as it lies (rounded as it is packed), w = A_cat^T [in, R] rounded once here
  // (R x in values against the GEMM's R x in x out multiply-adds), y = residual = W. The residual
  // joins the first k-block's store element by element, read before the same element is written,
  // so W may be both.
  auto bits = std::make_shared<std::vector<std::uint16_t>>(std::size_t(in) * std::size_t(r));
  if (r % 2 == 0) detail::transpose_pairs_bf16(s.A_cat.data(), r, in, reinterpret_cast<std::uint32_t*>(bits->data()));
  else detail::transpose_bf16(s.A_cat.data(), r, in, bits->data());
  const auto at = io::Bf16Matrix::view(bits, bits->data(), in, r);
  cpu_backend::bf16dot::linear(s.B_cat.data(), out, at, nullptr, W.data(), W.data());
#else
  // No vdpbf16ps: the same rounded factors through the F32 GEMM (exact products, F32 sums).
  moe::StackedLoRA<float, D> rounded{Tensor<float, DynShape<2>, D>(s.A_cat.shape()),
                                     Tensor<float, DynShape<2>, D>(s.B_cat.shape())};
  std::transform(s.A_cat.data(), s.A_cat.data() + s.A_cat.numel(), rounded.A_cat.data(), io::round_to_bf16);
  std::transform(s.B_cat.data(), s.B_cat.data() + s.B_cat.numel(), rounded.B_cat.data(), io::round_to_bf16);
  moe::add_merged_delta(W, rounded);
#endif
}

}  // namespace ttmoe::ttmm
