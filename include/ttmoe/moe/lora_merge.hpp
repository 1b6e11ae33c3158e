#pragma once
// TTMM merging of K LoRA adapters with coefficients w_k. The adapters are stacked once:
// A_cat = [w_0 s_0 A_0; ...] [sum r_k, in] and B_cat = [B_0 | ...] [out, sum r_k]; then
//  (a) dense:         delta W = B_cat A_cat = sum_k w_k s_k B_k A_k (ONE GEMM), added to the base;
//  (b) unmaterialised: y = x W^T + (x A_cat^T) B_cat^T, one rank-(sum r_k) adapter, cheaper when
//      out * in is large relative to the token count.

#include <vector>

#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"

namespace ttmoe::moe {

/// The stacked factors of K adapters.
template <class T, class D = cpu>
struct StackedLoRA {
  Tensor<T, DynShape<2>, D> A_cat;  ///< [sum r_k, in], coefficients folded in
  Tensor<T, DynShape<2>, D> B_cat;  ///< [out, sum r_k]
};

/// Stacks A_k [r_k, in] scaled by weights[k] * scalings[k] and B_k [out, r_k].
template <class T, class D>
StackedLoRA<T, D> stack_lora(const std::vector<Tensor<T, DynShape<2>, D>>& A, const std::vector<Tensor<T, DynShape<2>, D>>& B,
                             const std::vector<T>& weights, const std::vector<T>& scalings) {
  if (A.size() != B.size() || A.size() != weights.size() || A.size() != scalings.size() || A.empty())
    throw ValueError("stack_lora: need as many A, B, weights and scalings (and at least one)");
  std::vector<Tensor<T, DynShape<2>, D>> as;
  for (std::size_t k = 0; k < A.size(); ++k) as.push_back(A[k] * (weights[k] * scalings[k]));
  return {concat<0>(as), concat<1>(B)};
}

/// (a) delta W = B_cat A_cat [out, in].
template <class T, class D>
Tensor<T, DynShape<2>, D> merged_delta(const StackedLoRA<T, D>& s) {
  return matmul(s.B_cat, s.A_cat);
}

/// (a) in place: W [out, in] += B_cat A_cat through the GEMM's accumulate (beta = 1), one pass over
/// W and no [out, in] temporary. Exact undo needs the original W from elsewhere (a copy, a patch or
/// the checkpoint it was loaded from): W + delta - delta is not W in floating point.
template <class T, class D>
void add_merged_delta(Tensor<T, DynShape<2>, D>& W, const StackedLoRA<T, D>& s) {
  if (W.extent(0) != s.B_cat.extent(0) || W.extent(1) != s.A_cat.extent(1) || s.B_cat.extent(1) != s.A_cat.extent(0))
    throw ShapeError("add_merged_delta: W [out, in] += B_cat [out, R] A_cat [R, in] shapes differ");
  const index_t out = W.extent(0), in = W.extent(1), r = s.A_cat.extent(0);
  Backend<D>::gemm(false, false, out, in, r, T(1), s.B_cat.data(), r, s.A_cat.data(), in, T(1), W.data(), in);
}

/// (b) y = x W^T + (x A_cat^T) B_cat^T for x [N, in] and base W [out, in].
template <class T, class D>
Tensor<T, DynShape<2>, D> apply_stacked(const Tensor<T, DynShape<2>, D>& x, const Tensor<T, DynShape<2>, D>& W,
                                        const StackedLoRA<T, D>& s) {
  return matmul<false, true>(x, W) + matmul<false, true>(matmul<false, true>(x, s.A_cat), s.B_cat);
}

}  // namespace ttmoe::moe
