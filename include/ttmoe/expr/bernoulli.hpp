#pragma once
// A Bernoulli mask as an expression operand: element i of the mask is `scale` where the i-th 32-bit
// draw of a counter-based generator keyed by `key` is below `threshold`, else 0. The value depends
// only on (key, i), so the mask needs no buffer: an expression such as gelu(h) * mask computes it in
// the same fused loop that reads h (split across threads like any expression), and that loop's
// backward computes it again instead of reading it back. Dropout of a large activation (GMoE's expert
// dropout: ~10M hidden values per MoE layer at 32 images) then writes and re-reads no mask, and no
// serial host loop fills one. The draws are splitmix64's (Steele, Lea & Flood 2014): draw 2p and
// 2p + 1 are the low and high halves of mix64(key + p * golden).

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ttmoe/core/broadcast.hpp"
#include "ttmoe/core/config.hpp"
#include "ttmoe/core/shape.hpp"
#include "ttmoe/expr/vmath.hpp"

namespace ttmoe::expr {

/// splitmix64's output function: a bijective mix of a 64-bit counter into 64 well-spread bits.
TTMOE_HD constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// The 64 bits that hold draws 2p (low half) and 2p + 1 (high half) of the stream keyed by `key`.
TTMOE_HD constexpr std::uint64_t draw_pair(std::uint64_t key, std::uint64_t p) noexcept {
  return mix64(key + p * 0x9e3779b97f4a7c15ULL);  // splitmix64's Weyl step
}

/// Draw i (a uniform 32-bit value) of the stream keyed by `key`.
TTMOE_HD constexpr std::uint32_t draw32(std::uint64_t key, std::uint64_t i) noexcept {
  return std::uint32_t(draw_pair(key, i >> 1) >> ((i & 1) * 32));
}

/// The kernel of a BernoulliLeaf: like LeafKernel, but the value at an element is computed from its
/// index in the mask's own (row-major) layout instead of loaded. Never differentiated.
template <class T, std::size_t R>
struct BernoulliKernel {
  std::uint64_t key = 0;
  std::uint64_t threshold = 0;  ///< keep where draw < threshold (2^32 keeps all)
  T scale = T(1);
  std::array<index_t, R> stride{};  ///< the mask's strides over the output (0 where broadcast)
  index_t row = 0;                  ///< mask index of the current output row's start
  bool inner_contiguous = true;

  TTMOE_HD void set_row(const std::array<index_t, R>& idx, index_t) {
    index_t off = 0;
    if constexpr (R > 0)
      for (std::size_t d = 0; d + 1 < R; ++d) off += idx[d] * stride[d];
    row = off;
  }
  /// Mask value at mask index i.
  TTMOE_HD T value(index_t i) const { return std::uint64_t(draw32(key, std::uint64_t(i))) < threshold ? scale : T(0); }
  template <class V>
  TTMOE_HD V eval(index_t j) const {
    if constexpr (std::is_arithmetic_v<V>) {
      return value(inner_contiguous ? row + j : row);
    } else {
      if (!inner_contiguous) return V(value(row));
      constexpr index_t W = index_t(V::size);
      const index_t i0 = row + j;
      alignas(64) T m[W];
#if !defined(__CUDACC__)
      // float lanes from an even index: the W draws are the halves of W / 2 mixes, low half first,
      // so one batch of W / 2 64-bit lanes mixes them all and its bytes, read as W 32-bit lanes, are
      // the draws in element order (x86 and ARM are little endian). The scalar loop below runs one
      // mix per element and does not vectorise: ~10x slower.
      using U64 = xsimd::batch<std::uint64_t, typename V::arch_type>;
      using U32 = xsimd::batch<std::uint32_t, typename V::arch_type>;
      if constexpr (sizeof(T) == 4 && index_t(U64::size) * 2 == W && index_t(U32::size) == W &&
                    std::endian::native == std::endian::little) {
        if (i0 % 2 == 0) {
          if (threshold > 0xffffffffULL) return V(scale);
          constexpr std::uint64_t golden = 0x9e3779b97f4a7c15ULL;
          alignas(64) static constexpr std::uint64_t steps[8] = {0,          golden,     2 * golden, 3 * golden,
                                                                 4 * golden, 5 * golden, 6 * golden, 7 * golden};
          static_assert(U64::size <= 8);
          U64 z = U64(key + (std::uint64_t(i0) >> 1) * golden) + U64::load_aligned(steps);
          z = (z ^ (z >> 30)) * U64(0xbf58476d1ce4e5b9ULL);  // mix64, lane by lane
          z = (z ^ (z >> 27)) * U64(0x94d049bb133111ebULL);
          z = z ^ (z >> 31);
          alignas(64) std::uint32_t d[W];
          z.store_aligned(reinterpret_cast<std::uint64_t*>(d));
          const U32 bits = xsimd::select(U32::load_aligned(d) < U32(std::uint32_t(threshold)),
                                         U32(std::bit_cast<std::uint32_t>(scale)), U32(std::uint32_t(0)));
          bits.store_aligned(d);
          std::memcpy(m, d, sizeof(m));
          return vm::load<V>(m);
        }
      }
#endif
      for (index_t q = 0; q < W; ++q) m[q] = value(i0 + q);
      return vm::load<V>(m);
    }
  }
  /// Value at an output multi-index (for executors without rows).
  TTMOE_HD T at(const std::array<index_t, R>& idx) const {
    index_t off = 0;
    if constexpr (R > 0)
      for (std::size_t d = 0; d < R; ++d) off += idx[d] * stride[d];
    return value(off);
  }
  template <class V>
  struct Cache {
    V out;
  };
  template <class V>
  TTMOE_HD V fwd(index_t j, Cache<V>& c) const {
    return c.out = eval<V>(j);  // the backward recomputes the mask rather than reading it
  }
  template <class V>
  TTMOE_HD void bwd(index_t, const Cache<V>&, V) const {}
  template <class F>
  void visit_leaves(F&& f) {
    f(*this);  // coalescing merges its dimensions like a tensor operand's
  }
};

template <class T, class D>
struct BackwardPlan;

/// A Bernoulli mask of extents `ext` as an expression operand on device D (a lazy expression of its
/// own: `Tensor(leaf)` materialises it, in parallel). Element i (row-major) is `scale` where
/// draw32(key, i) < threshold, else 0; a constant (no gradient).
template <class T, std::size_t R, class D>
struct BernoulliLeaf {
  using is_lazy_expression = void;
  using value_type = T;
  using shape_type = DynShape<R>;
  using device_type = D;
  static constexpr std::size_t rank = R;
  std::array<index_t, R> ext{};
  std::uint64_t key = 0;
  std::uint64_t threshold = 0;
  T scale = T(1);

  std::array<index_t, R> extents() const { return ext; }
  bool requires_grad() const { return false; }
  BernoulliLeaf for_backward(bool) const { return *this; }  // nothing to keep: the mask is recomputed
  template <std::size_t RO>
  BernoulliKernel<T, RO> kernel(const std::array<index_t, RO>& out) const {
    BernoulliKernel<T, RO> k;
    k.key = key, k.threshold = threshold, k.scale = scale;
    k.stride = broadcast_strides<RO>(ext, out);
    return k;
  }
  template <std::size_t RO, class DP = D>
  BernoulliKernel<T, RO> backward_kernel(const std::array<index_t, RO>& out, bool, BackwardPlan<T, DP>&) const {
    return kernel(out);
  }
};

}  // namespace ttmoe::expr
