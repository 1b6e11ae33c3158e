#pragma once
// Matrix products. matmul<TA, TB>(a, b) = op(a) @ op(b) where op transposes the last two axes when
// its flag is set. Forms: [.., M, K] @ [K, N] (leading dims folded into M: one GEMM for a whole
// [B, T, D] activation), and batched [b.., M, K] @ [b.., K, N] with equal batch dims.
// VJP: dA = alpha G op(B)^T, dB = alpha op(A)^T G; A is saved only if B needs a gradient and vice versa, so a
// frozen weight's matmul keeps no input activation.

#include <type_traits>

#include "ttmoe/ops/record.hpp"

namespace ttmoe {

/// Tag naming matmul in shape diagnostics.
namespace op {
struct matmul_tag {
  static constexpr const char* name = "matmul";
};
}  // namespace op

namespace detail {
template <class SA, class SB, bool TA, bool TB>
struct matmul_shape {
  static constexpr std::size_t RA = SA::rank, RB = SB::rank;
  static_assert(RA >= 2 && RB >= 2, "ttmoe: matmul operands need rank >= 2");
  static_assert(RB == 2 || RA == RB, "ttmoe: matmul: b must be a matrix or have a's rank (batched)");
  static_assert(!(TA && RA > 2 && RB == 2), "ttmoe: matmul<true, _> with a folded batch is not supported");
  static constexpr index_t KA = SA::static_extents[TA ? RA - 2 : RA - 1];
  static constexpr index_t KB = SB::static_extents[TB ? RB - 1 : RB - 2];
  static constexpr bool inner_ok = KA == dyn || KB == dyn || KA == KB;
  static constexpr bool batch_ok = [] {
    if constexpr (RB == 2) {
      return true;
    } else {
      for (std::size_t i = 0; i + 2 < RA; ++i) {
        const index_t x = SA::static_extents[i], y = SB::static_extents[i];
        if (x != dyn && y != dyn && x != y) return false;
      }
      return true;
    }
  }();
  struct holder {
    static constexpr std::array<index_t, RA> value = [] {
      std::array<index_t, RA> e{};
      for (std::size_t i = 0; i + 2 < RA; ++i) {
        if constexpr (RB == 2) {
          e[i] = SA::static_extents[i];
        } else {
          e[i] = SA::static_extents[i] != dyn ? SA::static_extents[i] : SB::static_extents[i];
        }
      }
      e[RA - 2] = SA::static_extents[TA ? RA - 1 : RA - 2];
      e[RA - 1] = SB::static_extents[TB ? RB - 2 : RB - 1];
      return e;
    }();
  };
  using type = typename checked_shape<inner_ok && batch_ok, shape_from_array_t<holder>, op::matmul_tag, SA, SB>::type;
};
}  // namespace detail

/// alpha * op(a) @ op(b); see the header comment for the accepted shapes. The scale rides on the
/// GEMM (attention's 1/sqrt(d) costs no extra pass and no scaled copy of a kept for the backward).
template <bool TA = false, bool TB = false, class T, ShapeType SA, ShapeType SB, class D>
auto matmul(const Tensor<T, SA, D>& a, const Tensor<T, SB, D>& b, std::type_identity_t<T> alpha = T(1)) {
  using SO = typename detail::matmul_shape<SA, SB, TA, TB>::type;
  constexpr std::size_t RA = SA::rank, RB = SB::rank;
  const auto ea = a.extents();  // separate declarations: the two deduce different types
  const auto eb = b.extents();
  const index_t M = ea[TA ? RA - 1 : RA - 2], K = ea[TA ? RA - 2 : RA - 1];
  const index_t KB = eb[TB ? RB - 1 : RB - 2], N = eb[TB ? RB - 2 : RB - 1];
  auto fail = [&](const std::string& why) {
    // Appended piece by piece: GCC 12 warns falsely (-Warray-bounds, inside libstdc++'s memcpy)
    // about a chain of rvalue operator+ that starts from a short string.
    std::string msg = TA ? (TB ? "matmul<A^T><B^T>" : "matmul<A^T>") : (TB ? "matmul<B^T>" : "matmul");
    msg.append(": shapes ").append(a.shape().to_string()).append(" and ").append(b.shape().to_string());
    msg.append(" ").append(why);
    return ShapeError(msg);
  };
  if (K != KB) throw fail("have different inner dimensions (" + std::to_string(K) + " vs " + std::to_string(KB) + ")");
  index_t batch = 1;
  if constexpr (RB > 2) {
    for (std::size_t i = 0; i + 2 < RA; ++i) {
      if (ea[i] != eb[i]) throw fail("have different batch dimensions");
      batch *= ea[i];
    }
  }
  std::array<index_t, RA> eo = ea;
  eo[RA - 2] = M;
  eo[RA - 1] = N;
  Tensor<T, SO, D> out(SO::from_extents(eo, "matmul"));
  // Folded form: all leading dims of a become rows.
  const index_t Mf = (RB == 2 && !TA) ? extent_product(ea, 0, RA - 1) : M;
  const index_t lda = ea[RA - 1], ldb = eb[RB - 1];
  if constexpr (RB == 2) {
    Backend<D>::gemm(TA, TB, Mf, N, K, alpha, a.data(), lda, b.data(), ldb, T(0), out.data(), N);
  } else {
    Backend<D>::gemm_batched(batch, TA, TB, M, N, K, alpha, a.data(), lda, M * K, b.data(), ldb, K * N, T(0),
                             out.data(), N, M * N);
  }
  if (should_record(a, b)) {
    // Save only what the needed gradients read.
    Tensor<T, SA, D> a_saved = b.requires_grad() ? a : Tensor<T, SA, D>();
    Tensor<T, SB, D> b_saved = a.requires_grad() ? b : Tensor<T, SB, D>();
    auto ma = a.meta(), mb = b.meta();
    record("matmul", out, [=](const T* g) {
      if (ma) {
        auto t = ma->target();
        const T beta = t.fresh ? T(0) : T(1);
        if constexpr (RB == 2) {
          if (!TA)  // dA[Mf,K] = G[Mf,N] op(B)^T
            Backend<D>::gemm(false, !TB, Mf, K, N, alpha, g, N, b_saved.data(), ldb, beta, t.data, K);
          else  // dA[K,M] = op(B)[K,N] G^T
            Backend<D>::gemm(TB, true, K, M, N, alpha, b_saved.data(), ldb, g, N, beta, t.data, M);
        } else {
          if (!TA)
            Backend<D>::gemm_batched(batch, false, !TB, M, K, N, alpha, g, N, M * N, b_saved.data(), ldb, K * N, beta,
                                     t.data, K, M * K);
          else
            Backend<D>::gemm_batched(batch, TB, true, K, M, N, alpha, b_saved.data(), ldb, K * N, g, N, M * N, beta,
                                     t.data, M, M * K);
        }
      }
      if (mb) {
        auto t = mb->target();
        const T beta = t.fresh ? T(0) : T(1);
        if constexpr (RB == 2) {
          if (!TB)  // dB[K,N] = op(A)^T G
            Backend<D>::gemm(!TA, false, K, N, Mf, alpha, a_saved.data(), lda, g, N, beta, t.data, N);
          else  // dB[N,K] = G^T op(A)
            Backend<D>::gemm(true, TA, N, K, Mf, alpha, g, N, a_saved.data(), lda, beta, t.data, K);
        } else {
          if (!TB)
            Backend<D>::gemm_batched(batch, !TA, false, K, N, M, alpha, a_saved.data(), lda, M * K, g, N, M * N, beta,
                                     t.data, N, K * N);
          else
            Backend<D>::gemm_batched(batch, true, TA, N, K, M, alpha, g, N, M * N, a_saved.data(), lda, M * K, beta,
                                     t.data, K, K * N);
        }
      }
    });
  }
  return out;
}

}  // namespace ttmoe
