#pragma once
// y = x W^T (+ bias) (+ residual) for a BF16-resident weight W [N, K] on AVX512-BF16 (`vdpbf16ps`,
// issue #14): the prefill kernel of linear_bf16 when the weight asks for BF16 activations
// (io::Bf16Arithmetic::bf16_activations), and its batch-1 GEMV (gemv, at the end). Compiled only where
// __AVX512BF16__ is defined (-march=native on Zen 4, Cooper Lake, Sapphire Rapids and later); other
// builds never see it.
//
// `vdpbf16ps acc, a, b` adds a[2i] b[2i] + a[2i+1] b[2i+1] to F32 lane i: one instruction does 32
// multiply-adds where an F32 FMA does 16, and its operands are half the bytes. Both operands are
// therefore laid out in k-PAIRS, one 32-bit word holding two consecutive k:
//  * x is rounded to BF16 (round to nearest even, `vcvtne2ps2bf16`) as it is packed, into slivers of
//    MR rows, [pair][row] words (the F32 kernel's A layout with a word for a float);
//  * W's rows already hold (w[n][2p], w[n][2p+1]) as one word, so packing W is a 32-bit transpose
//    into slivers of NR columns, [pair][column] words (the F32 kernel's B layout), no widening: the
//    8 x 8 register transpose of gemm_packed.hpp moves the words unchanged.
// The micro-kernel keeps gemm_packed.hpp's tile shapes (24 accumulators: 8 x 48 or 6 x 64), loads NV
// vectors of W pairs and broadcasts one x pair per row per step, and finishes through the F32
// kernel's store_tile, so bias and residual join the first k-block's store exactly as there.
// Schedule: packed::run_column_split, as gemm_column_split (x small, W wide): the threads pack all
// of x together, meet once, then take units of columns from a counter, each packing its unit's
// k-block of W into its own L2-sized buffer and running every row sliver past it, so W streams
// from memory once. Several weights that read the same x (q | k | v, gate | up: linear_group) are
// one such job: x packed once and one meeting for the group, the units of all their columns from
// one counter.

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#define TTMOE_BF16DOT_GEMM 1

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "ttmoe/backend/cpu/gemm_packed.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/io/bf16_matrix.hpp"

namespace ttmoe::cpu_backend::bf16dot {

/// Activation rows from which linear_bf16's rounded path runs this GEMM rather than the dot-product
/// kernel on rounded x (bench_bf16_decode --rows on an AVX-512 EPYC: even at 12 rows, 0.8-0.9 at
/// 16; docs/design.md): packing W is a word transpose, cheaper than the F32 GEMM's widening.
inline constexpr index_t kMinRows = 16;

/// k-pairs per packed k-block: 2048 values of k, so a 64-column block of packed W is 256 KiB (L2)
/// and an x sliver 24 KiB (6 rows) or 32 KiB (8 rows), in L1. Deeper blocks mean fewer passes of C
/// (each k-block after the first reads and rewrites every C tile): at 2048 a Llama-1B projection
/// of depth 2048 is ONE k-block and its down projection 4 instead of 11. 1024 pairs against 384:
/// a decoder layer's projections at 512 rows took 4-5% less CPU time per flop (6 alternating rounds,
/// loaded; docs/design.md, helper prefill17); the micro-kernel alone ran at the same rate with W
/// slivers from 16 to 192 KiB, so streaming W from L2 costs it nothing.
inline constexpr index_t KCP = 1024;

/// Target width of a column unit (whole slivers, at least one): the work a thread takes from the
/// counter at a time. 64 (one 6 x 64 sliver) rather than the F32 kernel's 128: the same CPU time per
/// flop (a decoder layer's projections at 512 rows, grouped, on one thread, 3 alternating rounds,
/// loaded: 448-455 vs 443-451 GFLOP per CPU-second; docs/design.md, helper prefill17), and half the
/// work left to wait for at the end of a job when the other thread is descheduled (a down
/// projection's 128-column unit was ~2.5 ms).
inline constexpr index_t kUnitColumns = 64;

/// One 32-bit word of W's row `row` (K values) at pair p: (w[2p], w[2p+1]), the high half 0 past an
/// odd K's end (no read passes the row, or a mapped file).
inline std::uint32_t weight_pair(const std::uint16_t* row, index_t K, index_t p) {
  const std::uint32_t lo = row[2 * p], hi = 2 * p + 1 < K ? row[2 * p + 1] : 0u;
  return lo | (hi << 16);
}

/// Packs pairs [p0, p0 + kcp) of W's rows [n0, n0 + nc) into slivers of NR columns ([pair][column],
/// zero columns past nc). Groups of 8 whole columns go through 8 x 8 register transposes of
/// unaligned 8-word row loads (W rows are only 2-byte aligned); the pairs past the last multiple of
/// 8, an odd K's half pair and a group with dead columns go word by word.
template <class Tl>
inline void pack_w(const std::uint16_t* w, index_t K, index_t p0, index_t kcp, index_t n0, index_t nc, std::uint32_t* out) {
  constexpr index_t NR = Tl::NR;
  // Pairs of this block with both values inside the row, in whole groups of 8 (index_t is unsigned:
  // differences are taken only once known not to wrap).
  const index_t full_pairs = K / 2, vec_end = (full_pairs > p0 ? std::min(kcp, full_pairs - p0) : 0) / 8 * 8;
  for (index_t j = 0; j < nc; j += NR) {
    std::uint32_t* o = out + (j / NR) * kcp * NR;
    for (index_t g = 0; g < NR; g += 8) {
      const index_t live = nc > j + g ? std::min<index_t>(8, nc - j - g) : 0;
      index_t p = 0;
      if (live == 8) {
        const std::uint16_t* rows = w + (n0 + j + g) * K + 2 * p0;
        for (; p < vec_end; p += 8) {
          __m256 r[8];
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i)
            r[i] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows + index_t(i) * K + 2 * p)));
          packed::transpose_8x8(r);
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + (p + index_t(i)) * NR + g), _mm256_castps_si256(r[i]));
        }
      }
      for (; p < kcp; ++p)
        for (index_t c = 0; c < 8; ++c)
          o[p * NR + g + c] = c < live ? weight_pair(w + (n0 + j + g + c) * K, K, p0 + p) : 0u;
    }
  }
}

/// Packs x's rows [m0, m0 + mc) (row stride K floats), pairs [p0, p0 + kcp), rounded to BF16 into
/// slivers of MR rows ([pair][row] words, zero rows past mc). 32 floats (16 pairs) at a time go
/// through one `vcvtne2ps2bf16`; a masked load zero-fills the tail, an odd K's missing value included.
template <class Tl>
inline void pack_x(const float* x, index_t K, index_t m0, index_t mc, index_t p0, index_t kcp, std::uint32_t* out) {
  constexpr index_t MR = Tl::MR;
  alignas(64) std::uint32_t words[16];
  for (index_t i = 0; i < mc; i += MR) {
    std::uint32_t* o = out + (i / MR) * kcp * MR;
    for (index_t r = 0; r < MR; ++r) {
      if (i + r >= mc) {
        for (index_t p = 0; p < kcp; ++p) o[p * MR + r] = 0u;
        continue;
      }
      const float* row = x + (m0 + i + r) * K;
      for (index_t p = 0; p < kcp; p += 16) {
        const index_t k = 2 * (p0 + p), left = std::min<index_t>(32, K - std::min(K, k));
        const auto mask = [](index_t n) { return __mmask16(n >= 16 ? 0xFFFF : (1u << n) - 1u); };
        const __m512 lo = _mm512_maskz_loadu_ps(mask(left), row + k);
        const __m512 hi = _mm512_maskz_loadu_ps(mask(left > 16 ? left - 16 : 0), row + k + 16);
        _mm512_store_si512(words, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
        for (index_t q = 0; q < std::min<index_t>(16, kcp - p); ++q) o[(p + q) * MR + r] = words[q];
      }
    }
  }
}

/// One micro-tile: acc = x sliver . W sliver over kcp pairs (`vdpbf16ps`), then the F32 kernel's
/// store_tile (`up`: assign with bias and residual on the first k-block, add on later ones). The
/// tile's bias and residual come as pointers (already moved to the tile), not as a GemmEpilogue:
/// a 56-byte struct built on the stack for every call cost a store-forwarding stall per call,
/// about 1% of a prefill's samples.
template <class Tl>
inline void micro_kernel(index_t kcp, const std::uint32_t* a, const std::uint32_t* b, float* c, index_t ldc,
                         packed::Update up, const float* bias, const float* residual, index_t ld_residual, index_t mr,
                         index_t nr) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  constexpr int NV = Tl::NV;
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (index_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (index_t p = 0; p < kcp; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + 16 * v));
#pragma GCC unroll 8
    for (index_t r = 0; r < MR; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(a[r])));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
    a += MR;
    b += NR;
  }
  ttmoe::GemmEpilogue<float> ep;
  ep.bias = bias;
  ep.residual = residual;
  ep.ld_residual = ld_residual;
  packed::store_tile<Tl, void>(acc, c, ldc, 1.f, 0.f, up, true, ep, mr, nr);
}

/// One weight of a group that reads the same x (linear_group): y [rows, w->rows] = round_bf16(x)
/// w^T (+ bias [w->rows]) (+ residual [rows, w->rows]); bias and residual may be null.
struct Part {
  const io::Bf16Matrix* w = nullptr;
  const float* bias = nullptr;
  const float* residual = nullptr;
  float* y = nullptr;
};

/// The tile linear() runs a weight of `n` outputs with: the one that pads N least (gemm_packed.hpp's
/// rule). 0 for packed::WideTile, 1 for packed::AltTile.
inline int tile_for(index_t n) { return n % packed::AltTile::NR == 0 && n % packed::WideTile::NR != 0 ? 1 : 0; }

/// Rows [m0, m0 + M) of every part's product (all parts K wide), with tile Tl, threads splitting the
/// columns (see the header comment): x is packed ONCE for the whole group, then the threads meet
/// once and take units of columns of all the parts' outputs from one counter. Each output element
/// is summed in the same order as with a group of one, so grouping changes no bit.
template <class Tl>
inline void gemm_columns(const float* x, index_t m0, index_t M, index_t K, std::span<const Part> parts) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  constexpr index_t unit = NR * std::max<index_t>(1, kUnitColumns / NR);
  const std::size_t threads = ThreadPool::in_parallel() ? 1 : ThreadPool::instance().num_threads();
  const index_t pairs = (K + 1) / 2, m_slivers = (M + MR - 1) / MR, m_padded = m_slivers * MR;
  const index_t k_blocks = (pairs + KCP - 1) / KCP, w_len = std::min(KCP, pairs) * unit;
  index_t units = 0;
  for (const Part& p : parts) units += (p.w->rows + unit - 1) / unit;
  // Words are 4 bytes like the floats PackScratch counts: packed x (block kb at p0 m_padded, sliver
  // s at + s kcp MR) in slot 1, one unit's k-block of W per thread in slot 0, as the F32 kernel.
  const packed::PackScratch a_scratch(m_padded * pairs, 1), b_scratch(w_len * index_t(threads), 0);
  auto* ap = reinterpret_cast<std::uint32_t*>(a_scratch.get());
  const index_t pack_units = k_blocks * m_slivers;  // (k-block, row sliver) pairs
  packed::run_column_split(
      threads, pack_units, units,
      [&](index_t u) {
        const index_t kb = u / m_slivers, s = u % m_slivers, p0 = kb * KCP, kcp = std::min(KCP, pairs - p0);
        pack_x<Tl>(x, K, m0 + s * MR, std::min(MR, M - s * MR), p0, kcp, ap + p0 * m_padded + s * kcp * MR);
      },
      [&](std::size_t t, index_t u) {
        // The part this unit belongs to (a group has a few parts, so a scan).
        std::size_t i = 0;
        for (index_t n = (parts[0].w->rows + unit - 1) / unit; u >= n; n = (parts[i].w->rows + unit - 1) / unit)
          u -= n, ++i;
        const Part& part = parts[i];
        const index_t N = part.w->rows;
        float* y = part.y + m0 * N;
        const float* res = part.residual ? part.residual + m0 * N : nullptr;
        auto* bp = reinterpret_cast<std::uint32_t*>(b_scratch.get()) + index_t(t) * w_len;
        const index_t n0 = u * unit, nc = std::min(unit, N - n0);
        for (index_t p0 = 0; p0 < pairs; p0 += KCP) {
          const index_t kcp = std::min(KCP, pairs - p0);
          pack_w<Tl>(part.w->bits, K, p0, kcp, n0, nc, bp);
          const packed::Update up = p0 > 0 ? packed::Update::add : packed::Update::assign;
          const std::uint32_t* ak = ap + p0 * m_padded;
          for (index_t s = 0; s < m_slivers; ++s) {
            const index_t r0 = s * MR, mr = std::min(MR, M - r0);
            for (index_t j = 0; j < nc; j += NR)
              micro_kernel<Tl>(kcp, ak + s * kcp * MR, bp + (j / NR) * kcp * NR, y + r0 * N + n0 + j, N, up,
                               part.bias ? part.bias + n0 + j : nullptr, res ? res + r0 * N + n0 + j : nullptr, N, mr,
                               std::min(NR, nc - j));
          }
        }
      });
}

/// Whether linear_group runs `parts` as one job: two or more weights, all `K` wide, all with the
/// same tile (tile_for). Otherwise each goes through linear() on its own.
inline bool groups(std::span<const Part> parts, index_t K) {
  if (parts.size() < 2) return false;
  for (const Part& p : parts)
    if (p.w->cols != K || p.w->rows == 0 || tile_for(p.w->rows) != tile_for(parts[0].w->rows)) return false;
  return true;
}

/// Every part's y = round_bf16(x) w^T (+ bias) (+ residual) for x [rows, K] (K = every part's
/// w->cols; the caller checks that): BF16 products, F32 sums. The parts share one job per row block
/// (gemm_columns): x packed once, one meeting of the threads, where separate calls would pack it
/// and meet once per weight (attention's q | k | v, SwiGLU's gate | up at prefill). Parts that
/// cannot share (groups() false) run one by one, with the same results. x in row blocks of at most
/// packed::kColumnSplitMaxA words of packed x, each streaming the weights once more.
inline void linear_group(const float* x, index_t rows, index_t K, std::span<const Part> parts) {
  if (rows == 0 || parts.empty()) return;
  if (parts.size() > 1 && !groups(parts, K)) {
    for (const Part& p : parts) linear_group(x, rows, K, std::span<const Part>(&p, 1));
    return;
  }
  if (parts[0].w->rows == 0) return;
  const index_t pairs = (K + 1) / 2;
  auto run = [&]<class Tl>(Tl) {
    const index_t block = std::max(Tl::MR, packed::kColumnSplitMaxA / std::max<index_t>(pairs, 1) / Tl::MR * Tl::MR);
    for (index_t m0 = 0; m0 < rows; m0 += block) gemm_columns<Tl>(x, m0, std::min(block, rows - m0), K, parts);
  };
  if (tile_for(parts[0].w->rows) == 1) run(packed::AltTile{});
  else run(packed::WideTile{});
}

/// y = round_bf16(x) W^T (+ bias) (+ residual) for x [rows, w.cols], y and residual [rows, w.rows]:
/// linear_group with one part.
inline void linear(const float* x, index_t rows, const io::Bf16Matrix& w, const float* bias, const float* residual,
                   float* y) {
  const Part part{&w, bias, residual, y};
  linear_group(x, rows, w.cols, std::span<const Part>(&part, 1));
}

/// Values of x per `vdpbf16ps` step of the batch-1 GEMV: one zmm of BF16.
inline constexpr index_t kGemvStep = 32;

/// x [K] rounded to BF16 (nearest even, `vcvtneps2bf16`, as the GEMM packs x) into `xb`, which
/// holds whole steps: ceil(K / kGemvStep) * kGemvStep values, zero past K. Vectorised because it
/// runs once per projection per token, serially before the threads start: the scalar
/// io::float_to_bf16 loop took about 2.5% of a decode step (docs/design.md, helper decode16).
inline void round_row(const float* x, index_t K, std::uint16_t* xb) {
  const index_t padded = (K + kGemvStep - 1) / kGemvStep * kGemvStep;
  for (index_t k = 0; k < padded; k += 16) {
    const index_t live = K > k ? std::min<index_t>(16, K - k) : 0;
    const __mmask16 m = live == 16 ? __mmask16(0xFFFF) : __mmask16((1u << live) - 1u);
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + k));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + k), reinterpret_cast<__m256i>(r));
  }
}

/// Output rows [o0, o1) of the batch-1 product y[o] = xb . w[o] (+ bias[o]) (+ residual[o]), xb from
/// round_row: `vdpbf16ps` on W's rows as they lie in memory (32 values per instruction, a masked
/// load for the tail), R weight rows per pass (R streams in flight). Each row's sum is two chains
/// (even and odd steps) added at the end, whatever R is, so R changes no bit. PF > 0: a `prefetcht0`
/// of every line PF bytes ahead of each row's loads. gemv_rows picks R and PF; the other shapes are
/// here for bench_llm_decode's A/B (TTMOE_COMPARE_GEMV).
/// Serial: the callers split the rows over threads.
template <index_t R, index_t PF = 0>
inline void gemv_rows_by(const std::uint16_t* xb, const io::Bf16Matrix& w, const float* bias, const float* residual,
                         float* y, index_t o0, index_t o1) {
  const index_t K = w.cols, steps = (K + kGemvStep - 1) / kGemvStep;
  const __mmask32 tail = K % 32 == 0 ? __mmask32(0xFFFFFFFFu) : __mmask32((1u << (K % 32)) - 1u);
  auto finish = [&](index_t o, __m512 acc) {
    float v = _mm512_reduce_add_ps(acc);
    if (bias) v += bias[o];
    if (residual) v += residual[o];
    y[o] = v;
  };
  index_t o = o0;
  auto rows_pass = [&]<index_t NW>(std::integral_constant<index_t, NW>) {
    // Two accumulators per row (even and odd steps): independent chains hide vdpbf16ps' latency.
    __m512 acc[NW][2];
    for (index_t j = 0; j < NW; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
    auto step = [&](index_t s, int slot, __mmask32 m) {
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + 32 * s));
#pragma GCC unroll 8
      for (index_t j = 0; j < NW; ++j) {
        if constexpr (PF > 0)
          _mm_prefetch(reinterpret_cast<const char*>(w.bits + (o + j) * K + 32 * s) + PF, _MM_HINT_T0);
        acc[j][slot] = _mm512_dpbf16_ps(
            acc[j][slot], reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, w.bits + (o + j) * K + 32 * s)), xv);
      }
    };
    const __mmask32 all = __mmask32(0xFFFFFFFFu);
    index_t s = 0;
    for (; s + 2 < steps; s += 2) step(s, 0, all), step(s + 1, 1, all);
    for (; s + 1 < steps; ++s) step(s, 0, all);
    step(s, 1, tail);  // the last step: masked, so no read passes the row
    for (index_t j = 0; j < NW; ++j) finish(o + j, _mm512_add_ps(acc[j][0], acc[j][1]));
    o += NW;
  };
  while (o + R <= o1) rows_pass(std::integral_constant<index_t, R>{});
  while (o < o1) rows_pass(std::integral_constant<index_t, 1>{});
}

/// Bytes ahead of its loads at which gemv_rows prefetches its one stream (`prefetcht0`, every line).
/// 8 KiB: two 4 KiB rows of a 2048-wide matrix, half a row of an 8192-wide one.
inline constexpr index_t kGemvPrefetchBytes = 8192;

/// gemv_rows_by with ONE row per pass and a `prefetcht0` kGemvPrefetchBytes ahead: the rows of an
/// item lie back to back, so each thread reads one sequential stream and tells the memory where it
/// goes before the hardware prefetchers would. Against 4 rows per pass without a prefetch (4 streams
/// 4-16 KiB apart, bw17's kernel) it streams 1.1-1.2x as fast over the model's own weights in 2 MiB
/// pages, and faster than a plain read of the same bytes (bench_llm_decode --compare with
/// TTMOE_COMPARE_GEMV; docs/design.md, #14 decode, helper decode19). Same sums in the same order.
inline void gemv_rows(const std::uint16_t* xb, const io::Bf16Matrix& w, const float* bias, const float* residual,
                      float* y, index_t o0, index_t o1) {
  gemv_rows_by<1, kGemvPrefetchBytes>(xb, w, bias, residual, y, o0, o1);
}

/// Batch 1 (decode): y[o] = round_bf16(x) . w[o] (+ bias[o]) (+ residual[o]) for one activation row,
/// x rounded once (round_row), the threads splitting the output rows (gemv_rows). Measured against
/// the dot-product kernel in bench_bf16_decode (docs/design.md): at batch 1 both wait on memory.
inline void gemv(const float* x, const io::Bf16Matrix& w, const float* bias, const float* residual, float* y) {
  if (w.cols == 0) return;
  std::vector<std::uint16_t> xb(std::size_t((w.cols + kGemvStep - 1) / kGemvStep * kGemvStep));
  round_row(x, w.cols, xb.data());
  parallel_for(w.rows, 16, [&](index_t o0, index_t o1) { gemv_rows(xb.data(), w, bias, residual, y, o0, o1); });
}

}  // namespace ttmoe::cpu_backend::bf16dot

#endif  // __AVX512BF16__ && __AVX512F__
