#pragma once
// Scaled dot-product attention over a folded batch [BH, T, hd]: two batched GEMMs and a softmax,
// all differentiable through the core ops. This is the general form: keys may outnumber queries and
// the mask is optional. Llama's attention uses the fused op of ops/causal_attention.hpp instead. The
// causal mask is an additive constant (0 / -inf), so masked probabilities are exactly 0 and receive
// exactly 0 gradient.

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/causal_attention.hpp"  // causal_mask
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::nn {

/// softmax(q k^T * scale [+ causal mask]) v for q [BH, T, hd], k/v [BH, S, hd] -> [BH, T, hd].
template <class T, class S, class D>
Tensor<T, DynShape<3>, D> scaled_dot_product_attention(const Tensor<T, S, D>& q, const Tensor<T, S, D>& k,
                                                       const Tensor<T, S, D>& v, T scale, bool causal) {
  static_assert(S::rank == 3, "scaled_dot_product_attention: operands are [BH, T, hd]");
  // The scale is the GEMM's alpha: no scaled copy of q to write, nor to keep for the backward.
  Tensor<T, DynShape<3>, D> scores = matmul<false, true>(q, k, scale);
  if (causal) scores = scores + causal_mask<T, D>(q.extent(1), k.extent(1));
  auto p = softmax<-1>(scores);
  return matmul(p, Tensor<T, DynShape<3>, D>(v));
}

}  // namespace ttmoe::nn
