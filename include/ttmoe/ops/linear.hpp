#pragma once
// linear(x, W, b) = x W^T + b as ONE recorded op (nn.Linear's computation, W stored [out, in]), and
// linear(x, W, b, r) = r + x W^T + b, the transformer's residual branch closing onto its stream.
// Fusing the bias is worth an op of its own: the GEMM writes its output rows with b already added,
// where a separate `+ b` reads and writes the whole activation again and allocates a second one.
// The residual likewise joins the GEMM's store on backends with a GEMM epilogue
// (backend/gemm_epilogue.hpp), which saves the add's pass forward and, backward, the copy of the
// gradient to both of the add's operands: r takes the output gradient's buffer over.
// VJP: dx = g W, dW = g^T x (x saved only if W needs a gradient), db = column sums of g, dr = g.

#include <array>

#include "ttmoe/backend/backend.hpp"  // GemmEpilogueBackend, GemmEpilogue
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/matmul.hpp"

namespace ttmoe {

namespace detail {
/// The VJP of out [M, N] = x [M, K] W^T + b for the inputs whose gradient metadata is non-null:
/// dx += g W (reads w), dW += g^T x (reads x), db += column sums of g.
template <class T, class D>
void linear_vjp(const T* g, index_t M, index_t N, index_t K, autograd::GradMeta<T, D>* mx,
                autograd::GradMeta<T, D>* mw, autograd::GradMeta<T, D>* mb, const T* x, const T* w) {
  if (mx) {  // dx [M, K] = g [M, N] W [N, K]
    auto t = mx->target();
    Backend<D>::gemm(false, false, M, K, N, T(1), g, N, w, K, t.fresh ? T(0) : T(1), t.data, K);
  }
  if (mw) {  // dW [N, K] = g^T [N, M] x [M, K]
    auto t = mw->target();
    Backend<D>::gemm(true, false, N, K, M, T(1), g, N, x, K, t.fresh ? T(0) : T(1), t.data, K);
  }
  if (mb) {  // db [1, N] = ones [1, M] g [M, N]: a GEMV the pool parallelises over N
    auto t = mb->target();
    auto ones = Tensor<T, DynShape<1>, D>::full(DynShape<1>(M), T(1));
    Backend<D>::gemm(false, false, 1, N, M, T(1), ones.data(), M, g, N, t.fresh ? T(0) : T(1), t.data, N);
  }
}

/// Throws unless W [N, K] and b ([N] or undefined) fit an input of width K; `input` describes it.
template <class T, class D>
void check_linear_params(const std::string& input, index_t K, const Tensor<T, DynShape<2>, D>& w,
                         const Tensor<T, DynShape<1>, D>& b, const char* op) {
  if (w.extent(1) != K || (b.defined() && b.extent(0) != w.extent(0)))
    throw ShapeError(std::string(op) + ": " + input + ", weight " + w.shape().to_string() +
                     (b.defined() ? " and bias " + b.shape().to_string() : std::string(" (no bias)")) +
                     " do not fit (weight is [out, in], bias [out])");
}

/// Checks linear's operands (x [..., K], W [N, K], b [N] or undefined) and returns (M, N, K).
template <class T, ShapeType S, class D>
std::array<index_t, 3> linear_extents(const Tensor<T, S, D>& x, const Tensor<T, DynShape<2>, D>& w,
                                      const Tensor<T, DynShape<1>, D>& b, const char* op) {
  const index_t K = x.extent(S::rank - 1);
  check_linear_params("x " + x.shape().to_string(), K, w, b, op);
  return {x.numel() / (K == 0 ? 1 : K), w.extent(0), K};
}

/// x's extents with the last one replaced by n.
template <class T, ShapeType S, class D>
DynShape<S::rank> with_last_extent(const Tensor<T, S, D>& x, index_t n, const char* op) {
  auto e = x.extents();
  e[S::rank - 1] = n;
  return DynShape<S::rank>::from_extents(e, op);
}

/// Throws unless the residual r has exactly the extents of the output `shape`.
template <class T, ShapeType R, class D, ShapeType O>
void check_residual(const Tensor<T, R, D>& r, const O& shape, const char* op) {
  static_assert(R::rank == O::rank, "ttmoe: the residual must have the rank of the output");
  if (r.extents() != shape.extents())
    throw ShapeError(std::string(op) + ": residual " + r.shape().to_string() + " differs from the output " +
                     shape.to_string());
}
}  // namespace detail

/// x [..., K] @ W^T + b with W [N, K], b [N] (an undefined b means no bias) -> [..., N].
template <class T, ShapeType S, class D>
Tensor<T, DynShape<S::rank>, D> linear(const Tensor<T, S, D>& x, const Tensor<T, DynShape<2>, D>& w,
                                        const Tensor<T, DynShape<1>, D>& b) {
  static_assert(S::rank >= 2, "ttmoe: linear needs x of rank >= 2 ([..., in])");
  if (!b.defined()) return matmul<false, true>(x, w);
  const auto [M, N, K] = detail::linear_extents(x, w, b, "linear");
  Tensor<T, DynShape<S::rank>, D> out(detail::with_last_extent(x, N, "linear"));
  Backend<D>::gemm_bias(false, true, M, N, K, T(1), x.data(), K, w.data(), K, b.data(), out.data(), N);
  if (should_record(x, w, b)) {
    Tensor<T, S, D> x_saved = w.requires_grad() ? x : Tensor<T, S, D>();
    Tensor<T, DynShape<2>, D> w_saved = x.requires_grad() ? w : Tensor<T, DynShape<2>, D>();
    auto mx = x.meta(), mw = w.meta(), mb = b.meta();
    record("linear", out, [=, M = M, N = N, K = K](const T* g) {
      detail::linear_vjp(g, M, N, K, mx.get(), mw.get(), mb.get(), x_saved.data(), w_saved.data());
    });
  }
  return out;
}

/// r + x [..., K] @ W^T + b (b may be undefined) with r of the output's shape [..., N]: the residual
/// joins the GEMM's store where the backend has an epilogue, else a fused add follows the linear.
template <class T, ShapeType S, class D, ShapeType R>
Tensor<T, DynShape<S::rank>, D> linear(const Tensor<T, S, D>& x, const Tensor<T, DynShape<2>, D>& w,
                                        const Tensor<T, DynShape<1>, D>& b, const Tensor<T, R, D>& r) {
  static_assert(S::rank >= 2, "ttmoe: linear needs x of rank >= 2 ([..., in])");
  const auto [M, N, K] = detail::linear_extents(x, w, b, "linear (with residual)");
  const auto shape = detail::with_last_extent(x, N, "linear (with residual)");
  detail::check_residual(r, shape, "linear (with residual)");
  if constexpr (!GemmEpilogueBackend<D, T>) {
    return Tensor<T, DynShape<S::rank>, D>(linear(x, w, b) + r);
  } else {
    Tensor<T, DynShape<S::rank>, D> out(shape);
    GemmEpilogue<T> ep;
    ep.bias = b.defined() ? b.data() : nullptr;
    ep.residual = r.data(), ep.ld_residual = N;
    Backend<D>::template gemm_epilogue<void>(false, true, M, N, K, T(1), x.data(), K, w.data(), K, out.data(), N, ep);
    if (should_record(x, w, b, r)) {
      Tensor<T, S, D> x_saved = w.requires_grad() ? x : Tensor<T, S, D>();
      Tensor<T, DynShape<2>, D> w_saved = x.requires_grad() ? w : Tensor<T, DynShape<2>, D>();
      auto mx = x.meta(), mw = w.meta(), mb = b.meta(), mr = r.meta();
      record_with_output("linear_residual", out, [=, M = M, N = N, K = K](const T* g, auto& o) {
        detail::linear_vjp(g, M, N, K, mx.get(), mw.get(), mb.get(), x_saved.data(), w_saved.data());
        if (mr) pass_gradient(*mr, o, g, M * N);  // last: r may take g's buffer over
      });
    }
    return out;
  }
}

}  // namespace ttmoe
