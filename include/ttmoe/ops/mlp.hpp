#pragma once
// fused_mlp<Act>(x, W1, b1, W2, b2, r) = r + Act(x W1^T + b1) W2^T + b2 as ONE recorded op: the
// transformer's feed-forward branch (timm's Mlp with GELU) and its residual. On backends with a GEMM
// epilogue (backend/gemm_epilogue.hpp) no elementwise pass of its own touches the hidden activation:
// - forward: fc1's GEMM stores Act(pre) as it writes each tile (and, when a backward will need it,
//   the pre-activation beside it); fc2's GEMM adds b2 and r as it stores;
// - backward: fc2's input-gradient GEMM multiplies by Act'(pre) as it stores, so d(pre) comes out of
//   the GEMM that makes d(hidden), and r takes the output gradient's buffer over (no copy).
// Saved for the backward: pre (when x, W1 or b1 need a gradient), the hidden activation (when W2
// does), x (when W1 does), the weights their input gradients read. Other backends compose the same
// computation from linear, the activation expression and an add.
//
// VJP: dW2 = g^T h, db2 = sums of g, d(pre) = (g W2) * Act'(pre), then linear's VJP of fc1 on d(pre),
// dr = g.

#include <string>
#include <type_traits>

#include "ttmoe/ops/linear.hpp"

namespace ttmoe {

/// r + Act(x [..., K] W1^T + b1) W2^T + b2 with W1 [H, K], W2 [N, H], b1 [H] / b2 [N] (either may be
/// undefined) and r of the output's shape [..., N]. Act is an elementwise functor whose VJP reads
/// only its input (op::gelu, op::gelu_tanh, op::silu, op::relu).
template <class Act, class T, ShapeType S, class D, ShapeType R>
Tensor<T, DynShape<S::rank>, D> fused_mlp(const Tensor<T, S, D>& x, const Tensor<T, DynShape<2>, D>& w1,
                                           const Tensor<T, DynShape<1>, D>& b1, const Tensor<T, DynShape<2>, D>& w2,
                                           const Tensor<T, DynShape<1>, D>& b2, const Tensor<T, R, D>& r) {
  static_assert(S::rank >= 2, "ttmoe: fused_mlp needs x of rank >= 2 ([..., in])");
  // The backward's epilogue calls Act::vjp without the forward's output: only VJPs that do not read it.
  static_assert(std::is_same_v<Act, op::gelu> || std::is_same_v<Act, op::gelu_tanh> || std::is_same_v<Act, op::silu> ||
                    std::is_same_v<Act, op::relu>,
                "ttmoe: fused_mlp takes op::gelu, op::gelu_tanh, op::silu or op::relu");
  constexpr const char* op = "fused_mlp";
  const auto [M, H, K] = detail::linear_extents(x, w1, b1, "fused_mlp (fc1)");
  detail::check_linear_params("hidden width " + std::to_string(H), H, w2, b2, "fused_mlp (fc2)");
  const index_t N = w2.extent(0);
  const auto shape = detail::with_last_extent(x, N, op);
  detail::check_residual(r, shape, op);
  if constexpr (!GemmEpilogueBackend<D, T>) {
    Tensor<T, DynShape<S::rank>, D> hidden = expr::make_expr<Act>(linear(x, w1, b1));
    return Tensor<T, DynShape<S::rank>, D>(linear(hidden, w2, b2) + r);
  } else {
    const bool recording = should_record(x, w1, b1, w2, b2, r);
    // d(pre) is needed when anything before the activation wants a gradient; then keep pre.
    const bool keep_pre = recording && (x.requires_grad() || w1.requires_grad() || b1.requires_grad());
    Tensor<T, DynShape<2>, D> hidden(DynShape<2>(M, H)), pre;
    GemmEpilogue<T> ep1;
    ep1.bias = b1.defined() ? b1.data() : nullptr;
    T* c1 = hidden.data();  // without a backward reading pre, Act is applied in place
    if (keep_pre) {
      pre = Tensor<T, DynShape<2>, D>(DynShape<2>(M, H));
      c1 = pre.data(), ep1.activated = hidden.data(), ep1.ld_activated = H;
    }
    Backend<D>::template gemm_epilogue<Act>(false, true, M, H, K, T(1), x.data(), K, w1.data(), K, c1, H, ep1);
    Tensor<T, DynShape<S::rank>, D> out(shape);
    GemmEpilogue<T> ep2;
    ep2.bias = b2.defined() ? b2.data() : nullptr;
    ep2.residual = r.data(), ep2.ld_residual = N;
    Backend<D>::template gemm_epilogue<void>(false, true, M, N, H, T(1), hidden.data(), H, w2.data(), H, out.data(), N,
                                             ep2);
    if (recording) {
      Tensor<T, S, D> x_saved = w1.requires_grad() ? x : Tensor<T, S, D>();
      Tensor<T, DynShape<2>, D> w1_saved = x.requires_grad() ? w1 : Tensor<T, DynShape<2>, D>();
      Tensor<T, DynShape<2>, D> w2_saved = keep_pre ? w2 : Tensor<T, DynShape<2>, D>();
      Tensor<T, DynShape<2>, D> h_saved = w2.requires_grad() ? hidden : Tensor<T, DynShape<2>, D>();
      auto mx = x.meta(), mw1 = w1.meta(), mb1 = b1.meta(), mw2 = w2.meta(), mb2 = b2.meta(), mr = r.meta();
      record_with_output("fused_mlp", out, [=, M = M, H = H, K = K](const T* g, auto& o) {
        detail::linear_vjp(g, M, N, H, static_cast<autograd::GradMeta<T, D>*>(nullptr), mw2.get(), mb2.get(),
                           h_saved.data(), static_cast<const T*>(nullptr));
        if (pre.defined()) {  // d(pre) [M, H] = (g [M, N] W2 [N, H]) * Act'(pre), in the GEMM's store
          Tensor<T, DynShape<2>, D> dpre(DynShape<2>(M, H));
          GemmEpilogue<T> ep;
          ep.act_input = pre.data(), ep.ld_act_input = H;
          Backend<D>::template gemm_epilogue<Act>(false, false, M, H, N, T(1), g, N, w2_saved.data(), H, dpre.data(), H,
                                                  ep);
          detail::linear_vjp(dpre.data(), M, H, K, mx.get(), mw1.get(), mb1.get(), x_saved.data(), w1_saved.data());
        }
        if (mr) pass_gradient(*mr, o, g, M * N);  // last: r may take g's buffer over
      });
    }
    return out;
  }
}

}  // namespace ttmoe
