#pragma once
// Scaled dot-product attention over a folded batch [BH, T, hd]: two batched GEMMs and a softmax,
// all differentiable through the core ops. The causal mask is an additive constant (0 / -inf), so
// masked probabilities are exactly 0 and receive exactly 0 gradient.

#include <limits>
#include <vector>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::nn {

/// [T, S] additive causal mask: key j is hidden from query i when j > i + (S - T) (queries are the
/// last T of S positions, as with a key/value cache).
template <class T, class D = cpu>
Tensor<T, DynShape<2>, D> causal_mask(index_t t, index_t s) {
  std::vector<T> m(t * s, T(0));  // built on the host, then copied to D
  for (index_t i = 0; i < t; ++i)
    for (index_t j = i + (s - t) + 1; j < s; ++j) m[i * s + j] = -std::numeric_limits<T>::infinity();
  return Tensor<T, DynShape<2>, D>::from_host(DynShape<2>(t, s), m);
}

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
