#pragma once
// y = x W^T (+ bias) (+ residual) with W a BF16-resident weight (io/bf16_matrix.hpp), F32
// activations and F32 accumulation (issue #14). Two kernels, chosen by the number of activation rows:
//  * Few rows (decode, short continuations): a dot-product kernel. x is split once per row into its
//    even and odd elements. A 32-bit load of W then holds two BF16 values, and `word << 16` /
//    `word & 0xFFFF0000` ARE the even / odd floats, so widening costs one shift or AND per lane and
//    the dot product needs no shuffles at any SIMD width (xsimd picks AVX2 here, AVX-512 where built
//    for it). Threads split the output features: each weight row streams from memory once per call
//    and, with up to kRowsPerPass x rows sharing each widened weight vector, is reused from
//    registers. At batch 1 this is a GEMV running at memory bandwidth, the point of keeping weights
//    BF16.
//  * Many rows (prefill): the packed F32 GEMM (gemm_packed.hpp) with W widened to F32 as its panels
//    are packed. The dot-product kernel re-reads every x row from cache for every weight row, which
//    caps it well below GEMM speed once x outgrows L2; the GEMM reuses each packed weight panel for
//    all rows from L2 and its register tile does 12 (AVX2) or 24 (AVX-512) FMAs per B load.
//    kPackedGemmMinRows (measured, docs/design.md) is where the GEMM starts to win.
// With io::Bf16Arithmetic::bf16_activations on the weight, x is rounded to BF16 first; many rows then
// run the AVX512-BF16 `vdpbf16ps` GEMM (gemm_bf16dot.hpp) where the build has it.
// An odd `cols` (no real model has one) falls back to a scalar loop in the dot-product kernel (the
// GEMM packs an odd depth's last column by a scalar loop, so it takes odd widths as they are).

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/simd/xsimd.hpp"

#include "ttmoe/backend/cpu/gemm_bf16dot.hpp"
#include "ttmoe/backend/cpu/gemm_packed.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/io/bf16_matrix.hpp"
#include "ttmoe/core/error.hpp"
#include "ttmoe/core/tensor.hpp"

namespace ttmoe::cpu_backend {

namespace detail {

/// A 32-bit word that may alias the uint16 BF16 storage.
using AliasedWord = std::uint32_t __attribute__((may_alias));

/// Dot products of one BF16 weight row `wr` (2 * half values) with NR split activation rows
/// (`xs[i]`: half even then half odd floats); NR is a template parameter so the accumulators stay
/// in registers.
template <index_t NR>
inline void bf16_row_dots(const std::uint16_t* wr, index_t half, const float* const* xs, float* sums) {
  using fbatch = xsimd::batch<float>;
  using ubatch = xsimd::batch<std::uint32_t>;
  constexpr index_t L = fbatch::size;
  // Two words per step, four accumulators per row: enough independent FMA chains to hide the
  // FMA latency at batch 1.
  fbatch acc[NR][4];
  for (index_t i = 0; i < NR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = fbatch(0.f);
  const ubatch hi_mask(0xFFFF0000u);
  auto step = [&](index_t kk, int slot) {
    // A direct unaligned load (W rows need only 2-byte alignment): a memcpy to the stack first
    // costs a store-forwarding stall per vector.
    const ubatch wv = ubatch::load_unaligned(reinterpret_cast<const AliasedWord*>(wr + 2 * kk));
    const fbatch even = xsimd::bitwise_cast<fbatch>(wv << 16);
    const fbatch odd = xsimd::bitwise_cast<fbatch>(wv & hi_mask);
    for (index_t i = 0; i < NR; ++i) {
      acc[i][slot] = xsimd::fma(even, fbatch::load_unaligned(xs[i] + kk), acc[i][slot]);
      acc[i][slot + 1] = xsimd::fma(odd, fbatch::load_unaligned(xs[i] + half + kk), acc[i][slot + 1]);
    }
  };
  index_t k = 0;
  for (; k + 2 * L <= half; k += 2 * L) {
    step(k, 0);
    step(k + L, 2);
  }
  for (; k + L <= half; k += L) step(k, 0);
  for (index_t i = 0; i < NR; ++i) {
    float s = xsimd::hadd((acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]));
    for (index_t j = k; j < half; ++j)
      s += xs[i][j] * io::bf16_to_float(wr[2 * j]) + xs[i][half + j] * io::bf16_to_float(wr[2 * j + 1]);
    sums[i] = s;
  }
}

/// Keeps `v` in a register from here on: an empty asm that claims to change it stops the compiler
/// from folding its load into every instruction that uses it. GCC otherwise turns bf16_gemv_rows'
/// one W load into two (the shift and the AND each read memory) and its two x loads into eight
/// (one per FMA), and at batch 1 those extra loads, half of them straddling two cache lines,
/// rather than memory bound the kernel (docs/design.md, helper decode14).
template <class Batch>
inline void in_register(Batch& v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.data));
#else
  (void)v;
#endif
}

/// Batch-1 (decode) dot products of NW consecutive BF16 weight rows (`w`, stride 2 * half) with
/// ONE split activation row `xs`: each activation vector is loaded once for NW rows, and the NW
/// weight streams are in flight together, which is what keeps a GEMV at memory bandwidth (one
/// row at a time leaves the loads of the next row waiting behind the last FMAs of this one).
/// `next` (the NW rows the caller reads after these, or `w` again) is prefetched line for line as
/// these are read: a 2048-wide row is one 4 KiB page, and the hardware prefetcher, which stops at
/// page ends, would otherwise restart on every row (docs/design.md, helper decode14).
template <index_t NW>
inline void bf16_gemv_rows(const std::uint16_t* w, index_t half, const float* xs, float* sums,
                           const std::uint16_t* next) {
  using fbatch = xsimd::batch<float>;
  using ubatch = xsimd::batch<std::uint32_t>;
  constexpr index_t L = fbatch::size;
  const index_t stride = 2 * half;
  fbatch even_acc[NW], odd_acc[NW];
  for (index_t j = 0; j < NW; ++j) even_acc[j] = odd_acc[j] = fbatch(0.f);
  const ubatch hi_mask(0xFFFF0000u);
  index_t k = 0;
  for (; k + L <= half; k += L) {
    fbatch xe = fbatch::load_unaligned(xs + k), xo = fbatch::load_unaligned(xs + half + k);
    in_register(xe), in_register(xo);
    for (index_t j = 0; j < NW; ++j) {
      __builtin_prefetch(next + j * stride + 2 * k);
      ubatch wv = ubatch::load_unaligned(reinterpret_cast<const AliasedWord*>(w + j * stride + 2 * k));
      in_register(wv);
      even_acc[j] = xsimd::fma(xsimd::bitwise_cast<fbatch>(wv << 16), xe, even_acc[j]);
      odd_acc[j] = xsimd::fma(xsimd::bitwise_cast<fbatch>(wv & hi_mask), xo, odd_acc[j]);
    }
  }
  for (index_t j = 0; j < NW; ++j) {
    const std::uint16_t* wr = w + j * stride;
    float s = xsimd::hadd(even_acc[j] + odd_acc[j]);
    for (index_t t = k; t < half; ++t)
      s += xs[t] * io::bf16_to_float(wr[2 * t]) + xs[half + t] * io::bf16_to_float(wr[2 * t + 1]);
    sums[j] = s;
  }
}

/// x [in] (in even) split into its even then its odd elements: the layout bf16_gemv_rows and
/// bf16_row_dots read.
inline void split_even_odd(const float* x, index_t in, float* split) {
  const index_t half = in / 2;
  for (index_t k = 0; k < half; ++k) {
    split[k] = x[2 * k];
    split[half + k] = x[2 * k + 1];
  }
}

/// Output rows [o0, o1) of the batch-1 product y[o] = x . w[o] (+ bias[o]) (+ residual[o]) with x
/// split (split_even_odd; w.cols even): kDecodeRows weight rows per pass, each pass prefetching the
/// next. Serial: the callers split the rows over threads.
inline void bf16_gemv_range(const float* split, const io::Bf16Matrix& w, const float* bias, const float* residual,
                            float* y, index_t o0, index_t o1) {
  constexpr index_t kDecodeRows = 4;
  const index_t in = w.cols, half = in / 2;
  auto finish = [&](index_t o, float acc) {
    if (bias) acc += bias[o];
    if (residual) acc += residual[o];
    y[o] = acc;
  };
  float sums[kDecodeRows];
  index_t o = o0;
  for (; o + kDecodeRows <= o1; o += kDecodeRows) {
    const index_t after = o + 2 * kDecodeRows <= o1 ? o + kDecodeRows : o;  // the next full pass
    bf16_gemv_rows<kDecodeRows>(w.bits + o * in, half, split, sums, w.bits + after * in);
    for (index_t j = 0; j < kDecodeRows; ++j) finish(o + j, sums[j]);
  }
  for (; o < o1; ++o) {
    bf16_gemv_rows<1>(w.bits + o * in, half, split, sums, w.bits + o * in);
    finish(o, sums[0]);
  }
}

}  // namespace detail

/// The dot-product kernel for linear_bf16 (any row count; the one that runs below
/// kPackedGemmMinRows): y[r, o] = sum_k x[r, k] w[o, k] (+ bias[o]) (+ residual[r, o]).
inline void linear_bf16_dot(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias,
                            const float* residual, float* y) {
  constexpr index_t kRowsPerPass = 4;
  const index_t in = w.cols, out = w.rows, half = in / 2;
  const bool paired = in % 2 == 0;
  // x rows split into [even | odd] halves (only when paired).
  std::vector<float> split(paired ? rows * in : 0);
  if (paired)
    for (index_t r = 0; r < rows; ++r) detail::split_even_odd(x + r * in, in, split.data() + r * in);
  if (paired && rows == 1) {  // decode: a GEMV over the output features
    parallel_for(out, 16, [&](index_t o0, index_t o1) { detail::bf16_gemv_range(split.data(), w, bias, residual, y, o0, o1); });
    return;
  }
  auto finish = [&](index_t r, index_t o, float acc) {
    if (bias) acc += bias[o];
    if (residual) acc += residual[r * out + o];
    y[r * out + o] = acc;
  };
  parallel_for(out, 16, [&](index_t o0, index_t o1) {
    for (index_t o = o0; o < o1; ++o) {
      const std::uint16_t* wr = w.bits + o * in;
      if (!paired) {
        for (index_t r = 0; r < rows; ++r) {
          float acc = 0;
          for (index_t k = 0; k < in; ++k) acc += x[r * in + k] * io::bf16_to_float(wr[k]);
          finish(r, o, acc);
        }
        continue;
      }
      for (index_t r0 = 0; r0 < rows; r0 += kRowsPerPass) {
        const index_t nr = std::min(kRowsPerPass, rows - r0);
        const float* xs[kRowsPerPass];
        for (index_t i = 0; i < nr; ++i) xs[i] = split.data() + (r0 + i) * in;
        float sums[kRowsPerPass];
        switch (nr) {
          case 1: detail::bf16_row_dots<1>(wr, half, xs, sums); break;
          case 2: detail::bf16_row_dots<2>(wr, half, xs, sums); break;
          case 3: detail::bf16_row_dots<3>(wr, half, xs, sums); break;
          default: detail::bf16_row_dots<4>(wr, half, xs, sums); break;
        }
        for (index_t i = 0; i < nr; ++i) finish(r0 + i, o, sums[i]);
      }
    }
  });
}

#if defined(TTMOE_PACKED_GEMM)
/// Activation rows from which linear_bf16 runs the packed GEMM instead of the dot-product kernel
/// (measured with bench_bf16_decode --rows; docs/design.md "BF16-resident LLM weights"): 80 on an
/// AVX2 EPYC; on an AVX-512 EPYC the GEMM's 24-accumulator tile wins from about 24 rows.
#if defined(__AVX512F__)
inline constexpr index_t kPackedGemmMinRows = 32;
#else
inline constexpr index_t kPackedGemmMinRows = 80;
#endif

/// The packed-GEMM kernel for linear_bf16 (any row count; the one that runs from kPackedGemmMinRows):
/// the same result through packed::gemm with W's BF16 panels widened to F32 as they are packed (a
/// large W by packed::gemm_column_split, each thread widening one L2-sized block of its own columns
/// at a time, so no widened copy of W is ever whole), and bias and residual added as each tile is
/// stored.
inline void linear_bf16_packed(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias,
                               const float* residual, float* y) {
  if (rows == 0 || w.rows == 0) return;
  ttmoe::GemmEpilogue<float> ep;
  ep.bias = bias;
  ep.residual = residual;
  ep.ld_residual = w.rows;
  packed::gemm(false, true, rows, w.rows, w.cols, 1.f, x, w.cols, w.bits, w.cols, 0.f, y, w.rows, ep);
}
#endif

/// linear_bf16 with exact arithmetic (F32 activations, io::Bf16Arithmetic::exact), whatever `w`
/// asks for. Prefill-sized inputs (from kPackedGemmMinRows rows, in AVX2+FMA / AVX-512 builds) run
/// the packed GEMM, fewer rows the dot-product kernel.
inline void linear_bf16_exact(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias,
                              const float* residual, float* y) {
#if defined(TTMOE_PACKED_GEMM)
  if (rows >= kPackedGemmMinRows && w.cols > 0 && w.rows >= packed::NR) {
    linear_bf16_packed(x, rows, w, bias, residual, y);
    return;
  }
#endif
  linear_bf16_dot(x, rows, w, bias, residual, y);
}

/// linear_bf16 with x rounded to BF16 first (io::Bf16Arithmetic::bf16_activations), whatever `w`
/// asks for. On AVX512-BF16 builds from bf16dot::kMinRows rows run the `vdpbf16ps` GEMM and one row
/// (decode) the `vdpbf16ps` GEMV (gemm_bf16dot.hpp); otherwise (fewer rows, other CPUs)
/// the rounded x goes through linear_bf16_exact: a BF16 x BF16 product is exact in F32, so only the
/// summation order differs from the `vdpbf16ps` result.
inline void linear_bf16_rounded(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias,
                                const float* residual, float* y) {
#if defined(TTMOE_BF16DOT_GEMM)
  if (rows >= bf16dot::kMinRows && w.cols > 0) {
    bf16dot::linear(x, rows, w, bias, residual, y);
    return;
  }
  if (rows == 1 && w.cols > 0) {
    bf16dot::gemv(x, w, bias, residual, y);
    return;
  }
#endif
  std::vector<float> xr(std::size_t(rows) * std::size_t(w.cols));
  std::transform(x, x + xr.size(), xr.begin(), io::round_to_bf16);
  linear_bf16_exact(xr.data(), rows, w, bias, residual, y);
}

/// One product of a batch-1 group (linear_bf16_gemv_group): y [w->rows] = x w^T (+ bias) (+ residual).
struct Bf16GemvPart {
  const io::Bf16Matrix* w = nullptr;
  const float* bias = nullptr;      ///< [w->rows] or null
  float* y = nullptr;
  const float* residual = nullptr;  ///< [w->rows] or null
};

/// Weight bytes per work item of a batch-1 GEMV (linear_bf16_gemv_group): 64 rows of a 2048-wide
/// BF16 matrix, 16 of an 8192-wide one; a few microseconds of streaming, so the items' counter costs
/// nothing and a thread the host deschedules holds up at most one item.
inline constexpr index_t kGemvItemBytes = index_t(256) << 10;

/// y_i = x W_i^T (+ b_i) for ONE activation row x and several BF16 weights that read it (attention's
/// q | k | v, SwiGLU's gate | up) in ONE parallel region: x is split or rounded once and the threads
/// split the concatenated output rows, so the group costs one hand-off to the pool and one
/// end-of-job wait instead of one per weight (docs/design.md, helper decode16). Each output is
/// bit-identical to linear_bf16's at one row: the same kernel computes every row in the same order.
/// Weights of different widths or arithmetics, or an odd width with exact arithmetic, run one by
/// one through linear_bf16's kernels. linear_bf16 sends every single row here.
inline void linear_bf16_gemv_group(const float* x, std::span<const Bf16GemvPart> parts) {
  if (parts.empty()) return;
  const io::Bf16Matrix& w0 = *parts[0].w;
  bool same = w0.cols > 0;
  for (const auto& p : parts) same = same && p.w->cols == w0.cols && p.w->arithmetic == w0.arithmetic;
  const bool rounded = w0.arithmetic == io::Bf16Arithmetic::bf16_activations;
  // Items of whole rows, kGemvItemBytes of weight each, taken from a shared counter
  // (ThreadPool::parallel_items): a thread slowed or descheduled by the host hands its remaining
  // items to the other instead of keeping it waiting at the end of the job, and a worker that is
  // not awake yet when the caller has done every item is not waited for.
  auto run = [&](auto&& rows_of) {
    const index_t chunk = std::max<index_t>(16, kGemvItemBytes / (2 * w0.cols));
    index_t items = 0;
    for (const auto& p : parts) items += (p.w->rows + chunk - 1) / chunk;
    ThreadPool::instance().parallel_items(items, [&] {
      return [&](index_t item) {
        for (const auto& p : parts) {
          const index_t n = (p.w->rows + chunk - 1) / chunk;
          if (item < n) {
            rows_of(p, item * chunk, std::min(p.w->rows, (item + 1) * chunk));
            return;
          }
          item -= n;
        }
      };
    });
  };
#if defined(TTMOE_BF16DOT_GEMM)
  if (same && rounded) {
    std::vector<std::uint16_t> xb(std::size_t((w0.cols + bf16dot::kGemvStep - 1) / bf16dot::kGemvStep * bf16dot::kGemvStep));
    bf16dot::round_row(x, w0.cols, xb.data());
    run([&](const Bf16GemvPart& p, index_t o0, index_t o1) { bf16dot::gemv_rows(xb.data(), *p.w, p.bias, p.residual, p.y, o0, o1); });
    return;
  }
#endif
  if (same && w0.cols % 2 == 0) {
    // As linear_bf16_rounded without the `vdpbf16ps` GEMV: the dot kernel on x rounded to BF16.
    std::vector<float> xr(rounded ? std::size_t(w0.cols) : 0), split(std::size_t(w0.cols));
    std::transform(x, x + xr.size(), xr.begin(), io::round_to_bf16);
    detail::split_even_odd(rounded ? xr.data() : x, w0.cols, split.data());
    run([&](const Bf16GemvPart& p, index_t o0, index_t o1) { detail::bf16_gemv_range(split.data(), *p.w, p.bias, p.residual, p.y, o0, o1); });
    return;
  }
  for (const auto& p : parts) {
    if (p.w->arithmetic == io::Bf16Arithmetic::bf16_activations) linear_bf16_rounded(x, 1, *p.w, p.bias, p.residual, p.y);
    else linear_bf16_exact(x, 1, *p.w, p.bias, p.residual, p.y);
  }
}

/// y[r, o] = sum_k x[r, k] w[o, k] (+ bias[o]) (+ residual[r, o]) for r < rows; x [rows, w.cols],
/// y and residual [rows, w.rows]; bias and residual may be null. `w.arithmetic` picks exact F32
/// activations (linear_bf16_exact) or BF16-rounded ones (linear_bf16_rounded).
inline void linear_bf16(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias, const float* residual,
                        float* y) {
  if (rows == 1) {  // decode: the batch-1 schedule (one part)
    const Bf16GemvPart part{&w, bias, y, residual};
    linear_bf16_gemv_group(x, std::span<const Bf16GemvPart>(&part, 1));
    return;
  }
  if (w.arithmetic == io::Bf16Arithmetic::bf16_activations) linear_bf16_rounded(x, rows, w, bias, residual, y);
  else linear_bf16_exact(x, rows, w, bias, residual, y);
}

}  // namespace ttmoe::cpu_backend

namespace ttmoe {

/// x [..., in] -> [..., out] through the BF16 weight `w` [out, in] (+ bias [out]) (+ residual, the
/// output's shape); inference only. Found by argument-dependent lookup from nn::Linear, so the
/// device-generic layer never includes this backend header.
template <class S, class R = DynShape<1>>
Tensor<float, DynShape<S::rank>, cpu> linear_bf16(const Tensor<float, S, cpu>& x, const io::Bf16Matrix& w,
                                                  const Tensor<float, DynShape<1>, cpu>& bias,
                                                  const Tensor<float, R, cpu>* residual = nullptr) {
  static_assert(S::rank >= 2, "linear_bf16: x must have rank >= 2");
  if (x.extent(S::rank - 1) != w.cols)
    throw ShapeError("linear_bf16: x " + x.shape().to_string() + " has " + std::to_string(x.extent(S::rank - 1)) +
                     " features; the BF16 weight takes " + std::to_string(w.cols));
  auto e = x.shape().extents();
  e[S::rank - 1] = w.rows;
  Tensor<float, DynShape<S::rank>, cpu> y(DynShape<S::rank>::from_extents(e, "linear_bf16"));
  if (residual && residual->numel() != y.numel())
    throw ShapeError("linear_bf16: residual " + residual->shape().to_string() + " does not match the output " +
                     y.shape().to_string());
  cpu_backend::linear_bf16(x.data(), x.numel() / w.cols, w, bias.defined() ? bias.data() : nullptr,
                           residual ? residual->data() : nullptr, y.data());
  return y;
}


/// The outputs x W_i^T (+ b_i) of several BF16 weights on one input x [..., in] (nn::linear_group's
/// q | k | v and gate | up); inference only, found by argument-dependent lookup as linear_bf16 is. One
/// activation row runs the weights as one group (cpu_backend::linear_bf16_gemv_group: one parallel
/// region); from bf16dot::kMinRows rows with bf16 arithmetic on AVX512-BF16 builds, one `vdpbf16ps`
/// GEMM job (bf16dot::linear_group: x packed once, one meeting of the threads); otherwise each weight
/// on its own (linear_bf16). Each output is bit-identical to linear_bf16's. `biases[i]` may be undefined.
template <class S, std::size_t N>
std::array<Tensor<float, DynShape<S::rank>, cpu>, N> linear_bf16_group(
    const Tensor<float, S, cpu>& x, const std::array<const io::Bf16Matrix*, N>& ws,
    const std::array<const Tensor<float, DynShape<1>, cpu>*, N>& biases) {
  static_assert(S::rank >= 2, "linear_bf16_group: x must have rank >= 2");
  std::array<Tensor<float, DynShape<S::rank>, cpu>, N> out;
  const index_t in = x.extent(S::rank - 1);
  if (x.numel() != in) {  // not one row
#if defined(TTMOE_BF16DOT_GEMM)
    const index_t rows = x.numel() / std::max<index_t>(in, 1);
    bool rounded = rows >= cpu_backend::bf16dot::kMinRows && in > 0;
    for (const auto* w : ws) rounded = rounded && w->cols == in && w->arithmetic == io::Bf16Arithmetic::bf16_activations;
    if (rounded) {
      std::array<cpu_backend::bf16dot::Part, N> parts;
      for (std::size_t i = 0; i < N; ++i) {
        auto e = x.shape().extents();
        e[S::rank - 1] = ws[i]->rows;
        out[i] = Tensor<float, DynShape<S::rank>, cpu>(DynShape<S::rank>::from_extents(e, "linear_bf16"));
        parts[i] = {ws[i], biases[i]->defined() ? biases[i]->data() : nullptr, nullptr, out[i].data()};
      }
      cpu_backend::bf16dot::linear_group(x.data(), rows, in, std::span<const cpu_backend::bf16dot::Part>(parts));
      return out;
    }
#endif
    for (std::size_t i = 0; i < N; ++i) out[i] = linear_bf16(x, *ws[i], *biases[i]);  // each on its own
    return out;
  }
  std::array<cpu_backend::Bf16GemvPart, N> parts;
  for (std::size_t i = 0; i < N; ++i) {
    if (ws[i]->cols != in)
      throw ShapeError("linear_bf16: x " + x.shape().to_string() + " has " + std::to_string(in) +
                       " features; the BF16 weight takes " + std::to_string(ws[i]->cols));
    auto e = x.shape().extents();
    e[S::rank - 1] = ws[i]->rows;
    out[i] = Tensor<float, DynShape<S::rank>, cpu>(DynShape<S::rank>::from_extents(e, "linear_bf16"));
    parts[i] = {ws[i], biases[i]->defined() ? biases[i]->data() : nullptr, out[i].data(), nullptr};
  }
  cpu_backend::linear_bf16_gemv_group(x.data(), std::span<const cpu_backend::Bf16GemvPart>(parts));
  return out;
}

}  // namespace ttmoe
