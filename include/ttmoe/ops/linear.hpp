#pragma once
// linear(x, W, b) = x W^T + b as ONE recorded op (nn.Linear's computation, W stored [out, in]).
// Fusing the bias is worth an op of its own: the GEMM accumulates onto output rows that start as b
// (beta = 1), which costs nothing extra since the GEMM must initialise its output anyway, where a
// separate `+ b` reads and writes the whole activation again and allocates a second one. Backward,
// the output gradient feeds the GEMMs directly instead of first being copied through an add node.
// VJP: dx = g W, dW = g^T x (x saved only if W needs a gradient), db = column sums of g.

#include <array>

#include "ttmoe/expr/expr.hpp"  // ops/*.hpp rely on the expression machinery being declared first
#include "ttmoe/ops/matmul.hpp"

namespace ttmoe {

/// x [..., K] @ W^T + b with W [N, K], b [N] (an undefined b means no bias) -> [..., N].
template <class T, ShapeType S, class D>
Tensor<T, DynShape<S::rank>, D> linear(const Tensor<T, S, D>& x, const Tensor<T, DynShape<2>, D>& w,
                                        const Tensor<T, DynShape<1>, D>& b) {
  static_assert(S::rank >= 2, "ttmoe: linear needs x of rank >= 2 ([..., in])");
  if (!b.defined()) return matmul<false, true>(x, w);
  constexpr std::size_t R = S::rank;
  const auto ex = x.extents();
  const index_t K = ex[R - 1], N = w.extent(0);
  if (w.extent(1) != K || b.extent(0) != N)
    throw ShapeError("linear: x " + x.shape().to_string() + ", weight " + w.shape().to_string() + " and bias " +
                     b.shape().to_string() + " do not fit (weight is [out, in], bias [out])");
  const index_t M = x.numel() / (K == 0 ? 1 : K);
  auto eo = ex;
  eo[R - 1] = N;
  Tensor<T, DynShape<R>, D> out(DynShape<R>::from_extents(eo, "linear"));
  Backend<D>::gemm_bias(false, true, M, N, K, T(1), x.data(), K, w.data(), K, b.data(), out.data(), N);
  if (should_record(x, w, b)) {
    Tensor<T, S, D> x_saved = w.requires_grad() ? x : Tensor<T, S, D>();
    Tensor<T, DynShape<2>, D> w_saved = x.requires_grad() ? w : Tensor<T, DynShape<2>, D>();
    auto mx = x.meta(), mw = w.meta(), mb = b.meta();
    record("linear", out, [=](const T* g) {
      if (mx) {  // dx [M, K] = g [M, N] W [N, K]
        auto t = mx->target();
        Backend<D>::gemm(false, false, M, K, N, T(1), g, N, w_saved.data(), K, t.fresh ? T(0) : T(1), t.data, K);
      }
      if (mw) {  // dW [N, K] = g^T [N, M] x [M, K]
        auto t = mw->target();
        Backend<D>::gemm(true, false, N, K, M, T(1), g, N, x_saved.data(), K, t.fresh ? T(0) : T(1), t.data, K);
      }
      if (mb) {  // db [1, N] = ones [1, M] g [M, N]: a GEMV the pool parallelises over N
        auto t = mb->target();
        auto ones = Tensor<T, DynShape<1>, D>::full(DynShape<1>(M), T(1));
        Backend<D>::gemm(false, false, 1, N, M, T(1), ones.data(), M, g, N, t.fresh ? T(0) : T(1), t.data, N);
      }
    });
  }
  return out;
}

}  // namespace ttmoe
