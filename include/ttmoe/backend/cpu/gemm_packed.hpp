#pragma once
// float GEMM for AVX-512 and AVX2+FMA builds: packed panels, a register-blocked micro-kernel, and
// one parallel job over the thread pool that shares the packed B panel between threads. The kernel
// is written once over an ISA traits struct (PackedIsa: vector register, its width, the few
// intrinsics the kernel uses); the build's ISA picks the traits and the tile shapes.
//
// Why not Eigen's kernel here: with AVX-512, Eigen 3.4's float GEBP kernel is 48 x 4 (12 of the 32
// vector registers hold accumulators) and each thread of a split GEMM packs its own copy of the
// shared operand; together that measured 0.85-0.87 of OpenBLAS at 2 threads on ViT-B/16's shapes
// (0.85-0.89 on AVX2, where the fused epilogues also ran as passes of their own). On AVX-512 the
// tile keeps 24 accumulators (8 rows x 3 vectors of C) and loads 3 vectors of B plus 8 broadcasts
// of A per step of k; on AVX2 (16 ymm registers) 6 rows x 2 vectors: 12 accumulators, 2 of B, 1
// broadcast. B is packed once per k-block by all threads together, A once per thread, and the loops
// keep an A sliver (KC x MR) in L1 while a B block (KC x NC) stays in L2.
//
// Row-major C[M, N] = alpha op(A)[M, K] op(B)[K, N] + beta C. Packed layouts: A slivers of MR rows
// as [k][r], B slivers of NR columns as [k][c], each zero-padded to a full sliver. B may also be BF16
// bits (a BF16-resident weight, backend/cpu/linear_bf16.hpp's prefill): pack_b widens them into the
// F32 panel, so everything after packing is the F32 kernel.
// Two schedules over that kernel: gemm_tiled (threads split C's rows, one shared panel of all of B)
// and gemm_column_split (threads split C's columns, A packed whole, B a block at a time: an LLM's
// weight at prefill); gemm_scheduled picks (splits_columns).

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define TTMOE_PACKED_GEMM 1

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "ttmoe/backend/cpu/gemm_epilogue.hpp"
#include "ttmoe/simd/math.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe::cpu_backend::packed {

#if defined(__AVX512F__)
/// The AVX-512 vector unit as the kernel sees it: 16 float lanes in a zmm register.
struct PackedIsa {
  using reg = __m512;
  using batch = xsimd::batch<float, xsimd::avx512f>;  // what an activation's apply/vjp takes
  static constexpr int W = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static void store_aligned(float* p, reg v) { _mm512_store_ps(p, v); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  /// Reads one float from each of W rows `ld` apart (lanes >= `live` read as 0): a column of a
  /// transposed B. Set up once per sliver vector, then load() per k.
  struct ColumnGather {
    __m512i idx;
    __mmask16 live;
    ColumnGather(index_t first_row, index_t live_rows, index_t ld)
        : idx(_mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(int(first_row)),
                                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                                 _mm512_set1_epi32(int(ld)))),
          live(live_rows >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << live_rows) - 1u)) {}
    reg load(const float* base) const { return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx, base, 4); }
  };
  /// Reads two consecutive BF16 values (k, k + 1) from each of W rows `ld` apart as one 32-bit word
  /// and widens them: the low half shifted up is element k, the high half masked is k + 1 (lanes >=
  /// `live` read as 0). A column pair of a transposed BF16 B, one gather per two k; the offsets and
  /// live lanes are ColumnGather's (in elements: this gather scales them by 2 bytes, not 4).
  struct Bf16PairGather : ColumnGather {
    using ColumnGather::ColumnGather;
    void load(const std::uint16_t* base, reg& even, reg& odd) const {
      const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base, 2);
      even = _mm512_castsi512_ps(_mm512_slli_epi32(words, 16));
      odd = _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(int(0xFFFF0000u))));
    }
  };
};
#else
/// The AVX2+FMA vector unit as the kernel sees it: 8 float lanes in a ymm register.
struct PackedIsa {
  using reg = __m256;
  using batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;  // what an activation's apply/vjp takes
  static constexpr int W = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static void store_aligned(float* p, reg v) { _mm256_store_ps(p, v); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  /// Reads one float from each of W rows `ld` apart (lanes >= `live` read as 0): a column of a
  /// transposed B. Set up once per sliver vector, then load() per k.
  struct ColumnGather {
    __m256i idx;
    __m256 live;
    ColumnGather(index_t first_row, index_t live_rows, index_t ld)
        : idx(_mm256_mullo_epi32(_mm256_add_epi32(_mm256_set1_epi32(int(first_row)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                 _mm256_set1_epi32(int(ld)))),
          live(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<index_t>(live_rows, 0, 8))),
                                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)))) {}
    reg load(const float* base) const { return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, live, 4); }
  };
  /// Reads two consecutive BF16 values (k, k + 1) from each of W rows `ld` apart as one 32-bit word
  /// and widens them: the low half shifted up is element k, the high half masked is k + 1 (lanes >=
  /// `live` read as 0). A column pair of a transposed BF16 B, one gather per two k; the offsets and
  /// live lanes are ColumnGather's (in elements: this gather scales them by 2 bytes, not 4).
  struct Bf16PairGather : ColumnGather {
    using ColumnGather::ColumnGather;
    void load(const std::uint16_t* base, reg& even, reg& odd) const {
      const __m256i words =
          _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(base), idx,
                                      _mm256_castps_si256(live), 2);
      even = _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
      odd = _mm256_castsi256_ps(_mm256_and_si256(words, _mm256_set1_epi32(int(0xFFFF0000u))));
    }
  };
};
#endif

using V = PackedIsa;
inline constexpr int W = PackedIsa::W;

/// A micro-tile shape: MR rows of C (broadcasts of A) x NR columns (NR / W vectors of B).
template <index_t MR_, index_t NR_>
struct Tile {
  static constexpr index_t MR = MR_, NR = NR_;
  static constexpr int NV = int(NR_ / W);
  static_assert(NR_ % W == 0, "a sliver is whole vectors");
};
#if defined(__AVX512F__)
// 24 accumulators either way. 8 x 48 is the default; 6 x 64 serves widths that are multiples of 64
// but not of 48 (attention's head dimension), where 48-wide slivers would be a third padding.
using WideTile = Tile<8, 48>;
using AltTile = Tile<6, 64>;
inline constexpr index_t NC = 384;  // columns per B block within a k-block (576 KiB, L2); a multiple of both NRs
#else
// 12 accumulators + 2 B vectors + 1 broadcast of the 16 ymm registers; one shape serves every width.
using WideTile = Tile<6, 16>;
using AltTile = WideTile;
inline constexpr index_t NC = 256;  // columns per B block within a k-block (384 KiB: Zen's 512 KiB L2)
#endif
inline constexpr index_t MR = std::min(WideTile::MR, AltTile::MR);  // the smallest row block any tile shape takes
inline constexpr index_t NR = std::min(WideTile::NR, AltTile::NR);  // the narrowest sliver
inline constexpr index_t KC = 384;  // depth of a packed block: an A sliver (<= 12 KiB) stays in L1

/// How a micro-tile's result meets C: C = alpha acc (+ bias and residual when given; beta 0, C not
/// read: it may be uninitialised), C = beta C + alpha acc (first k-block), or C += alpha acc (later
/// k-blocks).
enum class Update { assign, scale_add, add };

/// Writes the accumulators of a micro-tile to C (mr x nr of it, leading dimension ldc) as `up` says.
/// `ep` is the GEMM's epilogue moved to this tile (GemmEpilogue::at): its bias and residual join the
/// first k-block's store, its activation (Act, void for none) the last one's (`last`), so the
/// activation sees the finished sum.
template <class Tl, class Act>
__attribute__((always_inline)) inline void store_tile(typename V::reg (&acc)[Tl::MR][Tl::NV], float* c, index_t ldc,
                                                      float alpha, float beta, Update up, bool last,
                                                      const ttmoe::GemmEpilogue<float>& ep, index_t mr, index_t nr) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  constexpr int NV = Tl::NV;
    const bool act = !std::is_void_v<Act> && last;
  const float* res = up == Update::add ? nullptr : ep.residual;
  if (mr == MR && nr == NR) {
    const typename V::reg al = V::set1(alpha), be = V::set1(beta);
    typename V::reg bb[NV];
    for (int v = 0; v < NV; ++v) bb[v] = ep.bias ? V::load(ep.bias + W * v) : V::zero();
    for (index_t r = 0; r < MR; ++r) {
      float* cr = c + r * ldc;
      for (int v = 0; v < NV; ++v) {
        const typename V::reg x = V::mul(al, acc[r][v]);
        typename V::reg y;
        if (up == Update::assign) y = V::add(x, bb[v]);
        else if (up == Update::scale_add) y = V::fmadd(be, V::load(cr + W * v), x);
        else y = V::add(V::load(cr + W * v), x);
        if (res) y = V::add(y, V::load(res + r * ep.ld_residual + W * v));
        if constexpr (!std::is_void_v<Act>) {
          if (act) {
            if (ep.act_input) {  // the activation's VJP at its input, applied to the gradient y
              typename V::batch ga;
              Act::vjp(typename V::batch(V::load(ep.act_input + r * ep.ld_act_input + W * v)), typename V::batch(0.f),
                       typename V::batch(y), ga);
              y = ga;
            } else if (ep.activated) {  // keep the pre-activation in C, the activation beside it
              V::store(ep.activated + r * ep.ld_activated + W * v, Act::apply(typename V::batch(y)));
            } else {
              y = Act::apply(typename V::batch(y));
            }
          }
        }
        V::store(cr + W * v, y);
      }
    }
    return;
  }
  alignas(64) float t[MR * NR];  // an edge tile: only its mr x nr corner reaches C
  for (index_t r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) V::store_aligned(t + r * NR + W * v, acc[r][v]);
  for (index_t r = 0; r < mr; ++r)
    for (index_t j = 0; j < nr; ++j) {
      float& y = c[r * ldc + j];
      const float x = alpha * t[r * NR + j];
      float v = up == Update::assign ? x + (ep.bias ? ep.bias[j] : 0.f) : up == Update::scale_add ? beta * y + x : y + x;
      if (res) v += res[r * ep.ld_residual + j];
      if constexpr (!std::is_void_v<Act>) {
        if (act) v = ep.finish_scalar<Act>(v, r, j);
      }
      y = v;
    }
}

/// One micro-tile: acc = A sliver x B sliver over kc, then store_tile. A is a packed sliver
/// ([k][r], `rows` null) or, unpacked, MR row pointers stepping `a_k` floats per k (read in place
/// when B has so few slivers that packing A would cost more than it saves).
template <class Tl, class Act>
inline void micro_kernel(index_t kc, const float* a, const float* const* rows, index_t a_k, const float* b, float* c,
                         index_t ldc, float alpha, float beta, Update up, bool last, const ttmoe::GemmEpilogue<float>& ep,
                         index_t mr, index_t nr) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  constexpr int NV = Tl::NV;
  typename V::reg acc[MR][NV];
#pragma GCC unroll 8
  for (index_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  if (!rows) {
    for (index_t k = 0; k < kc; ++k) {
      typename V::reg bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = V::load(b + W * v);
#pragma GCC unroll 8
      for (index_t r = 0; r < MR; ++r) {
        const typename V::reg av = V::set1(a[r]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(av, bv[v], acc[r][v]);
      }
      a += MR;
      b += NR;
    }
  } else {
    for (index_t k = 0, off = 0; k < kc; ++k, off += a_k) {
      typename V::reg bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = V::load(b + W * v);
#pragma GCC unroll 8
      for (index_t r = 0; r < MR; ++r) {
        const typename V::reg av = V::set1(rows[r][off]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(av, bv[v], acc[r][v]);
      }
      b += NR;
    }
  }
  store_tile<Tl, Act>(acc, c, ldc, alpha, beta, up, last, ep, mr, nr);
}

/// Packs op(A)[m0 : m0 + mc, k0 : k0 + kc] into slivers of MR rows ([k][r], zero rows past mc).
template <class Tl>
inline void pack_a(bool ta, const float* A, index_t lda, index_t m0, index_t mc, index_t k0, index_t kc, float* out) {
  constexpr index_t MR = Tl::MR;
  for (index_t i = 0; i < mc; i += MR) {
    const index_t h = std::min(MR, mc - i);
    float* o = out + (i / MR) * kc * MR;
    if (ta) {  // op(A)(m, k) = A[k, m]: each k reads h consecutive values
      for (index_t k = 0; k < kc; ++k) {
        const float* src = A + (k0 + k) * lda + m0 + i;
        for (index_t r = 0; r < h; ++r) o[k * MR + r] = src[r];
        for (index_t r = h; r < MR; ++r) o[k * MR + r] = 0.f;
      }
    } else if (h == MR) {  // MR row streams read in step, contiguous writes
      const float* src[MR];
      for (index_t r = 0; r < MR; ++r) src[r] = A + (m0 + i + r) * lda + k0;
      for (index_t k = 0; k < kc; ++k)
#pragma GCC unroll 8
        for (index_t r = 0; r < MR; ++r) o[k * MR + r] = src[r][k];
    } else {
      for (index_t k = 0; k < kc; ++k)
        for (index_t r = 0; r < MR; ++r) o[k * MR + r] = r < h ? A[(m0 + i + r) * lda + k0 + k] : 0.f;
    }
  }
}

/// The float a BF16 value stands for: its 16 bits are the float's upper half.
inline float widen_bf16(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t(bits) << 16); }

/// 8 consecutive values of a row of B as floats: 8 floats, or 8 BF16 values widened (zero-extended
/// to 32 bits and shifted into the upper half).
template <class BE>
__attribute__((always_inline)) inline __m256 load8_widened(const BE* p) {
  if constexpr (std::is_same_v<BE, float>)
    return _mm256_loadu_ps(p);
  else
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

/// Transposes the 8 x 8 block r[0..7] (row i = r[i]) in registers: afterwards r[i] is column i.
__attribute__((always_inline)) inline void transpose_8x8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  // s0: elements 0 and 4 of rows 0-3, s1: 1 and 5, s2: 2 and 6, s3: 3 and 7; s4-s7 the same of rows 4-7.
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/// Packs one whole sliver of a transposed B: NR rows of B (`base`, ldb apart, from its k0) become kc
/// packed rows [k][c]. Blocks of 8 rows x 8 k are loaded as 8 vectors (contiguous reads along each
/// row of B), widened if BF16, transposed in registers and stored as 8 k-rows of 8 columns: about a
/// quarter of a cycle per value, where one gather per vector costs about one. 8-wide at every ISA
/// (every NR is a multiple of 8); a depth past the last multiple of 8 goes value by value.
template <index_t NR, class BE>
inline void pack_transposed_sliver(const BE* base, index_t ldb, index_t kc, float* o) {
  index_t k = 0;
  for (; k + 8 <= kc; k += 8)
    for (index_t g = 0; g < NR; g += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = load8_widened(base + (g + index_t(i)) * ldb + k);
      transpose_8x8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(o + (k + index_t(i)) * NR + g, r[i]);
    }
  for (; k < kc; ++k)
    for (index_t c = 0; c < NR; ++c) {
      if constexpr (std::is_same_v<BE, float>) o[k * NR + c] = base[c * ldb + k];
      else o[k * NR + c] = widen_bf16(base[c * ldb + k]);
    }
}

/// Packs op(B)[k0 : k0 + kc, n0 : n0 + nc] into slivers of NR columns ([k][c], zero columns past nc).
/// BE is B's element: float, or std::uint16_t holding BF16 bits (a BF16-resident weight), widened to
/// float here, so the packed panel and the micro-kernel are the same for both (the packing buffer is
/// F32 anyway, and widening is a shift).
template <class Tl, class BE>
inline void pack_b(bool tb, const BE* B, index_t ldb, index_t k0, index_t kc, index_t n0, index_t nc, float* out) {
  static_assert(std::is_same_v<BE, float> || std::is_same_v<BE, std::uint16_t>, "B is float or BF16 bits");
  constexpr bool bf16 = std::is_same_v<BE, std::uint16_t>;
  constexpr index_t NR = Tl::NR;
  constexpr int NV = Tl::NV;
  for (index_t j = 0; j < nc; j += NR) {
    const index_t w = std::min(NR, nc - j);
    float* o = out + (j / NR) * kc * NR;
    if (!tb) {  // rows of B are contiguous: copy (or widen) w values per k
      for (index_t k = 0; k < kc; ++k) {
        const BE* src = B + (k0 + k) * ldb + n0 + j;
        if constexpr (bf16)
          for (index_t c = 0; c < w; ++c) o[k * NR + c] = widen_bf16(src[c]);
        else
          std::memcpy(o + k * NR, src, std::size_t(w) * sizeof(float));
        for (index_t c = w; c < NR; ++c) o[k * NR + c] = 0.f;
      }
      continue;
    }
    const BE* base = B + (n0 + j) * ldb + k0;
    if (w == NR) {  // a whole sliver: 8 x 8 blocks transposed in registers
      pack_transposed_sliver<NR>(base, ldb, kc, o);
      continue;
    }
    // op(B)(k, n) = B[n, k] for a narrow last sliver: per k, gather one value from each of W rows of
    // B per vector.
    // Rows of B behind vector v of this sliver: w - W v, or none. index_t is unsigned, so w - W v
    // for a narrow last sliver would wrap to a huge count, enable every lane and gather rows past B.
    const auto live_rows = [w](int first) { return w > index_t(first) ? w - index_t(first) : index_t(0); };
    if constexpr (bf16) {
      // One 32-bit gather per two k: both values lie inside the row (k + 1 < kc), so no read
      // passes the end of a row or of the (possibly memory-mapped) matrix. An odd kc leaves its
      // last k to a scalar loop.
      const std::array<typename V::Bf16PairGather, NV> cols = [&]<int... v>(std::integer_sequence<int, v...>) {
        return std::array<typename V::Bf16PairGather, NV>{typename V::Bf16PairGather(W * v, live_rows(W * v), ldb)...};
      }(std::make_integer_sequence<int, NV>{});
      index_t k = 0;
      for (; k + 2 <= kc; k += 2)
        for (int v = 0; v < NV; ++v) {
          typename V::reg even, odd;
          cols[std::size_t(v)].load(base + k, even, odd);
          V::store(o + k * NR + W * v, even);
          V::store(o + (k + 1) * NR + W * v, odd);
        }
      if (k < kc) {
        for (index_t c = 0; c < w; ++c) o[k * NR + c] = widen_bf16(base[c * ldb + k]);
        for (index_t c = w; c < NR; ++c) o[k * NR + c] = 0.f;
      }
    } else {
      const std::array<typename V::ColumnGather, NV> cols = [&]<int... v>(std::integer_sequence<int, v...>) {
        return std::array<typename V::ColumnGather, NV>{typename V::ColumnGather(W * v, live_rows(W * v), ldb)...};
      }(std::make_integer_sequence<int, NV>{});
      for (index_t k = 0; k < kc; ++k)
        for (int v = 0; v < NV; ++v) V::store(o + k * NR + W * v, cols[std::size_t(v)].load(base + k));
    }
  }
}

/// Scratch for packed panels. Up to `kCap` floats it is the calling thread's own grow-only buffer
/// (slot 0 for B, 1 for A), kept between calls: GEMMs repeat their shapes, and blocks from the
/// caching pool would share size classes with activations, which raised the MoETTA step's peak RSS
/// by ~40 MB when B came to be packed whole. Beyond the cap, a pool block for this call only.
class PackScratch {
 public:
  PackScratch(index_t n, int slot) : n_(n) {
    if (n <= kCap) {
      Slot& s = slots()[std::size_t(slot)];
      if (s.capacity < n) s.grow(n);
      data_ = s.data;
    } else {
      data_ = cpu::allocate<float>(n);
      pooled_ = true;
    }
  }
  ~PackScratch() {
    if (pooled_) cpu::deallocate<float>(data_, n_);
  }
  PackScratch(const PackScratch&) = delete;
  PackScratch& operator=(const PackScratch&) = delete;
  float* get() const { return data_; }

 private:
  static constexpr index_t kCap = index_t(8) << 20;  // 32 MiB of floats per slot and thread
  struct Slot {
    float* data = nullptr;
    index_t capacity = 0;
    void grow(index_t n) {
      std::free(data);
      data = nullptr, capacity = 0;
      data = static_cast<float*>(std::aligned_alloc(64, (std::size_t(n) * sizeof(float) + 63) / 64 * 64));
      if (!data) throw std::bad_alloc();
      capacity = n;
    }
    ~Slot() { std::free(data); }
  };
  static std::array<Slot, 2>& slots() {
    thread_local std::array<Slot, 2> s;
    return s;
  }
  float* data_ = nullptr;
  index_t n_ = 0;
  bool pooled_ = false;
};

/// The packing phase of a parallel GEMM: threads take packing units from a shared counter and meet
/// when every unit is packed, not when every thread has arrived, so a thread that starts late (or
/// never: ThreadPool::run_on_available) finds the panel ready instead of holding the others at a
/// barrier; the units are the same whoever packs them.
class PackCounter {
 public:
  /// The next unit to pack (>= the unit count when none is left).
  index_t claim() { return next_.fetch_add(1, std::memory_order_relaxed); }
  /// Marks one claimed unit packed.
  void done() { done_.fetch_add(1, std::memory_order_acq_rel); }
  /// Waits until `units` units are packed.
  void wait_all(index_t units) const {
    while (done_.load(std::memory_order_acquire) < units) __builtin_ia32_pause();
  }

 private:
  std::atomic<index_t> next_{0}, done_{0};
};

/// True when this kernel should take the problem: enough rows for every pool thread to own several
/// slivers (the split is over M), and enough work to amortise packing.
inline bool suits(index_t M, index_t N, index_t K) {
  // pack_b gathers with 32-bit offsets of up to NR rows of a transposed B.
  if (double(NR) * double(K) >= 2147483647.0) return false;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  return flops >= 4e6 && M >= 4 * MR * index_t(ThreadPool::instance().num_threads()) && N >= NR;
}

/// C = alpha op(A) op(B) + beta C on the pool's threads (serially inside a parallel region) with
/// micro-tile shape Tl, finished by the epilogue `ep` (bias, residual, activation Act; see
/// GemmEpilogue) in the same single pass over C.
///
/// The threads first pack all of op(B) together (every k-block, units from a PackCounter), then take
/// chunks of rows of C from a shared counter and run each chunk through every k-block. Taking chunks
/// rather than a fixed half each matters on shared machines: a static split with a barrier per
/// k-block measured ~9% of a MoETTA step's thread time spent waiting for the other thread's share.
/// For the same reason the pool runs the job with run_on_available: all work comes from counters.
template <class Tl, class Act, class BE>
inline void gemm_tiled(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                       const BE* B, index_t ldb, float beta, float* C, index_t ldc, const ttmoe::GemmEpilogue<float>& ep) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  auto& pool = ThreadPool::instance();
  const std::size_t threads = ThreadPool::in_parallel() ? 1 : pool.num_threads();
  const index_t kc_max = std::min(KC, K), slivers = (N + NR - 1) / NR, k_blocks = (K + KC - 1) / KC;
  // Each element of a packed A sliver is read once per B sliver: with one or two slivers the copy
  // costs about what it saves, so A is then read in place.
  const bool pack_a_too = slivers > 2;
  const index_t block_len = KC * slivers * NR;  // packed k-block kb starts at kb * block_len
  const index_t b_len = (k_blocks - 1) * block_len + kc_max * slivers * NR;
  // Row chunks: several per thread, so a thread slowed down for a while hands work to the other, but
  // of at least 12 slivers where M allows two chunks per thread: a chunk reads each B block from L3
  // once and then from L2 once per further sliver (768 x 768 x 768 lost ~10% with 6-sliver chunks).
  const index_t units = (M + MR - 1) / MR, nt = index_t(threads);
  const index_t chunk_units = std::max<index_t>({1, units / (8 * nt), std::min<index_t>(12, units / (2 * nt))});
  const index_t chunk_rows = chunk_units * MR, chunks = (units + chunk_units - 1) / chunk_units;
  const index_t a_len = chunk_rows * kc_max;
  const PackScratch b_scratch(b_len, 0), a_scratch(a_len * index_t(threads), 1);
  float* bp = b_scratch.get();
  float* ap = a_scratch.get();
  const index_t pack_units = k_blocks * slivers;  // (k-block, sliver) pairs, taken from a counter
  PackCounter packing;
  std::atomic<index_t> next_chunk{0};
  auto job = [&](std::size_t t, std::size_t) {
    for (index_t u = packing.claim(); u < pack_units; u = packing.claim()) {
      const index_t kb = u / slivers, s = u % slivers, k0 = kb * KC;
      pack_b<Tl>(tb, B, ldb, k0, std::min(KC, K - k0), s * NR, std::min(NR, N - s * NR),
                 bp + kb * block_len + s * std::min(KC, K - k0) * NR);
      packing.done();
    }
    packing.wait_all(pack_units);  // nobody reads B before all of it is packed
    float* my_a = ap + index_t(t) * a_len;
    for (index_t c = next_chunk.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next_chunk.fetch_add(1, std::memory_order_relaxed)) {
      const index_t r0 = c * chunk_rows, r1 = std::min(M, r0 + chunk_rows);
      for (index_t k0 = 0; k0 < K; k0 += KC) {
        const index_t kc = std::min(KC, K - k0);
        const float* bk = bp + (k0 / KC) * block_len;
        const Update up = k0 > 0 ? Update::add : beta == 0.f ? Update::assign : Update::scale_add;
        const bool last = k0 + KC >= K;
        if (pack_a_too) pack_a<Tl>(ta, A, lda, r0, r1 - r0, k0, kc, my_a);
        for (index_t n0 = 0; n0 < N; n0 += NC) {
          const index_t n1 = std::min(N, n0 + NC);
          for (index_t i = 0; i < r1 - r0; i += MR) {
            const index_t mr = std::min(MR, r1 - r0 - i);
            const float* rows[MR];  // unpacked A: row r of the tile at column k0 (edge rows repeat row 0)
            if (!pack_a_too)
              for (index_t r = 0; r < MR; ++r) {
                const index_t m = r0 + i + (r < mr ? r : 0);
                rows[r] = ta ? A + k0 * lda + m : A + m * lda + k0;
              }
            const float* as = my_a + (i / MR) * kc * MR;
            for (index_t j = n0; j < n1; j += NR)
              micro_kernel<Tl, Act>(kc, as, pack_a_too ? nullptr : rows, ta ? lda : 1, bk + (j / NR) * kc * NR,
                                    C + (r0 + i) * ldc + j, ldc, alpha, beta, up, last, ep.at(r0 + i, j), mr,
                                    std::min(NR, N - j));
          }
        }
      }
    }
  };
  if (threads == 1) job(0, 1);
  else pool.run_on_available(job);
}

/// The schedule of a column-split GEMM, shared by the F32 kernel and the BF16-products one
/// (gemm_bf16dot.hpp): the threads first pack A together, taking `pack_units` units from a
/// PackCounter (`pack_a_unit(u)`), and meet when all are packed; then each takes column units
/// u < `units` of C from a second counter and computes them whole (`column_unit(thread, u)`, which
/// packs its own B blocks into that thread's scratch). Every unit comes from a counter, so the pool
/// runs the job with run_on_available: a thread that starts late finds less (or nothing) left to do
/// instead of holding the others at a barrier. `threads` == 1 runs it on the caller alone.
template <class PackAUnit, class ColumnUnit>
inline void run_column_split(std::size_t threads, index_t pack_units, index_t units, PackAUnit&& pack_a_unit,
                             ColumnUnit&& column_unit) {
  PackCounter packing;
  std::atomic<index_t> next_unit{0};
  auto job = [&](std::size_t t, std::size_t) {
    for (index_t u = packing.claim(); u < pack_units; u = packing.claim()) {
      pack_a_unit(u);
      packing.done();
    }
    packing.wait_all(pack_units);  // nobody reads A before all of it is packed
    for (index_t u = next_unit.fetch_add(1, std::memory_order_relaxed); u < units;
         u = next_unit.fetch_add(1, std::memory_order_relaxed))
      column_unit(t, u);
  };
  if (threads == 1) job(0, 1);
  else ThreadPool::instance().run_on_available(job);
}

/// Target width of gemm_column_split's work unit in columns of C (rounded down to whole slivers): a
/// KC x 128 block of packed B is 192 KiB, so it stays in a 512 KiB L2 next to the A slivers and C
/// tiles that pass it.
inline constexpr index_t kColumnUnit = 128;
/// Floats of op(B) from which an F32 GEMM with a wide B takes gemm_column_split (measured, docs/
/// design.md "LLM prefill"): below it, gemm_tiled's one shared panel is packed while still in cache.
inline constexpr index_t kColumnSplitMinB = index_t(2) << 20;  // 8 MiB of F32

/// C = alpha op(A) op(B) + beta C for a B wider and larger than A is tall, an LLM's weight at prefill
/// (x [512, 2048] times W^T, W up to [8192, 2048]): the threads split C's COLUMNS, so each packs and
/// streams only its own columns of B, once. The threads first pack all of op(A) together into one
/// shared buffer (M x K floats; A is the small operand here; units from a PackCounter); then each takes
/// units of kColumnUnit columns from a shared counter and, per k-block, packs that unit's KC x unit
/// block of B into its own L2-resident buffer and runs every row sliver of A past it.
///
/// Against gemm_tiled (one whole packed B shared by row chunks): no panel of all of op(B) is written
/// to memory and read back once per row chunk (for an 8192 x 2048 weight that panel is 64 MiB, read 8
/// times at 512 rows), and a BF16 B is widened into a block of a few hundred KiB instead of a panel
/// twice its size (which had to go in column blocks to keep an LLM's peak RSS under 1.15 x its
/// weights). Units from a counter, not a fixed half each, for the reason gemm_tiled takes row chunks.
template <class Tl, class Act, class BE>
inline void gemm_column_split(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A,
                              index_t lda, const BE* B, index_t ldb, float beta, float* C, index_t ldc,
                              const ttmoe::GemmEpilogue<float>& ep) {
  constexpr index_t MR = Tl::MR, NR = Tl::NR;
  constexpr index_t unit = NR * std::max<index_t>(1, kColumnUnit / NR);
  const std::size_t threads = ThreadPool::in_parallel() ? 1 : ThreadPool::instance().num_threads();
  const index_t m_slivers = (M + MR - 1) / MR, m_padded = m_slivers * MR, k_blocks = (K + KC - 1) / KC;
  const index_t units = (N + unit - 1) / unit, b_len = std::min(KC, K) * unit;
  // Packed A: k-block kb (from k0 = kb KC) starts at k0 * m_padded and holds m_slivers slivers of
  // kc x MR. B: one unit's k-block per thread.
  const PackScratch a_scratch(m_padded * K, 1), b_scratch(b_len * index_t(threads), 0);
  float* ap = a_scratch.get();
  const index_t pack_units = k_blocks * m_slivers;  // (k-block, row sliver) pairs
  run_column_split(
      threads, pack_units, units,
      [&](index_t u) {
        const index_t kb = u / m_slivers, s = u % m_slivers, k0 = kb * KC, kc = std::min(KC, K - k0);
        pack_a<Tl>(ta, A, lda, s * MR, std::min(MR, M - s * MR), k0, kc, ap + k0 * m_padded + s * kc * MR);
      },
      [&](std::size_t t, index_t u) {
        float* bp = b_scratch.get() + index_t(t) * b_len;
        const index_t n0 = u * unit, nc = std::min(unit, N - n0);
        for (index_t k0 = 0; k0 < K; k0 += KC) {
          const index_t kc = std::min(KC, K - k0);
          pack_b<Tl>(tb, B, ldb, k0, kc, n0, nc, bp);
          const Update up = k0 > 0 ? Update::add : beta == 0.f ? Update::assign : Update::scale_add;
          const bool last = k0 + KC >= K;
          const float* ak = ap + k0 * m_padded;
          for (index_t s = 0; s < m_slivers; ++s) {
            const index_t m0 = s * MR, mr = std::min(MR, M - m0);
            for (index_t j = 0; j < nc; j += NR)
              micro_kernel<Tl, Act>(kc, ak + s * kc * MR, nullptr, 1, bp + (j / NR) * kc * NR, C + m0 * ldc + n0 + j,
                                    ldc, alpha, beta, up, last, ep.at(m0, n0 + j), mr, std::min(NR, nc - j));
          }
        }
      });
}

/// Whether gemm() runs gemm_column_split rather than gemm_tiled: a B of BF16 bits over 1M values
/// (gemm_tiled would widen all of it into one F32 panel, twice its size, kept in the packing buffer:
/// the resident set of an LLM's prefill), or an F32 B of at least kColumnSplitMinB floats that is
/// wider than A is tall (A is then the operand to pack whole) with two units of columns per thread.
template <class Tl, class BE>
inline bool splits_columns(index_t M, index_t N, index_t K) {
  constexpr index_t unit = Tl::NR * std::max<index_t>(1, kColumnUnit / Tl::NR);
  if (std::is_same_v<BE, std::uint16_t>) return K * N > index_t(1) << 20;
  const index_t threads = ThreadPool::in_parallel() ? 1 : index_t(ThreadPool::instance().num_threads());
  return M <= N && N >= 2 * threads * unit && K * N >= kColumnSplitMinB;
}

/// Floats of packed A that one gemm_column_split call packs at most (16 MiB): more rows go in row
/// blocks, each streaming B once more, so the shared A buffer (kept between calls) stays bounded.
inline constexpr index_t kColumnSplitMaxA = index_t(4) << 20;

/// gemm_tiled or gemm_column_split (in row blocks of at most kColumnSplitMaxA floats of A), as
/// splits_columns says.
template <class Tl, class Act, class BE>
inline void gemm_scheduled(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A,
                           index_t lda, const BE* B, index_t ldb, float beta, float* C, index_t ldc,
                           const ttmoe::GemmEpilogue<float>& ep) {
  if (!splits_columns<Tl, BE>(M, N, K)) {
    gemm_tiled<Tl, Act>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
    return;
  }
  const index_t rows = std::max(Tl::MR, kColumnSplitMaxA / K / Tl::MR * Tl::MR);
  for (index_t m0 = 0; m0 < M; m0 += rows)
    gemm_column_split<Tl, Act>(ta, tb, std::min(rows, M - m0), N, K, alpha, ta ? A + m0 : A + m0 * lda, lda, B, ldb,
                               beta, C + m0 * ldc, ldc, ep.at(m0, 0));
}

/// C = alpha op(A) op(B) + beta C, finished by `ep` with activation Act (void: none; see
/// gemm_tiled), with the tile shape that pads N least, scheduled by gemm_scheduled. B is float, or BF16 bits (BE = std::uint16_t, a BF16-resident weight)
/// widened to float as it is packed; A and C are float either way.
template <class Act = void, class BE = float>
inline void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                 const BE* B, index_t ldb, float beta, float* C, index_t ldc, const ttmoe::GemmEpilogue<float>& ep = {}) {
  if constexpr (!std::is_same_v<AltTile, WideTile>) {
    if (N % AltTile::NR == 0 && N % WideTile::NR != 0) {
      gemm_scheduled<AltTile, Act>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
      return;
    }
  }
  gemm_scheduled<WideTile, Act>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ep);
}

}  // namespace ttmoe::cpu_backend::packed

#endif  // __AVX512F__ || (__AVX2__ && __FMA__)
